"""The decision: which candidate to serve, with statistics, or "no speculation" with the reason.

DESIGN.md "Calibration method" step 6. A speculative candidate wins only when its paired rounds
against the baseline (launches adjacent in time, the same requests on both sides:
``tuner.calibration.pairing``) pass the sequential test: the lower bound of the ratio, at the test's
error level (5 % in all, spent over every look), must exceed ``1 + min_gain``. Otherwise the answer is
"no speculation", with the reason in plain words — including "the evidence was not enough" when the
budget ran out while the test was still inconclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .candidates import Candidate
from .outcome import SearchOutcome
from .pairing import (
    ALPHA,
    FINALISTS,
    MAX_PAIRS,
    MIN_GAIN,
    Comparison,
    Mix,
    compare,
    contrast_test,
    pooled_tokens_per_s,
)
from .results import Measurement, Sample

MIX_NOISE = 0.05
"""Short and long-context speedups that differ by more than this (relative) are stated separately (the
same bar as the per-category depth sentence, ``tuner.calibration.report.describe_depth``)."""



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

    def describe(self) -> str:
        """Plain words, e.g. ``"acceptance 41 %, break-even 58 %"`` or
        ``"acceptance 5 %, would not pay even at 100 % acceptance"``."""
        acc = "acceptance unknown" if self.acceptance is None else f"acceptance {_fmt_pct(self.acceptance)}"
        if self.never_pays:
            return f"{acc}, would not pay even at 100 % acceptance"
        if self.break_even_acceptance is None:
            return f"{acc}, break-even unknown"
        if self.break_even_acceptance < 0.005:
            return f"{acc}, break-even 0 % (its verification steps cost no more than the baseline's tokens)"
        return f"{acc}, break-even {_fmt_pct(self.break_even_acceptance)}"

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
        reason: the decision in plain words.
        best_speculative: the fastest speculative candidate that ran correctly, even when it lost.
        best_speculative_speedup: its speedup (``None`` when none ran).
        break_even: one entry per draft model / speculation type.
        per_category: the winner (or, for "no speculation", the best speculative candidate) vs the
            baseline per prompt category, on the requests both ran (see :func:`per_category`).
        lossless: the winner's lossless check (``None`` for the baseline).
        comparisons: one pooled :class:`~tuner.calibration.pairing.Comparison` per speculative
            candidate (paired ones first, then by speedup): the figures the chart shows.
        pairs: adjacent pairs behind the quoted speedup (0 = screening only).
        busy_note: what the load watcher saw, when the machine was busy (``None`` otherwise).
    """

    winner: Candidate
    gen_tokens_per_s: float | None
    baseline_gen_tokens_per_s: float | None
    speedup: float
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    reason: str
    best_speculative: Candidate | None = None
    best_speculative_speedup: float | None = None
    break_even: tuple[BreakEven, ...] = ()
    per_category: tuple[CategoryResult, ...] = ()
    lossless: bool | None = None
    comparisons: tuple[Comparison, ...] = ()
    pairs: int = 0
    busy_note: str | None = None

    @property
    def no_speculation(self) -> bool:
        """True when the answer is to run the target alone."""
        return self.winner.is_baseline

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (the profile's ``decision`` and the CLI's ``--json`` detail)."""
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


def divergence_text(m: Measurement) -> str:
    """Where ``m``'s output first differed from the baseline's, in words (empty when it never did).

    The first divergence in measurement order, 1-based prompt and repetition numbers, 0-based character
    offset in the generated text. On CPUs and GPUs the target's batched verification of drafted tokens
    can flip a near-tie of the greedy choice, so this is reported, not treated as a failure (DESIGN.md
    "Calibration method" step 4).
    """
    if not m.divergences:
        return ""
    d = m.divergences[0]
    more = len(m.divergences) - 1
    return (f"Its output first differed from the target alone's at prompt {d.prompt_index + 1}, repetition "
            f"{d.repetition + 1}, character {d.char_offset}"
            + (f" ({more} more request{'s' if more != 1 else ''} differed)" if more else "")
            + "; batched verification can flip a near-tie of the greedy choice")


def _fmt_pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.0f} %"


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


def _figures_text(c: Comparison, with_tokens_per_s: bool = True) -> str:
    """The pooled figures of a comparison, e.g. ``"1.45× over 6 adjacent pairs (30 requests, each run by
    both sides; sequential-test interval 1.31–1.60×): 145.0 vs 100.0 tokens/s"``; without
    ``with_tokens_per_s`` the closing tokens/s figures are left out (the sentence before gave them)."""
    sp = c.speedup or 0.0
    figs = f": {c.gen_tokens_per_s or 0.0:.1f} vs {c.baseline_gen_tokens_per_s or 0.0:.1f} tokens/s" \
        if with_tokens_per_s else ""
    each = ", each run by both sides" if c.requests != 1 else " run by both sides"
    req = f"{c.requests} request{'s' if c.requests != 1 else ''}{each}"
    if c.paired:
        n = len(c.pairs)
        look = c.look
        interval = ""
        if look is not None and look.low is not None and look.high is not None:
            if look.decided_at is not None:
                interval = (f"; faster beyond noise at the sequential test's look after {look.decided_at} pairs, "
                            f"interval {look.low:.2f}–{look.high:.2f}×")
            else:
                interval = f"; sequential-test interval {look.low:.2f}–{look.high:.2f}×"
        return f"{sp:.2f}× over {n} adjacent pair{'s' if n != 1 else ''} ({req}{interval}){figs}"
    return f"{sp:.2f}× on the same requests in screening runs, not adjacent in time ({req}){figs}"


def plain_tps(tps: float | None) -> str:
    """Tokens/s for the plain first sentence: whole numbers from 100 up, one decimal below
    (``738.4`` → ``"738"``, ``7.44`` → ``"7.4"``)."""
    v = tps or 0.0
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def plain_label(c: Candidate) -> str:
    """What a candidate does, in the user's words (the decision's first sentence), e.g. ``"the draft
    model draft-good.gguf, guessing up to 4 tokens ahead"``, ``"n-gram lookup (ngram-simple, which
    reuses spans of the prompt and the answer so far)"``; the baseline is ``"the model alone"``."""
    if c.is_baseline:
        return "the model alone"
    types = c.spec_types
    ngram = next((t for t in types if t.startswith("ngram")), None)
    ahead = f", guessing up to {c.n_max} tokens ahead" if c.n_max else ""
    if "draft-mtp" in types:
        out = f"the model's own multi-token prediction (MTP){ahead}"
    elif c.draft_path:
        out = f"the draft model {Path(c.draft_path).name}{ahead}"
    elif ngram is not None:
        return f"n-gram lookup ({ngram}, which reuses spans of the prompt and the answer so far)"
    else:
        out = c.label
    return out + (f", with n-gram lookup ({ngram})" if ngram is not None else "")


