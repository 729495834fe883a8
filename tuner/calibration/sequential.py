"""The sequential test on paired requests: when a paired comparison with the baseline is conclusive.

DESIGN.md "Calibration method" step 6 (issue 25, item 1). The units are **paired requests**: one
``(prompt, repetition)`` request run by the candidate and, adjacent in time, by the baseline, with its log ratio
``y = ln(candidate tokens/s ÷ baseline tokens/s)`` (tokens and seconds as ``pairing.sample_tokens_and_s``).
A **pair** (a *block*: ``pairing.Pair``) is one repetition of the prompt set run by both sides; every pair holds
the same prompts, so prompt-to-prompt differences of the speedup are part of what is measured (fixed effects),
not noise.

Model: ``y_pb = θ + α_p + u_b + e_pb`` — prompt effects ``α_p`` (fixed), drift of pair ``b`` ``u_b`` (the
machine's speed seen differently by the two sides from one repetition or launch to the next, SD ``τ``; measured
up to 0.18 in ln ratio on a busy 2-core machine) and request noise ``e`` (SD ``σ``: timing jitter). With prompt
weights ``π_p ∝ w_p·g_p`` (``w_p`` the served mix's weight, ``pairing.Mix``; ``g_p`` the prompt's median request
time ``√(t_candidate·t_baseline)``; ``Σπ = 1``), pair means ``m_b = Σ_p π_p y_pb``, ``θ̂ = mean_b m_b`` (the log of
the pooled ratio Σ w·tokens ÷ Σ w·time, to third order) and:

* ``σ̂²``: the two-way (pair × prompt) residual mean square, ``ν_e = (G−1)(P−1)`` degrees of freedom (one prompt:
  the pairs' own spread, ``G−1``);
* prior for ``Var(m_b)``: ``V₀ = τ₀² + σ̂²(κ² + Σπ²)``. Within two pairs the drift cannot be seen, so it is assumed
  to be at most ``κ·σ̂`` (:data:`KAPPA`: the same other programs that make requests jitter make pairs drift; the
  recordings here had ``τ ≤ 0.4 σ``), never below ``τ₀`` (:data:`TAU0`: side by side 0.03; alternating launches
  0.07, each launch's own offset up to SD 0.05 — simulated only, no GPU here);
* the pairs' own spread ``s_m²`` moderates the prior (empirical Bayes): ``V = (D0·V₀ + (G−1)·s_m²) ÷ (D0+G−1)``
  (:data:`D0`), degrees of freedom by Satterthwaite (``τ₀²`` on ``D0``, ``σ̂²`` on ``ν_e``, ``s_m²`` on ``G−1``):
  a drifting machine's pairs disagree and widen the interval; two consistent pairs of many quiet requests
  conclude without a third;
* ``se² = V ÷ G``; alternating launches (A{r0} B{r0,r1} A{r1,r2} …: neighbouring pairs share a launch) add
  ``(1 − 1/G)·max(0, V − σ̂²Σπ²) ÷ G``.

Looks and the error rate: a one-sided test of ``H0: θ ≤ ln(1 + min_gain)`` at ``G = 2, 4, 6`` pairs (a busy
side-by-side sweep: 2, 4, 8, :data:`BUSY_EXTRA_PAIRS`; :func:`look_points`: one look per launch pair's two
repetitions, at most :data:`MAX_LOOKS`, the last at ``max_pairs``), each at
``α_look = α ÷ (looks × finalists)`` (Bonferroni): "faster" when the interval's low end clears the bar, "not
faster" when its high end is below it. The union bound makes the probability of declaring any finalist faster
when none is more than ``min_gain`` faster at most ``α`` (5 %) for any rule of when to stop, so an earlier look's
"faster" stands (:func:`request_looks`). When the rounds end between two look points (the budget was spent
after 5 pairs), the decision's look (``final``) is at the pairs there are: it takes the place of the scheduled
looks that never came, so a finalist still has at most ``len(look_points)`` looks and the bound holds. Shown by simulation on recorded A/A and A/B requests shifted to exactly
the bar, idle and busy (tests/calibration/test_sequential_error.py; the A B B A layout of a GPU by simulation
only). Outside the assumption (drift larger than ``max(τ₀, κσ̂)``) the error can exceed 5 %: the search therefore
alternates which side goes first per request and starts a fresh candidate launch every two repetitions
(``tuner.calibration.search.side_by_side``), which keeps a launch's own offset from being shared by all pairs.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

ALPHA = 0.05
"""Total one-sided error: P(any finalist declared faster | none is more than ``min_gain`` faster)."""
MIN_PAIRS = 2
"""The first look: two pairs (one cannot tell prompt differences from noise)."""
LOOK_STEP = 2
"""Pairs between looks: a launch pair's two repetitions (looks at 2, 4, 6 pairs)."""
MAX_PAIRS = 6
"""The last look per finalist."""
BUSY_EXTRA_PAIRS = 2
"""A busy side-by-side sweep moves each finalist's last look this many pairs further (6 → 8: looks at 2, 4 and 8,
:data:`MAX_LOOKS`), reached only while the budget pays for the pairs. Issue 28's busy quality run 7: ngram-mod
read 1.13× in all six pairs, its interval 1.02–1.26× just missed the bar of 1.03 at the last look, 12 s of the
74 s budget were left and the model alone was served at 0.78 of the best; two more pairs were about 10 s."""
MAX_LOOKS = 3
"""Looks per finalist at most: ``MIN_PAIRS``, every ``LOOK_STEP`` pairs after it, and the last at ``max_pairs``
(6 pairs: 2, 4, 6; 8 pairs: 2, 4, 8). Each look spends ``α ÷ (looks × finalists)``: a fourth look at 6 of 8 would
widen every interval by 4 % (the t quantile at 0.05/8 against 0.05/6) to stop two pairs sooner now and then."""
FINALISTS = 2
"""Candidates whose paired rounds share the error ``ALPHA``."""
MIN_GAIN = 0.03
"""A winner must be at least this much faster than the baseline at the low end of its interval."""
CHAIN_MIN_GAIN = 0.0
"""A chained candidate is served over the best single-type winner when faster than it beyond noise at all (the low
end of chain ÷ single above 1): both have already passed the test against the baseline at :data:`MIN_GAIN`, so
what is left is which of two proven speedups is higher, not whether speculation pays (issue 14: "chosen only
when they win beyond noise"). Until issue 25 the bar was ``MIN_GAIN`` here too: on its greedy family the
chain measured 1.47–1.62× against ngram-mod's 1.35–1.40× (chain ÷ single 1.10–1.15×, low ends 1.00–1.01×) and
the slower single type was served in 2 of 4 runs."""
KAPPA = 0.5
"""Drift prior: a pair mean's drift SD is taken as at least ``κ·σ̂`` (the error/power trade of the study behind
issue 25: κ 0.3 gave 80 % power on the "idle" recording but 8.6–9.6 % false "faster" on the busy ones)."""
SIDE_BY_SIDE = "side_by_side"
"""Both servers up, each request sent to one and then the other (CPU: the weights are mmapped)."""
ALTERNATING = "alternating"
"""Launches A B B A, two repetitions each (a GPU: the weights are copied into its memory)."""
LAYOUTS = (SIDE_BY_SIDE, ALTERNATING)
TAU0 = {SIDE_BY_SIDE: 0.03, ALTERNATING: 0.07}
"""Floor of the pair drift SD (ln ratio) per layout: drift that steady requests do not show."""
D0 = 8.0
"""Weight of the prior against the pairs' own spread, in pairs (prior degrees of freedom)."""


