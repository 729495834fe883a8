"""CallWorker's ``event`` signal shares its name with QThread.event(QEvent) (mypy sees an override):
Qt must still deliver events to the C++ method, or deleteLater, thread changes and timers on the
worker would silently stop working."""

from __future__ import annotations

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent

from tuner.ui.workers import CallWorker

pytestmark = [pytest.mark.gui]


def test_deferred_delete_reaches_the_worker(qapp):
    w = CallWorker(lambda ev, cancel: 1, "event-name")
    received: list[object] = []
    w.event.connect(received.append)
    w.start()
    assert w.wait(5000)
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(w), "QThread.event(DeferredDelete) was not handled: the worker still exists"


def test_event_signal_still_carries_on_event_objects(qtbot):
    w = CallWorker(lambda ev, cancel: ev("step"), "event-name")
    with qtbot.waitSignal(w.event, timeout=5000) as blocker:
        w.start()
    assert blocker.args == ["step"]
    assert w.wait(5000)