def _unmeasured_text(unmeasured: Sequence[Candidate]) -> str:
    """``"the time budget was spent before ngram-simple, … were measured (a larger budget measures them)"``."""
    names = ", ".join(c.label for c in unmeasured[:4]) + (" and others" if len(unmeasured) > 4 else "")
    return (f"the time budget was spent before {names} {'was' if len(unmeasured) == 1 else 'were'} measured "
            "(a larger budget measures them: re-tune with it, --force on the command line)")


def _never_text(never: Sequence[Measurement]) -> str:
    """The types that ran but never drafted, named once, with their shared reason stated once, e.g.
    ``"ngram-mod, ngram-simple never drafted at the served sampling (…); no speedup is possible"``."""
    def rest_of(m: Measurement) -> str | None:
        _, sep, rest = (m.error or "").partition(" never drafted ")
        if not sep:
            return None
        # the sampling settings are named once, in the reason's "Measured with …" sentence
        if m.no_drafts_at:
            rest = rest.replace(f"at the served sampling ({m.no_drafts_at})", "at these sampling settings", 1)
        return rest

    rests = [rest_of(m) for m in never]
    if any(r is None for r in rests):
        return "; ".join(f"{m.candidate.label}: {m.error}" for m in never)
    if len(set(rests)) == 1:  # one shared reason: stated once
        return f"{', '.join(m.candidate.label for m in never)} never drafted {rests[0]}"
    return "; ".join(f"{m.candidate.label} never drafted {r}" for m, r in zip(never, rests))


