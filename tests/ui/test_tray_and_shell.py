"""The Qt shell: tray menu in each state, the no-tray fallback, single instance, smoke mode."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.ui import flow
from tuner.ui.state import AppState
from tuner.ui.window import NO_TRAY_HINT, TAB_NAMES

pytestmark = pytest.mark.gui
REPO = Path(__file__).resolve().parents[2]


def fake_serving(port: int = 18088) -> flow.ServingInfo:
    return flow.ServingInfo(
        model_name="stories260K.gguf",
        target_path=Path("/models/stories260K.gguf"),
        endpoint_url=f"http://127.0.0.1:{port}/v1",
        base_url=f"http://127.0.0.1:{port}",
        argv=("llama-server", "-m", "/models/stories260K.gguf", "--port", str(port)),
        pid=None,
        spec_label="no speculation",
    )


def enabled(tray) -> dict[str, bool]:
    tray.menu.aboutToShow.emit()  # what Qt does when the menu opens
    return {name: a.isEnabled() for name, a in tray.actions().items()}


def test_tray_menu_in_each_state(make_app, qtbot):
    a = make_app(tray_available=True)
    c, tray = a.controller, a.tray

    idle = enabled(tray)
    assert idle["Tune & serve"] and idle["Start server"] and idle["Quit"]
    assert not idle["Re-tune"], "nothing to re-tune before a first sweep or a served profile"
    assert not idle["Chat…"], "nothing to chat with before serving"
    assert idle["Open Draftwise"] and not idle["Copy endpoint URL"]
    assert "Stop server" not in idle and "Cancel tuning" not in idle

    c.set_state(AppState.TUNING)
    tuning = enabled(tray)
    assert not tuning["Tune & serve"] and not tuning["Start server"] and not tuning["Re-tune"]
    assert tuning["Cancel tuning"] and tuning["Quit"]

    c.serving = fake_serving()
    c.set_state(AppState.SERVING)
    serving = enabled(tray)
    assert serving["Stop server"] and serving["Copy endpoint URL"] and serving["Re-tune"] and serving["Chat…"]
    # while serving, Tune & serve tunes the selected target and serves it too (issue 26 item 2)
    assert "Start server" not in serving and serving["Tune & serve"]
    assert "Serving stories260K.gguf" in serving
    tray.actions()["Copy endpoint URL"].trigger()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == "http://127.0.0.1:18088/v1"
    assert "http://127.0.0.1:18088/v1" in tray.icon.toolTip()

    c.serving = None
    c.set_state(AppState.ERROR, "llama-server stopped: out of memory")
    err = enabled(tray)
    assert err["Tune & serve"] and err["Start server"]
    assert "out of memory" in tray.icon.toolTip()


def test_tray_icon_follows_state(make_app):
    a = make_app(tray_available=True)
    keys = set()
    for st in AppState:
        a.controller.set_state(st)
        keys.add(a.tray.icon.icon().cacheKey())
        assert not a.tray.icon.icon().isNull()
    assert len(keys) == len(AppState)  # one distinct icon per state


def test_no_tray_fallback_keeps_running(make_app, qtbot, qapp):
    a = make_app(tray_available=False)
    a.window.show()
    qtbot.waitExposed(a.window)
    assert a.window.hint.isVisible() and a.window.hint.text() == NO_TRAY_HINT
    assert not a.tray.available
    assert not qapp.quitOnLastWindowClosed()
    a.window.close()  # the close button must not end the app
    qtbot.wait(50)
    assert not a._quitting
    assert a.window.isMinimized() or a.window.isVisible()
    a.tray.notify("t", "m")  # no tray: a no-op, not a crash


def test_window_has_the_five_tabs(make_app):
    a = make_app()
    tabs = a.window.tabs
    assert [tabs.tabText(i) for i in range(tabs.count())] == list(TAB_NAMES)


def test_first_run_asks_for_models_folder(make_app, qtbot):
    a = make_app()
    a.window.show()
    assert a.window.tabs.currentWidget() is a.window.models_tab
    assert a.window.models_tab.first_run.isVisible()


def _run_app(env, timeout=60):
    return subprocess.run(
        [sys.executable, "-c", "import sys; from tuner import app; sys.exit(app.main([]))"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


def test_smoke_mode_quits_with_zero(draftwise_home):
    env = dict(os.environ, DRAFTWISE_SMOKE_QUIT_MS="300", QT_QPA_PLATFORM="offscreen")
    t0 = time.monotonic()
    r = _run_app(env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.monotonic() - t0 < 30


def test_second_instance_hands_over(make_app, qtbot, draftwise_home):
    first = make_app(single_instance=True)
    assert first is not None and first.instance is not None
    first.window.hide()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tuner import app; sys.exit(app.main([]))"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        with qtbot.waitSignal(first.instance.show_requested, timeout=30000):
            pass
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "already running" in err
    qtbot.waitUntil(first.window.isVisible, timeout=5000)


def test_the_serve_menu_lists_the_targets_and_the_sweeps_progress(make_app) -> None:
    from tuner.calibration import TargetChoice
    from tuner.calibration.request import TuneEvent
    from tuner.ui.tray import progress_words

    a = make_app(tray_available=True)
    c, tray = a.controller, a.tray
    c.serve_targets.items = [TargetChoice(Path("/m/a.gguf"), "a.gguf", "a", True, "draft model d.gguf, 1.6× faster"),
                             TargetChoice(Path("/m/b&c.gguf"), "b&c.gguf", "b-c", False)]
    tray.menu.aboutToShow.emit()
    assert list(tray.serve_actions()) == ["a.gguf — draft model d.gguf, 1.6× faster", "b&c.gguf — tune and serve"]
    assert all(act.isEnabled() for act in tray.serve_actions().values())
    c.selected_target = Path("/m/b&c.gguf")
    c.set_state(AppState.TUNING)
    c.tune_event.emit(TuneEvent("measured", "x", progress=0.45, elapsed_s=100.0, eta_s=122.0))
    tray.menu.aboutToShow.emit()
    entries = tray.serve_actions()
    first = next(iter(entries))
    # the window's words (its bar's): the tray and the window never disagree
    assert first.startswith("Tuning b&c.gguf: 45%, about 2 min") and not entries[first].isEnabled()
    assert entries["Cancel tuning"].isEnabled() and not entries["a.gguf — draft model d.gguf, 1.6× faster"].isEnabled()
    assert progress_words(None, 0.0, None) == "Tuning…"
    c.set_state(AppState.IDLE)
    tray.menu.aboutToShow.emit()
    assert "Cancel tuning" not in tray.serve_actions()
