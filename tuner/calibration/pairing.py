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

The sequential test (``tuner.calibration.sequential``) takes the paired requests of the pairs
(:func:`paired_requests`) as its units, the pairs as blocks that carry the machine's drift; :func:`compare`
runs it over a candidate's pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .candidates import Candidate
from .prompts import Prompt
from .results import Measurement, Sample
from .sequential import (
    ALPHA,
    ALTERNATING,
    BUSY_EXTRA_PAIRS,
    FINALISTS,
    LOOK_STEP,
    MAX_PAIRS,
    MIN_GAIN,
    MIN_PAIRS,
    SIDE_BY_SIDE,
    Look,
    PairedRequest,
    alpha_per_look,
    look_points,
    request_looks,
    request_test,
    t_cdf,
    t_quantile,
)

RequestKey = tuple[int, int]
"""``(prompt_index, repetition)``."""


def generated_tokens_and_s(predicted_n: float | None, predicted_ms: float | None) -> tuple[float, float] | None:
    """``(generated tokens, generation seconds)`` from an answer's ``timings.predicted_n`` and
    ``timings.predicted_ms`` (llama-server: tools/server/server-common.cpp, ``server_slot_stats::to_json``):
    ``predicted_n − 1`` tokens (the first comes with the prompt's evaluation; at least 1) over
    ``predicted_ms ÷ 1000``; None when either is missing or zero."""
    try:
        n, ms = int(predicted_n or 0), float(predicted_ms or 0.0)
    except (TypeError, ValueError):
        return None
    if n <= 0 or ms <= 0:
        return None
    return float(max(1, n - 1)), ms / 1000.0


def sample_tokens_and_s(s: Sample) -> tuple[float, float]:
    """``(generated tokens, generation seconds)`` of one request, the rule of
    ``Measurement.rep_gen_tokens_per_s_by_id`` (:func:`generated_tokens_and_s`); without timings 1 token over
    ``1 / gen_tokens_per_s`` s."""
    return (generated_tokens_and_s(s.predicted_n, s.predicted_ms)
            or (1.0, 1.0 / max(s.gen_tokens_per_s, 1e-9)))


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


def paired_requests(pairs: Sequence[Pair]) -> list[PairedRequest]:
    """The paired requests of ``pairs``, the sequential test's units (``tuner.calibration.sequential``): per
    request ``ln(candidate tokens/s ÷ baseline tokens/s)`` (:func:`sample_tokens_and_s` on each side), its
    pair's repetition id, the candidate's launch, the served mix's weight (:meth:`Mix.weights` over the pair's
    requests) and ``√(candidate s · baseline s)``. A request without a positive time or token count on either
    side is left out (its pair is then incomplete and the test leaves it out too)."""
    out: list[PairedRequest] = []
    for p in pairs:
        weights = p.mix.weights(p.candidate_samples) if p.mix is not None else [1.0] * len(p.candidate_samples)
        for c, b, w in zip(p.candidate_samples, p.baseline_samples, weights):
            (tc, dc), (tb, db) = sample_tokens_and_s(c), sample_tokens_and_s(b)
            if min(tc, dc, tb, db) <= 0 or not all(map(math.isfinite, (tc, dc, tb, db))):
                continue
            out.append(PairedRequest(c.prompt_index, p.repetition, p.candidate_launch,
                                     math.log((tc / dc) / (tb / db)), w, math.sqrt(dc * db)))
    return out


def _by_rep(m: Measurement) -> dict[int, dict[int, Sample]]:
    out: dict[int, dict[int, Sample]] = {}
    for s in m.samples:
        out.setdefault(s.repetition, {})[s.prompt_index] = s
    return out


HEAD_TO_HEAD = "contrast"
"""The stage of the launches that run a chained finalist next to the best single-type one, request by request
(``tuner.calibration.search.side_by_side``): their pairs are :func:`adjacent_pairs` with ``other`` the single."""


