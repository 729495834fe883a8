"""Sound comparisons: ratios over the same requests, from launches adjacent in time, and the
sequential stopping rule that decides when a paired comparison is conclusive.

Terms (DESIGN.md "Calibration method" step 6):

* **request key** ``(prompt_index, repetition)``: the same prompt text with the same fresh prefix
  (``tuner.calibration.measure.repetition_prompt``) for every candidate.
* **paired rounds** (the search's ``confirm`` stage): launches alternate baseline / candidate, two
  repetitions per launch, ``A B B A A B B A …`` in time: each candidate repetition runs right after
  (or right before) the baseline repetition with the same id, only a model load apart. A candidate
  launch at position ``i`` of the sweep's measurement list is paired with the baseline launches at
  ``i − 1`` and ``i + 1``: for every repetition both ran, over exactly the same prompts, one
  :class:`Pair`. Probe and refine launches are never paired (the baseline they would be compared
  with ran minutes earlier, under whatever load the machine had then).
* **pair ratio** ``r_j``: the candidate's tokens/s on that repetition's requests ÷ the baseline's on
  the same requests (Σ generated tokens ÷ Σ generation time on each side).
* **speedup**: the pooled ratio over every paired request — the candidate's Σ tokens ÷ Σ time over
  all its paired requests, ÷ the baseline's over the same requests. The chart, the decision sentence
  and the per-category lines all quote these pooled figures (:class:`Comparison`), so they agree.

Sequential stopping rule (:func:`sequential_test`), with its error rate
-------------------------------------------------------------------------
After each new pair, with ``n ≥ MIN_PAIRS`` pairs, a one-sided t test on ``x_j = ln r_j`` of
H0: ``E[x] ≤ ln(1 + min_gain)``. Looks are allowed at ``n = MIN_PAIRS … max_pairs`` for each of at
most ``finalists`` candidates; the error is spent equally over all those looks (Bonferroni):
``α_look = α ÷ (looks × finalists)``. The union bound makes the total probability of declaring any
candidate faster when none is more than ``min_gain`` faster at most ``α`` (5 % by default) — for any
rule of when to stop, continue or switch candidates, as long as "faster" is only declared at a look
whose own test passes. Assumption: the log pair ratios are independent and normal (adjacent pairs
cancel slow drift of the machine's load; what remains is treated as noise). A look whose upper
bound is below the bar ends the candidate's rounds as "not faster" (futility; that error, missing a
real gain, is not bounded by α). Before ``MIN_PAIRS`` pairs no verdict is given: a bootstrap of 2–4
pairs says nothing about the noise.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .candidates import Candidate
from .results import Measurement, Sample

ALPHA = 0.05
"""Total one-sided error of the sequential test: P(a candidate declared faster | none is)."""
MIN_PAIRS = 3
"""No verdict before this many pairs (a t test on 2 pairs has 1 degree of freedom)."""
MAX_PAIRS = 6
"""Looks per finalist: at n = MIN_PAIRS … MAX_PAIRS pairs."""
FINALISTS = 2
"""Candidates whose paired rounds share the error ``ALPHA``."""

RequestKey = tuple[int, int]
"""``(prompt_index, repetition)``."""


def sample_tokens_and_s(s: Sample) -> tuple[float, float]:
    """``(generated tokens, generation seconds)`` of one request, the rule of
    ``Measurement.rep_gen_tokens_per_s_by_id``: ``predicted_n − 1`` tokens over ``predicted_ms`` (the
    first token comes with the prompt); without timings 1 token over ``1 / gen_tokens_per_s`` s."""
    if s.predicted_n and s.predicted_ms:
        return float(max(1, s.predicted_n - 1)), s.predicted_ms / 1000.0
    return 1.0, 1.0 / max(s.gen_tokens_per_s, 1e-9)


def pooled_tokens_per_s(samples: Sequence[Sample]) -> float | None:
    """Σ tokens ÷ Σ seconds over ``samples`` (see :func:`sample_tokens_and_s`); ``None`` when empty."""
    if not samples:
        return None
    toks = secs = 0.0
    for s in samples:
        t, d = sample_tokens_and_s(s)
        toks += t
        secs += d
    return toks / secs if secs > 0 else None


@dataclass(frozen=True)
class Pair:
    """One repetition run by a candidate and, adjacent in time, by the baseline, on the same prompts.

    Attributes:
        repetition: the repetition id both ran.
        candidate_launch: position of the candidate's launch in the sweep's measurement list.
        baseline_launch: position of the baseline launch next to it (``candidate_launch ± 1``).
        candidate_samples: the candidate's requests of this repetition, by prompt index.
        baseline_samples: the baseline's requests of the same keys, same order.
    """

    repetition: int
    candidate_launch: int
    baseline_launch: int
    candidate_samples: tuple[Sample, ...]
    baseline_samples: tuple[Sample, ...]

    @property
    def candidate_tokens_per_s(self) -> float:
        """Candidate's Σ tokens ÷ Σ time over the pair's requests."""
        return pooled_tokens_per_s(self.candidate_samples) or 0.0

    @property
    def baseline_tokens_per_s(self) -> float:
        """Baseline's Σ tokens ÷ Σ time over the same requests."""
        return pooled_tokens_per_s(self.baseline_samples) or 0.0

    @property
    def ratio(self) -> float:
        """Candidate ÷ baseline tokens/s on this pair."""
        b = self.baseline_tokens_per_s
        return self.candidate_tokens_per_s / b if b > 0 else 0.0


