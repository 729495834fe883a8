"""The paired rounds: the sequential test confirms (or not) the screened contenders against the baseline.

DESIGN.md "Calibration method" step 5, ``confirm`` (``tuner.calibration.pairing``): the screened
candidates are ranked on their ratio over the same requests as the baseline (stopped-early losers and
those slower than the baseline are dropped); the top half (at most ``finalists``), the fastest of each draft
group first (:func:`.rules.finalists`: one length per draft before a second), is confirmed one after
another in alternating launches ``A B B A A B B A …`` (baseline A, finalist B, two repetitions per launch,
n-gram types one launch per repetition), so each finalist repetition is paired with the baseline
repetition next to it in time. With ``SearchSettings.side_by_side`` (CPU: the weights are mmapped, so two
servers on one GGUF share the page cache) the baseline's server instead stays up next to the finalist's
(``tuner.calibration.search.side_by_side``). After every pair the sequential test looks; rounds go on while
it is inconclusive, fewer than ``max_pairs`` pairs ran and the budget allows — on a busy machine the
noise is larger and the same rule spends more of the budget on pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tuner.errors import Cancelled

from ..candidates import Candidate
from ..measure import needs_fresh_launch_per_repetition
from ..pairing import MIN_PAIRS, compare
from . import rules
from .measurer import Measurer
from .record import Record
from .settle import chain_to_settle, settle_words
from .side_by_side import SideBySide
from .stage import Stage, SweepState


class Confirmation(Stage):
    """The paired rounds of one sweep (module docstring); :meth:`run` takes the screening's contenders."""

    def __init__(self, measurer: Measurer, state: SweepState) -> None:
        super().__init__(state)
        self.measurer = measurer
        self.side_by_side = SideBySide(measurer, state)
        self._failed: set[Candidate] = set()  # finalists whose paired launch failed (alternating layout)

    def run(self, contenders: Sequence[tuple[float, Candidate]]) -> None:
        """Paired rounds for each finalist in turn — the top half of ``contenders`` (``(screening ratio,
        candidate)``, best first), at most ``finalists`` — until its sequential test is conclusive, it
        reached ``max_pairs`` pairs, or the budget is spent; the rest are dropped (event ``"skipped"``).

        Raises:
            Cancelled: the user cancelled.
        """
        assert self.record.base_tps is not None
        if self.s.side_by_side and self.busy():
            # fixed before any pair (the sequential test's error bound needs the looks set in advance): the load
            # watcher has seen the screening by now, where at the protocol's plan it had seen one warm-up
            self.tracker.extend_last_look(self.s.max_pairs + max(0, self.s.busy_extra_pairs))
        if not contenders:
            self.events("skipped", "no speculative configuration beat the baseline on the same requests: "
                        "nothing to confirm")
            return
        keep = max(1, min(self.s.finalists, math.ceil(len(contenders) / 2)))
        finalists = rules.finalists(contenders, keep, rules.pruned_against(self.record.pruned))
        # the sequential test's error is shared by the finalists chosen here, from screening data only
        # (independent of the pairs to come): fewer finalists, more error per look
        self.tracker.finalists = len(finalists)
        self.tracker.left = list(finalists)
        for _sp, c in contenders:
            if c not in finalists:
                self.events("skipped", self._dropped_words(c, finalists), candidate=c)
        try:
            if self.s.side_by_side:
                self.side_by_side.run(finalists, {c: r for r, c in contenders})
            else:
                self._alternating_rounds(finalists)
                while (side := chain_to_settle(self.state, finalists)) is not None:
                    self.events("progress", settle_words(side), candidate=side)
                    if not self._alternating([side], settle=True):
                        break
        finally:
            self.tracker.left = []

    @staticmethod
    def _dropped_words(c: Candidate, finalists: Sequence[Candidate]) -> str:
        """The ``"skipped"`` event's words for a contender that is not a finalist (:func:`.rules.finalists`)."""
        kin = next((f for f in finalists if Record.group(f) == Record.group(c)), None)
        if kin is None:
            return f"{c.label}: dropped after screening (successive halving)"
        return f"{c.label}: dropped after screening (successive halving; {kin.label} is confirmed for the same draft)"

    def _alternating_rounds(self, finalists: Sequence[Candidate]) -> None:
        """The alternating layout's paired rounds: with more than one finalist a first pass gives each its first
        look (``MIN_PAIRS`` pairs: one block), then the budget left goes to the finalists still undecided, the
        one whose pairs read fastest first (:meth:`_standing`) — as side by side
        (:meth:`.side_by_side.SideBySide.run`, which says why; the sequential test's error bound holds for any
        such order)."""
        if len(finalists) < 2:
            self._alternating(finalists)
            return
        if not self._alternating(finalists, until=MIN_PAIRS):
            return
        self.tracker.looked = True
        order = self._standing(finalists)
        self.tracker.left = list(order)
        self._alternating(order)

    def _standing(self, finalists: Sequence[Candidate]) -> list[Candidate]:
        """After the first pass: the finalists still undecided (fewer than ``max_pairs`` pairs, inconclusive or
        wanting more pairs while busy; not one whose launch failed), the highest mean ratio over their pairs
        first (screening order among equals); the first is announced (event ``"progress"``)."""
        s, t = self.s, self.tracker
        looks = {c: self.record.look(c, s.min_gain, s.alpha, t.max_pairs, t.finalists, (), s.layout) for c in finalists}
        left = rules.standing(finalists, looks,
                              lambda c: c not in self._failed and self.side_by_side.undecided(looks[c]))
        if left:
            self.events("progress", rules.standing_words(left[0], looks[left[0]]), candidate=left[0])
        return left

    def _conclude(self, c: Candidate, until: int | None = None) -> tuple[bool, int]:
        """``(the rounds of c end here, pairs so far)``: the sequential test's latest look over ``c``'s
        adjacent pairs is conclusive (and no more pairs are wanted while busy), or ``max_pairs`` ran; each
        ending is an event ``"confirmed"``. ``until``: the first pass pauses an undecided finalist after that many
        pairs (event ``"progress"``: its rounds may go on after the other finalists' first looks)."""
        s, t = self.s, self.tracker
        cmp_ = compare(self.record.measurements, c, s.min_gain, s.alpha, t.max_pairs, t.finalists, mix=self.record.mix,
                       layout=s.layout)
        n_pairs = len(cmp_.pairs) if cmp_ is not None and cmp_.paired else 0
        look = cmp_.look if cmp_ is not None and cmp_.paired else None
        if look is not None:
            t.saw(look, self.budget.clock())
        if (cmp_ is not None and look is not None and look.verdict != "inconclusive"
                and not t.more_pairs_while_busy(look, self.busy, self.budget, self.estimates)):
            self.events("confirmed", f"{c.label}: {look.verdict} than no speculation after {n_pairs} "
                        f"adjacent pairs ({cmp_.speedup:.2f}×)", candidate=c,
                        detail={"verdict": look.verdict, "pairs": n_pairs, "speedup": cmp_.speedup})
            return True, n_pairs
        if until is not None and look is not None and until <= n_pairs < t.max_pairs:
            self.side_by_side.paused(c, look)
            return True, n_pairs
        if n_pairs >= t.max_pairs or not t.leaves_room(look, self.budget, self.estimates):
            self.events("confirmed", f"{c.label}: still inconclusive after {n_pairs} adjacent pairs"
                        + ("" if n_pairs >= t.max_pairs else t.room_words()),
                        candidate=c, detail={"verdict": "inconclusive", "pairs": n_pairs})
            return True, n_pairs
        return False, n_pairs

    def _alternating(self, finalists: Sequence[Candidate], settle: bool = False, until: int | None = None) -> bool:
        """Alternating launches ``A B B A …`` for each finalist (module docstring); ``settle``: one block of
        the one finalist, for the decision's chain rule (:func:`.settle.chain_to_settle`); ``until``: the first
        pass (:meth:`_conclude`). False when the budget was spent or a baseline launch failed."""
        est = self.estimates
        ran = 0
        open_rep: int | None = None  # a baseline repetition of the last launch still without a partner
        for n_f, c in enumerate(finalists):
            self.tracker.next_finalist(c, self.budget.clock())
            while True:
                if self.cancel.is_set():
                    raise Cancelled()
                done, n_pairs = (ran > 0, self._n_pairs(c)) if settle else self._conclude(c, until)
                if done:
                    break
                ran += 1
                opening = 0.0 if open_rep is not None else est.estimate_s(None, 1)
                block = opening + est.estimate_s(self.record.base_tps, 2) + est.estimate_s(None, 2)
                if not est.fits(self.budget, block, reserve=False, held=settle):
                    self.events("skipped", f"{c.label}: paired round {n_pairs // 2 + 1} not run, the time budget "
                                "is spent", candidate=c, detail={"pairs": n_pairs})
                    return False
                self.eta.pending_s = block
                if open_rep is None:
                    open_rep = self.tracker.take_rep()
                    if not self._run_baseline([open_rep]):
                        return False
                r1 = open_rep
                r2 = self.tracker.take_rep()
                b_ok = self._run_candidate(c, [r1, r2])
                # hold the next pair's baseline repetition in the same launch when another block fits
                more = n_f + 1 < len(finalists) or n_pairs + 2 < self.tracker.max_pairs
                # (this launch with two repetitions, then the next block's B and A)
                hold = more and est.fits(self.budget, est.estimate_s(None, 2) + est.estimate_s(self.record.base_tps, 2)
                                         + est.estimate_s(None, 1), reserve=False)
                r3 = self.tracker.take_rep() if hold else None
                if not self._run_baseline([r2] + ([r3] if r3 is not None else [])):
                    return False
                open_rep = r3
                if not b_ok:
                    self._failed.add(c)
                    break
        self.eta.pending_s = 0.0
        return True

    def _n_pairs(self, c: Candidate) -> int:
        s, t = self.s, self.tracker
        cmp_ = compare(self.record.measurements, c, s.min_gain, s.alpha, t.max_pairs, t.finalists, mix=self.record.mix,
                       layout=s.layout)
        return len(cmp_.pairs) if cmp_ is not None and cmp_.paired else 0

    def _run_baseline(self, reps: list[int]) -> bool:
        m = self.measurer.measure(self.measurer.baseline, reps, "confirm", single_launch=True)
        if m.ok:
            self.record.keep_outputs(m)
        return m.ok

    def _run_candidate(self, c: Candidate, reps: list[int]) -> bool:
        """One launch of ``c`` for ``reps`` (n-gram types: one launch per repetition, so their n-gram
        pool never carries over; each launch stays its own measurement, adjacent to a baseline launch)."""
        if needs_fresh_launch_per_repetition(c):
            return all(self.measurer.measure(c, [r], "confirm", single_launch=True).ok for r in reps)
        return self.measurer.measure(c, reps, "confirm", single_launch=True).ok


__all__ = ["Confirmation"]
