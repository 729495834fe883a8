"""The decision: which candidate to serve, with statistics, or "no speculation" with the reason.

DESIGN.md "Calibration method" step 6. A speculative candidate wins only when its speedup over the
baseline (measured in the same sweep) is above 1 by more than the measured noise: the lower end of a
bootstrap 95 % confidence interval of the speedup must exceed ``1 + min_gain``. Otherwise the answer is
"no speculation", with the reason in plain words.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .candidates import Candidate
from .results import Measurement, Sample

MIN_GAIN = 0.03
"""A winner must be at least this much faster than the baseline at the low end of its interval."""

BOOTSTRAP_ROUNDS = 2000


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
    def of(cls, m: Measurement, baseline_gen_tokens_per_s: float) -> "BreakEven":
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


@dataclass(frozen=True)
class Decision:
    """The outcome of a sweep.

    Attributes:
        winner: the chosen candidate; the baseline (``spec_type == "none"``) for "no speculation".
        gen_tokens_per_s: winner's median tokens/s.
        baseline_gen_tokens_per_s: baseline's median tokens/s.
        speedup: winner ÷ baseline (1.0 for the baseline).
        speedup_ci_low: lower end of the 95 % bootstrap interval of the speedup (``None`` = unknown).
        speedup_ci_high: upper end.
        reason: the decision in plain words.
        best_speculative: the fastest speculative candidate that ran correctly, even when it lost.
        best_speculative_speedup: its speedup (``None`` when none ran).
        break_even: one entry per draft model / speculation type.
        per_category: the winner (or, for "no speculation", the best speculative candidate) vs the
            baseline per prompt category, on the requests both ran (see :func:`per_category`).
        lossless: the winner's lossless check (``None`` for the baseline).
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
        }


def _rep_values(m: Measurement) -> list[float]:
    return [v for v in m.rep_gen_tokens_per_s() if v > 0]


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    values = sorted(values)
    n = len(values)
    return values[int((1 - level) / 2 * (n - 1))], values[int((1 + level) / 2 * (n - 1))]


def speedup_interval(
    candidate: Measurement,
    baseline: Measurement,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 12345,
    level: float = 0.95,
) -> tuple[float, float | None, float | None]:
    """Speedup over the baseline and its bootstrap confidence interval.

    A single candidate repetition with a baseline repetition of the same id is compared with that one
    (ratio of the pair, no interval). Paired when the two share at least two repetition ids (the search measures each repetition of a
    finalist next to a baseline repetition with the same prompts, so slow drift of the machine's load
    cancels): the speedup is the median of the per-repetition ratios, and the interval the percentile
    interval of that median over pairs resampled with replacement. Otherwise unpaired: ratio of the
    medians over repetitions, each side resampled independently. With a single repetition on both
    sides there is no noise estimate and the interval is ``(None, None)``.

    Returns:
        ``(speedup, ci_low, ci_high)``.

    Raises:
        ValueError: either side has no samples.
    """
    cr = {k: v for k, v in candidate.rep_gen_tokens_per_s_by_id().items() if v > 0}
    br = {k: v for k, v in baseline.rep_gen_tokens_per_s_by_id().items() if v > 0}
    if not cr or not br:
        raise ValueError("speedup_interval needs samples on both sides")
    rng = random.Random(seed)
    shared = sorted(cr.keys() & br.keys())
    if len(shared) >= 2:
        pairs = [cr[k] / br[k] for k in shared]
        point = statistics.median(pairs)
        meds = [statistics.median([rng.choice(pairs) for _ in pairs]) for _ in range(rounds)]
        lo, hi = _percentiles(meds, level)
        return point, lo, hi
    if len(cr) == 1 and len(shared) == 1:
        # One candidate repetition next to a baseline repetition of the same requests: compare like with
        # like (not with the baseline's median over other repetitions); one pair gives no noise estimate.
        (k,) = shared
        return cr[k] / br[k], None, None
    c = list(cr.values())
    b = list(br.values())
    point = statistics.median(c) / statistics.median(b)
    if len(c) < 2 and len(b) < 2:
        return point, None, None
    ratios = []
    for _ in range(rounds):
        cs = [rng.choice(c) for _ in c]
        bs = [rng.choice(b) for _ in b]
        ratios.append(statistics.median(cs) / statistics.median(bs))
    lo, hi = _percentiles(ratios, level)
    return point, lo, hi


