"""The tray's *Serve* menu behind the scenes: the folder's targets (read in a worker) and how the app follows
llama-server's router when another model becomes the one served.

:class:`ServeTargets` keeps :attr:`ServeTargets.items` (:class:`tuner.calibration.TargetChoice`: tuned ones with
their decision in a few words) and reads them again after each scan and serve; only the newest reading counts.
:func:`follow_router` is the controller's answer to a router state change: the views follow the current model
(the Monitor's ``/metrics?model=ID``, the Chat tab's ``model``) — the one picked in the menu, or the last one a
request loaded.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from tuner.server import ServerState, SleepStatus, StateChange
from tuner.ui import flow
from tuner.ui.state import AppState
from tuner.ui.workers import CallWorker

log = logging.getLogger(__name__)


class Controller(Protocol):
    """What :func:`switched` and :func:`follow_router` use of :class:`tuner.ui.controller.AppController`."""

    serving: flow.ServingInfo | None
    sleep: SleepStatus
    runner: flow.ServerRunner
    server_changed: Any
    status: Any

    def metrics_reset(self) -> None: ...

    def set_state(self, state: AppState, message: str | None = None) -> None: ...


class ServeTargets(QObject):
    """The folder's targets for the *Serve* menu.

    Signals:
        changed(object): the targets were read again: the list, also in :attr:`items`.
    """

    changed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.items: list[flow.TargetChoice] = []
        self._asked = 0
        self.workers: list[CallWorker] = []
        """The readings started (the app waits for them on quit)."""

    def refresh(self, scanned: flow.ScanResult | None) -> None:
        """Read the targets of ``scanned`` and their saved decisions again (a worker: it reads the profiles); the
        answer arrives as :attr:`changed`. Nothing before a scan (the scan's end asks)."""
        if scanned is None:
            return
        self._asked += 1
        asked = self._asked
        w = CallWorker(lambda ev, cancel: flow.serve_choices(scanned), "targets")
        w.done.connect(lambda choices: self._read(asked, choices))
        w.failed.connect(lambda exc: log.warning("cannot read the folder's targets: %s", exc))
        self.workers = [x for x in self.workers if x.isRunning()] + [w]
        w.start()

    def _read(self, asked: int, choices: list[flow.TargetChoice]) -> None:
        if asked != self._asked:
            return  # a later reading is on its way
        self.items = list(choices)
        self.changed.emit(self.items)


def switched(c: Controller, info: flow.ServingInfo) -> None:
    """The router serves another model now (the user's pick, or a request named it): the views follow it."""
    if c.serving is not None and c.serving.model_id == info.model_id:
        c.serving = info
        return
    c.serving = info
    c.sleep = SleepStatus()
    c.metrics_reset()  # another process: its counters start again
    c.server_changed.emit(info)
    c.set_state(AppState.SERVING, f"Serving {info.model_name} at {info.endpoint_url}")


def follow_router(c: Controller, change: StateChange) -> bool:
    """A router loads another model, or serves one it did not: True when the change was that (handled)."""
    router = c.runner.router
    if router is None:
        return False
    if change.state is ServerState.SWITCHING:
        c.status.emit(change.message)
        return True
    if change.state is ServerState.READY and router.current not in (None, c.serving and c.serving.model_id):
        info = flow.router_serving_info(c.runner)
        if info is not None:
            switched(c, info)
            return True
    return False


__all__ = ["ServeTargets", "follow_router", "switched"]
