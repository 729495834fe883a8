"""The decision: which candidate to serve, with statistics, or "no speculation" and why.

DESIGN.md "Calibration method" step 6. A speculative candidate wins only when its paired rounds
against the baseline (launches adjacent in time, the same requests on both sides:
``tuner.calibration.pairing``) pass the sequential test: the lower bound of the ratio, at the test's
error level (5 % in all, spent over every look), must exceed ``1 + min_gain``. Otherwise the answer is
"no speculation", with the reason — including "the evidence was not enough" when the budget ran out
while the test was still inconclusive.

This module holds the statistics only: :func:`decide` states what it found as sentences (data:
``tuner.calibration.sentences``) and their words come from ``tuner.calibration.wording``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .candidates import Candidate
from .outcome import SearchOutcome
from .pairing import (
    MIN_GAIN,
    Comparison,
    Mix,
    compare,
    head_to_head,
    pooled_tokens_per_s,
)
from .results import Measurement, Sample
from .sentences import Sentence, Slot, in_reading_order
from .sequential import CHAIN_MIN_GAIN
from .sequential import contrast as contrast_looks
from .wording import never_entry, of_slot, render

MIX_NOISE = 0.05
"""Short and long-context speedups that differ by more than this (relative) are stated separately (the
same bar as the per-category depth sentence, ``tuner.calibration.report.depth_sentence``)."""


@dataclass(frozen=True)
class BreakEven:
    """Break-even acceptance of one speculative candidate on this machine.

    Attributes:
        candidate: the measured candidate (the best-measured one per draft model / type).
        acceptance: its measured acceptance rate.
        break_even_acceptance: acceptance (0..1) at which its measured per-step cost would exactly
            match the baseline's tokens/s; ``None`` when it cannot be computed (no drafts) or when no
            acceptance up to 100 % would be enough (then ``never_pays`` is True). Never above 1.0.
        gen_tokens_per_s: its measured tokens/s.
        never_pays: True when even 100 % acceptance would not reach the baseline's tokens/s at the
            measured cost per verification step (the draft, or the n-gram lookup, costs too much here).
    """

    candidate: Candidate
    acceptance: float | None
    break_even_acceptance: float | None
    gen_tokens_per_s: float | None
    never_pays: bool = False

    @classmethod
    def of(cls, m: Measurement, baseline_gen_tokens_per_s: float) -> BreakEven:
        """Break-even of measurement ``m`` against the baseline's tokens/s (see :func:`break_even_acceptance`)."""
        raw = break_even_acceptance(m, baseline_gen_tokens_per_s)
        never = raw is not None and raw > 1.0
        return cls(m.candidate, m.acceptance, None if never else raw, m.gen_tokens_per_s, never)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "candidate": self.candidate.to_json(),
            "label": self.candidate.label,
            "acceptance": self.acceptance,
            "break_even_acceptance": self.break_even_acceptance,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "never_pays": self.never_pays,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BreakEven:
        """Inverse of :meth:`to_json` (a saved profile's decision).

        Raises:
            KeyError, TypeError, ValueError: ``obj`` is not such a dict.
        """
        return cls(Candidate.from_json(obj["candidate"]), obj.get("acceptance"), obj.get("break_even_acceptance"),
                   obj.get("gen_tokens_per_s"), bool(obj.get("never_pays")))


@dataclass(frozen=True)
class CategoryResult:
    """Per-category comparison of one speculative candidate with the baseline, like with like.

    Only requests that both measured are compared: the same prompt (``prompt_index``) at the same
    repetition (the same fresh prefix), so a candidate stopped early, or measured on fewer
    repetitions than the baseline, is compared on exactly the requests it ran.

    Attributes:
        category: prompt category.
        baseline_gen_tokens_per_s: baseline tokens/s on those requests (Σ tokens ÷ Σ generation time).
        gen_tokens_per_s: the candidate's tokens/s on the same requests; ``None`` when it ran none.
        speedup: ratio of the two; ``None`` when the candidate ran none of this category's requests.
        acceptance: the candidate's acceptance on those requests, ``None`` without drafts.
        candidate_label: the candidate these results are for (its ``label``).
        paired_requests: number of (prompt, repetition) requests compared.
    """

    category: str
    baseline_gen_tokens_per_s: float | None
    gen_tokens_per_s: float | None
    speedup: float | None
    acceptance: float | None
    candidate_label: str = ""
    paired_requests: int = 0

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CategoryResult:
        """Inverse of :meth:`to_json` (a saved profile's decision); unknown keys are ignored.

        Raises:
            KeyError, TypeError: ``obj`` lacks ``category``.
        """
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in obj.items() if k in names})


