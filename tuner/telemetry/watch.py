"""Watch live draft acceptance against a profile's break-even (no Qt).

The break-even acceptance rate is the rate below which speculation costs more than it saves
(computed by calibration when deciding; stored with the profile). When the pooled acceptance of
the last ``hold_s`` seconds stays below it (with enough drafted tokens to mean something), the app
tells the user "speculation is now slowing you down — re-tune?" once, and again only after the
acceptance has recovered above break-even.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class WatchVerdict:
    """Result of one :meth:`AcceptanceWatch.feed`.

    Attributes:
        acceptance_rate: pooled Δaccepted ÷ Δdrafted over the window, or None (too few drafts).
        below: the pooled rate is below break-even over a full window.
        alert: True exactly once when ``below`` becomes true (notify now).
    """

    acceptance_rate: float | None
    below: bool
    alert: bool


class AcceptanceWatch:
    """Pooled acceptance over a sliding time window, compared with ``break_even_rate``.

    Args:
        break_even_rate: 0..1 acceptance rate below which speculation is slower than the baseline.
        hold_s: how long (seconds) the window must cover before it can alert.
        min_draft_tokens: fewest drafted tokens in the window for a verdict.

    Raises:
        ValueError: ``break_even_rate`` outside 0..1 or ``hold_s`` <= 0.
    """

    def __init__(self, break_even_rate: float, hold_s: float = 300.0, min_draft_tokens: int = 200) -> None:
        if not 0.0 <= break_even_rate <= 1.0:
            raise ValueError(f"break_even_rate must be within 0..1, got {break_even_rate}")
        if hold_s <= 0:
            raise ValueError(f"hold_s must be > 0, got {hold_s}")
        self.break_even_rate = break_even_rate
        self.hold_s = hold_s
        self.min_draft_tokens = min_draft_tokens
        self._items: deque[tuple[float, float, float]] = deque()
        self._first_t: float | None = None
        self._alerted = False

    def feed(self, t_s: float, draft_tokens: float | None, accepted_tokens: float | None) -> WatchVerdict:
        """Add one interval's deltas (None/0 when no drafting happened) and return the verdict."""
        if self._first_t is None:
            self._first_t = t_s
        if draft_tokens and accepted_tokens is not None:
            self._items.append((t_s, float(draft_tokens), float(accepted_tokens)))
        while self._items and self._items[0][0] < t_s - self.hold_s:
            self._items.popleft()
        drafted = sum(d for _, d, _ in self._items)
        accepted = sum(a for _, _, a in self._items)
        rate = accepted / drafted if drafted >= self.min_draft_tokens else None
        covered = t_s - self._first_t >= self.hold_s
        below = bool(covered and rate is not None and rate < self.break_even_rate)
        alert = below and not self._alerted
        if alert:
            self._alerted = True
        elif rate is not None and rate >= self.break_even_rate:
            self._alerted = False
        return WatchVerdict(acceptance_rate=rate, below=below, alert=alert)