def adjacent_pairs(measurements: Sequence[Measurement], candidate: Candidate, mix: Mix | None = None,
                   other: Candidate | None = None) -> list[Pair]:
    """Every :class:`Pair` of ``candidate`` in a sweep, in time order.

    Args:
        measurements: the sweep's measurements in launch order (``Search.measurements``; a profile's
            ``evidence`` keeps that order). Each element is one launch.
        candidate: the speculative candidate (matched on ``Candidate.key``).
        mix: the served mix each pair's ratio is weighted by (``None`` = every request the same).
        other: ``None``: pairs with the baseline (``confirm``-stage launches); a candidate: the head-to-head
            pairs of ``candidate`` and ``other`` (:data:`HEAD_TO_HEAD`-stage launches; "baseline" in the
            pairs' field names is then ``other``).

    Only ``confirm``-stage launches that ran correctly and were not stopped early are paired, each
    with the ``confirm``-stage baseline launch right before or after it; a repetition forms a pair
    only when both sides ran exactly the same prompts for it. A baseline repetition pairs with at
    most one candidate repetition.
    """
    stage = "confirm" if other is None else HEAD_TO_HEAD
    pairs: list[Pair] = []
    used: set[tuple[int, int]] = set()
    for i, m in enumerate(measurements):
        if m.candidate.key != candidate.key or m.stage != stage or not m.ok or m.stopped_early:
            continue
        mine = _by_rep(m)
        for j in (i - 1, i + 1):
            if not 0 <= j < len(measurements):
                continue
            b = measurements[j]
            theirs_ok = b.candidate.is_baseline if other is None else b.candidate.key == other.key
            if not theirs_ok or b.stage != stage or not b.ok:
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


def head_to_head(measurements: Sequence[Measurement], a: Candidate, b: Candidate, mix: Mix | None = None,
                 layout: str = SIDE_BY_SIDE) -> Look | None:
    """The estimate of ``ln(a ÷ b)`` from the requests ``a`` and ``b`` ran head to head (:data:`HEAD_TO_HEAD`
    launches, :func:`adjacent_pairs` with ``other``): a :class:`Look` whose ``mean_ratio``, ``se`` and ``df`` are
    what :func:`tuner.calibration.sequential.contrast` pools (its verdict is not used). ``None`` without such pairs."""
    pairs = adjacent_pairs(measurements, a, mix, other=b)
    if not pairs:
        return None
    return request_test(paired_requests(pairs), 0.0, layout=layout, final=True)


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
    layout: str = SIDE_BY_SIDE,
    final: bool = False,
) -> Comparison | None:
    """The :class:`Comparison` of ``candidate`` in a sweep (``measurements`` in launch order).

    Adjacent pairs when there are any (:func:`adjacent_pairs`); otherwise a screening comparison: every
    request of the candidate's successful runs (a configuration measured again counts both launches)
    against the baseline's request with the same (prompt, repetition) key, over the keys that the
    candidate's successful runs and the baseline's successful
    runs (not ``superseded`` ones: a disturbed launch that was measured again) both measured. ``None`` when there is no shared request at all. Every pooled figure and pair
    ratio is weighted by ``mix`` (the served share of long-context requests; ``None`` = every request
    the same), so the speedup and the sequential test are about the served mix. ``final``: the paired rounds
    have ended (the decision's look, at whatever pair count they reached: ``sequential.request_test``).
    """
    pairs = adjacent_pairs(measurements, candidate, mix)
    if pairs:
        cs = tuple(s for p in pairs for s in p.candidate_samples)
        bs = tuple(s for p in pairs for s in p.baseline_samples)
        look = request_looks(paired_requests(pairs), min_gain, alpha, max_pairs, finalists, layout, final)
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
    "ALTERNATING",
    "BUSY_EXTRA_PAIRS",
    "Comparison",
    "FINALISTS",
    "HEAD_TO_HEAD",
    "LOOK_STEP",
    "Look",
    "MAX_PAIRS",
    "MIN_GAIN",
    "MIN_PAIRS",
    "Mix",
    "Pair",
    "PairedRequest",
    "SIDE_BY_SIDE",
    "adjacent_pairs",
    "alpha_per_look",
    "compare",
    "generated_tokens_and_s",
    "head_to_head",
    "look_points",
    "paired_requests",
    "pooled_tokens_per_s",
    "sample_tokens_and_s",
    "t_cdf",
    "t_quantile",
]