@dataclass(frozen=True)
class Decision:
    """The outcome of a sweep.

    Attributes:
        winner: the chosen candidate; the baseline (``spec_type == "none"``) for "no speculation".
        gen_tokens_per_s: winner's pooled tokens/s over its paired requests (the baseline's for "no
            speculation", over the best candidate's compared requests).
        baseline_gen_tokens_per_s: baseline's pooled tokens/s over the same requests.
        speedup: winner ÷ baseline over the paired requests (1.0 for the baseline).
        speedup_ci_low: lower bound of the ratio at the sequential test's level (``None`` = unknown).
        speedup_ci_high: upper bound.
        reason: the decision in plain words: its :attr:`sentences` rendered
            (:func:`tuner.calibration.wording.render`); only the renderer fills it and no code reads it back.
        best_speculative: the fastest speculative candidate that ran correctly, even when it lost.
        best_speculative_speedup: its speedup (``None`` when none ran).
        break_even: one entry per draft model / speculation type.
        per_category: the winner (or, for "no speculation", the best speculative candidate) vs the
            baseline per prompt category, on the requests both ran (see :func:`per_category`).
        lossless: the winner's lossless check (``None`` for the baseline).
        comparisons: one pooled :class:`~tuner.calibration.pairing.Comparison` per speculative
            candidate (paired ones first, then by speedup): the figures the chart shows.
        pairs: adjacent pairs behind the quoted speedup (0 = screening only).
        busy_note: the sentence about other programs on the machine during the sweep, rendered (``None``
            when there was none).
        kind: why this is the answer: ``"speculate"``, or why the model alone: ``"alone_slower"``,
            ``"alone_within_noise"``, ``"alone_not_enough_evidence"``, ``"alone_screening_only"``,
            ``"alone_unsteady"``, ``"alone_never_drafted"``, ``"alone_failed"``, ``"alone_unmeasured"``,
            ``"alone_nothing"``; ``""`` for a profile saved before kinds were kept.
        named: the candidate labels its sentences name (so a later sentence does not name them again).
        sentences: the decision's sentences, in reading order (``tuner.calibration.sentences``).
    """

    winner: Candidate
    gen_tokens_per_s: float | None
    baseline_gen_tokens_per_s: float | None
    speedup: float
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    reason: str = ""
    best_speculative: Candidate | None = None
    best_speculative_speedup: float | None = None
    break_even: tuple[BreakEven, ...] = ()
    per_category: tuple[CategoryResult, ...] = ()
    lossless: bool | None = None
    comparisons: tuple[Comparison, ...] = ()
    pairs: int = 0
    busy_note: str | None = None
    kind: str = ""
    named: tuple[str, ...] = ()
    sentences: tuple[Sentence, ...] = ()

    @property
    def no_speculation(self) -> bool:
        """True when the answer is to run the target alone."""
        return self.winner.is_baseline

    def with_sentences(self, sentences: Iterable[Sentence], *, measured_unix_s: float | None = None) -> Decision:
        """This decision holding ``sentences`` (put in reading order), with :attr:`reason` and
        :attr:`busy_note` rendered from them; ``measured_unix_s``: when a saved profile's sweep ran (its
        sentence about other programs then says so; ``None`` = the sweep that just ran).

        Raises:
            ValueError: a sentence of a kind without a renderer.
        """
        ordered = in_reading_order(sentences)
        load = render(of_slot(ordered, Slot.MACHINE_LOAD), measured_unix_s=measured_unix_s).text
        return replace(self, sentences=ordered, reason=render(ordered, measured_unix_s=measured_unix_s).text,
                       busy_note=load or None)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (the profile's ``decision`` and the CLI's ``--json`` detail); ``reason`` is kept
        beside ``sentences`` for readers of older Draftwise versions."""
        return {
            "winner": self.winner.to_json(),
            "label": self.winner.label,
            "spec_type": self.winner.spec_type,
            "draft": self.winner.draft_path,
            "n_max": self.winner.n_max,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "baseline_gen_tokens_per_s": self.baseline_gen_tokens_per_s,
            "speedup": self.speedup,
            "speedup_ci_low": self.speedup_ci_low,
            "speedup_ci_high": self.speedup_ci_high,
            "reason": self.reason,
            "best_speculative": self.best_speculative.to_json() if self.best_speculative else None,
            "best_speculative_speedup": self.best_speculative_speedup,
            "break_even": [b.to_json() for b in self.break_even],
            "per_category": [c.to_json() for c in self.per_category],
            "lossless": self.lossless,
            "comparisons": [c.to_json() for c in self.comparisons],
            "pairs": self.pairs,
            "busy_note": self.busy_note,
            "kind": self.kind,
            "named": list(self.named),
            "sentences": [s.to_json() for s in self.sentences],
        }


def break_even_acceptance(m: Measurement, baseline_gen_tokens_per_s: float) -> float | None:
    """Acceptance at which ``m``'s measured per-step cost would match the baseline's tokens/s.

    Per sample, steps = predicted_n − draft_n_accepted (each verification step yields its accepted
    tokens plus one), time per step = predicted time ÷ steps, drafted per step = draft_n ÷ steps. The
    break-even acceptance r solves ``(1 + r · drafted_per_step) / time_per_step = baseline tokens/s``.

    Derivation (DESIGN.md "Calibration method" step 5): a verification step yields its accepted drafted
    tokens plus one, so tokens/s = (1 + r · drafted_per_step) ÷ time_per_step, with r the acceptance rate
    (draft_n_accepted ÷ draft_n, server-common.cpp ``server_slot_stats``); the baseline yields one token per
    step. The step cost is taken as measured, i.e. independent of r.

    Returns ``None`` when nothing was drafted or times are missing. The raw value can exceed 1.0 (no
    acceptance would pay); :class:`BreakEven` turns that into ``never_pays``.
    """
    steps = 0.0
    secs = 0.0
    drafted = 0
    for s in m.samples:
        if not s.draft_n or not s.predicted_n or not s.predicted_ms:
            continue
        steps += max(1, s.predicted_n - (s.draft_n_accepted or 0))
        secs += s.predicted_ms / 1000.0
        drafted += s.draft_n
    if steps <= 0 or drafted <= 0 or secs <= 0:
        return None
    t_step = secs / steps
    d = drafted / steps
    return max(0.0, (baseline_gen_tokens_per_s * t_step - 1.0) / d)


def _pair_cost_s(c: Comparison, measurements: Sequence[Measurement]) -> float | None:
    """Seconds one more adjacent pair costs: both sides' generation time per pair plus, per pair, one
    model load (each launch of the paired rounds holds two repetitions)."""
    if not c.pairs:
        return None
    gen = sum(sum((s.predicted_ms or 0.0) for s in p.candidate_samples + p.baseline_samples) / 1000.0
              for p in c.pairs) / len(c.pairs)
    loads = [s for p in c.pairs for i in (p.candidate_launch, p.baseline_launch)
             if (s := measurements[i].load_s) is not None]
    load = sum(loads) / len(loads) if loads else 0.0
    return gen * 1.15 + load


def figures(c: Comparison) -> dict[str, Any]:
    """The pooled figures of comparison ``c`` as a sentence states them (words:
    :func:`tuner.calibration.wording.figures_text`): speedup, tokens/s of both sides, requests, whether
    they come from adjacent pairs and how many, and the sequential test's interval (``low``/``high``,
    ``None`` when unknown; ``decided_at``: the look that decided "faster", when an earlier one did)."""
    look = c.look
    known = look is not None and look.low is not None and look.high is not None
    return {
        "speedup": c.speedup, "tps": c.gen_tokens_per_s, "base_tps": c.baseline_gen_tokens_per_s,
        "requests": c.requests, "paired": c.paired, "pairs": len(c.pairs),
        "low": look.low if known and look is not None else None,
        "high": look.high if known and look is not None else None,
        "decided_at": look.decided_at if known and look is not None else None,
    }


@dataclass(frozen=True)
class _Evidence:
    """What the sweep's measurements hold for the decision: the baseline (its launches pooled), one
    comparison per speculative candidate that ran correctly (paired first, then by speedup), the
    speculative candidates that only failed, the baseline's prompt categories and the break-even lines."""

    baseline: Measurement
    base_tps: float
    comparisons: tuple[Comparison, ...]
    failed: tuple[Measurement, ...]
    categories: tuple[str, ...]
    break_even: tuple[BreakEven, ...]