def _by_rep(m: Measurement) -> dict[int, dict[int, Sample]]:
    out: dict[int, dict[int, Sample]] = {}
    for s in m.samples:
        out.setdefault(s.repetition, {})[s.prompt_index] = s
    return out


def adjacent_pairs(measurements: Sequence[Measurement], candidate: Candidate) -> list[Pair]:
    """Every :class:`Pair` of ``candidate`` in a sweep, in time order.

    Args:
        measurements: the sweep's measurements in launch order (``Search.measurements``; a profile's
            ``evidence`` keeps that order). Each element is one launch.
        candidate: the speculative candidate (matched on ``Candidate.key``).

    Only ``confirm``-stage launches that ran correctly and were not stopped early are paired, each
    with the ``confirm``-stage baseline launch right before or after it; a repetition forms a pair
    only when both sides ran exactly the same prompts for it. A baseline repetition pairs with at
    most one candidate repetition.
    """
    pairs: list[Pair] = []
    used: set[tuple[int, int]] = set()
    for i, m in enumerate(measurements):
        if m.candidate.key != candidate.key or m.stage != "confirm" or not m.ok or m.stopped_early:
            continue
        mine = _by_rep(m)
        for j in (i - 1, i + 1):
            if not 0 <= j < len(measurements):
                continue
            b = measurements[j]
            if not b.candidate.is_baseline or b.stage != "confirm" or not b.ok:
                continue
            theirs = _by_rep(b)
            for rep in sorted(mine.keys() & theirs.keys()):
                if (j, rep) in used or mine[rep].keys() != theirs[rep].keys():
                    continue
                used.add((j, rep))
                keys = sorted(mine[rep])
                pairs.append(Pair(rep, i, j, tuple(mine[rep][k] for k in keys), tuple(theirs[rep][k] for k in keys)))
    pairs.sort(key=lambda p: (min(p.candidate_launch, p.baseline_launch), p.repetition))
    return pairs


# ---- Student's t (no scipy): the CDF for integer degrees of freedom, and its quantile ----------------

