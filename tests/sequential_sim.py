"""Whole sweeps' paired rounds simulated in bulk for the sequential test (tuner.calibration.sequential).

The test is computed here vectorised over replications with numpy (:func:`batch_look`); :func:`check_batch`
verifies on random cases that it equals ``sequential.request_test`` (the same verdicts, intervals to 1e-9), so
what the simulation shows is the module's rule. Used by tests/calibration/test_sequential_error.py (the error
rate and the power) and bench/paired_requests.py (the figures of a new recording).

Data (``Y`` log ratios and ``S`` seconds, each ``[replications, pairs, prompts]``) come from:

* :func:`residual_bootstrap`: a recording of paired requests (tests/data/paired_requests/*.json, written by
  bench/paired_requests.py): its prompt effects, its launch-pair and pair effects shrunk to their variance
  components (method of moments) and its two-way residuals drawn with replacement, centred on a chosen true
  ratio; a launch pair = two pairs, as the search's side-by-side rounds start a candidate launch every two
  repetitions;
* :func:`abba`: a model of alternating launches A{r0} B{r0,r1} A{r1,r2} … (a GPU), each launch with its own
  speed offset — no GPU here, so that path is covered by this simulation only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tuner.calibration import sequential as sq

RECORDINGS = Path(__file__).resolve().parent / "data" / "paired_requests"
BAR = math.log1p(sq.MIN_GAIN)
"""The bar in ln ratio (1.03×)."""


def load_recording(name: str) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """``(metadata, Y, S)`` of ``RECORDINGS/<name>.json``: ``Y[launch pair, pair in it, prompt]`` the log ratios,
    ``S`` the seconds ``√(t_candidate · t_baseline)``.

    Raises:
        ValueError: a launch pair without the same repetitions and prompts as the others.
    """
    d = json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))
    rows = [dict(zip(d["columns"], r)) for r in d["requests"]]
    launches = sorted({r["launch"] for r in rows})
    prompts = sorted({r["prompt"] for r in rows})
    reps = {lp: sorted({r["repetition"] for r in rows if r["launch"] == lp}) for lp in launches}
    per = len(reps[launches[0]])
    if any(len(v) != per for v in reps.values()) or len(rows) != len(launches) * per * len(prompts):
        raise ValueError(f"{name}.json: every launch pair must hold the same repetitions of every prompt")
    y = np.zeros((len(launches), per, len(prompts)))
    s = np.zeros_like(y)
    for r in rows:
        i, j, k = launches.index(r["launch"]), reps[r["launch"]].index(r["repetition"]), prompts.index(r["prompt"])
        tc, dc, tb, db = r["c_tokens"], r["c_s"], r["b_tokens"], r["b_s"]
        y[i, j, k] = math.log((tc / dc) / (tb / db))
        s[i, j, k] = math.sqrt(dc * db)
    return d, y, s


def spread(y: np.ndarray) -> dict[str, float]:
    """The request-level spread of a recording ``Y[launch pair, pair, prompt]``: ``sigma`` (the two-way
    residual SD of the log ratios), ``prompt_sd`` (SD of the prompt effects), ``pair_sd`` (SD of the pair
    means) and ``mean_ratio``."""
    flat = y.reshape(-1, y.shape[-1])
    g, p = flat.shape
    res = flat - flat.mean(axis=1, keepdims=True) - flat.mean(axis=0, keepdims=True) + flat.mean()
    return {"sigma": float(math.sqrt((res ** 2).sum() / ((g - 1) * (p - 1)))),
            "prompt_sd": float(flat.mean(axis=0).std(ddof=1)), "pair_sd": float(flat.mean(axis=1).std(ddof=1)),
            "mean_ratio": float(math.exp(flat.mean()))}


# ---- the statistic, vectorised -----------------------------------------------------------------------------

_Q: dict[tuple[float, int], float] = {}


def _quantiles(p: float, df: np.ndarray) -> np.ndarray:
    """``sequential.t_quantile(p, df)`` for an array of integer degrees of freedom."""
    out = np.empty(df.shape)
    for d in np.unique(df):
        key = (p, int(d))
        if key not in _Q:
            _Q[key] = sq.t_quantile(p, int(d))
        out[df == d] = _Q[key]
    return out


def batch_look(y: np.ndarray, s: np.ndarray, g: int, layout: str, a_look: float) -> tuple[np.ndarray, ...]:
    """``(θ̂, low, high)`` (ln scale) of ``sequential.request_test`` over the first ``g ≥ 2`` pairs of every
    replication (``y``, ``s``: ``[R, ≥ g, P]``, ``P ≥ 2``, equal mix weights)."""
    yy = y[:, :g, :]
    p = yy.shape[2]
    tau0 = sq.TAU0[layout]
    gm = np.median(s[:, :g, :], axis=1)
    pi = gm / gm.sum(axis=1, keepdims=True)
    m = (yy * pi[:, None, :]).sum(axis=2)
    theta = m.mean(axis=1)
    res = yy - yy.mean(axis=2, keepdims=True) - yy.mean(axis=1, keepdims=True) + yy.mean(axis=(1, 2), keepdims=True)
    nu_e = (g - 1) * (p - 1)
    s2 = (res ** 2).sum(axis=(1, 2)) / nu_e
    sp2 = (pi ** 2).sum(axis=1)
    scaled = s2 * (sq.KAPPA ** 2 + sp2)
    sm2 = m.var(axis=1, ddof=1)
    big_d = sq.D0 + g - 1
    v = (sq.D0 * (tau0 ** 2 + scaled) + (g - 1) * sm2) / big_d
    denom = (sq.D0 * tau0 ** 2 / big_d) ** 2 / sq.D0 + (sq.D0 * scaled / big_d) ** 2 / nu_e \
        + ((g - 1) * sm2 / big_d) ** 2 / (g - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denom > 0, v * v / denom, 1000.0)
    se2 = v / g
    if layout == sq.ALTERNATING:
        se2 = se2 + (1 - 1 / g) * np.maximum(0.0, v - s2 * sp2) / g
    q = _quantiles(1.0 - a_look, np.clip(np.floor(df), 1, 1000).astype(int))
    se = np.sqrt(se2)
    return theta, theta - q * se, theta + q * se


def sequential(y: np.ndarray, s: np.ndarray, layout: str = sq.SIDE_BY_SIDE, max_pairs: int = sq.MAX_PAIRS,
               finalists: int = sq.FINALISTS, ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per replication the first conclusive look's pair count (0: none) and its verdict (+1 "faster", −1 "not
    faster", 0 none): the rounds stop at the first conclusive look, as the search's do on an idle machine.
    ``ends``: per replication the pair count at which the budget ends the rounds (default ``max_pairs``); the
    decision's final look is there when it falls between look points (``request_test(final=True)``)."""
    a_look = sq.alpha_per_look(sq.ALPHA, max_pairs, finalists)
    r = y.shape[0]
    ends = np.full(r, max_pairs) if ends is None else ends
    points = sq.look_points(max_pairs)
    stop = np.zeros(r, int)
    verdict = np.zeros(r, int)
    for g in range(sq.MIN_PAIRS, max_pairs + 1):
        at = (ends == g) if g not in points else (ends >= g)
        if not at.any():
            continue
        _th, lo, hi = batch_look(y, s, g, layout, a_look)
        fast, slow = at & (lo > BAR), at & (hi < BAR)
        open_ = stop == 0
        verdict[open_ & fast] = 1
        verdict[open_ & slow & ~fast] = -1
        stop[open_ & (fast | slow)] = g
    return stop, verdict


