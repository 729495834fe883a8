"""The sweep's shared state and the base of its stages.

:class:`SweepState` holds what every stage of one sweep reads and writes (built once by
:class:`~tuner.calibration.search.Search`); :class:`Stage` gives a stage its parts under the names the stages
use (``s`` for the settings, ``record``, ``budget``, ``estimates``, ``eta``, ``tracker``, ``events``, ``cancel``,
``busy``), so a stage's constructor only adds its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .budget import Budget, Estimates
from .eta import ConfirmTracker, Eta
from .events import SweepEvents
from .record import Record
from .settings import SearchSettings


@dataclass(frozen=True)
class SweepState:
    """What the stages of one sweep share.

    Attributes:
        settings: the sweep's :class:`SearchSettings`.
        record: every measurement and what the sweep learned.
        budget, estimates: the time budget and the estimated cost of the next steps.
        eta, tracker: the ETA and the paired rounds' state it reads.
        events: the event sink.
        cancel: the user's cancel.
        busy: the load watcher's "other programs are using the CPU" so far.
    """

    settings: SearchSettings
    record: Record
    budget: Budget
    estimates: Estimates
    eta: Eta
    tracker: ConfirmTracker
    events: SweepEvents
    cancel: threading.Event
    busy: Callable[[], bool]


class Stage:
    """A stage of the sweep (screening, the paired rounds, the thread stage, the measurer they share): the
    :class:`SweepState`'s parts as attributes."""

    def __init__(self, state: SweepState) -> None:
        self.state = state
        self.s = state.settings
        self.record = state.record
        self.budget = state.budget
        self.estimates = state.estimates
        self.eta = state.eta
        self.tracker = state.tracker
        self.events = state.events
        self.cancel = state.cancel
        self.busy = state.busy


__all__ = ["Stage", "SweepState"]
