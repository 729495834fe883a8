"""*Re-tune on recent requests* (issue 28, item 2) in the app: the Tune tab's button and the tray's entry appear
only while captured requests exist for the served model (or, with nothing served, the selected target), and start
a forced tune whose request replays that model's captured requests (``prompts_from_served``). The sweep itself is
not run here (tests/cli/test_tune_served.py runs it on the real llama-server): ``tune`` is replaced by one that
records its request and cancels."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tuner.calibration.request import TuneRequest
from tuner.server import capture
from tuner.server.discovery import ServerBinary
from tuner.ui import flow
from tuner.ui.state import AppState

pytestmark = pytest.mark.gui


def _capture(model_id: str, n: int) -> None:
    folder = capture.log_prompts_dir(model_id)
    old = time.time() - 600
    for i in range(n):
        path = folder / f"{5000 + i:012d}.txt"
        path.write_text(f"<start_of_turn>user\nrewrite request {i}<end_of_turn>\n", encoding="utf-8")
        os.utime(path, (old + i, old + i))


def _serving(target: Path) -> flow.ServingInfo:
    return flow.ServingInfo(model_name=target.name, target_path=target, endpoint_url="http://127.0.0.1:18089/v1",
                            base_url="http://127.0.0.1:18089", argv=("llama-server", "-m", str(target)), pid=None,
                            spec_label="no speculation")


def _recording_tune(monkeypatch: pytest.MonkeyPatch, server: Path) -> list[TuneRequest]:
    requests: list[TuneRequest] = []

    def tune(request: TuneRequest, **_kw: object):
        requests.append(request)
        raise flow.Cancelled()

    monkeypatch.setattr(flow.calibration, "tune", tune)
    monkeypatch.setattr(flow, "find_server", lambda *_a, **_k: ServerBinary(path=server, source="setting", build=None, commit=None, version_text=""))
    return requests


def test_the_action_appears_only_with_captures_and_tunes_on_them(make_app, qtbot, models_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app(tray_available=True)
    c, tab, tray = app.controller, app.window.tune_tab, app.tray
    target = models_dir / "stories260K.gguf"
    c.settings = c.settings.replace(models_dir=models_dir)
    c.selected_target = target
    tab.on_state(c.state)
    tray.menu.aboutToShow.emit()
    assert tab.served_btn.isHidden() and "Re-tune on recent requests" not in tray.actions()

    _capture("stories260K", 3)
    _capture("another-model", 2)  # another model's requests are not this one's
    c.capture_changed.emit()
    assert not tab.served_btn.isHidden() and tab.served_btn.isEnabled()
    assert "(3 requests kept)" in tab.served_btn.toolTip()
    tray.menu.aboutToShow.emit()
    assert tray.actions()["Re-tune on recent requests"].isEnabled()

    c.set_state(AppState.TUNING)  # no second sweep while one runs
    assert not tab.served_btn.isEnabled()
    tray.menu.aboutToShow.emit()
    assert not tray.actions()["Re-tune on recent requests"].isEnabled()
    c.set_state(AppState.IDLE)

    requests = _recording_tune(monkeypatch, tmp_path / "llama-server")
    with qtbot.waitSignal(c.status, timeout=20000, check_params_cb=lambda m: m == "Cancelled"):
        tab.served_btn.click()
    (request,) = requests
    assert request.prompts_from_served and request.served_model_id == "stories260K"
    assert request.force and request.prompts is None

    # serving another model: the tray offers the re-tune on that model's requests
    c.serving = _serving(models_dir / "another-model.gguf")
    c.set_state(AppState.SERVING)
    tray.menu.aboutToShow.emit()
    with qtbot.waitSignal(c.status, timeout=20000, check_params_cb=lambda m: m == "Cancelled"):
        tray.actions()["Re-tune on recent requests"].trigger()
    assert requests[-1].served_model_id == "another-model" and requests[-1].prompts_from_served

    capture.forget_captured()
    c.capture_changed.emit()
    tray.menu.aboutToShow.emit()
    assert tab.served_btn.isHidden() and "Re-tune on recent requests" not in tray.actions()
