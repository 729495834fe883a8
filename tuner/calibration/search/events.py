"""The sweep's events: each one the caller's ``emit`` gets, with the progress and the ETA at that moment."""

from __future__ import annotations

from collections.abc import Callable

from .budget import Budget, Estimates
from .eta import ConfirmTracker, Eta
from .settings import Emit


class SweepEvents:
    """Sends the sweep's events to ``emit`` with ``progress`` (0..1, never back, below 1 while work remains),
    ``elapsed_s`` and ``eta_s`` (``None`` until the first warm-up was timed) added.

    Args:
        emit: the caller's event sink (:data:`~tuner.calibration.search.settings.Emit`).
        budget, estimates, eta, tracker: the sweep's state the ETA is computed from.
        busy: the load watcher's "other programs are using the CPU".
    """

    def __init__(self, emit: Emit, budget: Budget, estimates: Estimates, eta: Eta, tracker: ConfirmTracker,
                 busy: Callable[[], bool]) -> None:
        self.emit = emit
        self.budget = budget
        self.estimates = estimates
        self.eta = eta
        self.tracker = tracker
        self.busy = busy

    def __call__(self, kind: str, message: str, **kw: object) -> None:
        """Send one event: ``emit(kind, message, progress=, elapsed_s=, eta_s=, **kw)`` (``kw``: ``candidate``,
        ``measurement``, ``detail``)."""
        elapsed = self.budget.elapsed_s()
        eta = self.eta.remaining_s(self.budget, self.estimates, self.tracker, self.busy)
        progress = self.eta.progress(kind, elapsed, eta)
        self.emit(kind, message, progress=min(1.0, progress), elapsed_s=elapsed, eta_s=eta, **kw)


__all__ = ["SweepEvents"]
