"""The screening stages: the baseline, one probe per candidate, the draft lengths worth measuring, and the
contenders the paired rounds confirm.

DESIGN.md "Calibration method" step 5. Each candidate one server launch:

1. :meth:`Screening.baseline`: the target alone (``baseline_repetitions`` repetitions): the screening
   reference. Its outputs are the reference for the lossless check.
2. :meth:`Screening.probes`: per draft model one run at a long draft (``n_max`` 16, ``p_min`` 0): its
   per-position acceptance counters predict accepted tokens per verification for every shorter draft,
   and its measured step cost fits a :class:`~tuner.calibration.predict.CostModel`; together they
   predict tokens/s for every ``n_max`` (event ``"predicted"``). n-gram types and ``draft-mtp`` get one
   run. A run that drafted nothing is the model alone: when it disagrees with the baseline, the baseline
   is measured again (:meth:`Screening.recheck_baseline`).
3. :meth:`Screening.refine`: the draft lengths predicted fastest (and predicted to beat the baseline) are
   measured, best prediction first; after each, the cost model is refitted on every measured length of
   that draft and the curve re-predicted, so a better length found by the refit is measured too.
   :meth:`Screening.explore`: while more than half the budget is left, the neighbours (±1) of every
   length within 5 % of the draft's best are measured as well (``SearchSettings.explore_per_draft``): on
   a noisy machine one unlucky run can otherwise end the refit on a local maximum.
   :meth:`Screening.rescreen_near_ties` (busy machine only) measures near-tied lengths once more; then
   :meth:`Screening.p_min_variants` measures the best length of each draft once more with ``p_min`` > 0.
4. :meth:`Screening.contenders`: the screened candidates, ranked on their ratio over the same requests
   as the baseline, for the paired rounds (``tuner.calibration.search.confirm``).

Every step runs only when its estimated time fits (event ``"skipped"`` otherwise).
"""

from __future__ import annotations

from dataclasses import replace

from tuner.errors import Cancelled

from ..candidates import Candidate, CandidatePlan
from ..pairing import compare, pooled_tokens_per_s
from ..predict import CostModel, StepCost, fit_cost_model, predict_curve
from ..results import Measurement
from ..sentences import JsonValue, Sentence, Slot
from ..verifycost import PricedCurve
from .measurer import Measurer
from .record import Curve, Record
from .rules import (
    PRUNE_SLACK,
    PRUNE_SLACK_BUSY,
    RecheckVerdict,
    agree,
    cannot_beat_leader,
    chain_member_never_drafted,
    draft_length,
    generated_tokens,
    leader,
    never_drafted_type,
    ngram_basis,
    recheck_verdict,
    screening_factor,
    screening_ratio,
)
from .settings import BaselineFailed
from .stage import Stage, SweepState