def compared_rates(candidate: Measurement, baseline: Measurement) -> tuple[float, float, int]:
    """The tokens/s of each side over the repetitions :func:`speedup_interval` compared.

    Same pairing rule: with two or more shared repetition ids, the median over those ids on each side;
    with one candidate repetition that the baseline also ran, that pair; otherwise each side's median
    over all its repetitions. Sentences that quote a speedup quote these figures with it, so the
    numbers never contradict the verdict (a noisy baseline's overall median can differ a lot from
    its median over the paired repetitions).

    Returns:
        ``(candidate tokens/s, baseline tokens/s, paired repetitions)``; 0 paired = unpaired medians.

    Raises:
        ValueError: either side has no samples.
    """
    cr = {k: v for k, v in candidate.rep_gen_tokens_per_s_by_id().items() if v > 0}
    br = {k: v for k, v in baseline.rep_gen_tokens_per_s_by_id().items() if v > 0}
    if not cr or not br:
        raise ValueError("compared_rates needs samples on both sides")
    shared = sorted(cr.keys() & br.keys())
    if len(shared) >= 2 or (len(cr) == 1 and len(shared) == 1):
        return (statistics.median(cr[k] for k in shared), statistics.median(br[k] for k in shared),
                len(shared))
    return statistics.median(cr.values()), statistics.median(br.values()), 0


def _comparison_text(sp: float, lo: float | None, hi: float | None, c_tps: float, b_tps: float,
                     n_pairs: int) -> str:
    """The figures the verdict was computed from, e.g. ``"paired speedup 0.91× over 3 repetitions of
    the same requests (95 % interval 0.90–0.92×), medians 418.0 vs 460.0 tokens/s"``."""
    interval = f"95 % interval {lo:.2f}–{hi:.2f}×" if lo is not None and hi is not None else "too few repetitions for a 95 % interval"
    if n_pairs >= 2:
        return (f"paired speedup {sp:.2f}× over {n_pairs} repetitions of the same requests ({interval}), "
                f"medians {c_tps:.1f} vs {b_tps:.1f} tokens/s")
    if n_pairs == 1:
        return f"{sp:.2f}× on one repetition of the same requests ({interval}), {c_tps:.1f} vs {b_tps:.1f} tokens/s"
    return f"{sp:.2f}× ({interval}), medians over all repetitions {c_tps:.1f} vs {b_tps:.1f} tokens/s"


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


def _launches_text(m: Measurement) -> str:
    """Which figures were pooled: the chart's "measured" events show one launch each, the decision
    pools every launch of a candidate (probe, refine and confirm stages)."""
    return ", all its runs pooled" if m.repetitions > 1 else ""


def _fmt_pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.0f} %"