# ---- Student's t (no scipy): the CDF for integer degrees of freedom, and its quantile ----------------

def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with ``df ≥ 1`` integer degrees of freedom (closed form of
    Abramowitz & Stegun 26.7.3/26.7.4 for ``A(t|ν) = P(|T| < t)``).

    Raises:
        ValueError: ``df < 1``.
    """
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


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom (bisection on
    :func:`t_cdf`, to 1e-9).

    Raises:
        ValueError: ``p`` outside (0.5, 1).
    """
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


def t_df(df: float) -> int:
    """Degrees of freedom for :func:`t_quantile`: ``df`` rounded down (conservative), within 1..1000."""
    return max(1, min(1000, int(df)))


# ---- the units ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PairedRequest:
    """One request run by both sides, adjacent in time.

    Attributes:
        prompt: prompt index.
        pair: repetition id (all prompts of a repetition form one pair, ``pairing.Pair``).
        launch: position of the candidate's launch in the sweep (evidence; not used by the statistic).
        log_ratio: ``ln(candidate tokens/s ÷ baseline tokens/s)`` on this request.
        weight: the served mix's weight of this request (``pairing.Mix.weights``; 1.0 = equal).
        seconds: ``√(candidate s · baseline s)`` of generation; ``None``: the prompt weighs by ``weight`` alone.
    """

    prompt: int
    pair: int
    launch: int
    log_ratio: float
    weight: float = 1.0
    seconds: float | None = None


