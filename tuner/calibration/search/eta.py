"""How long the sweep still runs, as the events say it: the ETA and the progress that never moves back.

:class:`Eta` holds what is pending (the launch under way, the probes still queued) and turns it, with the
:class:`~tuner.calibration.search.budget.Estimates` and the budget left, into the seconds until the
decision; while the paired rounds run it asks the :class:`ConfirmTracker` — the rounds' state: the
finalists left, the sequential test's latest look, when the current pair began — how many pairs the test
is expected to need. Progress events never report 100 % while work remains, and the ETA is unknown
(``None``) until the first warm-up has been timed.

The ETA follows reality (issue 25 item 5: it read "9 s" at 120 s into a sweep whose launches ran far
longer than planned): the launch under way counts its requests (:meth:`Eta.start_step`,
:meth:`Eta.request_done`), and when they come later than its estimate planned, the ETA scales that launch
and everything after it by the observed slowdown (:attr:`Eta.slow`: a machine that is slow now stays slow
for a while), up to the hard time limit, where every step ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..candidates import Candidate
from ..pairing import MIN_PAIRS, Look, look_points
from .budget import Budget, Estimates

MAX_SLOWDOWN = 50.0
"""The largest slowdown the ETA believes (a 2-thread server with another program on one of 2 cores ran 66×
slower; the hard time limit bounds the rest)."""


@dataclass
class ConfirmTracker:
    """The paired rounds' state, for the rounds themselves and for the ETA.

    Attributes:
        max_pairs: the sequential test's last look per finalist (the decision uses the same): the settings', or
            further on a busy machine side by side (:meth:`extend_last_look`). (More looks when busy were tried:
            each look then gets a smaller share of the error, and short busy sweeps ended inconclusive after 2
            pairs where 3 would have decided; a further last look keeps three: 2, 4, 8.)
        finalists: finalists the paired rounds were planned for (the sequential test's error is split
            over them; chosen from screening data only).
        next_rep: the next fresh repetition id (after the screening ones).
        left: finalists whose paired rounds have not ended (the current one first).
        look: the sequential test's latest look at the current finalist (``None`` before its first pair).
        pair_t0: clock reading when the current pair (side by side) or round (alternating) began.
        looked: every finalist has had its first look (side by side's first pass,
            ``tuner.calibration.search.side_by_side``): :meth:`leaves_room` keeps nothing more for them.
        planned_pairs: the settings' ``max_pairs``: a finalist already "faster" on a busy machine has its rounds go
            on up to here (:meth:`more_pairs_while_busy`), not to an extended last look (0: ``max_pairs``).
    """

    max_pairs: int
    finalists: int
    next_rep: int
    left: list[Candidate] = field(default_factory=list)
    look: Look | None = None
    pair_t0: float | None = None
    looked: bool = False
    planned_pairs: int = 0

    def extend_last_look(self, last_look: int) -> None:
        """Move the last look to ``last_look`` pairs when that is further (a busy machine side by side, when the
        paired rounds begin: ``tuner.calibration.search.confirm.Confirmation.run``); the pairs planned stay."""
        self.planned_pairs = self.faster_pairs
        self.max_pairs = max(self.max_pairs, last_look)

    @property
    def faster_pairs(self) -> int:
        """Pairs a finalist already "faster" on a busy machine runs to: the planned ones (:attr:`planned_pairs`)."""
        return self.planned_pairs or self.max_pairs

    def take_rep(self) -> int:
        """A fresh repetition id for the next pair."""
        r = self.next_rep
        self.next_rep += 1
        return r

    def next_finalist(self, c: Candidate, now: float) -> None:
        """The paired rounds of the finalists before ``c`` have ended; ``c``'s begin at ``now``."""
        while self.left and self.left[0] != c:
            self.left.pop(0)
        self.look = None
        self.pair_t0 = now

    def saw(self, look: Look, now: float) -> None:
        """The sequential test looked (``look``) at ``now``: the next pair begins."""
        self.look, self.pair_t0 = look, now

    def more_pairs_while_busy(self, look: Look | None, busy: Callable[[], bool], budget: Budget,
                              estimates: Estimates) -> bool:
        """True when a finalist's test has said "faster" but the machine is ``busy`` and the budget left
        affords another pair (less ``MIN_PAIRS`` pairs and a launch for each later
        finalist): its rounds go on up to ``max_pairs``. The verdict is already sound (the error bound
        holds for any stopping rule, and the decision takes the last look); what the extra pairs buy is
        the estimate: a test that stops at its first conclusive look on 3 noisy pairs stops when they
        happen to read high, and under load a pair's ratio spreads wider than idle (issue 10: "spend
        the remaining budget on more paired rounds")."""
        if look is None or look.verdict != "faster" or look.n >= self.faster_pairs or not busy():
            return False
        per_pair = estimates.pair_s()
        later = max(0, len(self.left) - 1) * (MIN_PAIRS * per_pair + estimates.launch_s())
        return budget.remaining_s() - later >= per_pair

    def leaves_room(self, look: Look | None, budget: Budget, estimates: Estimates) -> bool:
        """False when the current finalist's test is inconclusive at a look point and the budget left cannot pay
        the pairs to its next look and still give each later finalist its first look (``MIN_PAIRS`` pairs and a
        launch): its rounds end there. One finalist's inconclusive rounds then never take the budget the next one
        needs to be looked at at all (issue 28, a busy quality run: ngram-mod ran 6 inconclusive pairs, 23 s of a
        54 s budget, and the chain ngram-mod + draft, 1.54× in its one pair, was never looked at; the model alone
        was served). True before the first look, between look points, for the last finalist, and once every finalist
        had its first look (:attr:`looked`)."""
        points = look_points(self.max_pairs)
        if self.looked or look is None or look.verdict != "inconclusive" or look.n not in points \
                or look.n >= points[-1] or len(self.left) <= 1:
            return True
        per_pair = estimates.pair_s()
        later = (len(self.left) - 1) * (MIN_PAIRS * per_pair + estimates.launch_s())
        to_next = next(p for p in points if p > look.n) - look.n
        return budget.remaining_s() - later >= to_next * per_pair

    def room_words(self) -> str:
        """The words for a finalist whose rounds :meth:`leaves_room` ended: who gets the budget."""
        nxt = self.left[1].label if len(self.left) > 1 else "the next finalist"
        return f"; the budget left goes to {nxt}'s first look"

    def expected_s(self, estimates: Estimates, budget: Budget, busy: Callable[[], bool], slow: float = 1.0) -> float:
        """Expected seconds of the paired rounds still to run (the ETA while confirming).

        For the current finalist: the pairs its sequential test is expected to need — ``pairs_needed``
        of the latest look (at the current mean and spread), at least ``MIN_PAIRS``, at most
        ``max_pairs``; ``max_pairs`` when its mean gain is not above the bar (it runs on until a
        futility verdict or the last look); ``MIN_PAIRS`` before two pairs give a spread — less the
        time the current pair has already run, as far as the budget left affords them. Each later
        finalist: ``MIN_PAIRS`` pairs and its launches, within the budget left. Every estimate is
        ``slow`` times the planned one (:attr:`Eta.slow`). (Before: the whole budget left, so the bar
        jumped to the end whenever the test concluded early.)"""
        if not self.left:
            return 0.0
        per_pair = estimates.pair_s() * slow
        launch = estimates.launch_s() * slow
        look = self.look
        n = look.n if look is not None else 0
        if look is None or n < 2:
            want = MIN_PAIRS
        elif look.verdict != "inconclusive":
            want = self.faster_pairs if self.more_pairs_while_busy(look, busy, budget, estimates) else n
        else:
            want = look.pairs_needed if look.pairs_needed is not None else self.max_pairs
            # the test decides only at a look point: the first at or after the pairs needed
            want = next(p for p in look_points(self.max_pairs) if p >= min(self.max_pairs, max(MIN_PAIRS, want)))
        ran = (budget.clock() - self.pair_t0) if self.pair_t0 is not None else 0.0
        # the pair under way (less what it has run; an overrun one is still under way: not below 0),
        # then the rest, as far as the budget left affords them (a pair that does not fit is not run)
        if want > n:
            # right after a look the next pair starts only when its estimate fits the budget left
            under_way = ran > 0.0 or budget.remaining_s() >= estimates.pair_s()
            now = max(0.0, per_pair - ran) if under_way else 0.0
            fit = int(max(0.0, budget.remaining_s() - now) // per_pair)
            current = now + min(want - n - 1, fit) * per_pair
        else:
            current = 0.0
        if look is None:
            current += launch  # the finalist's (and, side by side, the baseline's) server to start
        later = (len(self.left) - 1) * (MIN_PAIRS * per_pair + launch)
        return current + min(later, max(0.0, budget.remaining_s() - current))


@dataclass
class Step:
    """The launch under way, as the ETA follows it.

    Attributes:
        t0: clock reading at its start.
        setup_s: its estimated load and warm-up (seconds).
        requests: the requests it plans.
        done: the requests done so far.
    """

    t0: float
    setup_s: float
    requests: int
    done: int = 0


@dataclass
class Eta:
    """What the ETA counts besides the budget: the work pending now, and whether the sweep is confirming.

    Attributes:
        pending_s: estimated seconds of the step under way (a launch, or a stage's queue).
        launch_est: the launch under way: ``(its estimate in pending_s, predicted tokens/s, repetitions)``.
        queued_probes: ``(probes and planned refine launches not yet started, repetitions each)``: their
            estimate counts in the ETA from the first warm-up on (before, the ETA during the baseline left them
            out and then jumped up).
        confirming: the paired rounds have begun (the ETA is then :meth:`ConfirmTracker.expected_s`).
        finished: the search has ended.
        shown_progress: the progress last shown (it never moves back).
        step: the launch under way whose requests are counted (``None`` between launches).
        slow: how much slower than estimated the latest launch ran (≥ 1, at most :data:`MAX_SLOWDOWN`): the
            seconds it took to reach its last request ÷ the seconds its estimate planned for that far.
    """

    pending_s: float = 0.0
    launch_est: tuple[float, float | None, int] = (0.0, None, 0)
    queued_probes: tuple[int, int] = (0, 0)
    confirming: bool = False
    finished: bool = False
    shown_progress: float = 0.0
    step: Step | None = None
    slow: float = 1.0

    def start_step(self, now: float, est_s: float, setup_s: float, requests: int, predicted: float | None = None,
                   repetitions: int = 1) -> None:
        """A launch of ``est_s`` estimated seconds begins at ``now``: ``setup_s`` of them load and warm it up,
        the rest are its ``requests`` (``predicted``, ``repetitions``: :attr:`launch_est`)."""
        self.launch_est = (est_s, predicted, repetitions)
        self.step = Step(now, setup_s, max(1, requests))

    def request_done(self, now: float) -> None:
        """One request of the launch under way ended at ``now``: :attr:`slow` from how late it came."""
        st = self.step
        if st is None:
            return
        st.done += 1
        per_request = max(0.0, self.launch_est[0] - st.setup_s) / st.requests
        planned = st.setup_s + st.done * per_request
        if planned > 0:
            self.slow = min(MAX_SLOWDOWN, max(1.0, (now - st.t0) / planned))

    def end_step(self) -> None:
        """The launch under way ended."""
        self.step = None

    def _current(self, now: float) -> tuple[float, float]:
        """``(seconds the launch under way still needs at the observed pace, its estimate)``; zeros without one."""
        if self.step is None:
            return 0.0, 0.0
        est = self.launch_est[0]
        return max(0.0, est * self.slow - (now - self.step.t0)), est

    def remaining_s(self, budget: Budget, estimates: Estimates, tracker: ConfirmTracker,
                    busy: Callable[[], bool]) -> float | None:
        """Estimated seconds until the decision: the launch under way at its observed pace, then what is
        pending and queued and the paired rounds, each :attr:`slow` times its estimate, as far as the budget
        left affords them (while confirming: :meth:`ConfirmTracker.expected_s`), and the share kept back for the
        thread stage (``Budget.held_s``); never past the hard time limit, where every step ends. ``None`` before the first warm-up was timed."""
        if estimates.tps() is None:
            return None
        hard_left = max(0.0, budget.limit_s - budget.elapsed_s())
        pending = max(0.0, self.pending_s)
        if self.finished:
            return min(pending, hard_left)
        held = budget.held_s  # the thread stage's share of the budget, spent after the paired rounds
        if self.confirming:
            # the current pair's own estimate is inside (less what it has run): no pending on top
            return min(hard_left, tracker.expected_s(estimates, budget, busy, self.slow) + held)
        current, step_est = self._current(budget.clock())
        n_q, reps_q = self.queued_probes
        queued = n_q * estimates.estimate_s(None, reps_q)
        rest = (max(0.0, pending - step_est) + queued + estimates.rounds_s()) * self.slow
        # steps beyond the budget left are skipped: the rest is capped by it, the launch under way is not
        return min(hard_left, current + min(rest, max(0.0, budget.remaining_s() - current)) + held)

    def progress(self, kind: str, elapsed_s: float, eta_s: float | None) -> float:
        """The progress (0..1) an event of ``kind`` shows: elapsed ÷ (elapsed + ETA), below 1 until
        ``"finished"``, and never below what was shown before."""
        if eta_s is None:
            progress = 0.0
        else:
            progress = elapsed_s / (elapsed_s + eta_s) if (elapsed_s + eta_s) > 0 else 0.0
            if kind != "finished":
                progress = min(progress, 0.99)
        progress = max(progress, self.shown_progress)  # never moves back
        self.shown_progress = progress
        return progress


__all__ = ["MAX_SLOWDOWN", "ConfirmTracker", "Eta", "Step"]
