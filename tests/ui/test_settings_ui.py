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
