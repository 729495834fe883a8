"""The sweep's time: the one budget holder (:class:`Budget`) and the estimates every step is planned from.

Every step runs only when its estimated time fits the budget left (:meth:`Estimates.fits`); the screening
stages leave enough of it for :data:`RESERVE_PAIRS` paired rounds of the leader (:meth:`Estimates.reserve_s`).
Estimates come from what the sweep has seen: the first warm-up's speed, then the baseline's, and the mean
load time. When they are wrong (a machine that slows down under another program's load), the hard time
limit (:data:`HARD_LIMIT`) still ends the sweep in time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..measure import bounded_timeout
from ..pairing import LOOK_STEP, MIN_PAIRS
from .protocol import Requests, rep_s
from .record import Record

HARD_LIMIT = 1.08
"""The sweep's hard time limit, as a fraction of the budget (issue 10: first launch to decision within
15 % of it). The stages plan from estimates (the warm-up's speed, the mean load time); on a busy machine
those can be wrong by a factor (a 2-thread server on a 2-core box with one core taken by another program
ran 30× slower than in the pause before), so from the end of the baseline launch on, a launch that has
not become ready, a request in flight and every later step end at ``HARD_LIMIT × budget``: the requests
completed so far are kept (``Measurement.cut_short``), the rest of the plan is reported as not measured,
and the decision is made from what was measured. The margin to 15 % is for stopping the server and
deciding."""

RESERVE_PAIRS = MIN_PAIRS + LOOK_STEP
"""Pairs the screening stages leave time for: two looks of the sequential test (``tuner.calibration.sequential``:
two consistent pairs decide on a quiet machine, a noisier one needs the second look)."""

DEFAULT_TPS = 20.0
"""Tokens/s assumed before any speed was measured."""

DEFAULT_LOAD_S = 5.0
"""Seconds a model load is assumed to take before one was timed."""


class _UntilDeadline(threading.Event):
    """A cancel event for one launch's start-up wait: reads as set once ``cancel`` is set or
    ``time.monotonic()`` passes ``deadline()`` (``None`` = no deadline yet). Only ``is_set`` is meaningful
    (the supervisor's ready wait polls it)."""

    def __init__(self, cancel: threading.Event, deadline: Callable[[], float | None]) -> None:
        super().__init__()
        self._cancel = cancel
        self._deadline = deadline

    def is_set(self) -> bool:
        d = self._deadline()
        return self._cancel.is_set() or (d is not None and time.monotonic() >= d)


class Budget:
    """The sweep's time budget, from its start (construction) to the decision.

    Args:
        budget_s: the budget in seconds (checked where the user gives it: ``tuner.options``).
        clock: reads seconds (``time.monotonic``; tests give a simulated clock). The hard time limit runs
            on ``time.monotonic`` whatever the clock: it bounds real waits (a launch, a request).

    Attributes:
        budget_s: the budget (seconds).
        t0: the clock's reading when the sweep started.
        hard_deadline_s: ``time.monotonic()`` value of the hard time limit (:data:`HARD_LIMIT`), set by
            :meth:`arm_hard_limit` once the baseline was measured; ``None`` before.
        held_s: seconds kept back for the last stage (the thread stage: ``tuner.calibration.threads.SHARE`` of
            the budget); the stages before it see :meth:`remaining_s` without them; that stage sets it to 0.
    """

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self.clock = clock
        self.t0 = clock()
        self.hard_deadline_s: float | None = None
        self.held_s = 0.0  # kept back for a later stage (the thread stage's share): not in remaining_s until released

    @property
    def limit_s(self) -> float:
        """The hard time limit in seconds from the start (``HARD_LIMIT × budget_s``)."""
        return HARD_LIMIT * self.budget_s

    def elapsed_s(self) -> float:
        """Seconds since the sweep started."""
        return self.clock() - self.t0

    def remaining_s(self) -> float:
        """Budget left in seconds (negative once overrun), less what is :attr:`held_s` for a later stage."""
        return self.budget_s - self.held_s - self.elapsed_s()

    def arm_hard_limit(self) -> None:
        """Start the hard time limit (:data:`HARD_LIMIT` × budget from the sweep's start)."""
        self.hard_deadline_s = time.monotonic() + (self.limit_s - self.elapsed_s())

    def past_hard_limit(self) -> bool:
        """True once the hard time limit has passed."""
        return self.hard_deadline_s is not None and time.monotonic() >= self.hard_deadline_s

    def request_timeout(self, request_timeout_s: float) -> float:
        """HTTP timeout (seconds) of the next request: ``request_timeout_s``, never past the hard time limit."""
        return bounded_timeout(request_timeout_s, self.hard_deadline_s)

    def until_deadline(self, cancel: threading.Event) -> threading.Event:
        """A cancel event for a launch's start-up wait: set once ``cancel`` is, or the hard time limit passed."""
        return _UntilDeadline(cancel, lambda: self.hard_deadline_s)


@dataclass
class Estimates:
    """Estimated seconds of the sweep's next steps, from the speeds and load times seen so far.

    Attributes:
        requests: what every launch sends (prompts, ``n_predict``).
        record: the sweep's record (the baseline's speed once measured).
        side_by_side: paired rounds keep the baseline's server running next to the finalist's.
        ngram_only: the plan has n-gram types only (the leader needs a fresh launch per pair).
        load_s: every load time timed so far (seconds).
        warmup_tps: the first launch's warm-up speed (tokens/s); ``None`` until timed.
        finalists: candidates the paired rounds may confirm (at most ``SearchSettings.finalists``, at most one
            per group of the plan); a busy machine's optional stages keep the first look of each one after the
            first (:meth:`reserve_s`).
    """

    requests: Requests
    record: Record
    side_by_side: bool = False
    ngram_only: bool = False
    load_s: list[float] = field(default_factory=list)
    warmup_tps: float | None = None
    finalists: int = 1

    def tps(self) -> float | None:
        """The model's speed as far as known: the baseline's, else the first warm-up's (``None``: neither)."""
        return self.record.base_tps or self.warmup_tps

    def load(self) -> float:
        """Mean load time (seconds; :data:`DEFAULT_LOAD_S` before one was timed)."""
        return sum(self.load_s) / len(self.load_s) if self.load_s else DEFAULT_LOAD_S

    def rep_s(self, gen_tokens_per_s: float | None = None) -> float:
        """Estimated seconds of one repetition (every prompt once) at ``gen_tokens_per_s`` (default: :meth:`tps`)."""
        tps = gen_tokens_per_s or self.tps() or DEFAULT_TPS
        return rep_s(tps, len(self.requests.prompts), self.requests.n_predict)

    def launch_s(self) -> float:
        """Estimated seconds of a launch before its requests: the mean load and a 16-token warm-up."""
        return self.load() + 16 / max(self.tps() or DEFAULT_TPS, 1e-3)

    def estimate_s(self, gen_tokens_per_s: float | None, repetitions: int) -> float:
        """Estimated seconds of one launch: mean load time + warm-up + requests at ``gen_tokens_per_s``."""
        tps = gen_tokens_per_s or self.tps() or DEFAULT_TPS
        return self.load() + 16 / max(tps, 1e-3) + self.rep_s(tps) * repetitions

    def pair_s(self) -> float:
        """Estimated seconds of one more adjacent pair: a repetition on each side, plus its share of the
        launches: alternating launches hold two repetitions each (one launch per pair), an n-gram leader gets a
        fresh launch per pair (its pool must not carry over), and side by side a draft model's server is
        started afresh every :data:`~tuner.calibration.pairing.LOOK_STEP` pairs."""
        if not self.side_by_side or self.ngram_only:
            return 2 * self.rep_s() + self.launch_s()
        return 2 * self.rep_s() + self.launch_s() / LOOK_STEP

    def reserve_s(self, optional: bool, busy: bool) -> float:
        """Budget the screening stages leave for the paired rounds: :data:`RESERVE_PAIRS` pairs of the
        leader (two looks: the second is the spare for a noisier machine) and the launch that opens them
        (side by side: the baseline's server; alternating: the first baseline launch).

        ``optional``: the reserve of the optional stages (exploration, the ``p_min`` variant, a second launch of
        near ties): the first look (``MIN_PAIRS`` pairs) of each finalist after the leader (:attr:`finalists`),
        and on a ``busy`` machine one more look's pairs of the leader; the refine stage after its first length
        counts as optional, without that busy extra (``Screening.refine`` says why). (Idle too since issue 28's
        quality runs: with the leader's two looks alone reserved, two finalists split four pairs, neither
        concluded, and the model alone was served in five of nine runs where the pairs read 1.2–2×.)

        The probes and the first refine length keep the plain reserve while busy: the length the probe's curve
        predicts fastest is what the pairs then confirm. (Doubling the reserve for them too left a busy 90 s sweep
        with only the ``n_max`` 16 probe to confirm — every predicted-better length skipped at 34 s with 56 s left —
        and it ended inconclusive on that probe.) Why the other finalists' looks (issue 28, quality family, 51 s
        busy tune): the optional stages ran to 32 s, the leader's first look was inconclusive and the second
        finalist (the chain, ~1.4×) had three noisy looks left, too few to conclude; the model alone was served
        where the chain was fastest."""
        extra = (self.finalists - 1) * MIN_PAIRS + (LOOK_STEP if busy else 0) if optional else 0
        return (RESERVE_PAIRS + extra) * self.pair_s() + self.opening_s()

    def opening_s(self) -> float:
        """The launch that opens the paired rounds: side by side the baseline's server, alternating the first
        baseline launch (one repetition)."""
        return self.launch_s() if self.side_by_side else self.estimate_s(None, 1)

    def rounds_s(self) -> float:
        """What the paired rounds are expected to take before they begin (the ETA of the screening stages):
        the first look's ``MIN_PAIRS`` pairs and the launch that opens them (the ETA while they run follows the
        sequential test: ``tuner.calibration.search.eta.ConfirmTracker.expected_s``)."""
        return MIN_PAIRS * self.pair_s() + self.opening_s()

    def fits(self, budget: Budget, est_s: float, reserve: bool = True, optional: bool = False,
             busy: bool = False, held: bool = False) -> bool:
        """True when a step of ``est_s`` seconds fits the budget left (screening steps keep
        :meth:`reserve_s`; ``optional`` steps its busy-machine reserve; ``held``: the time kept back for the
        thread stage counts too — a step that decides what is served outranks measuring its threads, which
        then falls back to the model alone's setting)."""
        left = budget.remaining_s() + (budget.held_s if held else 0.0)
        return left - (self.reserve_s(optional, busy) if reserve else 0.0) >= est_s


__all__ = ["DEFAULT_LOAD_S", "DEFAULT_TPS", "HARD_LIMIT", "RESERVE_PAIRS", "Budget", "Estimates"]
