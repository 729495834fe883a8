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
* **served mix** (:class:`Mix`): the fraction of served requests that are long-context ones
  (``long_share``). Pooled figures weigh each short request ``(1 − share) ÷ n_short`` and each long one
  ``share ÷ n_long``, so Σ w·tokens ÷ Σ w·time is the tokens/s over that mix and the ratio picks the
  configuration that is fastest over it. Without a share every request weighs the same (the prompt
  set's own share, e.g. 2 long of 7 requests in the built-in set).

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
from dataclasses import dataclass, replace
from typing import Any

from .candidates import Candidate
from .prompts import Prompt
from .results import Measurement, Sample

ALPHA = 0.05
"""Total one-sided error of the sequential test: P(a candidate declared faster | none is)."""
MIN_PAIRS = 3
"""No verdict before this many pairs (a t test on 2 pairs has 1 degree of freedom)."""
MAX_PAIRS = 6
"""Looks per finalist: at n = MIN_PAIRS … MAX_PAIRS pairs."""
FINALISTS = 2
"""Candidates whose paired rounds share the error ``ALPHA``."""
MIN_GAIN = 0.03
"""A winner must be at least this much faster than the baseline at the low end of its interval."""

RequestKey = tuple[int, int]
"""``(prompt_index, repetition)``."""


def sample_tokens_and_s(s: Sample) -> tuple[float, float]:
    """``(generated tokens, generation seconds)`` of one request, the rule of
    ``Measurement.rep_gen_tokens_per_s_by_id``: ``predicted_n − 1`` tokens over ``predicted_ms`` (the
    first token comes with the prompt); without timings 1 token over ``1 / gen_tokens_per_s`` s."""
    if s.predicted_n and s.predicted_ms:
        return float(max(1, s.predicted_n - 1)), s.predicted_ms / 1000.0
    return 1.0, 1.0 / max(s.gen_tokens_per_s, 1e-9)


@dataclass(frozen=True)
class Mix:
    """The served mix of short and long-context requests that pooled figures stand for.

    Attributes:
        long_share: fraction (0..1) of the served requests that are long-context ones (the
            ``long_share`` setting, ``tune --long-share``); ``None`` = the prompt set's own share (every
            measured request weighs the same).
        long_prompts: prompt indices of the long-context requests (``Prompt.fill`` set).
        captured_long_tokens: for captured requests (``Prompt.captured_unix_s`` set), the prompt tokens
            (``Sample.prompt_n``, as the server counted them) from which one is long-context; ``None`` = none.
        captured_prompts: prompt indices of the captured requests.
    """

    long_share: float | None = None
    long_prompts: frozenset[int] = frozenset()
    captured_long_tokens: int | None = None
    captured_prompts: frozenset[int] = frozenset()

    @classmethod
    def of(cls, prompts: Sequence[tuple[int, Prompt]], long_share: float | None = None,
           captured_long_tokens: int | None = None) -> Mix:
        """The mix of a sweep's ``(index, prompt)`` list: its long-context prompts are those with ``fill``, and
        the captured ones whose prompt has at least ``captured_long_tokens`` tokens
        (``tuner.calibration.workload.long_prompt_tokens`` of the served context).

        Raises:
            ValueError: ``long_share`` outside 0..1.
        """
        if long_share is not None and not (math.isfinite(long_share) and 0.0 <= long_share <= 1.0):
            raise ValueError(f"long-context share {long_share!r}: must be between 0 and 1")
        return cls(long_share, frozenset(i for i, p in prompts if p.fill is not None), captured_long_tokens,
                   frozenset(i for i, p in prompts if p.captured_unix_s is not None))

    def is_long(self, s: Sample) -> bool:
        """True when ``s`` is a long-context request (a captured one by its prompt tokens)."""
        if s.prompt_index in self.captured_prompts:
            return (self.captured_long_tokens is not None and s.prompt_n is not None
                    and s.prompt_n >= self.captured_long_tokens)
        return s.prompt_index in self.long_prompts

    def weights(self, samples: Sequence[Sample]) -> list[float]:
        """Per-request weights (mean 1): short ``(1 − share) ÷ n_short``, long ``share ÷ n_long``
        (× ``len(samples)``); all 1.0 without a share or when one kind is missing from ``samples``."""
        n = len(samples)
        n_long = sum(1 for s in samples if self.is_long(s))
        share = self.long_share
        if share is None or n_long == 0 or n_long == n:
            return [1.0] * n
        w_long, w_short = share * n / n_long, (1.0 - share) * n / (n - n_long)
        return [w_long if self.is_long(s) else w_short for s in samples]

    def share_of(self, samples: Sequence[Sample]) -> float:
        """The long-context share the pooled figure over ``samples`` stands for: the set share when both
        kinds are present, else the fraction of long requests in ``samples`` (0 or 1)."""
        if not samples:
            return 0.0
        n_long = sum(1 for s in samples if self.is_long(s))
        if self.long_share is not None and 0 < n_long < len(samples):
            return self.long_share
        return n_long / len(samples)


def pooled_tokens_per_s(samples: Sequence[Sample], mix: Mix | None = None) -> float | None:
    """Σ tokens ÷ Σ seconds over ``samples`` (see :func:`sample_tokens_and_s`), each request weighted by
    ``mix`` (:meth:`Mix.weights`; ``None`` = equal weights); ``None`` when empty."""
    if not samples:
        return None
    weights = mix.weights(samples) if mix is not None else [1.0] * len(samples)
    toks = secs = 0.0
    for s, w in zip(samples, weights):
        t, d = sample_tokens_and_s(s)
        toks += w * t
        secs += w * d
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
        mix: the served mix the pair's figures are weighted by (``None`` = every request the same).
    """

    repetition: int
    candidate_launch: int
    baseline_launch: int
    candidate_samples: tuple[Sample, ...]
    baseline_samples: tuple[Sample, ...]
    mix: Mix | None = None

    @property
    def candidate_tokens_per_s(self) -> float:
        """Candidate's Σ tokens ÷ Σ time over the pair's requests (weighted by :attr:`mix`)."""
        return pooled_tokens_per_s(self.candidate_samples, self.mix) or 0.0

    @property
    def baseline_tokens_per_s(self) -> float:
        """Baseline's Σ tokens ÷ Σ time over the same requests (weighted by :attr:`mix`)."""
        return pooled_tokens_per_s(self.baseline_samples, self.mix) or 0.0

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


def adjacent_pairs(measurements: Sequence[Measurement], candidate: Candidate, mix: Mix | None = None) -> list[Pair]:
    """Every :class:`Pair` of ``candidate`` in a sweep, in time order.

    Args:
        measurements: the sweep's measurements in launch order (``Search.measurements``; a profile's
            ``evidence`` keeps that order). Each element is one launch.
        candidate: the speculative candidate (matched on ``Candidate.key``).
        mix: the served mix each pair's ratio is weighted by (``None`` = every request the same).

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
                pairs.append(Pair(rep, i, j, tuple(mine[rep][k] for k in keys), tuple(theirs[rep][k] for k in keys),
                                  mix))
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
        decided_at: when an earlier look (over the first ``decided_at`` pairs) said "faster" and this
            one alone would not, that number of pairs; the verdict is then "faster", ``low`` / ``high`` are
            the deciding look's interval (a served configuration's interval clears the bar) and
            ``mean_ratio`` stays this look's, over all ``n`` pairs (:func:`sequential_looks`).
    """

    n: int
    verdict: str
    mean_ratio: float | None
    low: float | None
    high: float | None
    alpha_look: float
    pairs_needed: int | None = None
    decided_at: int | None = None


def alpha_per_look(alpha: float = ALPHA, max_pairs: int = MAX_PAIRS, finalists: int = FINALISTS) -> float:
    """Bonferroni share of ``alpha`` for one look (see the module docstring)."""
    looks = max(1, max_pairs - MIN_PAIRS + 1)
    return alpha / (looks * max(1, finalists))


def _verdict(n: int, lo: float, hi: float, bar: float) -> str:
    """``"faster"`` when the interval's low end (log scale) clears ``bar``, ``"not faster"`` when its high
    end stays below it, else ``"inconclusive"``; never decided on fewer than ``MIN_PAIRS`` pairs."""
    if n >= MIN_PAIRS:
        if lo > bar:
            return "faster"
        if hi < bar:
            return "not faster"
    return "inconclusive"


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
    verdict = _verdict(n, lo, hi, bar)
    needed = None
    if mean > bar:
        for k in range(max(n, MIN_PAIRS), 61):
            if mean - t_quantile(1.0 - a_look, k - 1) * max(sd, 1e-6) / math.sqrt(k) > bar:
                needed = k
                break
    return Look(n, verdict, math.exp(mean), math.exp(lo), math.exp(hi), a_look, needed)


def sequential_looks(
    ratios: Sequence[float],
    min_gain: float,
    alpha: float = ALPHA,
    max_pairs: int = MAX_PAIRS,
    finalists: int = FINALISTS,
) -> Look:
    """The sequential rule's verdict over pair ratios in time order: the last look, except that a
    "faster" verdict of an earlier look stands (``Look.decided_at``).

    Why that is sound: the error is spent over every look ``n = MIN_PAIRS … max_pairs`` (module
    docstring), so the probability that *any* look declares "faster" when the candidate is not more than
    ``min_gain`` faster is at most ``alpha`` — whatever happens after it. A busy sweep goes on pairing
    after a conclusive look to narrow the estimate (``tuner.calibration.search``); those pairs refine the
    figures, and cannot take back a verdict already reached at its error level.

    Same arguments and errors as :func:`sequential_test`.
    """
    last = sequential_test(ratios, min_gain, alpha, max_pairs, finalists)
    if last.verdict == "faster" or len(ratios) <= MIN_PAIRS:
        return last
    for k in range(MIN_PAIRS, len(ratios)):
        early = sequential_test(ratios[:k], min_gain, alpha, max_pairs, finalists)
        if early.verdict == "faster":
            # the interval is the deciding look's (it clears the bar); the mean is over all pairs
            return replace(last, verdict="faster", decided_at=k, low=early.low, high=early.high)
    return last


def contrast_test(
    ratios_a: Sequence[float],
    ratios_b: Sequence[float],
    min_gain: float,
    alpha: float = ALPHA,
) -> Look:
    """Whether candidate A is faster than candidate B beyond noise, from each one's pair ratios
    against the baseline (the decision's rule for a chained candidate against the best single one).

    Each pair ratio already cancels the machine's drift (its baseline ran next to it), so the two
    sets of log ratios are compared as independent samples: a one-sided Welch t test of
    H0: ``E[ln a] − E[ln b] ≤ ln(1 + min_gain)``, at error ``alpha`` (one test, made once at decision
    time). Degrees of freedom: Welch–Satterthwaite, rounded down (at least 1).

    Args:
        ratios_a, ratios_b: pair ratios (candidate ÷ baseline tokens/s) of A and of B, > 0.
        min_gain: A must be more than ``1 + min_gain`` times B at the low end of the interval.
        alpha: the test's one-sided error.

    Returns:
        A :class:`Look` of the ratio A ÷ B: ``mean_ratio`` = exp of the difference of mean log ratios,
        ``low`` / ``high`` its bounds at ``1 − alpha`` each side, ``verdict`` ``"faster"`` (low above
        the bar), ``"not faster"`` (high below it) or ``"inconclusive"`` (neither, or fewer than
        ``MIN_PAIRS`` pairs on a side); ``n`` = the smaller number of pairs.

    Raises:
        ValueError: a ratio ≤ 0.
    """
    if any(r <= 0 for r in list(ratios_a) + list(ratios_b)):
        raise ValueError("pair ratios must be positive")
    n = min(len(ratios_a), len(ratios_b))
    if n < 2:
        return Look(n, "inconclusive", None, None, None, alpha)
    xa = [math.log(r) for r in ratios_a]
    xb = [math.log(r) for r in ratios_b]
    diff = statistics.fmean(xa) - statistics.fmean(xb)
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se <= 0:
        se = 1e-9
    df_f = (va + vb) ** 2 / ((va * va) / (len(xa) - 1) + (vb * vb) / (len(xb) - 1)) if va + vb > 0 else 1.0
    q = t_quantile(1.0 - alpha, max(1, int(df_f)))
    lo, hi = diff - q * se, diff + q * se
    verdict = _verdict(n, lo, hi, math.log(1.0 + min_gain))
    return Look(n, verdict, math.exp(diff), math.exp(lo), math.exp(hi), alpha)


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
        long_share: the long-context share the pooled figures stand for (:meth:`Mix.share_of`); 0.0 when
            no long-context request was compared.
        share_set: True when that share is the user's setting, False when it is the prompt set's own.
        short_speedup: the ratio over the short requests alone (``None`` when none was compared).
        long_speedup: the ratio over the long-context requests alone (``None`` when none was compared).
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
    long_share: float = 0.0
    share_set: bool = False
    short_speedup: float | None = None
    long_speedup: float | None = None

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
            "long_share": self.long_share,
            "long_share_set": self.share_set,
            "short_speedup": self.short_speedup,
            "long_speedup": self.long_speedup,
        }


