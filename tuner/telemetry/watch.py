"""Watch live draft acceptance against a profile's break-even, and the live speed against the profile's
while other programs use the CPU (no Qt).

The break-even acceptance rate is the rate below which speculation costs more than it saves
(computed by calibration when deciding; stored with the profile). When the pooled acceptance of
the last ``hold_s`` seconds stays below it (with enough drafted tokens to mean something), the app
tells the user "speculation is now slowing you down — re-tune?" once, and again only after the
acceptance has recovered above break-even.

:class:`CollapseWatch`: when the live speed stays below 0.3× the profile's for 10 s while other programs use
more than half a core, the server's threads are losing to them; :func:`collapse_words` says what to do.
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


COLLAPSE_RATIO = 0.3
"""A live speed below this fraction of the profile's counts toward a collapse."""

COLLAPSE_HOLD_S = 10.0
"""… when it stays there this many seconds …"""

OTHER_CORES = 0.5
"""… while other programs use more than this many cores."""


@dataclass(frozen=True)
class CollapseVerdict:
    """Result of one :meth:`CollapseWatch.feed`.

    Attributes:
        collapsed: the live speed has stayed below ``ratio`` × the profile's for ``hold_s`` seconds while other
            programs used more than ``other_cores`` cores.
        alert: True exactly once when ``collapsed`` becomes true (tell the user now).
        live_tps: the interval's generation tokens/s (None: nothing generated).
        other_cores: other programs' CPU in cores (None: unknown).
    """

    collapsed: bool
    alert: bool
    live_tps: float | None
    other_cores: float | None


class CollapseWatch:
    """The served server's speed against its profile's while other programs use the CPU (issue 25).

    On a build whose CPU threads spin-wait for each other (OpenMP: ggml/src/ggml-cpu/ggml-cpu.c
    ``ggml_barrier``), one thread pushed off its core by another busy program stalls the others: the default
    thread count was measured at 1.5 tokens/s instead of 99. Each interval with generation either keeps the
    condition (speed below ``ratio`` × ``profile_tps`` and others above ``other_cores``) or resets it; an interval
    without generation or without a CPU reading neither keeps nor resets it. llama-server adds a request's tokens
    to ``/metrics`` when the request ends (tools/server/server-context.cpp ``metrics_on_prediction``), so one
    slow request shows up once, with its whole generation time (``gen_s``): the condition then holds from
    that long before.

    Args:
        profile_tps: the profile's generation tokens/s (> 0).
        ratio, hold_s, other_cores: see :data:`COLLAPSE_RATIO`, :data:`COLLAPSE_HOLD_S`, :data:`OTHER_CORES`.

    Raises:
        ValueError: ``profile_tps`` or ``hold_s`` not > 0.
    """

    def __init__(self, profile_tps: float, ratio: float = COLLAPSE_RATIO, hold_s: float = COLLAPSE_HOLD_S,
                 other_cores: float = OTHER_CORES) -> None:
        if not profile_tps > 0 or not hold_s > 0:
            raise ValueError(f"profile_tps and hold_s must be > 0, got {profile_tps} and {hold_s}")
        self.profile_tps = profile_tps
        self.ratio = ratio
        self.hold_s = hold_s
        self.other_cores = other_cores
        self._since: float | None = None
        self._alerted = False

    def feed(self, t_s: float, gen_tokens_per_s: float | None, other_cores: float | None,
             gen_s: float = 0.0) -> CollapseVerdict:
        """Add one interval ending at ``t_s`` (seconds on the caller's clock) whose finished requests generated at
        ``gen_tokens_per_s`` for ``gen_s`` seconds, with ``other_cores`` used by other programs; the verdict."""
        if gen_tokens_per_s is not None and other_cores is not None:
            slow = gen_tokens_per_s < self.ratio * self.profile_tps and other_cores > self.other_cores
            if not slow:
                self._since = None
                self._alerted = False
            else:
                start = t_s - max(0.0, gen_s)
                self._since = start if self._since is None else min(self._since, start)
        collapsed = self._since is not None and t_s - self._since >= self.hold_s
        alert = collapsed and not self._alerted
        if alert:
            self._alerted = True
        return CollapseVerdict(collapsed, alert, gen_tokens_per_s, other_cores)


def collapse_words(v: CollapseVerdict, profile_tps: float) -> tuple[str, str]:
    """``(title, body)`` of the collapse notice: what happened in plain words first, then what to do."""
    live = v.live_tps or 0.0
    title = "Draftwise: another program is slowing the model down a lot"
    body = (f"The model generates {live:.1f} tokens/s instead of the {profile_tps:.0f} it was tuned at, while "
            f"other programs use {v.other_cores or 0:.1f} cores: its threads wait for each other whenever one "
            "of them loses its core. Close the busy program, or give llama-server fewer threads (the threads "
            "setting, or draftwise serve --threads N), or re-tune: a tune tries each thread setting with "
            "another busy program and serves the one that copes best.")
    return title, body
