"""Idle sleep in the app: the Serve tab's setting (15 min by default, off, greyed out with the reason on a
llama-server without ``--sleep-idle-seconds``), and — with the real llama-server — the tray, the Serve tab and
the Monitor saying "sleeping — memory freed" and, once a request woke it, the reload time it waited."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.server.conftest import DATA
from tuner import settings as settings_mod
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.server.dialect import probe_dialect
from tuner.ui import flow
from tuner.ui.options import set_spin_value, spin_value
from tuner.ui.state import AppState

pytestmark = [pytest.mark.gui]


def _ik_binary(tmp_path: Path) -> Path:
    """A stand-in answering ``--help`` with ik_llama.cpp's captured help text."""
    exe = tmp_path / "ik" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{DATA / 'llama-server-help-ik-0.1.5.txt'}'\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_the_setting_defaults_to_15_minutes_and_off_is_saved(make_app, qtbot):
    app = make_app(tray_available=False)
    tab = app.window.serve_tab
    spin = tab.idle_sleep_spin
    assert spin.text() == "15 min" and spin_value(spin) == 900
    set_spin_value(spin, 0)
    assert spin.text() == "off"
    tab._save_idle_sleep()
    assert app.controller.settings.idle_sleep_s == 0 == settings_mod.load_settings().idle_sleep_s
    set_spin_value(spin, 30)  # a settings file's 30 s shows as the lowest minute, never as "off"
    assert spin.text() == "1 min"
    spin.setValue(20)
    tab._save_idle_sleep()
    assert settings_mod.load_settings().idle_sleep_s == 1200


def test_the_setting_is_greyed_out_with_the_reason_on_ik_llama_cpp(make_app, qtbot, tmp_path: Path):
    ik = _ik_binary(tmp_path)
    probe_dialect(ik)  # its --help read once (the window itself only reads the cache)
    settings_mod.save_settings(settings_mod.Settings(server_binary=ik))
    app = make_app(tray_available=False)
    spin = app.window.serve_tab.idle_sleep_spin
    assert not spin.isEnabled()
    assert "ik_llama.cpp's llama-server has no --sleep-idle-seconds" in spin.toolTip()
    assert app.window.serve_tab.idle_sleep_help.text().startswith("not available: ik_llama.cpp")


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tray_serve_tab_and_monitor_show_the_sleeping_server(make_app, qtbot, stories260k, llama_server_bin,
                                                             free_port):
    app = make_app(tray_available=True)
    c = app.controller
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, port=free_port, sleep_idle_s=1)
    sup = c.runner.start(cfg, binary=llama_server_bin, ready_timeout_s=60)
    info = flow.ServingInfo(model_name=stories260k.name, target_path=stories260k, endpoint_url=f"{sup.base_url}/v1",
                            base_url=sup.base_url, argv=tuple(sup.argv), pid=sup.pid, spec_label="no speculation")
    c._serving_started(info)
    serve_tab, monitor = app.window.serve_tab, app.window.monitor_tab
    app.window.show()
    app.window.tabs.setCurrentWidget(serve_tab)

    qtbot.waitUntil(lambda: c.sleep.sleeping, timeout=20_000)
    assert c.state is AppState.SERVING  # still serving: the endpoint answers, the model is unloaded
    tooltip = c.tooltip()
    assert "sleeping — memory freed; the model was unloaded at " in tooltip, tooltip
    assert "the next request loads it again" in tooltip
    app.tray.rebuild_menu()
    assert f"Serving {stories260k.name} — sleeping, memory freed" in app.tray.actions()
    assert "sleeping — memory freed" in serve_tab.state_label.text()
    assert serve_tab.sleep_label.text().startswith("The model was unloaded at ") and serve_tab.sleep_label.isVisible()
    monitor._update_summary()
    assert "sleeping — memory freed" in monitor.summary.text()

    with ServerClient(info.base_url) as client:
        assert client.completion("Once upon a time", n_predict=4, temperature=0.0).get("content") is not None
    qtbot.waitUntil(lambda: not c.sleep.sleeping and c.sleep.last_reload_s is not None, timeout=20_000)
    reload_words = serve_tab.sleep_label.text()
    assert reload_words.startswith("awake — the first request after sleeping waited "), reload_words
    assert reload_words.endswith(" for the model to load") and ("ms" in reload_words or " s " in reload_words)
    assert "the first request after sleeping waited" in c.tooltip()
    assert "● serving" in serve_tab.state_label.text()
    monitor._update_summary()
    assert "the first request after sleeping waited" in monitor.summary.text()