class Screening(Stage):
    """The screening stages of one sweep (module docstring); they talk to the rest of the sweep only through
    its state objects and the :class:`~tuner.calibration.search.measurer.Measurer`."""

    def __init__(self, plan: CandidatePlan, measurer: Measurer, state: SweepState) -> None:
        super().__init__(state)
        self.plan = plan
        self.measurer = measurer
        self.reps = list(range(state.settings.probe_repetitions))
        """Repetition ids of every probe and refine launch."""

    def _fits(self, est_s: float, reserve: bool = True, optional: bool = False, busy: bool | None = None) -> bool:
        """``Estimates.fits`` for a step of ``est_s`` s; ``busy``: reserve the busy extra look (default: if busy)."""
        return self.estimates.fits(self.budget, est_s, reserve, optional,
                                   reserve and (self.busy() if busy is None else busy))

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def _probe_list(self) -> list[Candidate]:
        """Drafts first (the first one always), then MTP, then n-gram types — each type's shortest variant
        first (for ngram-mod also the one with the smallest ``n_min``): its acceptance counters then predict the
        type's longer variants (:func:`~tuner.calibration.search.rules.cannot_beat_leader`), while a shorter
        variant cannot be predicted from a longer one that dropped short drafts — then the chains and the rest
        in plan order."""
        types = list(dict.fromkeys(c.spec_type for c in self.plan.ngram))

        def order(c: Candidate) -> tuple[int, int, int]:
            plain = c.spec_type.startswith("ngram") and not c.is_chained and not c.autotune
            return (0, types.index(c.spec_type), draft_length(c) or 0) if plain else (1, 0, 0)

        ngram = sorted(self.plan.ngram, key=order)  # stable: chains and the rest keep the plan's order
        return [*self.plan.drafts, *([self.plan.mtp] if self.plan.mtp is not None else []), *ngram]

    def pruned(self, c: Candidate, basis: Measurement | None = None) -> bool:
        """True (event ``"skipped"``, and the record's :attr:`~tuner.calibration.search.record.Record.pruned`)
        when ``c`` cannot beat the leader on these prompts (:func:`~tuner.calibration.search.rules.cannot_beat_leader`):
        an n-gram variant predicted from the same type's run at another length with that run's own cost of a
        verification step; a draft length (``basis``: its draft's long run) with the draft's fitted cost model.
        The leader is another draft group's best screening run; the margin is wider while the machine is busy,
        and nothing is ruled out once the baseline had to be measured again (screening runs minutes apart then
        say little)."""
        if any(p["label"] == c.label for p in self.record.pruned):
            return True  # said once
        lead = leader(self.record, other_than=c)
        if lead is None or self.record.baseline_rechecked:
            return False
        cost: StepCost
        if basis is None:
            found = ngram_basis(self.record, c)
            if found is None:
                return False
            basis, cost = found
        else:
            model = self.record.cost_models.get(self.record.group(basis.candidate))
            if model is None:
                return False
            cost = model
        why = cannot_beat_leader(c, basis, cost, lead, PRUNE_SLACK_BUSY if self.busy() else PRUNE_SLACK,
                                 screening_ratio(self.record, basis))
        if why is None:
            return False
        self.record.pruned.append(why.to_json())
        self.events("skipped", f"{c.label}: not launched, it cannot beat {why.leader} ({why.leader_ratio:.2f}×) on "
                    f"these prompts: at most {why.at_most:.2f}× by {why.basis}'s acceptance", candidate=c,
                    detail={"pruned": why.to_json()})
        return True

    def _planned_refine(self) -> int:
        """Refine launches the plan expects (``refine_per_draft`` per draft model and MTP), counted in the ETA
        until the refine stage has its own queue."""
        return self.s.refine_per_draft * (len(self.plan.drafts) + (1 if self.plan.mtp is not None else 0))

    def draft_probes(self) -> list[Candidate]:
        """The draft models' and MTP's probes that ran."""
        return [c for c in (*self.plan.drafts, *([self.plan.mtp] if self.plan.mtp else [])) if self.record.runs_of(c)]

    # ---- 1. the baseline ----------------------------------------------------------------------------
    def baseline(self) -> None:
        """Measure the target alone; its speed is the screening reference and arms the hard time limit.

        Raises:
            BaselineFailed: the baseline could not be measured.
        """
        self.eta.queued_probes = (len(self._probe_list()) + self._planned_refine(), len(self.reps))
        base = self.measurer.measure(self.plan.baseline, list(range(self.s.baseline_repetitions)), "baseline")
        if not base.ok or not base.gen_tokens_per_s:
            raise BaselineFailed(base)
        self.record.base_tps = float(base.gen_tokens_per_s)
        self.budget.arm_hard_limit()
        self.record.keep_outputs(base)

    # ---- 2. one probe per candidate -----------------------------------------------------------------
    def probes(self) -> None:
        """One run per draft (``n_max`` 16), MTP and n-gram type, budget permitting (the first always);
        skips n-gram lengths and chains that cannot draft where their type never did."""
        probes = self._probe_list()
        for i, c in enumerate(probes):
            est = self.estimates.estimate_s(None, len(self.reps))
            self.eta.queued_probes = (len(probes) - i - 1 + self._planned_refine(), len(self.reps))
            if c is not probes[0] and not self._fits(est, reserve=self.record.contender_seen()):
                self.events("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.record.unmeasured.append(c)
                continue
            never = never_drafted_type(self.record, c)
            if never is not None:
                self.events("skipped", f"{c.label}: not measured, {never.candidate.label} never drafted on these "
                            "prompts and this draft length cannot change that", candidate=c)
                continue
            useless = chain_member_never_drafted(self.record, c)
            if useless is not None:
                self.events("skipped", f"{c.label}: not measured, {useless.candidate.label} never drafted on these "
                            "prompts, so the chain would be its other member alone", candidate=c)
                continue
            if self.pruned(c):
                continue
            m = self.measurer.measure(c, self.reps, "probe")
            if m.no_drafts_at and m.samples:
                self.recheck_baseline(m)
            if m.ok and c.spec_type.startswith("draft"):
                self.predict(c)
        self.eta.pending_s = 0.0

    def recheck_baseline(self, idle_run: Measurement) -> None:
        """Measure the baseline once more when ``idle_run`` — a speculative launch that drafted nothing,
        so the model alone — ran more than :data:`~tuner.calibration.search.rules.BASELINE_DISAGREES` ×
        faster or slower than the baseline's launch on the same requests (at most once per sweep, when it
        fits the budget).

        When the re-measurement agrees with ``idle_run`` and not with the first launch, the first is
        marked ``superseded`` (kept in the record, never quoted as the model's speed nor used for
        screening) and the re-measurement becomes the baseline; when it agrees with neither, both are
        kept and the baseline is unsteady (:func:`~tuner.calibration.search.rules.recheck_verdict`). Either
        way a sentence goes to the record's notes."""
        found = self.record.screening_baseline()
        if self.record.baseline_rechecked or found is None:
            return
        pos, first = found
        keys = {(x.prompt_index, x.repetition) for x in idle_run.samples}
        b1 = pooled_tokens_per_s([x for x in first.samples if (x.prompt_index, x.repetition) in keys])
        n1 = pooled_tokens_per_s(idle_run.samples)
        if not b1 or not n1 or agree(n1, b1):
            return
        self.record.baseline_rechecked = True
        # the sentences quote each launch's own figure, as the launch table does (the check above compares
        # the same requests)
        f1, fn, label = first.gen_tokens_per_s or b1, idle_run.gen_tokens_per_s or n1, idle_run.candidate.label
        said: dict[str, JsonValue] = {"first_tps": f1, "idle_tps": fn, "idle_label": label}
        reps = sorted({x.repetition for x in first.samples})
        if not self._fits(self.estimates.estimate_s(n1, len(reps)), reserve=False):
            self.record.notes.append(Sentence(Slot.SWEEP, "sweep.baseline_unmeasurable", said))
            self.record.baseline_unsteady = True
            return
        self.events("error", f"no speculation: measured again — {f1:.1f} tokens/s in its launch, {fn:.1f} in "
                    f"{label}, which drafted nothing (the same model alone)")
        again = self.measurer.measure(self.plan.baseline, reps, "baseline")
        b2 = pooled_tokens_per_s([x for x in again.samples if (x.prompt_index, x.repetition) in keys]) if again.ok else None
        if not b2:
            return
        f2 = again.gen_tokens_per_s or b2
        said["again_tps"] = f2
        verdict = recheck_verdict(b1, n1, b2)
        if verdict is RecheckVerdict.SUPERSEDED:
            self.record.supersede(pos, f"disturbed: {f1:.1f} tokens/s, while {label} (which drafted nothing) ran "
                                       f"{fn:.1f} and a second baseline launch {f2:.1f}")
            self.record.base_tps = float(f2)
            self.record.keep_outputs(again)
            self.record.notes.append(Sentence(Slot.SWEEP, "sweep.baseline_superseded", said))
        elif verdict is RecheckVerdict.UNSTEADY:
            self.record.notes.append(Sentence(Slot.SWEEP, "sweep.baseline_unsteady", said))
            self.record.baseline_unsteady = True

    def _long_run(self, probe: Candidate) -> Measurement | None:
        """The run of ``probe``'s draft whose per-position counters predict its other lengths."""
        return next((m for m in self.record.runs_of(probe)
                     if m.counts and m.counts.accepted_per_pos and m.counts.drafts_total), None)

    def _length_pruned(self, c: Candidate, probe: Candidate) -> bool:
        """:meth:`pruned` for a draft length ``c`` of ``probe``'s draft (False without its long run)."""
        basis = self._long_run(probe)
        return basis is not None and self.pruned(c, basis)

    def predict(self, probe: Candidate) -> Curve:
        """(Re)fit the cost model of ``probe``'s draft and predict the curve; emits ``"predicted"``. A measured
        verify-cost curve gives the shape, read at the probe's screening level (scaled to predict the probe's own
        screening speedup, as the fitted model does by construction): its own level carries the offset of the
        launches it was measured in (issue 28's idle 28: 0.95× predicted for a probe that screened 1.24×, no
        length cleared the refine bar; idle 31: every length predicted above what it measured)."""
        runs = self.record.runs_of(probe)
        long_run = self._long_run(probe)
        if long_run is None or long_run.counts is None or self.record.base_tps is None:
            self.record.curves[self.record.group(probe)] = []
            return []
        fit_pts = []
        for m in runs:
            if m.counts and m.counts.drafts_total and m.gen_tokens_per_s:
                a = m.counts.accepted_tokens_total / m.counts.drafts_total
                k_eff = m.counts.drafted_per_step or float(m.candidate.n_max or 1)
                fit_pts.append((k_eff, a, float(m.gen_tokens_per_s)))
        group = self.record.group(probe)
        measured = self.record.verify_curves.get(group)
        fitted = fit_cost_model(self.record.base_tps, fit_pts) if fit_pts else None
        model: CostModel | PricedCurve | None = (PricedCurve(measured, self.record.base_tps) if measured is not None
                                                 else fitted)
        if model is None:
            self.record.curves[group] = []
            return []
        generated = generated_tokens(long_run)
        if measured is not None and fitted is not None:
            self.record.fitted_curves[group] = predict_curve(long_run.counts, fitted, self.s.draft_lengths, generated)
        curve = predict_curve(long_run.counts, model, self.s.draft_lengths, generated)
        factor = screening_factor(long_run, model, screening_ratio(self.record, long_run)) if measured else None
        if factor:  # the curve's shape at the probe's screening level
            curve = [(k, a, tps * factor) for k, a, tps in curve]
        self.record.curves[group] = curve
        self.record.cost_models[group] = model
        self.events(
            "predicted",
            f"{probe.label}: predicted best n_max " + (f"{max(curve, key=lambda t: t[2])[0]}" if curve else "unknown"),
            candidate=probe,
            detail={"curve": [list(t) for t in curve], **_cost_detail(model)},
        )
        return curve

    def use_verify_curves(self) -> None:
        """Predict again every draft whose group has a measured verify-cost curve now (it replaces the fitted
        cost model: ``tuner.calibration.search.verify``)."""
        for probe in self.draft_probes():
            if self.record.group(probe) in self.record.verify_curves:
                self.predict(probe)

    # ---- 3. draft lengths -----------------------------------------------------------------------------
    def _curve_ratio(self, probe: Candidate, tps: float) -> float:
        """A curve's predicted tokens/s as a ratio to the baseline it was predicted against (the cost model's:
        a probe measured in the same disturbed minutes as a baseline launch the sweep later measured again is
        compared with that launch, not with one measured minutes later at another speed)."""
        model = self.record.cost_models.get(self.record.group(probe))
        base = model.baseline_gen_tokens_per_s if model is not None else self.record.base_tps
        return tps / base if base else 0.0

    def _refine_queue(self, bar: float) -> list[tuple[float, Candidate, Candidate]]:
        """``(predicted tokens/s, probe, length to measure)`` of each draft's most promising lengths (predicted
        above ``bar``, a ratio to the baseline), best first; without per-position counters (no /metrics), a few
        fixed lengths."""
        queue: list[tuple[float, Candidate, Candidate]] = []
        for probe in self.draft_probes():
            curve = self.record.curves.get(self.record.group(probe)) or []
            done = self.record.measured_n_max(probe)
            promising = sorted((t for t in curve if self._curve_ratio(probe, t[2]) > bar and t[0] not in done),
                               key=lambda t: -t[2])
            fitted = self.record.fitted_curves.get(self.record.group(probe)) or []
            picks = second_opinion(promising[: self.s.refine_per_draft], fitted, done, self.record.base_tps, bar)
            picks = with_neighbours(picks, promising)
            for k, _acc, tps in picks:
                queue.append((tps, probe, probe.with_n_max(k)))
            if not curve and not any(m.candidate.n_max != probe.n_max for m in self.record.runs_of(probe)):
                for k in (4, 8):
                    if k not in done:
                        queue.append((0.0, probe, probe.with_n_max(k)))
        queue.sort(key=lambda t: -t[0])
        return queue

    def refine(self) -> None:
        """Measure the lengths each draft's curve predicts fastest (and faster than the baseline by half of
        ``min_gain``), best first, then the best one's two neighbours (:func:`with_neighbours`), refitting after
        each; a better length the refit finds is queued too (at most two per draft). The first length keeps the plain reserve, the rest the optional stages' reserve
        without the busy machine's extra look of the leader: the curve's predicted best moves by two or three
        lengths between curves of one draft, so its neighbours are worth more (tests/calibration/search/
        test_busy_refine.py says where that was measured)."""
        assert self.record.base_tps is not None
        bar = 1.0 + self.s.min_gain / 2  # a ratio to the baseline each curve was predicted against
        queue = self._refine_queue(bar)
        extra_budget = {self.record.group(p): 2 for p in self.draft_probes()}
        refined = 0
        self.eta.queued_probes = (0, 0)  # the refine stage's own queue from here on
        self.eta.pending_s = sum(self.estimates.estimate_s(t[0] or None, len(self.reps)) for t in queue)
        while queue:
            self._check_cancel()
            rank, probe, c = queue.pop(0)
            predicted = next((t[2] for t in self.record.curves.get(self.record.group(probe)) or []
                              if t[0] == c.n_max), rank)
            est = self.estimates.estimate_s(predicted or None, len(self.reps))
            self.eta.pending_s = max(0.0, self.eta.pending_s - est)
            if c.n_max in self.record.measured_n_max(probe) or self._length_pruned(c, probe):
                continue
            if not self._fits(est, optional=refined > 0, busy=False):
                self.events("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.record.unmeasured.append(c)
                continue
            self.measurer.measure(c, self.reps, "refine", predicted or None)
            refined += 1
            curve = self.predict(probe)
            done = self.record.measured_n_max(probe)
            best_measured = max((m.gen_tokens_per_s or 0.0) for m in self.record.runs_of(probe))
            better = [t for t in curve if t[0] not in done and self._curve_ratio(probe, t[2]) > bar
                      and t[2] > best_measured * 1.02]
            g = self.record.group(probe)
            if better and extra_budget[g] > 0 and not any(q[2].n_max == max(better, key=lambda t: t[2])[0]
                                                          and self.record.group(q[2]) == g for q in queue):
                k, _acc, tps = max(better, key=lambda t: t[2])
                extra_budget[g] -= 1
                queue.append((tps, probe, probe.with_n_max(k)))
                queue.sort(key=lambda t: -t[0])
                self.eta.pending_s += self.estimates.estimate_s(tps, len(self.reps))
        self.eta.pending_s = 0.0

    def explore_next(self, probe: Candidate) -> tuple[int, float] | None:
        """The next draft length to explore for ``probe``'s draft: ``(n_max, predicted tokens/s or 0)``.

        Unmeasured lengths next to (±1) a measured one whose tokens/s is within ``explore_within`` of
        the best measured, and those the cost model's curve predicts within ``explore_within`` of it;
        the one the curve ranks highest first (then the longer one).
        None when there is none, or when the draft's best run does not beat the baseline (by half of
        ``min_gain``, the refine stage's bar)."""
        rated = [(n, tps) for m in self.record.runs_of(probe)
                 if (tps := m.gen_tokens_per_s) and (n := m.candidate.n_max) is not None]
        if not rated:
            return None
        best = max(tps for _, tps in rated)
        base = self.record.base_tps
        if base is None or best <= base * (1.0 + self.s.min_gain / 2):
            return None  # a draft that does not beat the baseline anywhere: nothing worth a closer look
        done = self.record.measured_n_max(probe)
        near = {n for n, tps in rated if tps >= self.s.explore_within * best}
        predicted = {t[0]: t[2] for t in self.record.curves.get(self.record.group(probe)) or []}
        # the neighbours, and any length the refitted curve itself puts within reach of the best
        # (one unlucky run next to it must not hide it)
        likely = {n for n, tps in predicted.items() if tps >= self.s.explore_within * best}
        options = ({k + d for k in near for d in (-1, 1)} | likely) & set(self.s.draft_lengths) - done
        if not options:
            return None
        k = max(options, key=lambda n: (predicted.get(n, 0.0), n))
        return k, predicted.get(k, 0.0)

    def explore(self) -> None:
        """Spare budget after the refine stage: measure neighbours of the best draft lengths, so a
        noisy run or an imperfect cost model does not leave the search on a local maximum (see
        :class:`~tuner.calibration.search.settings.SearchSettings` ``explore_per_draft``)."""
        if self.s.explore_per_draft <= 0:
            return
        # On a busy machine one unlucky screening run is likelier still, so the exploration runs there
        # too, but keeps the busy reserve (twice the pairs) for the paired rounds. (Skipping it while
        # busy ended a sweep on n_max 2, 0.885 of the best length: bench/tune_quality.py --busy.)
        busy = self.busy()
        for probe in [c for c in self.plan.drafts if self.record.runs_of(c)]:
            for _ in range(self.s.explore_per_draft):
                self._check_cancel()
                if self.budget.remaining_s() < self.s.explore_spare * self.budget.budget_s:
                    return
                nxt = self.explore_next(probe)
                if nxt is None:
                    break
                k, predicted = nxt
                if self._length_pruned(probe.with_n_max(k), probe):
                    break  # the draft's most promising length cannot beat the leader: nor can the rest
                if not self._fits(self.estimates.estimate_s(predicted or None, len(self.reps)), optional=True):
                    if busy:
                        self.events("skipped", "the machine is busy: no further draft lengths explored, the budget "
                                    "left goes to more paired rounds")
                    return
                self.measurer.measure(probe.with_n_max(k), self.reps, "refine", predicted or None)
                self.predict(probe)

    def rescreen_near_ties(self) -> None:
        """On a busy machine, measure the draft-model (and MTP) configurations whose screening ratio is
        within ``rescreen_within`` of the best one once more, the best included, on the same requests,
        best first, while the optional stages' reserve allows; their screening comparisons then pool both
        launches (:func:`tuner.calibration.pairing.compare`) before the finalists are chosen.

        Why: one screening launch under another program's load decides which lengths reach the paired
        rounds, and draft lengths next to each other differ by a few per cent. Measured with
        ``bench/tune_quality.py --busy``: n_max 4, 3 and 5 screened at 96.7, 87.8 and 86.4 tokens/s, n_max 5
        was dropped, and the referee then measured it 13 % faster than the n_max 4 served — with 60 s
        of the budget unspent. The leader is measured again too: a second chance for the runners-up alone
        would favour them. Screening data only: the paired test's error is unaffected. Only while more
        than ``explore_spare`` of the budget is left, as for the exploration (a re-screen in a 45 s busy
        sweep left 3 pairs for the leader, the fewest the sequential test decides on)."""
        if not self.busy() or self.s.rescreen_within <= 0:
            return
        if self.budget.remaining_s() < self.s.explore_spare * self.budget.budget_s:
            return
        for c in near_ties(self.record, self.s.min_gain, self.s.rescreen_within):
            self._check_cancel()
            runs = [m for m in self.record.measurements if m.candidate == c and m.ok and m.stage in ("probe", "refine")]
            if len(runs) >= 2:
                continue
            est = self.estimates.estimate_s(runs[0].gen_tokens_per_s if runs else None, len(self.reps))
            if not self._fits(est, optional=True):
                self.events("skipped", f"{c.label}: not measured again, the budget left goes to the paired rounds",
                            candidate=c)
                return
            self.measurer.measure(c, self.reps, "refine", runs[0].gen_tokens_per_s if runs else None)

    def p_min_variants(self) -> None:
        """Measure ``p_min_variant`` at the best measured draft length of each draft (budget permitting).

        Only where it can matter: a draft model (or MTP) whose best length is at least 4 and that is within
        reach of the baseline (at least ``loser_ratio`` of its tokens/s). Not for DSpark heads: there
        ``p_min`` is a threshold on the head's confidence output, not on the draft token's probability
        (common/speculative.cpp ``common_speculative_impl_draft_dflash::draft``), and a head without a
        trained confidence head then drafts nothing."""
        assert self.record.base_tps is not None
        pv = self.s.p_min_variant
        if not pv or self.busy():
            return
        for probe in [c for c in self.draft_probes() if c.spec_type != "draft-dspark"]:
            self._check_cancel()
            best = max(self.record.runs_of(probe), key=lambda m: m.gen_tokens_per_s or 0.0)
            n_max = best.candidate.n_max or 0
            if n_max < 4 or (best.gen_tokens_per_s or 0.0) < self.s.loser_ratio * self.record.base_tps:
                continue
            c = replace(best.candidate, p_min=pv)
            if any(m.candidate == c for m in self.record.measurements):
                continue
            est = self.estimates.estimate_s(best.gen_tokens_per_s, len(self.reps))
            if not self._fits(est, optional=True):
                self.events("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.record.unmeasured.append(c)
                continue
            self.eta.pending_s = est
            self.measurer.measure(c, self.reps, "refine", best.gen_tokens_per_s)
        self.eta.pending_s = 0.0

    # ---- 4. what the paired rounds confirm ----------------------------------------------------------
    def contenders(self) -> list[tuple[float, Candidate]]:
        """Screened candidates worth confirming: ``(ratio on the same requests as the baseline,
        candidate)``, fastest first; stopped-early losers, failures and those not faster than the
        baseline are left out — except that when none is faster, those within screening noise of the
        baseline (ratio ≥ ``confirm_within``, ``confirm_within_busy`` on a busy machine) are still
        confirmed, fastest first (``rules.finalists`` then keeps one per draft group first): one screening
        run each, not adjacent in time, cannot tell 0.95× from 1.3× (measured on Gemma 3 270M under load:
        ngram-simple screened 0.95× with every draft accepted, and nothing was confirmed), nor 0.92× from
        0.90× (issue 28's busy 18: the baseline screened in a quiet second at 142 tokens/s, every other run
        below it; only ngram-mod at 0.92× was confirmed, inconclusive, while the draft at 0.90× measured
        1.25× by the referee was never paired). The finalists are chosen from screening data only, so the
        paired test's error is unaffected; it alone decides."""
        out: dict[tuple, tuple[float, Candidate]] = {}
        near: dict[tuple, tuple[float, Candidate]] = {}
        for m in self.record.measurements:
            if not m.ok or m.candidate.is_baseline or m.stopped_early or m.candidate.key in out:
                continue
            cmp_ = compare(self.record.measurements, m.candidate, self.s.min_gain, mix=self.record.mix)
            if cmp_ is None or cmp_.stopped_early or not cmp_.speedup:
                continue
            (out if cmp_.speedup > 1.0 else near)[m.candidate.key] = (cmp_.speedup, m.candidate)
        if not out:
            within = self.s.confirm_within_busy if self.busy() else self.s.confirm_within
            out = {k: t for k, t in near.items() if t[0] >= within}
        return sorted(out.values(), key=lambda t: -t[0])


def second_opinion(picks: Curve, fitted: Curve, done: set[int], base_tps: float | None, bar: float) -> Curve:
    """``picks`` (the draft lengths a measured verify-cost curve predicts fastest, best first), with the last one
    replaced by the best length of ``fitted`` (the curve of the cost model fitted to the draft's own runs) when
    that length is not among them, not in ``done`` (measured) and predicted above ``bar`` (a ratio to
    ``base_tps``, the screening baseline); ranked right after the curve's first pick (its tokens/s; the
    measurement's prediction is the curve's own, :meth:`Screening.refine`; :func:`with_neighbours` then puts the
    first pick's neighbours before it), so lengths a refit of a wrong curve queues again come after it. ``picks`` as given when there is no ``fitted`` curve, or when the measured curve
    predicts no length above ``bar`` (the fitted line, through a step cost of 1 at no drafted token, is the more
    optimistic about short lengths: it adds no launch of its own).

    Why: a curve of two or three launches can be wrong in its shape, and then every length it ranks first is
    wrong the same way. Issue 28's idle 24 reused a three-point curve whose step at 16 drafted tokens cost only
    1.32× the step at 8 (1.46–1.61× over ``bench/n_max_prediction.py``'s rounds): it predicted ``n_max`` 16
    best, the fitted model ``n_max`` 5, and the refine stage measured only lengths next to 16 — the draft's
    ``n_max`` 16 probe was served at 0.80 of its best length, ``n_max`` 5. Two opinions that disagree are both
    measured, within the same number of refine launches."""
    options = [t for t in fitted if t[0] not in done and base_tps and t[2] / base_tps > bar]
    if not options or not picks:
        return picks
    k, acc, _tps = max(options, key=lambda t: t[2])
    if k in {t[0] for t in picks}:
        return picks
    return [*picks[: max(1, len(picks) - 1)], (k, acc, picks[0][2])]


def with_neighbours(picks: Curve, promising: Curve) -> Curve:
    """``picks`` (best first) with the lengths next to the first one (±1, from ``promising``: the curve's unmeasured
    lengths predicted above the refine bar) placed right after it, the one predicted faster first, all ranked at the
    first one's predicted tokens/s (the queue keeps their order).

    Why: the verify-cost curve's predicted best moves by one or two lengths between curves of one draft (a curve of
    three points, 1, 7.7 and 14.7 drafted tokens, says little about the lengths between them), and on a busy machine
    the exploration after the refine stage keeps the paired rounds' reserve and measures none. Issue 28's busy 76:
    the refine measured the predicted ``n_max`` 8 and the fitted model's second opinion 3, then stopped with 48 s of
    83 left; it served 8 at 0.932 of the referee's best, 7. The second opinion still comes after the neighbours."""
    if not picks:
        return picks
    first = picks[0]
    near = sorted({t[0]: t for t in [*promising, *picks[1:]] if abs(t[0] - first[0]) == 1}.values(), key=lambda t: -t[2])
    rest = [t for t in picks[1:] if abs(t[0] - first[0]) != 1]
    return [first, *[(k, a, first[2]) for k, a, _ in [*near, *rest]]]


def near_ties(record: Record, min_gain: float, within: float) -> list[Candidate]:
    """Draft-model (and MTP) configurations of ``record`` screened within ``within`` of the best one's ratio over
    the baseline (the best included, best first; ratios at ``min_gain``'s comparison); none unless two or more."""
    rated: list[tuple[float, Candidate]] = []
    for m in record.measurements:
        c = m.candidate
        if not m.ok or m.stopped_early or c.is_baseline or not (c.draft_path or "draft-mtp" in c.spec_types):
            continue
        if any(r[1] == c for r in rated):
            continue
        cmp_ = compare(record.measurements, c, min_gain, mix=record.mix)
        if cmp_ is not None and not cmp_.paired and cmp_.speedup and cmp_.speedup > 1.0:
            rated.append((cmp_.speedup, c))
    if len(rated) < 2:
        return []
    rated.sort(key=lambda t: -t[0])
    ties = [c for sp, c in rated if sp >= within * rated[0][0]]
    return ties if len(ties) >= 2 else []


def _cost_detail(model: CostModel | PricedCurve) -> dict[str, JsonValue]:
    """The ``"predicted"`` event's words on the cost of a verification step: the fitted model's ``u`` and ``w``, or
    the measured curve's points."""
    if isinstance(model, PricedCurve):
        return {"verify_cost": [[x, y] for x, y in model.curve.points]}
    return {"cost_per_draft_token": model.per_draft_token, "cost_per_step": model.per_step}


__all__ = ["Screening"]