def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with ``df ≥ 1`` integer degrees of freedom (closed form of
    Abramowitz & Stegun 26.7.3/26.7.4 for ``A(t|ν) = P(|T| < t)``)."""
    if df < 1:
        raise ValueError("df must be ≥ 1")
    x = abs(t)
    theta = math.atan(x / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        total = 0.0
        if df > 1:
            term = c
            total = term
            for k in range(3, df - 1, 2):
                term *= c * c * (k - 1) / k
                total += term
            total *= s
        a = 2.0 / math.pi * (theta + total)
    else:
        term = 1.0
        total = 1.0
        for k in range(2, df - 1, 2):
            term *= c * c * (k - 1) / k
            total += term
        a = s * total
    a = min(1.0, max(0.0, a))
    return 0.5 + 0.5 * a if t >= 0 else 0.5 - 0.5 * a


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom (bisection on
    :func:`t_cdf`, to 1e-9)."""
    if not 0.5 < p < 1.0:
        raise ValueError("p must be in (0.5, 1)")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * max(1.0, hi):
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class Look:
    """The sequential test after ``n`` pairs.

    Attributes:
        n: pairs so far.
        verdict: ``"faster"`` (the lower bound clears ``1 + min_gain``), ``"not faster"`` (the upper
            bound is below it), ``"inconclusive"`` (neither, or fewer than ``MIN_PAIRS`` pairs).
        mean_ratio: geometric mean of the pair ratios (``exp`` of the mean log ratio).
        low: lower bound of the ratio at the look's level (``None`` below 2 pairs).
        high: upper bound.
        alpha_look: one-sided error spent at this look.
        pairs_needed: at the current mean and spread, about how many pairs in all would make the
            test conclude "faster" (``None`` when the mean gain is not above the bar, or unknown).
    """

    n: int
    verdict: str
    mean_ratio: float | None
    low: float | None
    high: float | None
    alpha_look: float
    pairs_needed: int | None = None


def alpha_per_look(alpha: float = ALPHA, max_pairs: int = MAX_PAIRS, finalists: int = FINALISTS) -> float:
    """Bonferroni share of ``alpha`` for one look (see the module docstring)."""
    looks = max(1, max_pairs - MIN_PAIRS + 1)
    return alpha / (looks * max(1, finalists))


def sequential_test(
    ratios: Sequence[float],
    min_gain: float,
    alpha: float = ALPHA,
    max_pairs: int = MAX_PAIRS,
    finalists: int = FINALISTS,
) -> Look:
    """One look of the sequential rule over the pair ratios so far (module docstring).

    Args:
        ratios: pair ratios (candidate ÷ baseline tokens/s), > 0.
        min_gain: the bar is ``1 + min_gain``.
        alpha, max_pairs, finalists: the error and how it is spent.

    Raises:
        ValueError: a ratio ≤ 0.
    """
    if any(r <= 0 for r in ratios):
        raise ValueError("pair ratios must be positive")
    a_look = alpha_per_look(alpha, max_pairs, finalists)
    n = len(ratios)
    if n == 0:
        return Look(0, "inconclusive", None, None, None, a_look)
    xs = [math.log(r) for r in ratios]
    mean = statistics.fmean(xs)
    if n < 2:
        return Look(n, "inconclusive", math.exp(mean), None, None, a_look)
    sd = statistics.stdev(xs)
    se = sd / math.sqrt(n)
    q = t_quantile(1.0 - a_look, n - 1)
    lo, hi = mean - q * se, mean + q * se
    bar = math.log(1.0 + min_gain)
    verdict = "inconclusive"
    if n >= MIN_PAIRS:
        if lo > bar:
            verdict = "faster"
        elif hi < bar:
            verdict = "not faster"
    needed = None
    if mean > bar:
        for k in range(max(n, MIN_PAIRS), 61):
            if mean - t_quantile(1.0 - a_look, k - 1) * max(sd, 1e-6) / math.sqrt(k) > bar:
                needed = k
                break
    return Look(n, verdict, math.exp(mean), math.exp(lo), math.exp(hi), a_look, needed)


