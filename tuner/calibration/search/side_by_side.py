"""Paired rounds side by side: the baseline's server stays up next to the finalist's, and every request of
the finalist's launch is also sent to the baseline's server, right before or right after it, so the two sides
of a paired request are one request apart in time and drift of the machine's load cancels within it. For
weights mmapped in host memory (CPU), where two servers on one GGUF share the page cache
(``SearchSettings.side_by_side``).

One repetition = one pair; the sequential test (``tuner.calibration.sequential``) looks at its look points
(every ``LOOK_STEP`` pairs). Two rules keep drift from reading as a speedup (the simulation behind issue 25):

* which side goes first alternates from request to request (candidate then baseline, baseline then
  candidate, …): under a fixed order a load that grows or shrinks within a launch favours one side in every
  pair, a bias no variance can show (a speed halving in 20 s: 0.54 % false "faster" fixed, 0.06 % alternated);
* a draft model's server is started afresh every ``LOOK_STEP`` pairs (n-gram types every pair, so their pool
  never carries over): a launch's own speed offset (a placement, a page-cache state) is then not shared by
  every pair of the finalist (a launch-level SD of 0.10: 13 % false "faster" in one launch, 3.7 % this way).

After the finalists, the decision's chain rule may ask for more (``tuner.calibration.search.settle``): first more
pairs against the model alone, then, once both sides reached ``max_pairs``, head-to-head launches of the chain next
to a server of the single type (:data:`~tuner.calibration.pairing.HEAD_TO_HEAD`), pooled by the decision with the
contrast (``tuner.calibration.sequential.contrast``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from tuner.errors import Cancelled

from ..candidates import Candidate
from ..measure import Launch, RequestError, first_divergence, measure_request, needs_fresh_launch_per_repetition
from ..pairing import HEAD_TO_HEAD, LOOK_STEP, MIN_PAIRS, Look, Pair
from ..prompts import Prompt
from ..results import Divergence, Measurement, Sample
from . import rules
from .measurer import Measurer
from .settle import chain_to_settle, head_to_head_next, settle_words
from .stage import Stage, SweepState


class SideBySide(Stage):
    """The side-by-side paired rounds of one sweep (module docstring; the caller:
    :class:`~tuner.calibration.search.confirm.Confirmation`)."""

    def __init__(self, measurer: Measurer, state: SweepState) -> None:
        super().__init__(state)
        self.measurer = measurer
        self.requests_sent = 0
        """Paired requests sent so far: the even ones go to the finalist first, the odd ones to the baseline."""
        self._base: Launch | None = None
        self.more_in_launch: Callable[[Look], bool] = self.wants_more
        """After each repetition of a launch: whether its next repetition runs (budget permitting)."""
        self.settling = False
        """The rounds for the decision's chain rule are under way: the thread stage's kept-back time may pay."""
        self.failed: set[Candidate] = set()
        """Finalists whose launch failed: their rounds ended, the second pass never launches them again."""
        self._screened: dict[Candidate, float] = {}
        self._later: list[Candidate] = []
        """The first pass: the finalists after the current one (their first looks still to come)."""

    def look(self, c: Candidate, extra: Sequence[Pair] = ()) -> Look:
        """The sequential test's look at finalist ``c`` over its pairs so far and ``extra`` pairs of the launch
        under way."""
        s, t = self.s, self.tracker
        return self.record.look(c, s.min_gain, s.alpha, t.max_pairs, t.finalists, extra, s.layout)

    def wants_more(self, look: Look, until: int | None = None) -> bool:
        """True while the finalist's rounds go on: the test is inconclusive (or says "faster" while busy and
        the budget affords more) and fewer than ``max_pairs`` pairs (``until``, when smaller: the first pass's
        first look) ran."""
        return (self.undecided(look) and look.n < (until or self.tracker.max_pairs)
                and self.tracker.leaves_room(look, self.budget, self.estimates))

    def undecided(self, look: Look) -> bool:
        """Fewer than ``max_pairs`` pairs ran and the test is inconclusive, or says "faster" while busy and the
        budget affords more pairs (``ConfirmTracker.more_pairs_while_busy``)."""
        t = self.tracker
        return look.n < t.max_pairs and (
            look.verdict == "inconclusive" or t.more_pairs_while_busy(look, self.busy, self.budget, self.estimates))

    def paused(self, c: Candidate, look: Look) -> None:
        """The first pass stops finalist ``c`` at its first ``look`` (event ``"progress"``): its rounds may go on
        after the other finalists' first looks. Both layouts say it (``Confirmation._alternating_rounds``)."""
        self.events("progress", f"{c.label}: {look.mean_ratio or 0:.2f}× after its first {look.n} pairs "
                    f"({look.verdict}); the other finalists' first looks come next", candidate=c,
                    detail={"verdict": look.verdict, "pairs": look.n})

    def run(self, finalists: Sequence[Candidate], screened: Mapping[Candidate, float] | None = None) -> None:
        """Paired rounds with the baseline's server kept running: a first pass gives each finalist its first
        look (``MIN_PAIRS`` pairs), then the rest of the budget goes to the finalists still undecided, the one
        whose pairs read fastest first (:meth:`standing`); then more pairs while the decision's chain rule is
        undecided and the budget allows (:func:`.settle.chain_to_settle`). ``screened``: each finalist's
        screening ratio (:meth:`goes_on`).

        Why the first pass (issue 28, quality family, five of nine runs): two finalists screened within noise
        of each other, the first one's rounds took what the budget gave and the second, whose pairs then read
        1.5–2× (the configuration the referee found fastest), had only its first look; neither concluded and the
        model alone was served. The sequential test's error is split over every finalist and look
        (``tuner.calibration.sequential.alpha_per_look``), so which finalist gets the later pairs may depend on
        the pairs so far: the bound holds for any such rule.

        Raises:
            Cancelled: the user cancelled (both servers are stopped).
        """
        self._base = None
        self._screened = dict(screened or {})
        try:
            for i, c in enumerate(finalists):
                self.tracker.next_finalist(c, self.budget.clock())
                self._later = list(finalists[i + 1:])
                if not self._rounds(c, until=MIN_PAIRS if len(finalists) > 1 else None):
                    return
            self._later = []
            self.tracker.looked = True
            order = self.standing(finalists)
            self.tracker.left = list(order)
            for c in order:
                self.tracker.next_finalist(c, self.budget.clock())
                if not self._rounds(c):
                    return
            self._settle(finalists)
            self._head_to_head(finalists)
        finally:
            self.eta.pending_s = 0.0
            if self._base is not None:
                self._base.stop()

    def standing(self, finalists: Sequence[Candidate]) -> list[Candidate]:
        """The finalists whose rounds go on after the first pass (:meth:`wants_more`; not one whose launch
        failed), the highest mean ratio over their pairs so far first (screening order among equals); the first is
        announced (event ``"progress"``)."""
        looks = {c: self.look(c) for c in finalists}
        left = rules.standing(finalists, looks, lambda c: c not in self.failed and self.wants_more(looks[c]))
        if len(finalists) > 1 and left:
            self.events("progress", rules.standing_words(left[0], looks[left[0]]), candidate=left[0])
        return left

    def goes_on(self, c: Candidate, look: Look) -> bool:
        """Whether finalist ``c``'s rounds go on past its first ``look`` before the later finalists' first looks (and
        then owe them none: ``ConfirmTracker.looked``): only on a busy machine, when the test is inconclusive,
        ``c``'s pairs read faster than every later finalist's screening ratio and no later finalist is a chain
        (event ``"progress"``). A chain's one screening run understates it — its n-gram part drafts only once the
        answer repeats (:func:`.rules.finalists`) — so a chain still gets its first look first: scripted, a chain
        screened 1.20× and truly 1.6× after a leader at 1.25× was served at 0.87 of the best on average with this
        rule and 0.92 without it.

        Why: issue 28's busy quality run 5 — ngram-mod's first two pairs read 1.17×, the draft ``n_max`` 7 had
        screened 1.02×; its first look took 11.5 s of a 74 s budget, ngram-mod then ran out of budget one pair short
        of its conclusion and the model alone was served at 0.76 of the best. (A later finalist whose screening read
        faster than the leader's pairs still gets its look first: the first pass's own case, where the chain's
        pairs read 1.5–2× after a lower screening.)"""
        if not self._later or look.verdict != "inconclusive" or look.mean_ratio is None or not self.busy() \
                or any(x.is_chained for x in self._later):
            return False
        rival = max(self._screened.get(x, float("inf")) for x in self._later)
        if look.mean_ratio <= rival:
            return False
        self.tracker.looked = True
        self.events("progress", f"{c.label}: {look.mean_ratio:.2f}× after its first {look.n} pairs, faster than "
                    f"{self._later[0].label} screened ({rival:.2f}×) on a busy machine: its paired rounds go on "
                    "first", candidate=c, detail={"verdict": look.verdict, "pairs": look.n})
        return True

    def _rounds(self, c: Candidate, until: int | None = None) -> bool:
        """Paired rounds of ``c`` until :meth:`wants_more` says no (``until``: at most that many pairs, the first
        pass, unless :meth:`goes_on`); False when the budget is spent (or the baseline's server would not start): no
        later finalist runs then."""
        self.more_in_launch = lambda lk: self.wants_more(lk, until)
        while True:
            if self.cancel.is_set():
                raise Cancelled()
            look = self.look(c)
            if look.n:
                self.tracker.saw(look, self.budget.clock())
            if not self.wants_more(look, until):
                if until is not None and look.n >= until and self.undecided(look):
                    if self.goes_on(c, look):
                        until = None
                        self.more_in_launch = lambda lk: self.wants_more(lk)
                        continue
                    # the first pass's first look: its rounds may go on after the other finalists' first looks
                    self.paused(c, look)
                    return True
                self._ended(c, look)
                return True
            done = self._round(c, look.n, until)
            if done:
                self.failed.add(c)
            if done is not None:
                return done

    def _ended(self, c: Candidate, look: Look) -> None:
        """The ``"confirmed"`` event of a finalist whose rounds ended at ``look``."""
        gave_way = look.verdict == "inconclusive" and look.n < self.tracker.max_pairs \
            and not self.tracker.leaves_room(look, self.budget, self.estimates)
        self.events("confirmed", f"{c.label}: {look.verdict} than no speculation after {look.n} "
                    "pairs" if look.verdict != "inconclusive" else
                    f"{c.label}: still inconclusive after {look.n} pairs"
                    + (self.tracker.room_words() if gave_way else ""), candidate=c,
                    detail={"verdict": look.verdict, "pairs": look.n})

    def _settle(self, finalists: Sequence[Candidate]) -> None:
        """One launch more at a time for the side :func:`.settle.chain_to_settle` names, while it names one."""
        self.more_in_launch = lambda _look: True  # a whole launch: its pairs are for the contrast, not this test
        self.settling = True
        while (c := chain_to_settle(self.state, finalists)) is not None:
            if self.cancel.is_set():
                raise Cancelled()
            self.events("progress", settle_words(c), candidate=c)
            if self._round(c, self.look(c).n, held=True) is not None:
                return

    def _head_to_head(self, finalists: Sequence[Candidate]) -> None:
        """While the chain rule is still undecided with both sides at ``max_pairs``
        (:func:`.settle.head_to_head_next`): one launch of the chain next to a fresh server of the single type,
        every request run by both one apart (the first side alternating), booked as :data:`HEAD_TO_HEAD` launches
        (their pairs never count as pairs against the model alone). The model alone's server is stopped first.
        Paid like the settling rounds (the thread stage's kept-back time may pay)."""
        self.settling = True
        while (sides := head_to_head_next(self.state, finalists)) is not None:
            if self.cancel.is_set():
                raise Cancelled()
            chain, single = sides
            est, tps = self.estimates, self.record.base_tps
            n_reps = 1 if needs_fresh_launch_per_repetition(chain) or needs_fresh_launch_per_repetition(single) \
                else LOOK_STEP
            cost = 2 * est.estimate_s(None, 0) + 2 * n_reps * est.rep_s(tps)
            if not est.fits(self.budget, cost, reserve=False, held=True):
                self.events("skipped", f"{chain.label}: not run head to head with {single.label}, the time budget "
                            "is spent", candidate=chain)
                return
            if self._base is not None:
                self._base.stop()
                self._base = None
            self.events("progress", f"{chain.label}: run head to head with {single.label}, to tell whether the "
                        "chain is faster than the single type beyond noise", candidate=chain)
            other = self.measurer.open_server(single)
            if other is None:
                return
            self.eta.pending_s = cost
            try:
                if not self._launch_head_to_head(chain, other, [self.tracker.take_rep() for _ in range(n_reps)], single):
                    return
            finally:
                other.stop()

    def _round(self, c: Candidate, n_pairs: int, until: int | None = None, held: bool = False) -> bool | None:
        """One launch of ``c`` next to the baseline's server (started here the first time), of at most ``until``
        pairs in all (default ``max_pairs``). ``None`` when it ran; True when ``c`` failed (its rounds end); False
        when the budget is spent or the baseline's server would not start. ``held``: the thread stage's kept-back
        time may pay for it (``Estimates.fits``)."""
        est = self.estimates
        base_tps = self.record.base_tps
        pair = est.estimate_s(base_tps, 1) + est.rep_s(base_tps) \
            + (est.estimate_s(None, 0) if self._base is None else 0.0)
        if not est.fits(self.budget, pair, reserve=False, held=held):
            self.events("skipped", f"{c.label}: no further pair, the time budget is spent", candidate=c,
                        detail={"pairs": n_pairs})
            return False
        if self._base is None:
            self._base = self.measurer.open_server()
            if self._base is None:
                return False
        per_launch = 1 if needs_fresh_launch_per_repetition(c) else LOOK_STEP
        left = min(self.tracker.max_pairs, until or self.tracker.max_pairs) - n_pairs
        reps = [self.tracker.take_rep() for _ in range(max(1, min(per_launch, left)))]
        self.eta.pending_s = pair
        n_req = len(self.measurer.requests.prompts) * len(reps)
        self.eta.start_step(self.budget.clock(), est.launch_s() + len(reps) * 2 * est.rep_s(base_tps),
                            est.launch_s(), n_req, base_tps, len(reps))
        try:
            return None if self._launch(c, self._base, reps) else True
        finally:
            self.eta.end_step()

    def _launch(self, c: Candidate, base: Launch, reps: list[int]) -> bool:
        """One launch of ``c`` whose every request is repeated on the baseline's server ``base``; books the
        baseline's and the finalist's measurements (adjacent). False when the finalist failed."""
        pair = _Pair(self, c, base)
        self.events("launch", f"confirm: starting {c.label} next to the running baseline", candidate=c)
        m = self.measurer.paired_launch(c, reps, pair.on_request, pair.stop_if, pair.before_request)
        if self.budget.past_hard_limit():
            m = replace(m, cut_short=True)
            if not m.samples:
                self.measurer.cut(c, measured=False)
                return False
        # stop_if ends a launch only at a repetition boundary (or on a baseline error): not a loser stop
        m = pair.checked(replace(m, stopped_early=False))
        m_a = Measurement(self.measurer.baseline, samples=tuple(pair.a_samples), stage="confirm", load_s=base.load_s,
                          error=pair.a_error[0] if pair.a_error and not pair.a_samples else None)
        for x in pair.a_samples:
            if x.content is not None:
                self.record.baseline_outputs[(x.prompt_index, x.repetition)] = x.content
        self.record.add(m_a)
        self.record.add(m)
        if m.load_s is not None:
            self.estimates.load_s.append(m.load_s)
        self.events("measured", f"no speculation (paired): {m_a.gen_tokens_per_s or 0:.1f} tokens/s",
                    candidate=self.measurer.baseline, measurement=m_a)
        msg = f"{c.label} (paired): {m.gen_tokens_per_s or 0:.1f} tokens/s" if m.ok else f"{c.label} failed: {m.error}"
        self.events("measured", msg, candidate=c, measurement=m)
        return m.ok and not pair.a_error

    def _launch_head_to_head(self, c: Candidate, base: Launch, reps: list[int], other: Candidate) -> bool:
        """:meth:`_launch` of the chain ``c`` next to ``other``'s server ``base``: both booked as
        :data:`HEAD_TO_HEAD` launches. False when either side failed."""
        pair = _HeadToHead(self, c, base, other)
        self.events("launch", f"head to head: starting {c.label} next to {other.label}", candidate=c,
                    detail={"versus": other.to_json()})
        m = self.measurer.paired_launch(c, reps, pair.on_request, pair.stop_if, pair.before_request)
        # no lossless check here: the other side is not the target alone, whose outputs are the reference
        m = replace(m, stopped_early=False, stage=HEAD_TO_HEAD)
        m_o = Measurement(other, samples=tuple(pair.a_samples), stage=HEAD_TO_HEAD, load_s=base.load_s,
                          error=pair.a_error[0] if pair.a_error and not pair.a_samples else None)
        self.record.add(m_o)
        self.record.add(m)
        for x, side in ((m_o, other), (m, c)):
            self.events("measured", f"{side.label} (head to head): {x.gen_tokens_per_s or 0:.1f} tokens/s" if x.ok
                        else f"{side.label} failed: {x.error}", candidate=side, measurement=x)
        return m.ok and m_o.ok and not pair.a_error and not self.budget.past_hard_limit()