def decide(
    measurements: Sequence[Measurement],
    min_gain: float = MIN_GAIN,
    seed: int = 12345,
    unmeasured: Sequence[Candidate] = (),
    alpha: float = ALPHA,
    max_pairs: int = MAX_PAIRS,
    finalists: int = FINALISTS,
    busy_note: str | None = None,
    mix: Mix | None = None,
    baseline_unsteady: bool = False,
) -> Decision:
    """Pick the winner among measured candidates, or "no speculation".

    Only a candidate with adjacent pairs (``tuner.calibration.pairing``: the search's paired rounds,
    A B B A) whose sequential test says "faster" (the lower bound clears ``1 + min_gain`` at the test's
    error level) can win; among those, the highest pooled speedup — except that a chained candidate wins
    over the best single-type one only when faster than it beyond noise (:func:`_chain_rule`). A
    candidate stopped early as a clear loser, or measured only in probe/refine launches, is never
    eligible: its screening comparison (same requests, not adjacent in time) is reported, never
    served. Every figure in the reason, the chart rows (:attr:`Decision.comparisons`) and the
    per-category lines comes from one
    :class:`~tuner.calibration.pairing.Comparison` per candidate.

    Args:
        measurements: every measurement of the sweep, in launch order (pairing needs the order).
            Exactly one candidate must be the baseline (``spec_type == "none"``).
        min_gain: the bar is ``1 + min_gain``.
        seed: unused (kept for callers of the former bootstrap; the decision is deterministic).
        unmeasured: speculative candidates the search skipped for lack of time (named in the reason
            when nothing speculative was measured).
        alpha, max_pairs, finalists: the sequential test's error and how it is spent
            (:func:`tuner.calibration.pairing.sequential_test`).
        busy_note: a sentence about the machine's load during the sweep, appended to the reason.
        mix: the served share of long-context requests (:class:`~tuner.calibration.pairing.Mix`): every
            pooled figure, pair ratio and so the pick is weighted to it, and the reason states the share
            (and the short and long-context speedups when they differ by more than :data:`MIX_NOISE`).
            ``None`` = every request weighs the same.
        baseline_unsteady: the model alone measured inconsistently across launches
            (``Search.baseline_unsteady``): a "no speculation" that rests on screening comparisons then says
            they are not evidence either way, instead of "slower" and a break-even.

    Raises:
        ValueError: no successful baseline measurement.
    """
    del seed
    ok_by_key: dict[tuple, Candidate] = {}
    failed_by_key: dict[tuple, Measurement] = {}
    baseline: Measurement | None = None
    for m in measurements:
        k = m.candidate.key
        if not m.ok:
            failed_by_key.setdefault(k, m)
            continue
        if m.candidate.is_baseline:
            if m.superseded is None:  # a disturbed launch measured again is never the model's speed
                baseline = baseline.merged(m) if baseline is not None else m
        else:
            ok_by_key.setdefault(k, m.candidate)
    if baseline is None or not baseline.gen_tokens_per_s:
        raise ValueError("no successful baseline measurement: the target alone could not be measured")
    base_tps = float(baseline.gen_tokens_per_s)
    tail = (" " + busy_note.strip()) if busy_note else ""

    comps: list[Comparison] = []
    for c in ok_by_key.values():
        cmp_ = compare(measurements, c, min_gain, alpha, max_pairs, finalists, mix=mix)
        if cmp_ is not None and cmp_.speedup:
            comps.append(cmp_)
    comps.sort(key=lambda x: (not x.paired, -(x.speedup or 0.0)))
    failed = [m for k, m in failed_by_key.items() if k not in ok_by_key and not m.candidate.is_baseline]
    base_cats = sorted({str(s.category) for s in baseline.samples if s.category is not None})

    # Break-even per draft model / speculation type: the best-compared candidate of each group, on the
    # requests of its comparison.
    groups: dict[str, Comparison] = {}
    for cmp_ in comps:
        g = cmp_.candidate.draft_path or cmp_.candidate.spec_type
        if g not in groups or (cmp_.speedup or 0) > (groups[g].speedup or 0):
            groups[g] = cmp_
    break_even = tuple(
        BreakEven.of(Measurement(c.candidate, samples=c.candidate_samples), c.baseline_gen_tokens_per_s or base_tps)
        for c in groups.values()
    )

    if not comps:
        never = [m for m in failed if m.no_drafts_at]
        broken = [m for m in failed if not m.no_drafts_at]
        if failed and not broken and unmeasured:
            # the measured ones proposed no token, the rest never ran: say both, not "none drafted"
            why = ("no measured speculative configuration drafted any token on these prompts: " + _never_text(never)
                   + "; " + _unmeasured_text(unmeasured))
        elif failed and not broken:
            # they ran fine but proposed no token: a finding about these prompts, not a failure of the run
            why = "no speculative configuration drafted any token on these prompts: " + _never_text(never)
        elif failed:
            why = "no speculative configuration ran correctly: " + "; ".join(
                f"{m.candidate.label}: {m.error}" for m in (broken + never)[:3])
        elif unmeasured:
            why = "no speculative configuration was measured: " + _unmeasured_text(unmeasured)
        else:
            why = "no speculative configuration was available to measure (no compatible draft, no n-gram type)"
        return Decision(baseline.candidate, base_tps, base_tps, 1.0, None, None,
                        "No speculation: " + why + "." + tail, break_even=break_even, busy_note=busy_note)

    winners = [c for c in comps if c.paired and c.look is not None and c.look.verdict == "faster"]
    if winners:
        w = max(winners, key=lambda c: c.speedup or 0.0)
        w, chain_text = _chain_rule(w, winners, min_gain, alpha)
        wm = _merged(measurements, w.candidate)
        reason = (f"Serving {plain_label(w.candidate)}: about {w.speedup or 1.0:.1f}× as fast as the model "
                  f"alone ({plain_tps(w.gen_tokens_per_s)} vs {plain_tps(w.baseline_gen_tokens_per_s)} tokens/s "
                  f"on these prompts). The evidence: {w.candidate.label} against no speculation, "
                  + _figures_text(w, with_tokens_per_s=False))
        if w.acceptance is not None:
            reason += f", draft acceptance {_fmt_pct(w.acceptance)}"
        reason += "." + chain_text
        if wm is not None and wm.divergences:
            reason += " " + divergence_text(wm) + "."
        reason += mix_text(w, mix)
        return Decision(
            winner=w.candidate,
            gen_tokens_per_s=w.gen_tokens_per_s,
            baseline_gen_tokens_per_s=w.baseline_gen_tokens_per_s,
            speedup=float(w.speedup or 1.0),
            speedup_ci_low=w.look.low if w.look else None,
            speedup_ci_high=w.look.high if w.look else None,
            reason=reason + tail,
            best_speculative=w.candidate,
            best_speculative_speedup=w.speedup,
            break_even=break_even,
            per_category=per_category(w, base_cats),
            lossless=wm.lossless if wm is not None else None,
            comparisons=tuple(comps),
            pairs=len(w.pairs),
            busy_note=busy_note,
        )

    # No speculation: explain with the best comparison (paired first: they are the better evidence).
    best = comps[0]
    be = next((b for b in break_even if b.candidate == best.candidate), None)
    figures = _figures_text(best)
    label = best.candidate.label
    if best.paired and best.look is not None and best.look.verdict == "inconclusive" and (best.speedup or 0) > 1.0 + min_gain:
        reason = (f"No speculation: the evidence was not enough to serve {label} ({figures}); "
                  f"a paired test at a {100 * alpha:.0f} % error rate needs more pairs")
        cost = _pair_cost_s(best, measurements)
        need = best.look.pairs_needed
        if need is not None and cost is not None and need > len(best.pairs):
            more = (need - len(best.pairs)) * cost
            reason += f": about {need} pairs in all, about {more:.0f} s more (a longer sweep would settle it)"
        else:
            reason += " (a longer sweep, on a quieter machine, would settle it)"
    elif not best.paired and baseline_unsteady:
        reason = (f"No speculation: no speculative configuration was confirmed in paired rounds; the screening "
                  f"figures ({label}: {figures}) come from launches minutes apart while the model's own speed "
                  "varied, so they are not evidence either way")
    elif (best.speedup or 0.0) < 1.0 and (not best.paired or (best.look is not None and best.look.high is not None
                                                               and best.look.high < 1.0)):
        reason = f"No speculation: the best speculative configuration ({label}) was slower than the target alone ({figures})"
    elif not best.paired:
        reason = (f"No speculation: no speculative configuration was confirmed in paired rounds; the best "
                  f"screening result was {label} ({figures}), which is not evidence enough to serve it")
    else:
        reason = (f"No speculation: the best speculative configuration ({label}) was within the measurement "
                  f"noise of the target alone ({figures}; needs more than {1 + min_gain:.2f}×)")
    if best.acceptance is not None and not (baseline_unsteady and not best.paired):
        reason += f"; it reached {_fmt_pct(best.acceptance)} draft acceptance"
        if be is not None and be.never_pays:
            reason += ", and even 100 % acceptance would not pay on this machine"
        elif be is not None and be.break_even_acceptance is not None and be.break_even_acceptance >= 0.005:
            reason += f", break-even on this machine is about {_fmt_pct(be.break_even_acceptance)}"
    reason += "." + mix_text(best, mix)
    return Decision(
        winner=baseline.candidate,
        gen_tokens_per_s=best.baseline_gen_tokens_per_s or base_tps,
        baseline_gen_tokens_per_s=best.baseline_gen_tokens_per_s or base_tps,
        speedup=1.0,
        speedup_ci_low=None,
        speedup_ci_high=None,
        reason=reason + tail,
        best_speculative=best.candidate,
        best_speculative_speedup=best.speedup,
        break_even=break_even,
        # no lines where they would say nothing or contradict the sentence: a run that drafted nothing is
        # the model alone, and screening figures taken while the model's speed varied are not evidence
        per_category=() if best.acceptance is None or (baseline_unsteady and not best.paired)
        else per_category(best, base_cats),
        lossless=None,
        comparisons=tuple(comps),
        pairs=len(best.pairs),
        busy_note=busy_note,
    )