@dataclass(frozen=True)
class Comparison:
    """One candidate against the baseline, on the same requests: the one pooled set of figures that the
    chart, the decision sentence and the per-category lines quote.

    Attributes:
        candidate: the speculative candidate.
        paired: True when the figures come from adjacent pairs (the only kind that can win); False for
            a screening comparison (probe/refine launches against the baseline's runs of the same
            requests, not adjacent in time).
        pairs: the adjacent pairs (empty for a screening comparison).
        candidate_samples: the candidate's compared requests.
        baseline_samples: the baseline's requests with the same keys (same order).
        gen_tokens_per_s: candidate's Σ tokens ÷ Σ time over ``candidate_samples``.
        baseline_gen_tokens_per_s: baseline's over ``baseline_samples``.
        speedup: ``gen_tokens_per_s ÷ baseline_gen_tokens_per_s``.
        look: the sequential test over the pairs (``None`` for a screening comparison).
        acceptance: candidate's Σ draft_n_accepted ÷ Σ draft_n over its compared requests.
        stopped_early: the candidate's only runs were cut short as a clear loser.
    """

    candidate: Candidate
    paired: bool
    pairs: tuple[Pair, ...]
    candidate_samples: tuple[Sample, ...]
    baseline_samples: tuple[Sample, ...]
    gen_tokens_per_s: float | None
    baseline_gen_tokens_per_s: float | None
    speedup: float | None
    look: Look | None
    acceptance: float | None
    stopped_early: bool = False

    @property
    def requests(self) -> int:
        """Number of (prompt, repetition) requests compared, per side."""
        return len(self.candidate_samples)

    def to_json(self) -> dict:
        """Plain-JSON summary (no samples)."""
        return {
            "label": self.candidate.label,
            "paired": self.paired,
            "pairs": len(self.pairs),
            "requests": self.requests,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "baseline_gen_tokens_per_s": self.baseline_gen_tokens_per_s,
            "speedup": self.speedup,
            "verdict": self.look.verdict if self.look else None,
            "ci_low": self.look.low if self.look else None,
            "ci_high": self.look.high if self.look else None,
            "acceptance": self.acceptance,
            "stopped_early": self.stopped_early,
        }


def _acceptance(samples: Sequence[Sample]) -> float | None:
    dn = sum(s.draft_n or 0 for s in samples)
    return sum(s.draft_n_accepted or 0 for s in samples) / dn if dn else None


def compare(
    measurements: Sequence[Measurement],
    candidate: Candidate,
    min_gain: float,
    alpha: float = ALPHA,
    max_pairs: int = MAX_PAIRS,
    finalists: int = FINALISTS,
) -> Comparison | None:
    """The :class:`Comparison` of ``candidate`` in a sweep (``measurements`` in launch order).

    Adjacent pairs when there are any (:func:`adjacent_pairs`); otherwise a screening comparison over
    the (prompt, repetition) keys that the candidate's successful runs and the baseline's successful
    runs both measured. ``None`` when there is no shared request at all.
    """
    pairs = adjacent_pairs(measurements, candidate)
    if pairs:
        cs = tuple(s for p in pairs for s in p.candidate_samples)
        bs = tuple(s for p in pairs for s in p.baseline_samples)
        look = sequential_test([p.ratio for p in pairs if p.ratio > 0], min_gain, alpha, max_pairs, finalists)
        c_tps, b_tps = pooled_tokens_per_s(cs), pooled_tokens_per_s(bs)
        return Comparison(candidate, True, tuple(pairs), cs, bs, c_tps, b_tps,
                          (c_tps / b_tps) if c_tps and b_tps else None, look, _acceptance(cs))
    mine = [m for m in measurements if m.candidate.key == candidate.key and m.ok]
    base: dict[RequestKey, Sample] = {}
    for m in measurements:
        if m.candidate.is_baseline and m.ok:
            for s in m.samples:
                base.setdefault((s.prompt_index, s.repetition), s)
    cs_l: list[Sample] = []
    bs_l: list[Sample] = []
    seen: set[RequestKey] = set()
    for m in mine:
        for s in m.samples:
            k = (s.prompt_index, s.repetition)
            if k in base and k not in seen:
                seen.add(k)
                cs_l.append(s)
                bs_l.append(base[k])
    if not cs_l:
        return None
    c_tps, b_tps = pooled_tokens_per_s(cs_l), pooled_tokens_per_s(bs_l)
    return Comparison(candidate, False, (), tuple(cs_l), tuple(bs_l), c_tps, b_tps,
                      (c_tps / b_tps) if c_tps and b_tps else None, None, _acceptance(cs_l),
                      stopped_early=all(m.stopped_early for m in mine))


__all__ = [
    "ALPHA",
    "Comparison",
    "FINALISTS",
    "Look",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "Pair",
    "adjacent_pairs",
    "alpha_per_look",
    "compare",
    "pooled_tokens_per_s",
    "sequential_test",
    "t_cdf",
    "t_quantile",
]