def paired_request(c_tokens: float, c_s: float, b_tokens: float, b_s: float, prompt: int, pair: int,
                   launch: int, weight: float = 1.0) -> PairedRequest:
    """A :class:`PairedRequest` from both sides' generated tokens and generation seconds.

    Raises:
        ValueError: a count or a time ≤ 0 (names the prompt and repetition, 1-based).
    """
    if min(c_tokens, c_s, b_tokens, b_s) <= 0:
        raise ValueError(f"prompt {prompt + 1}, repetition {pair + 1}: tokens and seconds must be positive")
    return PairedRequest(prompt, pair, launch, math.log((c_tokens / c_s) / (b_tokens / b_s)), weight,
                         math.sqrt(c_s * b_s))


@dataclass(frozen=True)
class Look:
    """The sequential test after ``n`` pairs.

    Attributes:
        n: complete pairs used (every prompt run by both sides).
        verdict: ``"faster"`` (the low end clears ``1 + min_gain``), ``"not faster"`` (the high end is below
            it), ``"inconclusive"`` (neither, fewer than ``MIN_PAIRS`` pairs, or not a look point).
        mean_ratio: ``exp(θ̂)``: the weighted mean ratio over the paired requests.
        low, high: the ratio's interval at ``1 − alpha_look`` each side (``None`` below two pairs).
        alpha_look: one-sided error spent at one look.
        pairs_needed: at the current mean and spread, the look (pairs in all) that would conclude "faster"
            (``None``: the mean is not above the bar, or more than 60 pairs).
        decided_at: when an earlier look (over the first ``decided_at`` pairs) said "faster" and this one alone
            would not, that number; ``low`` / ``high`` are then the deciding look's interval and
            ``mean_ratio`` / ``se`` this look's, over all ``n`` pairs (:func:`request_looks`).
        requests: paired requests in the ``n`` pairs.
        se: standard error of ``θ̂`` (ln ratio); ``df``: degrees of freedom of its t quantile.
        sigma: request noise ``σ̂`` (ln ratio).
    """

    n: int
    verdict: str
    mean_ratio: float | None
    low: float | None
    high: float | None
    alpha_look: float
    pairs_needed: int | None = None
    decided_at: int | None = None
    requests: int = 0
    se: float | None = None
    df: float | None = None
    sigma: float | None = None


def look_points(max_pairs: int = MAX_PAIRS) -> list[int]:
    """Pair counts at which the test looks: ``MIN_PAIRS, MIN_PAIRS + LOOK_STEP, …`` below ``max_pairs``, at most
    ``MAX_LOOKS − 1`` of them, and ``max_pairs`` itself (the last look; it may be odd or further on: 8 → 2, 4, 8);
    ``[MIN_PAIRS]`` when ``max_pairs`` is smaller."""
    if max_pairs <= MIN_PAIRS:
        return [MIN_PAIRS]
    pts = list(range(MIN_PAIRS, max_pairs, LOOK_STEP))[:MAX_LOOKS - 1]
    return pts + [max_pairs]