def _eligible(outcome: SearchOutcome) -> _Evidence:
    """The comparisons of ``outcome``'s measurements with the baseline (``tuner.calibration.pairing.compare``
    at the sweep's own test settings and mix).

    Raises:
        ValueError: no successful baseline measurement.
    """
    ok_by_key: dict[tuple, Candidate] = {}
    failed_by_key: dict[tuple, Measurement] = {}
    baseline: Measurement | None = None
    for m in outcome.measurements:
        k = m.candidate.key
        if not m.ok:
            failed_by_key.setdefault(k, m)
        elif m.candidate.is_baseline:
            if m.superseded is None:  # a disturbed launch measured again is never the model's speed
                baseline = baseline.merged(m) if baseline is not None else m
        else:
            ok_by_key.setdefault(k, m.candidate)
    if baseline is None or not baseline.gen_tokens_per_s:
        raise ValueError("no successful baseline measurement: the target alone could not be measured")
    base_tps = float(baseline.gen_tokens_per_s)
    comps = [cmp_ for c in ok_by_key.values()
             if (cmp_ := compare(outcome.measurements, c, outcome.min_gain, outcome.alpha, outcome.max_pairs,
                                 outcome.finalists, mix=outcome.mix, layout=outcome.layout, final=True)) is not None
             and cmp_.speedup]
    comps.sort(key=lambda x: (not x.paired, -(x.speedup or 0.0)))
    failed = tuple(m for k, m in failed_by_key.items() if k not in ok_by_key and not m.candidate.is_baseline)
    # Break-even per draft model / speculation type: the best-compared candidate of each group, on the
    # requests of its comparison.
    groups: dict[str, Comparison] = {}
    for cmp_ in comps:
        g = cmp_.candidate.draft_path or cmp_.candidate.spec_type
        if g not in groups or (cmp_.speedup or 0) > (groups[g].speedup or 0):
            groups[g] = cmp_
    break_even = tuple(
        BreakEven.of(Measurement(c.candidate, samples=c.candidate_samples), c.baseline_gen_tokens_per_s or base_tps)
        for c in groups.values())
    categories = tuple(sorted({str(s.category) for s in baseline.samples if s.category is not None}))
    return _Evidence(baseline, base_tps, tuple(comps), failed, categories, break_even)