def decide_outcome(outcome: SearchOutcome) -> Decision:
    """:func:`decide` over a sweep's :class:`~tuner.calibration.outcome.SearchOutcome`: its measurements,
    the candidates it left unmeasured, its mix and baseline verdict, with the statistics' settings it ran
    under. The sentence about the machine's load is the report's
    (:func:`tuner.calibration.report.finish_decision`).

    Raises:
        ValueError: no successful baseline measurement.
    """
    return decide(outcome.measurements, min_gain=outcome.min_gain, unmeasured=outcome.unmeasured,
                  alpha=outcome.alpha, max_pairs=outcome.max_pairs, finalists=outcome.finalists, mix=outcome.mix,
                  baseline_unsteady=outcome.baseline_unsteady)


def mix_text(c: Comparison, mix: Mix | None = None, noise: float = MIX_NOISE) -> str:
    """The sentence (with a leading space) on the served mix behind ``c``'s figures, e.g. ``" Over a
    served mix of 50 % long-context requests (the long-context share setting): short requests 1.40×,
    long-context requests 1.05×."``; the two speedups only when they differ by more than ``noise``
    (relative). Empty when no long-context request was compared and no share was set; with a share set
    but no long request compared, says the share could not be applied."""
    if c.long_speedup is None:
        if mix is not None and mix.long_share:
            return (f" No long-context request was compared, so the long-context share of "
                    f"{_fmt_pct(mix.long_share)} could not be applied: the figures are for short requests.")
        return ""
    if c.short_speedup is None:
        return " Every compared request was a long-context one."
    if c.share_set:
        text = f" Over a served mix of {_fmt_pct(c.long_share)} long-context requests (the long-context share setting)"
    else:
        # the compared requests' own mix, every request weighing the same: not the prompt set's share
        # when a long prompt went unmeasured (the trial read "17 % … (the prompt set's own share)" for 2 of 7)
        n_long = sum(1 for s in c.candidate_samples if (mix or Mix()).is_long(s))
        text = (f" Over the compared requests, {n_long} of {c.requests} long-context "
                f"({_fmt_pct(c.long_share)}, every request weighing the same)")
    s, lg = c.short_speedup, c.long_speedup
    if s > 0 and abs(lg / s - 1.0) > noise:
        text += f": short requests {s:.2f}×, long-context requests {lg:.2f}×"
    return text + "."
