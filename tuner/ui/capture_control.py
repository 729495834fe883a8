"""The capture of served requests, switched and emptied from the app: the ``capture_requests`` setting, the
served llama-server restarted with or without ``--log-prompts-dir`` (a start-up flag), and the captured files
forgotten one by one or all at once.

:class:`CaptureControl` is the controller's part for it (:attr:`tuner.ui.controller.AppController.captures`):
the window's capture panel and the tray's tooltip use it; it reports through the controller's
``capture_changed`` and ``status`` signals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject

from tuner.server import ServerState, SleepStatus
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.flow import EventCallback
from tuner.ui.state import AppState


class Controller(Protocol):
    """What :class:`CaptureControl` uses of :class:`tuner.ui.controller.AppController`."""

    settings: Settings
    runner: flow.ServerRunner
    serving: flow.ServingInfo | None
    sleep: SleepStatus
    status: Any
    capture_changed: Any
    sleep_changed: Any

    @property
    def busy(self) -> bool: ...

    def update_settings(self, new: Settings) -> None: ...

    def metrics_reset(self) -> None: ...

    def set_state(self, state: AppState, message: str | None = None) -> None: ...

    def _start_work(self, fn: Callable[..., Any], name: str, on_done: Callable[[Any], None]) -> Any: ...

    def _serving_process_changed(self) -> None: ...


class CaptureControl(QObject):
    """Capture of served requests on/off, forget all, delete one (see the module docstring). A QObject living
    in the controller's thread, so a worker's answer reaches :meth:`_applied` there (a queued call)."""

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller if isinstance(controller, QObject) else None)
        self.c = controller
        self._setting = ""

    def status(self) -> flow.CaptureStatus:
        """Where the capture of served requests stands (:func:`tuner.ui.flow.capture_status`)."""
        return flow.capture_status(self.c.settings, self.c.runner)

    def set_capture(self, on: bool) -> bool:
        """Switch the capture of served requests (the ``capture_requests`` setting). A served server is
        restarted to apply it (``--log-prompts-dir`` is a start-up flag: the supervisor's applying state); off
        deletes every captured request once the server runs without the flag. False when refused: a step runs
        (the setting is unchanged). Raises :class:`tuner.settings.SettingsError` when the setting cannot be saved."""
        c = self.c
        if c.busy:
            c.status.emit("Busy: wait for the current step or cancel it")
            return False
        c.update_settings(c.settings.replace(capture_requests=on))
        sup = c.runner.supervisor
        cfg = sup.config if sup is not None and c.serving is not None else None
        if cfg is None or sup is None or sup.state not in (ServerState.READY, ServerState.SLEEPING):
            if not on:
                flow.forget_captured()
            c.capture_changed.emit()
            return True
        setting = "keeping served requests" if on else "not keeping served requests"

        def job(on_event: EventCallback, cancel: threading.Event) -> None:
            c.runner.apply(flow.capture_config(cfg, on), setting)
            if not on:
                flow.forget_captured()

        self._setting = setting
        c._start_work(job, "apply", self._applied)
        return True

    def _applied(self, _result: object = None) -> None:
        """A start-up setting was applied: a new llama-server process serves (fresh /metrics counters, awake)."""
        c, setting = self.c, self._setting
        if c.sleep != SleepStatus():
            c.sleep = SleepStatus()
            c.sleep_changed.emit(c.sleep)
        c.metrics_reset()
        c._serving_process_changed()
        c.capture_changed.emit()
        c.set_state(AppState.SERVING, f"llama-server restarted: {setting}")

    def forget_all(self) -> int:
        """*Forget captured requests*: delete every captured request (a serving llama-server goes on keeping new
        ones while the setting is on). Returns how many; raises OSError when one cannot be deleted."""
        c = self.c
        try:
            n = flow.forget_captured(keep_folders=c.settings.capture_requests)
        finally:
            c.capture_changed.emit()
        c.status.emit(f"Forgot {n} captured request{'' if n == 1 else 's'}")
        return n

    def delete(self, path: Path) -> bool:
        """Delete one captured request (a file :func:`tuner.ui.flow.list_captured` listed); True when it existed.
        Raises ValueError for any other path, OSError when it cannot be deleted."""
        try:
            return flow.delete_captured(path)
        finally:
            self.c.capture_changed.emit()


__all__ = ["CaptureControl"]
