"""Serving settings in the window: start at login, LAN exposure with its API key, port; and the
Monitor's VRAM series when a GPU sampler exists."""

from __future__ import annotations

import os
import stat

from tuner import settings as S
from tuner.telemetry.samplers import VramSampler


def test_start_at_login_writes_autostart_entry(make_app, tmp_path):
    from tuner import desktop

    a = make_app()
    tab = a.window.serve_tab
    tab.login_check.setChecked(True)
    assert desktop.autostart_enabled() and desktop.autostart_path().is_file()
    assert str(tmp_path) in str(desktop.autostart_path())  # XDG_CONFIG_HOME of the test
    assert S.load_settings().start_at_login is True
    tab.login_check.setChecked(False)
    assert not desktop.autostart_path().exists()
    assert S.load_settings().start_at_login is False


def test_lan_exposure_generates_key_shown_once(make_app, qapp):
    a = make_app()
    tab = a.window.serve_tab
    assert S.read_api_key() is None
    tab.lan_check.setChecked(True)
    key = S.read_api_key()
    assert key and tab.key_edit.text() == key and tab.copy_key_btn.isEnabled()
    assert stat.S_IMODE(os.stat(S.api_key_path()).st_mode) == 0o600
    assert S.load_settings().expose_on_lan is True
    tab.copy_key_btn.click()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == key
    # a new window shows that a key exists but never the key itself
    b = make_app()
    assert b.window.serve_tab.key_edit.text() == ""
    assert "stored" in b.window.serve_tab.key_edit.placeholderText()


def test_bad_port_is_refused_with_the_key_named(make_app):
    a = make_app()
    tab = a.window.serve_tab
    ok = tab._save(port=0)
    assert not ok and "'port'" in tab.settings_msg.text()
    tab.port_spin.setValue(9123)
    tab._save_port()
    assert S.load_settings().port == 9123


def test_monitor_draws_vram_when_a_gpu_sampler_exists(make_app, qtbot):
    a = make_app()
    c = a.controller
    used = iter(range(10 * 2**30, 11 * 2**30, 2**28))
    c.collector.vram = VramSampler(lambda: next(used))  # no NVIDIA GPU on this machine: a stand-in reading
    from tuner.ui.tab_monitor import MonitorTab

    tab = MonitorTab(c)
    assert tab.has_vram and "VRAM used" in tab.mem_plot.curves
    for _ in range(3):
        c.collector.poll()
    tab.redraw()
    assert tab.mem_plot.point_count("VRAM used") == 3
    assert tab.mem_plot.y_unit == "GiB"  # over 2 GiB: shown in GiB
    tab.deleteLater()


def test_a_bad_setting_costs_only_its_key_and_is_reported(make_app):
    """Issue 16 item 12: one out-of-range value made the app start on defaults, and the next
    change overwrote models_dir, server_binary, prompts_path and port."""
    import json

    p = S.settings_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"port": 9321, "tune_budget_s": 5, "server_binary": "/opt/ls"}))
    a = make_app()
    assert a.controller.settings.port == 9321 and a.controller.settings.server_binary.as_posix() == "/opt/ls"
    msg = a.window.statusBar().currentMessage()
    assert "'tune_budget_s'" in msg and "got 5" in msg and "invalid-" in msg
    a.window.serve_tab.login_check.setChecked(True)  # any change is saved with the valid keys kept
    saved = json.loads(p.read_text())
    assert saved["port"] == 9321 and saved["server_binary"] == "/opt/ls" and saved["start_at_login"] is True
    a.window.serve_tab.login_check.setChecked(False)


def test_web_origin_setting_and_the_open_build_warning(make_app):
    from tuner.ui.tab_serve import web_pages_text

    a = make_app()
    tab = a.window.serve_tab
    tab.origin_edit.setText("http://192.168.1.20:3000/")
    tab._save_origin()
    assert S.load_settings().cors_origin == "http://192.168.1.20:3000"
    tab.origin_edit.setText("http://a.example, http://b.example")
    tab._save_origin()
    assert "'cors_origin'" in tab.settings_msg.text() and S.load_settings().cors_origin == "http://192.168.1.20:3000"
    assert "OPEN to any web page" in web_pages_text(["llama-server", "-m", "m.gguf"])  # legacy build: no flag
    assert "only pages from localhost" in web_pages_text(["llama-server", "--cors-origins", "localhost"])