def alpha_per_look(alpha: float = ALPHA, max_pairs: int = MAX_PAIRS, finalists: int = FINALISTS) -> float:
    """Bonferroni share of ``alpha`` for one look: ``α ÷ (looks × finalists)`` (:func:`look_points`)."""
    return alpha / (len(look_points(max_pairs)) * max(1, finalists))


def _table(reqs: Sequence[PairedRequest]) -> tuple[list[list[float]], list[float], int]:
    """Complete pairs as rows ``y[b][p]`` in repetition order over the prompts of the fullest pair (a pair
    missing one is left out: an incomplete repetition pairs with nothing), the prompt weights ``π`` (Σ 1)
    and the number of requests used."""
    by_pair: dict[int, dict[int, PairedRequest]] = {}
    for r in reqs:
        by_pair.setdefault(r.pair, {})[r.prompt] = r
    if not by_pair:
        return [], [], 0
    fullest: dict[int, PairedRequest] = max(by_pair.values(), key=len)
    prompts = sorted(fullest)
    rows = [by_pair[b] for b in sorted(by_pair) if all(p in by_pair[b] for p in prompts)]
    if not rows:
        return [], [], 0
    raw = []
    for p in prompts:
        secs = [s for row in rows if (s := row[p].seconds) is not None and s > 0]
        g = statistics.median(secs) if len(secs) == len(rows) else 1.0
        raw.append(statistics.fmean(row[p].weight for row in rows) * g)
    tot = sum(raw)
    pi = [x / tot for x in raw] if tot > 0 else [1.0 / len(prompts)] * len(prompts)
    return [[row[p].log_ratio for p in prompts] for row in rows], pi, len(rows) * len(prompts)


def _request_noise(y: list[list[float]]) -> tuple[float, float]:
    """``(σ̂², ν)``: the two-way residual mean square of ``y`` (≥ 2 rows); one column: the rows' variance."""
    g, p = len(y), len(y[0])
    if p == 1:
        return statistics.variance(r[0] for r in y), float(g - 1)
    rm = [statistics.fmean(r) for r in y]
    cm = [statistics.fmean(r[j] for r in y) for j in range(p)]
    grand = statistics.fmean(rm)
    ss = sum((y[i][j] - rm[i] - cm[j] + grand) ** 2 for i in range(g) for j in range(p))
    return ss / ((g - 1) * (p - 1)), float((g - 1) * (p - 1))


def _estimate(y: list[list[float]], pi: list[float], layout: str) -> tuple[float, float, float, float]:
    """``(θ̂, se, df, σ̂)`` of the module docstring's statistic (``y``: ≥ 2 pairs)."""
    g = len(y)
    tau0 = TAU0[layout]
    m = [sum(w * v for w, v in zip(pi, row)) for row in y]
    theta = statistics.fmean(m)
    s2, nu_e = _request_noise(y)
    sp2 = sum(w * w for w in pi)
    scaled = s2 * (KAPPA * KAPPA + sp2)  # request noise in a pair mean + the drift prior κ²σ̂²
    v0 = tau0 * tau0 + scaled
    sm2 = statistics.variance(m)
    big_d = D0 + g - 1
    v = (D0 * v0 + (g - 1) * sm2) / big_d
    denom = (D0 * tau0 * tau0 / big_d) ** 2 / D0 + (D0 * scaled / big_d) ** 2 / nu_e \
        + ((g - 1) * sm2 / big_d) ** 2 / (g - 1)
    df = v * v / denom if denom > 0 else 1000.0
    se2 = v / g
    if layout == ALTERNATING:
        se2 += (1.0 - 1.0 / g) * max(0.0, v - s2 * sp2) / g
    return theta, math.sqrt(se2), df, math.sqrt(s2)