def decide(
    measurements: Sequence[Measurement],
    min_gain: float = MIN_GAIN,
    seed: int = 12345,
    unmeasured: Sequence[Candidate] = (),
) -> Decision:
    """Pick the winner among measured candidates, or "no speculation".

    Args:
        measurements: every measurement of the sweep; launches of the same candidate are pooled.
            Exactly one candidate must be the baseline (``spec_type == "none"``).
        min_gain: the low end of the speedup interval must exceed ``1 + min_gain`` (with a single
            repetition, the point estimate must exceed ``1 + 2 · min_gain``). Among those that clear the
            bar, candidates measured in two or more repetitions are preferred to single-repetition ones.
        seed: bootstrap seed (the decision is deterministic for given measurements).
        unmeasured: speculative candidates the search skipped for lack of time (named in the reason
            when nothing speculative was measured).

    Raises:
        ValueError: no successful baseline measurement.
    """
    pooled: dict[tuple, Measurement] = {}
    failed_by_key: dict[tuple, Measurement] = {}
    for m in measurements:
        k = m.candidate.key
        if not m.ok:
            failed_by_key.setdefault(k, m)
            continue
        pooled[k] = pooled[k].merged(m) if k in pooled else m
    baseline = next((m for m in pooled.values() if m.candidate.is_baseline), None)
    if baseline is None or not baseline.gen_tokens_per_s:
        raise ValueError("no successful baseline measurement: the target alone could not be measured")
    base_tps = float(baseline.gen_tokens_per_s)

    spec_ok = [m for m in pooled.values() if not m.candidate.is_baseline and m.gen_tokens_per_s]
    failed = [m for k, m in failed_by_key.items() if k not in pooled and not m.candidate.is_baseline]

    # Break-even per draft model / speculation type: the best-measured candidate of each group.
    groups: dict[str, Measurement] = {}
    for m in spec_ok:
        g = m.candidate.draft_path or m.candidate.spec_type
        if g not in groups or (m.gen_tokens_per_s or 0) > (groups[g].gen_tokens_per_s or 0):
            groups[g] = m
    # Against the baseline's tokens/s on the repetitions this candidate is compared with (see compared_rates).
    break_even = tuple(BreakEven.of(m, compared_rates(m, baseline)[1]) for m in groups.values())

    if not spec_ok:
        why = "no speculative configuration ran correctly"
        if failed:
            why += ": " + "; ".join(f"{m.candidate.label}: {m.error}" for m in failed[:3])
        elif unmeasured:
            why = ("no speculative configuration was measured: the time budget was spent before "
                   + ", ".join(c.label for c in unmeasured[:4]) + (" and others" if len(unmeasured) > 4 else "")
                   + " (a larger budget measures them)")
        else:
            why = "no speculative configuration was available to measure (no compatible draft, no n-gram type)"
        return Decision(baseline.candidate, base_tps, base_tps, 1.0, None, None, "No speculation: " + why + ".",
                        break_even=break_even)

    scored = []
    for m in spec_ok:
        sp, lo, hi = speedup_interval(m, baseline, seed=seed)
        scored.append((sp, lo, hi, m))
    scored.sort(key=lambda t: t[0], reverse=True)
    best_sp, best_lo, best_hi, best = scored[0]

    per_category = _per_category(best, baseline)

    # Winner: the best point estimate among those whose interval clears the bar.
    def clears(sp: float, lo: float | None) -> bool:
        if lo is None:
            return sp > 1.0 + 2 * min_gain
        return lo > 1.0 + min_gain and sp > 1.0 + min_gain

    winners = [t for t in scored if clears(t[0], t[1])]
    # A candidate measured in several repetitions (a finalist of the confirmation rounds) is preferred to
    # one measured once: a single fast repetition is not evidence enough to beat a confirmed speedup.
    confirmed = [t for t in winners if t[3].repetitions >= 2]
    if confirmed:
        winners = confirmed
    if winners:
        sp, lo, hi, w = winners[0]
        acc = w.acceptance
        w_tps, w_base, n_pairs = compared_rates(w, baseline)
        reason = (
            f"{w.candidate.label} is faster than no speculation: "
            + _comparison_text(sp, lo, hi, w_tps, w_base, n_pairs)
            + _launches_text(w)
        )
        if acc is not None:
            reason += f", draft acceptance {_fmt_pct(acc)}"
        reason += "."
        if w.divergences:
            reason += " " + divergence_text(w) + "."
        return Decision(
            winner=w.candidate,
            gen_tokens_per_s=w_tps,
            baseline_gen_tokens_per_s=w_base,
            speedup=sp,
            speedup_ci_low=lo,
            speedup_ci_high=hi,
            reason=reason,
            best_speculative=w.candidate,
            best_speculative_speedup=sp,
            break_even=break_even,
            per_category=_per_category(w, baseline),
            lossless=w.lossless,
        )

    # No speculation: explain with the best speculative candidate.
    be = next((b for b in break_even if b.candidate == best.candidate), None)
    acc = best.acceptance
    b_tps, b_base, n_pairs = compared_rates(best, baseline)
    comparison = _comparison_text(best_sp, best_lo, best_hi, b_tps, b_base, n_pairs) + _launches_text(best)
    if best_sp < 1.0:
        reason = (
            f"No speculation: the best speculative configuration ({best.candidate.label}) was slower than the "
            f"target alone ({comparison})"
        )
    else:
        reason = (
            f"No speculation: the best speculative configuration ({best.candidate.label}) was within the "
            f"measurement noise of the target alone ({comparison}; needs more than {1 + min_gain:.2f}×)"
        )
    if acc is not None:
        reason += f"; it reached {_fmt_pct(acc)} draft acceptance"
        if be is not None and be.never_pays:
            reason += ", and even 100 % acceptance would not pay on this machine"
        elif be is not None and be.break_even_acceptance is not None and be.break_even_acceptance >= 0.005:
            reason += f", break-even on this machine is about {_fmt_pct(be.break_even_acceptance)}"
    reason += "."
    return Decision(
        winner=baseline.candidate,
        gen_tokens_per_s=base_tps,
        baseline_gen_tokens_per_s=base_tps,
        speedup=1.0,
        speedup_ci_low=None,
        speedup_ci_high=None,
        reason=reason,
        best_speculative=best.candidate,
        best_speculative_speedup=best_sp,
        break_even=break_even,
        per_category=per_category,
        lossless=None,
    )