def check_batch(rng: np.random.Generator, n: int = 40) -> float:
    """The largest difference (ln scale) between :func:`batch_look` and ``sequential.request_test`` over random
    cases of both layouts and 2, 3 and 6 pairs (0 up to rounding)."""
    worst = 0.0
    for layout in sq.LAYOUTS:
        y = rng.normal(0.2, 0.3, size=(n, sq.MAX_PAIRS, 5))
        s = rng.uniform(0.3, 1.2, size=y.shape)
        for g in (2, 3, 6):
            th, lo, hi = batch_look(y, s, g, layout, sq.alpha_per_look())
            for i in range(n):
                reqs = [sq.PairedRequest(p, b, b // 2, float(y[i, b, p]), 1.0, float(s[i, b, p]))
                        for b in range(g) for p in range(y.shape[2])]
                lk = sq.request_test(reqs, sq.MIN_GAIN, layout=layout)
                assert lk.low is not None and lk.high is not None and lk.mean_ratio is not None
                worst = max(worst, abs(math.log(lk.low) - lo[i]), abs(math.log(lk.high) - hi[i]),
                            abs(math.log(lk.mean_ratio) - th[i]))
    return worst


# ---- data ---------------------------------------------------------------------------------------------

def residual_bootstrap(rng: np.random.Generator, r: int, name: str, target: float,
                       pairs_per_launch: int = 2, pairs: int = sq.MAX_PAIRS) -> tuple[np.ndarray, np.ndarray]:
    """``(Y, S)`` of ``r`` replications of ``pairs`` pairs from the recording ``name`` (module docstring),
    centred on the true ln ratio ``target`` (under the recording's typical time weights)."""
    _d, yr, sr = load_recording(name)
    nl, per, p = yr.shape
    flat = yr.reshape(nl * per, p)
    grand = flat.mean()
    alpha = flat.mean(axis=0) - grand
    bm = flat.mean(axis=1) - grand
    lm = bm.reshape(nl, per).mean(axis=1)
    u = bm - np.repeat(lm, per)
    res = flat - flat.mean(axis=1, keepdims=True) - flat.mean(axis=0, keepdims=True) + grand
    s2 = (res ** 2).sum() / ((nl * per - 1) * (p - 1))
    # the pair and launch-pair effects also carry request noise: shrink them to their variance components
    tau2 = max(0.0, u.var(ddof=1) / (1 - 1 / per) - s2 / p)
    lam2 = max(0.0, lm.var(ddof=1) - (tau2 + s2 / p) / per)
    u = u / max(u.std(ddof=1), 1e-12) * math.sqrt(tau2)
    lm = (lm - lm.mean()) / max(lm.std(ddof=1), 1e-12) * math.sqrt(lam2)
    res = res.ravel() * math.sqrt(nl * per * p / ((nl * per - 1) * (p - 1)))  # residuals have fewer df
    g = pairs
    y = target + alpha[None, None, :] + rng.choice(res, size=(r, g, p))
    n_l = math.ceil(g / pairs_per_launch)
    y += np.repeat(rng.choice(lm, size=(r, n_l)), pairs_per_launch, axis=1)[:, :g, None]
    y += rng.choice(u, size=(r, g))[:, :, None]
    sf = sr.reshape(nl * per, p)
    s = sf[rng.integers(0, nl * per, size=(r, g, p)), np.arange(p)[None, None, :]]
    pi = np.median(sf, axis=0) / np.median(sf, axis=0).sum()
    y -= float((alpha * pi).sum())
    return y, s


def abba(rng: np.random.Generator, r: int, target: float, sigma: float, launch_sd: float, prompts: int = 8,
         prompt_sd: float = 0.19) -> tuple[np.ndarray, np.ndarray]:
    """``(Y, S)`` of alternating launches A{r0} B{r0,r1} A{r1,r2} …: request noise ``sigma``, every launch its
    own ln-speed offset (SD ``launch_sd``, shared by all its requests); pair ``j`` compares B_{j//2} with
    A_{(j+1)//2}. Equal request times."""
    g = sq.MAX_PAIRS
    alpha = rng.normal(0, prompt_sd, size=(r, 1, prompts))
    alpha -= alpha.mean(axis=2, keepdims=True)
    e = rng.normal(0, sigma, size=(r, g, prompts))
    b_off = rng.normal(0, launch_sd, size=(r, g // 2 + 1))
    a_off = rng.normal(0, launch_sd, size=(r, g // 2 + 1))
    j = np.arange(g)
    y = target + alpha + e + (b_off[:, j // 2] - a_off[:, (j + 1) // 2])[:, :, None]
    return y, np.ones_like(y)


def upper_95(k: int, n: int) -> float:
    """Wilson's upper 95 % bound of a rate ``k / n``."""
    z = 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre + half


__all__ = ["BAR", "RECORDINGS", "abba", "batch_look", "check_batch", "load_recording", "residual_bootstrap",
           "sequential", "spread", "upper_95"]