def _acceptance(samples: Sequence[Sample]) -> float | None:
    dn = sum(s.draft_n or 0 for s in samples)
    return sum(s.draft_n_accepted or 0 for s in samples) / dn if dn else None


def _ratio(cs: Sequence[Sample], bs: Sequence[Sample], mix: Mix | None = None) -> float | None:
    c_tps, b_tps = pooled_tokens_per_s(cs, mix), pooled_tokens_per_s(bs, mix)
    return (c_tps / b_tps) if c_tps and b_tps else None


def _mix_fields(cs: Sequence[Sample], bs: Sequence[Sample], mix: Mix | None) -> dict[str, Any]:
    """``long_share``, ``share_set``, ``short_speedup``, ``long_speedup`` of a :class:`Comparison`."""
    mx = mix or Mix()
    longs = [i for i, s in enumerate(cs) if mx.is_long(s)]
    shorts = [i for i, s in enumerate(cs) if not mx.is_long(s)]
    share = mx.share_of(cs)
    return {
        "long_share": share,
        "share_set": mx.long_share is not None and 0 < len(longs) < len(cs),
        "short_speedup": _ratio([cs[i] for i in shorts], [bs[i] for i in shorts]) if shorts else None,
        "long_speedup": _ratio([cs[i] for i in longs], [bs[i] for i in longs]) if longs else None,
    }