class _Pair:
    """The baseline's side of one side-by-side launch: each finalist request repeated on the baseline's
    server, right before it (:meth:`before_request`, every other request) or right after it
    (:meth:`on_request`); the look after each complete repetition (:meth:`stop_if`), and the lossless check of
    the finalist's outputs against the baseline's (:meth:`checked`)."""

    def __init__(self, rounds: SideBySide, c: Candidate, base: Launch) -> None:
        self.r = rounds
        self.c = c
        self.base = base
        self.n_pr = len(rounds.measurer.requests.prompts)
        self.prompt_of = dict(rounds.measurer.requests.prompts)
        self.a_samples: list[Sample] = []
        self.a_error: list[str] = []
        self.sized: dict[int, str] = {}
        self.first: set[tuple[int, int]] = set()
        """Requests the baseline ran first."""

    def _baseline_request(self, idx: int, rep: int) -> Sample | None:
        """The request ``(idx, rep)`` on the baseline's server, in the same shape (endpoint, sampling seed,
        sized long-context text); ``None`` past the hard time limit or on an error (kept in :attr:`a_error`)."""
        r = self.r
        if r.budget.past_hard_limit():
            return None  # this repetition stays incomplete on the baseline's side: it pairs with nothing
        try:
            a = measure_request(self.base.client, idx, self.prompt_of[idx], rep, r.measurer.requests.n_predict,
                                r.budget.request_timeout(r.s.request_timeout_s), workload=r.measurer.workload,
                                sized=self.sized)
        except RequestError as exc:
            if not r.budget.past_hard_limit():
                self.a_error.append(str(exc))
            return None
        self.a_samples.append(a)
        return a

    def before_request(self, idx: int, _prompt: Prompt, rep: int) -> None:
        """Every other paired request: the baseline's side first."""
        r = self.r
        r.requests_sent += 1
        if r.requests_sent % 2 == 0 and not self.a_error:
            if self._baseline_request(idx, rep) is not None:
                self.first.add((idx, rep))

    def on_request(self, sample: Sample) -> None:
        key = (sample.prompt_index, sample.repetition)
        a = next((x for x in self.a_samples if (x.prompt_index, x.repetition) == key), None) \
            if key in self.first else None
        if a is None:
            if self.a_error:
                return
            a = self._baseline_request(*key)
            if a is None:
                return
        self.r.eta.request_done(self.r.budget.clock())
        self.r.events("progress", self._words(sample, a), candidate=self.c)

    def _words(self, sample: Sample, a: Sample) -> str:
        """The ``"progress"`` event of one paired request."""
        return (f"pair {sample.repetition}: {self.c.label} {sample.gen_tokens_per_s:.1f} vs no speculation "
                f"{a.gen_tokens_per_s:.1f} tokens/s on the same request")

    def _pairs_so_far(self, samples: Sequence[Sample]) -> list[Pair]:
        """The complete repetitions of this launch so far, as pairs (``tuner.calibration.pairing.Pair``; the
        launch is not booked yet: its positions are the next two in the record)."""
        mix = self.r.record.mix
        pos = len(self.r.record.measurements)
        out = []
        for rep in sorted({x.repetition for x in samples}):
            bs = sorted((x for x in samples if x.repetition == rep), key=lambda x: x.prompt_index)
            as_ = sorted((x for x in self.a_samples if x.repetition == rep), key=lambda x: x.prompt_index)
            if len(bs) == self.n_pr and len(as_) == self.n_pr:
                out.append(Pair(rep, pos + 1, pos, tuple(bs), tuple(as_), mix))
        return out

    def stop_if(self, samples: Sequence[Sample]) -> bool:
        r = self.r
        if self.a_error or r.budget.past_hard_limit():
            return True
        if len(samples) % self.n_pr:
            return False
        if not self._more(samples):
            return True
        return not r.estimates.fits(r.budget, 2 * r.estimates.rep_s(r.record.base_tps), reserve=False, held=r.settling)

    def _more(self, samples: Sequence[Sample]) -> bool:
        """After a complete repetition: whether the launch's next one is wanted (the sequential test's look)."""
        look = self.r.look(self.c, self._pairs_so_far(samples))
        self.r.tracker.saw(look, self.r.budget.clock())
        return self.r.more_in_launch(look)

    def checked(self, m: Measurement) -> Measurement:
        """``m`` with its outputs compared with the baseline's on the same requests (the lossless check)."""
        by_key = {(x.prompt_index, x.repetition): x for x in self.a_samples}
        divs = [Divergence(x.prompt_index, x.repetition, off) for x in m.samples
                if x.content is not None and (a := by_key.get((x.prompt_index, x.repetition))) is not None
                and a.content is not None and (off := first_divergence(a.content, x.content)) is not None]
        compared = sum(1 for x in m.samples if x.content is not None and (x.prompt_index, x.repetition) in by_key)
        if m.ok:
            m = replace(m, divergences=tuple(divs), lossless=(not divs) if compared else None)
        return m


class _HeadToHead(_Pair):
    """:class:`_Pair` for a head-to-head launch: the other side is a speculative candidate's server, the launch runs
    all its repetitions while the budget fits them (no look: the decision pools these pairs with the contrast)."""

    def __init__(self, rounds: SideBySide, c: Candidate, base: Launch, other: Candidate) -> None:
        super().__init__(rounds, c, base)
        self.other = other

    def _words(self, sample: Sample, a: Sample) -> str:
        return (f"head to head {sample.repetition}: {self.c.label} {sample.gen_tokens_per_s:.1f} vs "
                f"{self.other.label} {a.gen_tokens_per_s:.1f} tokens/s on the same request")

    def _more(self, samples: Sequence[Sample]) -> bool:
        return True  # every repetition the budget fits (``SideBySide.settling`` is set: held time may pay)


__all__ = ["SideBySide"]