def decide(outcome: SearchOutcome) -> Decision:
    """Pick the winner among the sweep's measured candidates, or "no speculation".

    Only a candidate with adjacent pairs (``tuner.calibration.pairing``: the search's paired rounds,
    A B B A) whose sequential test says "faster" (the lower bound clears ``1 + outcome.min_gain`` at the
    test's error level) can win; among those, the highest pooled speedup — except that a chained
    candidate wins over the best single-type one only when faster than it beyond noise
    (:func:`_chain_rule`). A candidate stopped early as a clear loser, or measured only in probe/refine
    launches, is never eligible: its screening comparison (same requests, not adjacent in time) is
    reported, never served. Every figure in the sentences, the chart rows (:attr:`Decision.comparisons`)
    and the per-category lines comes from one :class:`~tuner.calibration.pairing.Comparison` per candidate.

    ``outcome`` (:class:`~tuner.calibration.outcome.SearchOutcome`) gives: every measurement in launch order
    (pairing needs the order; exactly one candidate is the baseline, ``spec_type == "none"``); the
    candidates the budget left unmeasured (named when nothing speculative was measured); ``min_gain``,
    ``alpha``, ``max_pairs``, ``finalists`` (the sequential test's bar and how its error is spent:
    :mod:`tuner.calibration.sequential`, under the search's ``layout``); ``mix`` (the served share of long-context requests
    every pooled figure, pair ratio and so the pick is weighted to; the sentences state the share, and the
    short and long-context speedups when they differ by more than :data:`MIX_NOISE`); ``baseline_unsteady``
    (the model alone measured inconsistently across launches: a "no speculation" that rests on screening
    comparisons then says they are not evidence either way, instead of "slower" and a break-even).

    The sentences about the machine and the sweep itself are the report's
    (:func:`tuner.calibration.report.finish_decision`).

    Raises:
        ValueError: no successful baseline measurement.
    """
    ev = _eligible(outcome)
    if not ev.comparisons:
        return _nothing_compared(ev, outcome)
    winners = [c for c in ev.comparisons if c.paired and c.look is not None and c.look.verdict == "faster"]
    if winners:
        return _winner(ev, winners, outcome)
    return _no_speculation(ev, outcome)


