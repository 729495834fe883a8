"""The event-loop stall detector used by the real-server tests can fail: a 300 ms block on the GUI
thread inside a worker's signal handler is reported, while the idle loop around it is not."""

from __future__ import annotations

import time

import pytest

from tuner.ui.workers import CallWorker

from .conftest import STALL_LIMIT_MS

pytestmark = [pytest.mark.gui]


def test_gui_thread_sleep_in_worker_callback_is_a_stall(qtbot, loop_latency):
    qtbot.wait(300)  # idle loop first: no stall expected here
    idle_stalls = loop_latency.stalls(STALL_LIMIT_MS)
    blocked: list[float] = []

    def on_done(_result):  # runs on the GUI thread (queued signal)
        t0 = time.monotonic()
        time.sleep(0.3)
        blocked.append(time.monotonic() - t0)

    w = CallWorker(lambda ev, cancel: 42, "stall-probe")
    w.done.connect(on_done)
    w.start()
    qtbot.waitUntil(lambda: bool(blocked), timeout=10_000)
    qtbot.wait(100)
    w.wait(5000)
    stalls = loop_latency.stalls(STALL_LIMIT_MS)
    assert idle_stalls == [], f"idle event loop reported as stalled: {idle_stalls}"
    assert len(stalls) == 1, f"the 300 ms GUI-thread sleep was not caught: {stalls}"
    wall_ms, excused_ms = stalls[0]
    assert wall_ms >= 290, (wall_ms, excused_ms)
