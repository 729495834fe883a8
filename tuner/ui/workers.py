"""Long work off the GUI thread: a ``QThread`` that runs one callable and reports through signals.

The callable receives ``(on_event, cancel)``: ``on_event(obj)`` is forwarded as the
:attr:`CallWorker.event` signal (queued to the GUI thread), ``cancel`` is a ``threading.Event``
that :meth:`CallWorker.cancel` sets. The result arrives via :attr:`done`, an exception via
:attr:`failed` (the exception object itself, so the UI can show its evidence).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QThread, Signal

from tuner.errors import Cancelled

log = logging.getLogger(__name__)


class CallWorker(QThread):
    """Run ``fn(on_event, cancel)`` in a thread.

    Signals:
        event(object): each object passed to ``on_event``.
        done(object): the return value.
        failed(object): the exception raised.
    """

    # the name shadows QThread.event(QEvent) for type checkers; Qt still dispatches events to the C++ method
    # (a Signal is no Python override: tests/ui/test_worker_event_signal.py deletes one through deleteLater)
    event = Signal(object)  # type: ignore[assignment]
    done = Signal(object)
    failed = Signal(object)

    def __init__(self, fn: Callable[[Callable[[Any], None], threading.Event], Any], name: str = "work") -> None:
        super().__init__()
        self.fn = fn
        self.cancel_event = threading.Event()
        self.reported = False
        """Set (in the GUI thread) once the result or error has been handed to its receiver."""
        self.setObjectName(name)

    def cancel(self) -> None:
        """Ask the work to stop (it checks the event; child processes are stopped by the core)."""
        self.cancel_event.set()

    def run(self) -> None:  # noqa: D401 - QThread entry point
        try:
            result = self.fn(self.event.emit, self.cancel_event)
        except BaseException as exc:  # report everything, the GUI decides
            if isinstance(exc, Cancelled):
                log.info("%s worker cancelled", self.objectName())
            else:  # the traceback goes to the log file; the GUI shows the message
                log.error("%s worker failed", self.objectName(), exc_info=exc)
            self.failed.emit(exc)
        else:
            self.done.emit(result)


class PollWorker(QThread):
    """Call ``fn()`` every ``interval_s`` seconds in a thread and emit each result as :attr:`tick`.

    Used for telemetry (HTTP to ``/metrics``, NVML, psutil), which must never block the GUI.
    """

    tick = Signal(object)

    def __init__(self, fn: Callable[[], Any], interval_s: float = 1.0) -> None:
        super().__init__()
        self.fn = fn
        self.interval_s = interval_s
        self._stop = threading.Event()
        self.setObjectName("telemetry")

    def stop(self, wait_ms: int = 5000) -> None:
        """Stop polling and wait for the thread to end."""
        self._stop.set()
        self.wait(wait_ms)

    def run(self) -> None:  # noqa: D401
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick.emit(self.fn())
            except Exception:  # a sampler bug must not kill the poller (it is logged)
                log.exception("%s poll failed", self.objectName())
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)