def _nothing_compared(ev: _Evidence, outcome: SearchOutcome) -> Decision:
    """No speculative candidate has a comparison: each drafted nothing, failed, or never ran."""
    never = [m for m in ev.failed if m.no_drafts_at]
    broken = [m for m in ev.failed if not m.no_drafts_at]
    unmeasured = [c.label for c in outcome.unmeasured]
    params: dict[str, Any]
    if ev.failed and not broken:
        # they ran fine but proposed no token: a finding about these prompts, not a failure of the run
        kind, listed = "never_drafted", never
        params = {"never": [_entry(m) for m in never], "unmeasured": unmeasured}
    elif ev.failed:
        kind, listed = "failed", (broken + never)[:3]
        params = {"failed": [_entry(m) for m in listed]}
    else:
        kind, listed = ("unmeasured" if unmeasured else "nothing"), []
        params = {"unmeasured": unmeasured} if unmeasured else {}
    named = (*(m.candidate.label for m in listed), *(unmeasured[:4] if kind != "failed" else ()))
    decision = Decision(ev.baseline.candidate, ev.base_tps, ev.base_tps, 1.0, None, None,
                        break_even=ev.break_even, kind=f"alone_{kind}", named=named)
    return decision.with_sentences([Sentence(Slot.HEADLINE, f"alone.{kind}", params)])


def _entry(m: Measurement) -> dict[str, Any]:
    """One type that never drafted (or failed), as the ``alone.*`` sentences hold it: for a type that never
    drafted, what was measured (:class:`~tuner.calibration.results.NoDrafts`: the sampling, the requests in
    which it drafted nothing, the greedy check's drafted tokens), from the measurement's own fields."""
    nd = m.drafted_nothing() or m.no_drafts
    return never_entry(m.candidate.label, m.candidate.spec_type, m.error, m.no_drafts_at, nd)


def _winner(ev: _Evidence, winners: Sequence[Comparison], outcome: SearchOutcome) -> Decision:
    """The fastest of ``winners`` (each "faster" in its paired rounds), after the chain rule."""
    fastest = max(winners, key=lambda c: c.speedup or 0.0)
    w, chain = _chain_rule(fastest, winners, outcome)
    wm = _merged(outcome.measurements, w.candidate)
    sentences = [
        Sentence(Slot.HEADLINE, "headline.serving", {
            "candidate": w.candidate.to_json(), "speedup": w.speedup, "tps": w.gen_tokens_per_s,
            "base_tps": w.baseline_gen_tokens_per_s}),
        Sentence(Slot.EVIDENCE, "evidence.paired", {"label": w.candidate.label, "figures": figures(w),
                                                    "acceptance": w.acceptance}),
    ]
    named = [w.candidate.label]
    if chain is not None:
        sentences.append(chain)
        named += [fastest.candidate.label, str(chain.params["single"])]  # the chain and the single type
    if wm is not None and wm.divergences:
        d = wm.divergences[0]
        sentences.append(Sentence(Slot.EVIDENCE, "evidence.divergence", {
            "prompt": d.prompt_index, "repetition": d.repetition, "char": d.char_offset,
            "more": len(wm.divergences) - 1}))
    sentences += _mix(w, outcome.mix)
    decision = Decision(
        winner=w.candidate,
        gen_tokens_per_s=w.gen_tokens_per_s,
        baseline_gen_tokens_per_s=w.baseline_gen_tokens_per_s,
        speedup=float(w.speedup or 1.0),
        speedup_ci_low=w.look.low if w.look else None,
        speedup_ci_high=w.look.high if w.look else None,
        best_speculative=w.candidate,
        best_speculative_speedup=w.speedup,
        break_even=ev.break_even,
        per_category=per_category(w, ev.categories),
        lossless=wm.lossless if wm is not None else None,
        comparisons=ev.comparisons,
        pairs=len(w.pairs),
        kind="speculate",
        named=tuple(dict.fromkeys(named)),
    )
    return decision.with_sentences(sentences)


