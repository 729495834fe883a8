"""Bounded ring buffers of timestamped samples (no Qt, no numpy in the hot path).

A :class:`RingBuffer` keeps at most ``capacity`` ``(t_s, value)`` pairs; the oldest sample is
dropped when a new one arrives and the buffer is full, so memory stays constant while serving
for days. ``value`` may be ``None`` (unknown at that instant: the graph shows a gap).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One sample: ``t_s`` is a monotonic or wall time in seconds, ``value`` in the series' unit or None."""

    t_s: float
    value: float | None


class RingBuffer:
    """Thread-safe bounded buffer of :class:`Sample` (append from a sampler thread, read from the GUI).

    Args:
        capacity: the most samples kept (>= 1); e.g. 3600 holds one hour at 1 Hz.

    Raises:
        ValueError: ``capacity`` < 1.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"RingBuffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[Sample] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def append(self, t_s: float, value: float | None) -> None:
        """Add one sample (drops the oldest when full)."""
        with self._lock:
            self._items.append(Sample(float(t_s), None if value is None else float(value)))

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def snapshot(self) -> list[Sample]:
        """All samples, oldest first (a copy)."""
        with self._lock:
            return list(self._items)

    def latest(self) -> Sample | None:
        """The newest sample, or None when empty."""
        with self._lock:
            return self._items[-1] if self._items else None

    def last_value(self) -> float | None:
        """The newest non-None value, or None."""
        with self._lock:
            for s in reversed(self._items):
                if s.value is not None:
                    return s.value
        return None

    def latest_valued(self) -> Sample | None:
        """The newest sample whose value is not None (its time tells how old the value is), or None."""
        with self._lock:
            for s in reversed(self._items):
                if s.value is not None:
                    return s
        return None

    def window(self, now_s: float, span_s: float) -> tuple[list[float], list[float | None]]:
        """Samples with ``now_s - span_s <= t_s <= now_s``.

        Returns:
            ``(ages_s, values)``: ages are ``t_s - now_s`` (<= 0, seconds before now), oldest first.
        """
        lo = now_s - span_s
        xs: list[float] = []
        ys: list[float | None] = []
        with self._lock:
            for s in self._items:
                if lo <= s.t_s <= now_s:
                    xs.append(s.t_s - now_s)
                    ys.append(s.value)
        return xs, ys

    def clear(self) -> None:
        """Forget every sample."""
        with self._lock:
            self._items.clear()


#: A spacing this many times the series' usual spacing is a gap (nothing was measured there).
GAP_FACTOR = 2.5


def with_breaks(ages_s: list[float], values: list[float | None], max_dt_s: float | None = None,
                ) -> tuple[list[float], list[float | None]]:
    """Insert a ``None`` (a break in the plotted line) between two samples further apart than
    ``max_dt_s``, so a line is never drawn across a stretch where nothing was measured (the app
    was suspended, the poller stalled, the window covers a restart).

    Args:
        ages_s: sample times in seconds, ascending (e.g. :meth:`RingBuffer.window`'s ages).
        values: the values (None = unknown, already a break).
        max_dt_s: the largest spacing that is still continuous; None = :data:`GAP_FACTOR` × the
            median spacing of the samples (a 1 Hz series breaks after 2.5 s, a series sampled every
            5 s after 12.5 s).

    Returns:
        ``(ages_s, values)`` with a ``None`` inserted at the midpoint of each gap; same lists
        (copied) when there is no gap or fewer than 2 samples.
    """
    xs, ys = list(ages_s), list(values)
    if len(xs) < 2:
        return xs, ys
    steps = sorted(b - a for a, b in zip(xs, xs[1:]) if b > a)
    if max_dt_s is None:
        if not steps:
            return xs, ys
        max_dt_s = GAP_FACTOR * steps[len(steps) // 2]
    out_x: list[float] = [xs[0]]
    out_y: list[float | None] = [ys[0]]
    for (x0, _y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x1 - x0 > max_dt_s:
            out_x.append((x0 + x1) / 2.0)
            out_y.append(None)
        out_x.append(x1)
        out_y.append(y1)
    return out_x, out_y