def _tokens_per_s(samples: Sequence[Sample]) -> float | None:
    """Σ generated tokens ÷ Σ generation time (same rule as ``Measurement.rep_gen_tokens_per_s_by_id``)."""
    if not samples:
        return None
    if all(s.predicted_n and s.predicted_ms for s in samples):
        ms = sum(s.predicted_ms or 0.0 for s in samples)
        if ms > 0:
            return sum(max(1, (s.predicted_n or 1) - 1) for s in samples) / (ms / 1000.0)
    return statistics.fmean(s.gen_tokens_per_s for s in samples)


def per_category(m: Measurement, baseline: Measurement) -> tuple[CategoryResult, ...]:
    """Per-category results of ``m`` against the baseline on the requests both ran.

    Requests are matched on ``(prompt_index, repetition)``: the same prompt text with the same fresh
    prefix (``tuner.calibration.measure.repetition_prompt``). Categories the baseline measured but ``m``
    never reached (it was stopped early) are listed with ``speedup`` ``None``. Empty when the prompt set
    has no categories.
    """
    base_by_key = {(s.prompt_index, s.repetition): s for s in baseline.samples if s.category is not None}
    cats: dict[str, tuple[list[Sample], list[Sample]]] = {}
    for s in base_by_key.values():
        cats.setdefault(str(s.category), ([], []))
    for s in m.samples:
        b = base_by_key.get((s.prompt_index, s.repetition))
        if b is None or s.category is None:
            continue
        pair = cats.setdefault(str(s.category), ([], []))
        pair[0].append(b)
        pair[1].append(s)
    out = []
    for cat, (bs, cs) in cats.items():
        b_tps = _tokens_per_s(bs)
        c_tps = _tokens_per_s(cs)
        dn = sum(s.draft_n or 0 for s in cs)
        acc = sum(s.draft_n_accepted or 0 for s in cs) / dn if dn else None
        out.append(CategoryResult(cat, b_tps, c_tps, (c_tps / b_tps) if (c_tps and b_tps) else None, acc,
                                  candidate_label=m.candidate.label, paired_requests=len(cs)))
    return tuple(out)


_per_category = per_category


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
    "divergence_text",
    "per_category",
    "speedup_interval",
]
