"""``AppController.busy`` stays true until a finished worker's result has been handled in the GUI thread.

A CI run caught the race (tests/ui/test_serve_at_start_real.py): the restore worker's thread had returned, so
``busy`` read false, while its queued ``done`` (which sets the state to IDLE) was not yet delivered, and the test
saw the state still TUNING.
"""

from __future__ import annotations

from tuner.settings import Settings
from tuner.ui.controller import AppController
from tuner.ui.state import AppState


def test_a_returned_worker_is_busy_until_its_result_is_handled(qtbot):
    c = AppController(Settings())
    got: list[object] = []

    def done(result: object) -> None:
        got.append(result)
        c.set_state(AppState.IDLE)

    c.set_state(AppState.TUNING)
    w = c._start_work(lambda on_event, cancel: 42, "probe", done)
    assert w is not None
    assert w.wait(10_000)  # the thread has returned; no event has been processed yet
    assert c.busy and got == [] and c.state is AppState.TUNING
    assert c._start_work(lambda on_event, cancel: 0, "second", done) is None  # still one step at a time
    qtbot.waitUntil(lambda: not c.busy, timeout=5000)
    assert got == [42] and c.state is AppState.IDLE  # "not busy" means the step's outcome is applied


def test_a_failed_worker_is_busy_until_its_error_is_reported(qtbot):
    c = AppController(Settings())
    errors: list[str] = []
    c.error.connect(errors.append)

    def fail(on_event, cancel):
        raise RuntimeError("the probe failed")

    w = c._start_work(fail, "probe", lambda result: None)
    assert w is not None and w.wait(10_000)
    assert c.busy and errors == []
    qtbot.waitUntil(lambda: not c.busy, timeout=5000)
    assert len(errors) == 1 and "the probe failed" in errors[0] and c.state is AppState.ERROR
