"""The tune's events: each step reports through one :class:`Events`, which logs the event's sentence and
hands a :class:`~tuner.calibration.request.TuneEvent` to the caller's callback."""

from __future__ import annotations

import logging
import time
from typing import Any

from ..request import EventCallback, TuneEvent

log = logging.getLogger(__name__)

LOGGED_KINDS = frozenset({"started", "reused", "stale", "measured", "decision", "saved", "cancelled"})
"""Event kinds logged at INFO (the tune's lifecycle); ``error`` (a non-fatal note) is logged as a warning
reading "tune note:", the others at DEBUG."""


class Events:
    """The event sink of one tune call: ``events(kind, message, **fields)``.

    Args:
        on_event: the caller's callback (``None``: the events are only logged). It runs on the tune's thread.
        logged: log the events (False: a caller that only reads the inputs, e.g. the freshness check of a saved
            profile, where "tune started" in the log would be untrue).

    Attributes:
        t0: ``time.monotonic()`` when the tune began; every event's ``elapsed_s`` counts from it.
    """

    def __init__(self, on_event: EventCallback | None, logged: bool = True) -> None:
        self.on_event = on_event
        self.logged = logged
        self.t0 = time.monotonic()

    def __call__(self, kind: str, message: str, **kw: Any) -> None:
        """Log ``message`` (the event's own sentence: file names, labels, figures; never a prompt's text) and
        send a :class:`TuneEvent` of ``kind`` with ``kw`` as its fields (``detail``: a JSON-able dict)."""
        if self.logged:
            level = logging.WARNING if kind == "error" else logging.INFO if kind in LOGGED_KINDS else logging.DEBUG
            log.log(level, "tune %s: %s", "note" if kind == "error" else kind, message)
        if self.on_event is None:
            return
        kw["elapsed_s"] = self.elapsed_s()
        detail = kw.pop("detail", None) or {}
        self.on_event(TuneEvent(kind=kind, message=message, detail=detail, **kw))

    def note(self, message: str | None, **kw: Any) -> None:
        """A non-fatal note (kind ``"error"``: fatal problems raise ``TuneError``); ``None`` says nothing."""
        if message:
            self(kind="error", message=message, **kw)

    def elapsed_s(self) -> float:
        """Seconds since the tune began."""
        return time.monotonic() - self.t0