def _pairs_needed(theta: float, se: float, df: float, g: int, a_look: float, bar: float) -> int | None:
    """The first look point ≥ ``g`` whose interval would clear ``bar`` at the same mean and spread (``se``
    shrinking as ``√(g/k)``), ``None`` when the mean is not above the bar or none up to 60 pairs would."""
    if theta <= bar:
        return None
    for k in range(max(g, MIN_PAIRS) + (g - MIN_PAIRS) % LOOK_STEP, 61, LOOK_STEP):
        if theta - t_quantile(1.0 - a_look, t_df(df + k - g)) * se * math.sqrt(g / k) > bar:
            return k
    return None


def request_test(reqs: Sequence[PairedRequest], min_gain: float, alpha: float = ALPHA, max_pairs: int = MAX_PAIRS,
                 finalists: int = FINALISTS, layout: str = SIDE_BY_SIDE, final: bool = False) -> Look:
    """One look of the test over the paired requests so far (module docstring).

    Args:
        reqs: paired requests (any order); a pair missing a prompt is left out.
        min_gain: the bar is ``1 + min_gain`` (0.03: 1.03×).
        alpha, max_pairs, finalists: the total error and the looks it is spent over.
        layout: :data:`SIDE_BY_SIDE` or :data:`ALTERNATING`.
        final: the rounds have ended (the decision's look): a verdict at any pair count from ``MIN_PAIRS`` to
            ``max_pairs`` (module docstring), not only at the look points.

    Returns:
        A :class:`Look`; "inconclusive" with no interval below two pairs, and (unless ``final``) no verdict
        between look points.

    Raises:
        ValueError: an unknown layout, or a log ratio that is not finite.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: must be one of {', '.join(LAYOUTS)}")
    if any(not math.isfinite(r.log_ratio) for r in reqs):
        raise ValueError("paired log ratios must be finite (a request with 0 tokens/s?)")
    a_look = alpha_per_look(alpha, max_pairs, finalists)
    y, pi, n_req = _table(reqs)
    if len(y) < 2:
        mean = math.exp(sum(w * v for w, v in zip(pi, y[0]))) if y else None
        return Look(len(y), "inconclusive", mean, None, None, a_look, requests=n_req)
    theta, se, df, sigma = _estimate(y, pi, layout)
    q = t_quantile(1.0 - a_look, t_df(df))
    lo, hi = theta - q * se, theta + q * se
    bar = math.log1p(min_gain)
    verdict = "inconclusive"
    if len(y) in look_points(max_pairs) or (final and MIN_PAIRS <= len(y) <= max_pairs):
        verdict = "faster" if lo > bar else "not faster" if hi < bar else "inconclusive"
    return Look(len(y), verdict, math.exp(theta), math.exp(lo), math.exp(hi), a_look,
                _pairs_needed(theta, se, df, len(y), a_look, bar), None, n_req, se, df, sigma)


def request_looks(reqs: Sequence[PairedRequest], min_gain: float, alpha: float = ALPHA, max_pairs: int = MAX_PAIRS,
                  finalists: int = FINALISTS, layout: str = SIDE_BY_SIDE, final: bool = False) -> Look:
    """The sequential rule over pairs in time order (repetition ids ascending): the last look, except that an
    earlier look's "faster" stands (``Look.decided_at``).

    Why that is sound: the error is spent over every look (module docstring), so the probability that *any* look
    declares "faster" when the candidate is not more than ``min_gain`` faster is at most ``alpha`` — whatever
    happens after it. A busy sweep goes on pairing after a conclusive look to narrow the estimate; those pairs
    refine the figures and cannot take back a verdict reached at its error level.

    Same arguments and errors as :func:`request_test`.
    """
    last = request_test(reqs, min_gain, alpha, max_pairs, finalists, layout, final)
    if last.verdict == "faster":
        return last
    order = sorted({r.pair for r in reqs})
    for k in (x for x in look_points(max_pairs) if x < last.n):
        keep = set(order[:k])
        early = request_test([r for r in reqs if r.pair in keep], min_gain, alpha, max_pairs, finalists, layout)
        if early.verdict == "faster" and early.n == k:
            return replace(last, verdict="faster", decided_at=k, low=early.low, high=early.high)
    return last


def contrast(a: Look, b: Look, min_gain: float, alpha: float = ALPHA, direct: Look | None = None) -> Look:
    """Whether candidate A is faster than candidate B beyond noise, from each one's look against the baseline
    (the decision's rule for a chained candidate against the best single one), and from ``direct`` pairs of A
    against B where they ran head to head.

    Each look's ``θ̂`` already cancels the machine's drift against its own adjacent baseline, and the two were
    measured in different launches, so ``θ̂_a − θ̂_b`` has ``se² = se_a² + se_b²`` with Satterthwaite's degrees of
    freedom. ``direct`` (:func:`request_test` of the head-to-head requests, ``ln(A ÷ B)`` each) is a second,
    independent estimate of the same ``θ_a − θ_b``, without either baseline's noise: the two are pooled by inverse
    variance (``se² = 1 ÷ (1/se_i² + 1/se_d²)``, Satterthwaite's degrees of freedom of the weighted sum). Then a
    one-sided test of H0: ``θ_a − θ_b ≤ ln(1 + min_gain)`` at error ``alpha`` (one test, made once at decision time).

    Returns:
        A :class:`Look` of the ratio A ÷ B (``n`` the smaller pair count, plus the direct pairs); "inconclusive"
        without an interval on either side.
    """
    n, requests = min(a.n, b.n), min(a.requests, b.requests)
    if a.mean_ratio is None or b.mean_ratio is None or a.se is None or b.se is None or n < MIN_PAIRS:
        return Look(n, "inconclusive", None, None, None, alpha)
    diff = math.log(a.mean_ratio) - math.log(b.mean_ratio)
    va, vb = a.se * a.se, b.se * b.se
    var = va + vb
    da, db = max(1.0, a.df or 1.0), max(1.0, b.df or 1.0)
    df = var ** 2 / (va * va / da + vb * vb / db) if var > 0 else 1000.0
    if direct is not None and direct.mean_ratio is not None and direct.se and direct.n >= MIN_PAIRS and var > 0:
        diff, var, df = _pooled((diff, var, df), (math.log(direct.mean_ratio), direct.se ** 2,
                                                  max(1.0, direct.df or 1.0)))
        n, requests = n + direct.n, requests + direct.requests
    se = math.sqrt(var) or 1e-9
    q = t_quantile(1.0 - alpha, t_df(df))
    lo, hi = diff - q * se, diff + q * se
    bar = math.log1p(min_gain)
    verdict = "faster" if lo > bar else "not faster" if hi < bar else "inconclusive"
    return Look(n, verdict, math.exp(diff), math.exp(lo), math.exp(hi), alpha, requests=requests, se=se, df=df)


def _pooled(x: tuple[float, float, float], y: tuple[float, float, float]) -> tuple[float, float, float]:
    """Inverse-variance pooling of two independent estimates ``(θ, var, df)``: ``(θ, var, df)`` of the pooled one
    (Satterthwaite's degrees of freedom of the weighted sum)."""
    (tx, vx, dx), (ty, vy, dy) = x, y
    if vy <= 0:
        return y
    wx, wy = (1.0 / vx) / (1.0 / vx + 1.0 / vy), (1.0 / vy) / (1.0 / vx + 1.0 / vy)
    var = 1.0 / (1.0 / vx + 1.0 / vy)
    df = var * var / ((wx * wx * vx) ** 2 / dx + (wy * wy * vy) ** 2 / dy)
    return wx * tx + wy * ty, var, df


__all__ = [
    "ALPHA",
    "ALTERNATING",
    "BUSY_EXTRA_PAIRS",
    "CHAIN_MIN_GAIN",
    "D0",
    "FINALISTS",
    "KAPPA",
    "LAYOUTS",
    "LOOK_STEP",
    "Look",
    "MAX_LOOKS",
    "MAX_PAIRS",
    "MIN_GAIN",
    "MIN_PAIRS",
    "PairedRequest",
    "SIDE_BY_SIDE",
    "TAU0",
    "alpha_per_look",
    "contrast",
    "look_points",
    "paired_request",
    "request_looks",
    "request_test",
    "t_cdf",
    "t_df",
    "t_quantile",
]
