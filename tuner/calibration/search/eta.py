"""How long the sweep still runs, as the events say it: the ETA and the progress that never moves back.

:class:`Eta` holds what is pending (the launch under way, the probes still queued) and turns it, with the
:class:`~tuner.calibration.search.budget.Estimates` and the budget left, into the seconds until the
decision; while the paired rounds run it asks the :class:`ConfirmTracker` — the rounds' state: the
finalists left, the sequential test's latest look, when the current pair began — how many pairs the test
is expected to need. Progress events never report 100 % while work remains, and the ETA is unknown
(``None``) until the first warm-up has been timed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..candidates import Candidate
from ..pairing import MIN_PAIRS, Look
from .budget import Budget, Estimates


@dataclass
class ConfirmTracker:
    """The paired rounds' state, for the rounds themselves and for the ETA.

    Attributes:
        max_pairs: looks per finalist of the sequential test (the decision uses the same). (More looks
            when busy were tried: each look then gets a smaller share of the error, and short busy
            sweeps ended inconclusive after 2 pairs where 3 would have decided.)
        finalists: finalists the paired rounds were planned for (the sequential test's error is split
            over them; chosen from screening data only).
        next_rep: the next fresh repetition id (after the screening ones).
        left: finalists whose paired rounds have not ended (the current one first).
        look: the sequential test's latest look at the current finalist (``None`` before its first pair).
        pair_t0: clock reading when the current pair (side by side) or round (alternating) began.
    """

    max_pairs: int
    finalists: int
    next_rep: int
    left: list[Candidate] = field(default_factory=list)
    look: Look | None = None
    pair_t0: float | None = None

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
        if look is None or look.verdict != "faster" or look.n >= self.max_pairs or not busy():
            return False
        per_pair = estimates.pair_s()
        later = max(0, len(self.left) - 1) * (MIN_PAIRS * per_pair + estimates.launch_s())
        return budget.remaining_s() - later >= per_pair

    def expected_s(self, estimates: Estimates, budget: Budget, busy: Callable[[], bool]) -> float:
        """Expected seconds of the paired rounds still to run (the ETA while confirming).

        For the current finalist: the pairs its sequential test is expected to need — ``pairs_needed``
        of the latest look (at the current mean and spread), at least ``MIN_PAIRS``, at most
        ``max_pairs``; ``max_pairs`` when its mean gain is not above the bar (it runs on until a
        futility verdict or the last look); ``MIN_PAIRS`` before two pairs give a spread — less the
        time the current pair has already run. Each later finalist: ``MIN_PAIRS`` pairs and its
        launches. The caller caps this at the budget left. (Before: the whole budget left, so the bar
        jumped to the end whenever the test concluded early.)"""
        if not self.left:
            return 0.0
        per_pair = estimates.pair_s()
        look = self.look
        n = look.n if look is not None else 0
        if look is None or n < 2:
            want = MIN_PAIRS
        elif look.verdict != "inconclusive":
            want = self.max_pairs if self.more_pairs_while_busy(look, busy, budget, estimates) else n
        else:
            want = look.pairs_needed if look.pairs_needed is not None else self.max_pairs
            want = max(MIN_PAIRS, min(self.max_pairs, want))
        ran = (budget.clock() - self.pair_t0) if self.pair_t0 is not None else 0.0
        # the pair under way (less what it has run; an overrun one is still under way: not below 0),
        # then the rest, as far as the budget left affords them (a pair that does not fit is not run)
        if want > n:
            now = max(0.0, per_pair - ran)
            fit = int(max(0.0, budget.remaining_s() - now) // per_pair)
            current = now + min(want - n - 1, fit) * per_pair
        else:
            current = 0.0
        if look is None:
            current += estimates.launch_s()  # the finalist's (and, side by side, the baseline's) server to start
        later = (len(self.left) - 1) * (MIN_PAIRS * per_pair + estimates.launch_s())
        return current + later


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
    """

    pending_s: float = 0.0
    launch_est: tuple[float, float | None, int] = (0.0, None, 0)
    queued_probes: tuple[int, int] = (0, 0)
    confirming: bool = False
    finished: bool = False
    shown_progress: float = 0.0

    def remaining_s(self, budget: Budget, estimates: Estimates, tracker: ConfirmTracker,
                    busy: Callable[[], bool]) -> float | None:
        """Estimated seconds until the decision: the current step, then the rest of the budget (the
        paired rounds use what is left while the test is inconclusive), or less when little is planned.
        ``None`` before the first warm-up was timed."""
        if estimates.tps() is None:
            return None
        pending = max(0.0, self.pending_s)
        if self.finished:
            return pending
        left = max(0.0, budget.remaining_s())
        if self.confirming:
            # the current pair's own estimate is inside (less what it has run): no pending on top
            return min(left, tracker.expected_s(estimates, budget, busy))
        n_q, reps_q = self.queued_probes
        queued = n_q * estimates.estimate_s(None, reps_q)  # probes beyond the budget are skipped: capped below
        return max(pending, min(left, pending + queued + estimates.rounds_s()))

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


__all__ = ["ConfirmTracker", "Eta"]