def compare(
    measurements: Sequence[Measurement],
    candidate: Candidate,
    min_gain: float,
    alpha: float = ALPHA,
    max_pairs: int = MAX_PAIRS,
    finalists: int = FINALISTS,
    mix: Mix | None = None,
) -> Comparison | None:
    """The :class:`Comparison` of ``candidate`` in a sweep (``measurements`` in launch order).

    Adjacent pairs when there are any (:func:`adjacent_pairs`); otherwise a screening comparison: every
    request of the candidate's successful runs (a configuration measured again counts both launches)
    against the baseline's request with the same (prompt, repetition) key, over the keys that the
    candidate's successful runs and the baseline's successful
    runs (not ``superseded`` ones: a disturbed launch that was measured again) both measured. ``None`` when there is no shared request at all. Every pooled figure and pair
    ratio is weighted by ``mix`` (the served share of long-context requests; ``None`` = every request
    the same), so the speedup and the sequential test are about the served mix.
    """
    pairs = adjacent_pairs(measurements, candidate, mix)
    if pairs:
        cs = tuple(s for p in pairs for s in p.candidate_samples)
        bs = tuple(s for p in pairs for s in p.baseline_samples)
        look = sequential_looks([p.ratio for p in pairs if p.ratio > 0], min_gain, alpha, max_pairs, finalists)
        c_tps, b_tps = pooled_tokens_per_s(cs, mix), pooled_tokens_per_s(bs, mix)
        return Comparison(candidate, True, tuple(pairs), cs, bs, c_tps, b_tps,
                          (c_tps / b_tps) if c_tps and b_tps else None, look, _acceptance(cs),
                          **_mix_fields(cs, bs, mix))
    mine = [m for m in measurements if m.candidate.key == candidate.key and m.ok]
    base: dict[RequestKey, Sample] = {}
    for m in measurements:
        if m.candidate.is_baseline and m.ok and m.superseded is None:
            for s in m.samples:
                base.setdefault((s.prompt_index, s.repetition), s)
    cs_l: list[Sample] = []
    bs_l: list[Sample] = []
    for m in mine:  # every screening launch of the candidate (one measured again pools both)
        for s in m.samples:
            k = (s.prompt_index, s.repetition)
            if k in base:
                cs_l.append(s)
                bs_l.append(base[k])
    if not cs_l:
        return None
    c_tps, b_tps = pooled_tokens_per_s(cs_l, mix), pooled_tokens_per_s(bs_l, mix)
    return Comparison(candidate, False, (), tuple(cs_l), tuple(bs_l), c_tps, b_tps,
                      (c_tps / b_tps) if c_tps and b_tps else None, None, _acceptance(cs_l),
                      stopped_early=all(m.stopped_early for m in mine), **_mix_fields(cs_l, bs_l, mix))


__all__ = [
    "ALPHA",
    "Comparison",
    "FINALISTS",
    "Look",
    "MAX_PAIRS",
    "MIN_PAIRS",
    "Mix",
    "Pair",
    "adjacent_pairs",
    "alpha_per_look",
    "compare",
    "contrast_test",
    "pooled_tokens_per_s",
    "sequential_looks",
    "sequential_test",
    "t_cdf",
    "t_quantile",
]
