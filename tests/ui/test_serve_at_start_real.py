"""A tray app people keep running (issue 26 items 1 and 6), with the real llama-server on stories260K:

- a folder typed into the Models tab and scanned is the folder *Tune & serve* tunes (it used to tune the
  remembered one and fail with a command-line message);
- the first serve turns *Serve at start* on; the app started again comes up serving the same profile without a
  click, announced as "Serving X again (profile of DATE)", never "tuning finished";
- a profile gone stale meanwhile is not served: the notification says why and offers the re-tune.
"""

from __future__ import annotations

import os
import time

import pytest
from PySide6.QtCore import Qt

from tuner import settings as settings_mod
from tuner.server.client import ServerClient
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.serve_targets import STALE_WORDS
from tuner.ui.state import AppState

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.slow, pytest.mark.timeout(420)]

QUICK_TUNE = dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2)


def started(make_app, qtbot):
    """The app as a login would start it (settings from disk), once its first step is done."""
    app = make_app(tray_available=True)
    qtbot.waitUntil(lambda: not app.controller.busy, timeout=180_000)
    return app


def test_typed_folder_then_serve_at_start_then_stale(make_app, qtbot, models_dir, free_port, llama_server_bin,
                                                     monkeypatch):
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    monkeypatch.setattr(flow, "TUNE_OPTIONS_DEFAULT", dict(QUICK_TUNE))  # every app below tunes/checks alike
    settings_mod.save_settings(Settings(models_dir=flow.demo_models_dir(), port=free_port, tune_budget_s=60))
    target = models_dir / "stories260K.gguf"

    # 1. a typed folder: Scan remembers it, and Tune & serve tunes it
    app = started(make_app, qtbot)
    c = app.controller
    assert c.scan is not None and c.scan.folder == flow.demo_models_dir()
    tab = app.window.models_tab
    tab.folder_edit.setText(str(models_dir))
    qtbot.mouseClick(tab.scan_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: c.scan is not None and c.scan.folder == models_dir, timeout=30_000)
    assert settings_mod.load_settings().models_dir == models_dir, "the scanned folder was not remembered"
    assert c.selected_target is not None and c.selected_target.resolve() == target.resolve()
    notes: list[tuple[str, str]] = []
    c.notify.connect(lambda title, msg: notes.append((title, msg)))
    qtbot.mouseClick(app.window.tune_tab.start_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: c.state in (AppState.SERVING, AppState.ERROR), timeout=240_000)
    assert c.state is AppState.SERVING, c.last_error
    assert c.serving.target_path.resolve() == target.resolve()
    qtbot.waitUntil(lambda: any(t == "Draftwise: tuning finished" for t, _ in notes), timeout=5000)
    line = next(m for t, m in notes if t == "Draftwise: tuning finished")
    assert "\n" not in line and line.startswith(("Fastest here: ", "Serving the model alone")), line
    st = settings_mod.load_settings()
    assert st.serve_at_start is True and st.served_target == c.serving.target_path  # unset → on at the first serve
    assert app.window.serve_tab.serve_at_start_check.isChecked()
    qtbot.waitUntil(lambda: app.window.tune_tab.chart.point_count() > 0, timeout=5000)
    tuned_points = dict(app.window.tune_tab.chart.points)  # each launch of the sweep, by bar
    qtbot.waitUntil(lambda: any(t.tuned for t in c.targets), timeout=30_000)
    assert all(t.words != STALE_WORDS for t in c.targets if t.tuned)  # a fresh profile reads as its decision
    c.shutdown()  # quit while serving, as a logout does

    # 2. the next start (a login) serves it again without a click, and says so
    app2 = make_app(tray_available=True)
    c2 = app2.controller
    assert c2.restoring is not None and c2.tooltip().startswith("Draftwise — starting\nServing stories260K.gguf again")
    assert "starting (serving stories260K.gguf again)" in app2.window.serve_tab.state_label.text()
    qtbot.waitUntil(lambda: not c2.busy, timeout=180_000)
    assert c2.restoring is None
    assert c2.state is AppState.SERVING, c2.last_error
    assert c2.serving.target_path.resolve() == target.resolve()
    assert c2.last_tune is not None and c2.last_tune.reused
    qtbot.waitUntil(lambda: app2.tray.last_notification is not None, timeout=5000)
    title, message = app2.tray.last_notification
    assert message.startswith("Serving stories260K.gguf again (profile of ") and "tuning finished" not in title.lower()
    qtbot.waitUntil(lambda: "saved profile" in app2.window.tune_tab.step_label.text(), timeout=5000)
    step = app2.window.tune_tab.step_label.text()
    assert step.startswith("Using the saved profile of ") and "Tuning finished" not in step, step
    assert app2.window.tune_tab.chart.points == tuned_points  # the saved profile's chart keeps every launch
    with ServerClient(c2.serving.base_url) as client:
        assert client.models() == ["stories260K"]
    c2.shutdown()

    # 3. the model file changed meanwhile: its profile is stale, nothing is served, the reason and a re-tune
    # are offered
    os.utime(target, (time.time(), time.time() + 60))
    app3 = started(make_app, qtbot)
    c3 = app3.controller
    assert c3.state is AppState.IDLE and c3.serving is None
    qtbot.waitUntil(lambda: any(t.tuned for t in c3.targets), timeout=60_000)
    assert [t.words for t in c3.targets if t.tuned] == [STALE_WORDS]  # the Serve menu says it needs a re-tune
    title, message = app3.tray.last_notification
    assert "re-tune" in title.lower()
    assert message.startswith("Not serving stories260K.gguf again: its profile is stale (model file ") and \
        "changed" in message and message.endswith("Click here to re-tune."), message
    assert c3.retune_offer is not None and c3.retune_offer.resolve() == target.resolve()
    assert app3.window.tune_tab.retune_btn.isEnabled()
    assert app3.window.tune_tab.step_label.text().startswith("Not serving stories260K.gguf again")
    assert settings_mod.load_settings().serve_at_start is True  # still on: it is the profile that is stale
