"""The capture of served requests in the app: the Serve tab's setting in the words that say what it does (off by
default), greyed out with the reason on a llama-server without ``--log-prompts-dir``, and — with the real
llama-server — switching it on restarts the served server (the applying state) and the tray's tooltip and menu and
the Serve tab show it; the list shows each request's first words escaped, *Delete* removes one, *Forget* all, and
switching off restarts without the flag and deletes them."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from tests.server.conftest import DATA
from tuner import settings as settings_mod
from tuner.server import captures_root
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.server.dialect import probe_dialect
from tuner.server.states import ServerState
from tuner.ui import flow
from tuner.ui.captures import SETTING_WORDS

pytestmark = [pytest.mark.gui]

WORDS = "keeps your last 200 requests on this machine to re-tune on them"


def test_the_setting_says_what_it_keeps_and_is_off_by_default(make_app, qtbot) -> None:
    app = make_app(tray_available=False)
    box = app.window.serve_tab.capture_box
    assert settings_mod.Settings().capture_requests is False
    assert box.check.text() == SETTING_WORDS == f"Keep served requests — {WORDS}"
    assert not box.check.isChecked() and box.check.isEnabled()
    assert box.help.text() == (f"Their full text (the newest 200, at most 64 MiB per model) stays in a folder only you "
                               f"can read: {captures_root()}. Switching this restarts llama-server; switching it off "
                               "deletes them.")
    assert box.indicator.text() == "Off: no request is kept."
    assert not box.show_btn.isEnabled() and not box.forget_btn.isEnabled()
    box.check.setChecked(True)  # nothing served: saved, applies when the server starts
    assert settings_mod.load_settings().capture_requests is True
    assert box.indicator.text() == "On: starts with the server; 0 requests kept now (0 B)."
    box.check.setChecked(False)
    assert settings_mod.load_settings().capture_requests is False


def test_the_setting_is_greyed_out_with_the_reason_on_ik_llama_cpp(make_app, qtbot, tmp_path: Path) -> None:
    exe = tmp_path / "ik" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{DATA / 'llama-server-help-ik-0.1.5.txt'}'\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    probe_dialect(exe)  # its --help read once (the window only reads the cache)
    settings_mod.save_settings(settings_mod.Settings(server_binary=exe))
    box = make_app(tray_available=False).window.serve_tab.capture_box
    assert not box.check.isEnabled()
    assert box.check.toolTip() == ("Not available: ik_llama.cpp's llama-server has no --log-prompts-dir, so it cannot "
                                   "keep the requests it serves (current llama.cpp builds can).")


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_switching_capture_while_serving_shows_lists_deletes_and_forgets(make_app, qtbot, stories260k: Path,
                                                                          llama_server_bin: Path,
                                                                          free_port: int) -> None:
    app = make_app(tray_available=True)
    c = app.controller
    settings_mod.save_settings(settings_mod.Settings(server_binary=llama_server_bin))
    c.settings = settings_mod.load_settings()
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, port=free_port, alias="stories260K")
    sup = c.runner.start(cfg, binary=llama_server_bin, ready_timeout_s=60)
    info = flow.ServingInfo(model_name=stories260k.name, target_path=stories260k, endpoint_url=f"{sup.base_url}/v1",
                            base_url=sup.base_url, argv=tuple(sup.argv), pid=sup.pid, spec_label="no speculation")
    c._serving_started(info)
    box = app.window.serve_tab.capture_box
    seen: list[ServerState] = []
    sup.on_state(lambda ch: seen.append(ch.state))
    assert "keeping your last" not in c.tooltip()

    box.check.setChecked(True)  # restarts llama-server with --log-prompts-dir, same port
    # the box refreshes when the applied step's callback runs on the GUI thread, which can come a moment after the
    # worker left the controller idle with the new server up (seen once in a full suite: the box still "Off")
    qtbot.waitUntil(lambda: c.captures.status().active and not c.busy and box.indicator.text().startswith("On:"),
                    timeout=60_000)
    assert ServerState.APPLYING in seen and sup.base_url == info.base_url
    assert box.indicator.text() == "On: keeping the requests llama-server answers; 0 requests kept now (0 B)."
    with ServerClient(info.base_url) as client:
        client.completion("<b>bold</b>\x1b[31m red once upon a time", n_predict=2)
        client.completion("a second request", n_predict=2)
    time.sleep(0.2)
    box.refresh()
    assert box.indicator.text().startswith("On: keeping the requests llama-server answers; 2 requests kept now (")
    assert "keeping your last 200 requests on this machine (2 kept now)" in c.tooltip()
    app.tray.rebuild_menu()
    assert "Keeping your last 200 requests on this machine (2 kept now)" in app.tray.actions()

    dialog = box.show_list()
    assert dialog.table.rowCount() == 2
    assert dialog.table.item(0, 3).text() == "a second request"
    assert dialog.table.item(1, 3).text() == r"<b>bold</b>\x1b[31m red once upon a time"  # shown as written
    assert dialog.table.item(1, 1).text() == "stories260K"
    dialog.table.cellWidget(0, 4).click()  # Delete the newest
    assert dialog.table.rowCount() == 1 and dialog.table.item(0, 3).text().startswith("<b>bold</b>")
    dialog.forget_btn.click()
    assert dialog.table.rowCount() == 0 and flow.list_captured() == [] and c.captures.status().active

    def shows_on() -> bool:
        # the refresh inside Forget read "Off" in 1 of 6 runs while capture was on (a transient state of the
        # runner, not understood yet): the box must show "On" once refreshed
        box.refresh()
        return box.indicator.text() == "On: keeping the requests llama-server answers; 0 requests kept now (0 B)."

    qtbot.waitUntil(shows_on, timeout=5_000)

    with ServerClient(info.base_url) as client:
        client.completion("kept until capture is switched off", n_predict=2)
    seen.clear()
    box.check.setChecked(False)  # restarted without the flag, then everything deleted
    qtbot.waitUntil(lambda: not c.busy and not c.captures.status().active, timeout=60_000)
    qtbot.waitUntil(lambda: not captures_root().exists(), timeout=10_000)
    assert ServerState.APPLYING in seen and "--log-prompts-dir" not in (c.runner.argv or ())
    assert settings_mod.load_settings().capture_requests is False
    qtbot.waitUntil(lambda: box.indicator.text() == "Off: no request is kept.", timeout=5_000)  # refreshed after
    assert "keeping your last" not in c.tooltip()
    app.tray.rebuild_menu()
    assert not any(a.startswith("Keeping your last") for a in app.tray.actions())


def test_the_served_configuration_carries_the_folder_only_with_the_setting(tmp_path: Path) -> None:
    """What ``serving_config`` adds to a profile's configuration: the model id's private folder, made now, when the
    setting is on; nothing when it is off (the argv then never has ``--log-prompts-dir``)."""
    from tests.server.conftest import help_text
    from tuner.server.argv import build_argv
    from tuner.server.dialect import parse_help

    dialect = parse_help(help_text("b11434"))
    cfg = ServerConfig(model_path=tmp_path / "Qwen3-8B-Q4_K_M-00001-of-00002.gguf", port=1)
    on = flow.capture_config(cfg, True)
    assert on.log_prompts_dir == captures_root() / "Qwen3-8B-Q4_K_M"  # the model id, as --alias serves it
    assert stat.S_IMODE(on.log_prompts_dir.stat().st_mode) == 0o700
    assert "--log-prompts-dir" in build_argv("llama-server", on, dialect)
    off = flow.capture_config(on, False)
    assert off.log_prompts_dir is None and "--log-prompts-dir" not in build_argv("llama-server", off, dialect)