def _chain_rule(w: Comparison, winners: Sequence[Comparison], min_gain: float,
                alpha: float) -> tuple[Comparison, str]:
    """A chained candidate (several types in one ``--spec-type``) that came out fastest is served only
    when its pairs show it faster than the best single-type winner beyond noise
    (:func:`tuner.calibration.pairing.contrast_test`: the low end of chain ÷ single above
    ``1 + min_gain``); otherwise the simpler candidate is served. Both must already have passed the
    sequential test against the baseline (``winners``). Returns ``(served comparison, sentence)``;
    the sentence (empty when no chain was involved) starts with a space."""
    if not w.candidate.is_chained:
        return w, ""
    singles = [c for c in winners if not c.candidate.is_chained]
    if not singles:
        return w, ""
    single = max(singles, key=lambda c: c.speedup or 0.0)
    look = contrast_test([p.ratio for p in w.pairs if p.ratio > 0], [p.ratio for p in single.pairs if p.ratio > 0],
                         min_gain, alpha)
    figs = ""
    if look.mean_ratio is not None and look.low is not None and look.high is not None:
        figs = f"{look.mean_ratio:.2f}× over their pairs, interval {look.low:.2f}–{look.high:.2f}×"
    if look.verdict == "faster":
        return w, (f" It is faster than the best single type, {single.candidate.label}, beyond noise "
                   f"({figs}; needs more than {1 + min_gain:.2f}×).")
    return single, (f" The chain {w.candidate.label} measured {w.speedup or 0.0:.2f}× but was not faster "
                    f"than {single.candidate.label} beyond noise ({figs or 'too few pairs'}; a chain is served "
                    f"only above {1 + min_gain:.2f}× the best single type), so the simpler configuration is "
                    "served.")


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


def describe_candidate(c: Candidate) -> str:
    """One-line description for tables: label plus the draft's file name."""
    return c.label if not c.draft_path else f"{c.label} ({Path(c.draft_path).parent})"


__all__ = [
    "BreakEven",
    "CategoryResult",
    "Decision",
    "MIN_GAIN",
    "break_even_acceptance",
    "decide",
    "decide_outcome",
    "divergence_text",
    "mix_text",
    "per_category",
]