def _no_speculation(ev: _Evidence, outcome: SearchOutcome) -> Decision:
    """No candidate was faster in paired rounds: the model alone, explained with the best comparison
    (paired first: they are the better evidence)."""
    best = ev.comparisons[0]
    kind, params = _why_alone(best, ev, outcome)
    unsteady = kind == "unsteady"
    decision = Decision(
        winner=ev.baseline.candidate,
        gen_tokens_per_s=best.baseline_gen_tokens_per_s or ev.base_tps,
        baseline_gen_tokens_per_s=best.baseline_gen_tokens_per_s or ev.base_tps,
        speedup=1.0,
        speedup_ci_low=None,
        speedup_ci_high=None,
        best_speculative=best.candidate,
        best_speculative_speedup=best.speedup,
        break_even=ev.break_even,
        # no lines where they would say nothing or contradict the sentence: a run that drafted nothing is
        # the model alone, and screening figures taken while the model's speed varied are not evidence
        per_category=() if best.acceptance is None or unsteady else per_category(best, ev.categories),
        lossless=None,
        comparisons=ev.comparisons,
        pairs=len(best.pairs),
        kind=f"alone_{kind}",
        named=(best.candidate.label,),
    )
    return decision.with_sentences([Sentence(Slot.HEADLINE, f"alone.{kind}", params), *_mix(best, outcome.mix)])


def _why_alone(best: Comparison, ev: _Evidence, outcome: SearchOutcome) -> tuple[str, dict[str, Any]]:
    """Why the best comparison does not win, as ``(kind, the sentence's params)``."""
    params: dict[str, Any] = {"label": best.candidate.label, "candidate": best.candidate.to_json(),
                              "figures": figures(best), "acceptance": _acceptance(best, ev.break_even)}
    look, sp = best.look, best.speedup or 0.0
    if best.paired and look is not None and look.verdict == "inconclusive" and sp > 1.0 + outcome.min_gain:
        cost = _pair_cost_s(best, outcome.measurements)
        need = look.pairs_needed
        more = (need - len(best.pairs)) * cost if need is not None and cost is not None and need > len(best.pairs) \
            else None
        return "not_enough_evidence", {**params, "alpha": outcome.alpha, "pairs_needed": need if more is not None
                                       else None, "more_s": more}
    if not best.paired and outcome.baseline_unsteady:
        return "unsteady", {**params, "acceptance": None}
    if sp < 1.0 and (not best.paired or (look is not None and look.high is not None and look.high < 1.0)):
        return "slower", params
    if not best.paired:
        return "screening_only", params
    return "within_noise", {**params, "min_gain": outcome.min_gain}


def _acceptance(best: Comparison, break_even: Sequence[BreakEven]) -> dict[str, Any] | None:
    """The best candidate's acceptance and break-even on this machine, ``None`` when it drafted nothing."""
    if best.acceptance is None:
        return None
    be = next((b for b in break_even if b.candidate == best.candidate), None)
    return {"acceptance": best.acceptance, "never_pays": be is not None and be.never_pays,
            "break_even": be.break_even_acceptance if be is not None else None}


def _mix(c: Comparison, mix: Mix | None) -> list[Sentence]:
    s = mix_sentence(c, mix)
    return [s] if s is not None else []


def mix_sentence(c: Comparison, mix: Mix | None = None, noise: float = MIX_NOISE) -> Sentence | None:
    """The sentence on the served mix behind ``c``'s figures (words: ``tuner.calibration.wording``), e.g.
    "Over a served mix of 50 % long-context requests (the long-context share setting): short requests
    1.40×, long-context requests 1.05×."; the two speedups only when they differ by more than ``noise``
    (relative). ``None`` when no long-context request was compared and no share was set; with a share set
    but no long request compared, says the share could not be applied."""
    if c.long_speedup is None:
        if mix is not None and mix.long_share:
            return Sentence(Slot.MIX, "mix.not_applied", {"share": mix.long_share})
        return None
    if c.short_speedup is None:
        return Sentence(Slot.MIX, "mix.all_long", {})
    s, lg = c.short_speedup, c.long_speedup
    split = {"short": s, "long": lg, "differ": s > 0 and abs(lg / s - 1.0) > noise}
    if c.share_set:
        return Sentence(Slot.MIX, "mix.share", {"share": c.long_share, **split})
    # the compared requests' own mix, every request weighing the same: not the prompt set's share when a
    # long prompt went unmeasured (the trial read "17 % … (the prompt set's own share)" for 2 of 7)
    n_long = sum(1 for x in c.candidate_samples if (mix or Mix()).is_long(x))
    return Sentence(Slot.MIX, "mix.compared", {"share": c.long_share, "n_long": n_long, "requests": c.requests,
                                               **split})


def _chain_rule(w: Comparison, winners: Sequence[Comparison], outcome: SearchOutcome
                ) -> tuple[Comparison, Sentence | None]:
    """A chained candidate (several types in one ``--spec-type``) that came out fastest is served only
    when its pairs show it faster than the best single-type winner beyond noise
    (:func:`tuner.calibration.sequential.contrast` of their request-level looks, pooled with the requests the two
    ran head to head where they did — :func:`tuner.calibration.pairing.head_to_head` —: the low end of chain ÷
    single above ``1 +`` :data:`~tuner.calibration.sequential.CHAIN_MIN_GAIN`, i.e. above 1); otherwise the simpler
    candidate is served. Both must already have passed the
    sequential test against the baseline (``winners``). Returns ``(served comparison, sentence)``; the
    sentence is ``None`` when no chain was involved."""
    if not w.candidate.is_chained:
        return w, None
    singles = [c for c in winners if not c.candidate.is_chained]
    if not singles:
        return w, None
    single = max(singles, key=lambda c: c.speedup or 0.0)
    assert w.look is not None and single.look is not None  # both passed the sequential test
    min_gain = CHAIN_MIN_GAIN
    direct = head_to_head(outcome.measurements, w.candidate, single.candidate, outcome.mix, outcome.layout)
    look = contrast_looks(w.look, single.look, min_gain, outcome.alpha, direct)
    contrast: dict[str, Any] | None = None
    if look.mean_ratio is not None and look.low is not None and look.high is not None:
        contrast = {"mean": look.mean_ratio, "low": look.low, "high": look.high,
                    "head_to_head": direct.n if direct is not None else 0}
    if look.verdict == "faster":
        return w, Sentence(Slot.EVIDENCE, "evidence.chain_faster", {
            "single": single.candidate.label, "contrast": contrast, "min_gain": min_gain})
    return single, Sentence(Slot.EVIDENCE, "evidence.chain_not_faster", {
        "chain": w.candidate.label, "chain_speedup": w.speedup, "single": single.candidate.label,
        "contrast": contrast, "min_gain": min_gain})


def _merged(measurements: Sequence[Measurement], c: Candidate) -> Measurement | None:
    out = None
    for m in measurements:
        if m.candidate.key == c.key and m.ok:
            out = m if out is None else out.merged(m)
    return out


def per_category(c: Comparison, categories: Sequence[str] = ()) -> tuple[CategoryResult, ...]:
    """Per-category lines of comparison ``c``: the same requests as its overall figure, grouped.

    The candidate's and the baseline's samples of ``c`` are aligned (the same (prompt, repetition) key
    at each position), so each line compares like with like and the lines pool to the overall figure
    (with the served mix's weights when ``c`` was weighted to a long-context share: each line itself is
    unweighted, every request of one category being of one kind).
    ``categories`` (the baseline's categories) that ``c`` never reached (it was stopped early) are
    listed with ``speedup`` ``None``. Empty when the prompt set has no categories.
    """
    cats: dict[str, tuple[list[Sample], list[Sample]]] = {str(k): ([], []) for k in categories}
    for cand, base in zip(c.candidate_samples, c.baseline_samples):
        if cand.category is None:
            continue
        pair = cats.setdefault(str(cand.category), ([], []))
        pair[0].append(base)
        pair[1].append(cand)
    out = []
    for cat, (bs, cs) in cats.items():
        b_tps = pooled_tokens_per_s(bs)
        c_tps = pooled_tokens_per_s(cs)
        dn = sum(s.draft_n or 0 for s in cs)
        acc = sum(s.draft_n_accepted or 0 for s in cs) / dn if dn else None
        out.append(CategoryResult(cat, b_tps, c_tps, (c_tps / b_tps) if (c_tps and b_tps) else None, acc,
                                  candidate_label=c.candidate.label, paired_requests=len(cs)))
    return tuple(out)




__all__ = [
    "BreakEven",
    "CategoryResult",
    "Decision",
    "MIN_GAIN",
    "break_even_acceptance",
    "decide",
    "figures",
    "mix_sentence",
    "per_category",
]
