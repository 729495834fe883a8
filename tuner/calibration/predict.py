"""Acceptance prediction from per-position counters, and the throughput cost model.

DESIGN.md "Calibration method" step 5. llama-server's ``/metrics`` exposes
``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``: the number of verification
steps in which at least i+1 drafted tokens were accepted (tools/server/server-context.cpp, the
``n_accepted_per_pos`` fold at slot release; printed by ``server_task_result_metrics::to_metrics`` in
server-task.cpp). With ``drafts`` = ``spec_decode_num_drafts_total`` (verification steps), a run at a
long draft length K with ``p_min`` 0 predicts, for any k ≤ K:

    accepted tokens per step at n_max k  =  Σ_{i<k} per_pos[i] / drafts
    acceptance rate at n_max k           =  that / min(k, drafted tokens per step at K)

Throughput model (per target-token time ``t`` = 1 / baseline tokens/s): one verification step at draft
length k costs ``t · (1 + w + u·k)`` seconds, where ``u`` is the cost of drafting and verifying one more
token relative to a target token, and ``w`` a fixed per-step overhead; it yields ``1 + a(k)`` tokens.
``u`` (and ``w`` when two or more draft lengths were measured) are fitted to measured runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tuner.telemetry.prom import parse_metrics


@dataclass(frozen=True)
class PerPositionCounts:
    """Speculative counters from ``/metrics`` (cumulative, or a difference of two scrapes).

    Attributes:
        drafts_total: ``spec_decode_num_drafts_total`` (verification steps with a draft).
        draft_tokens_total: ``spec_decode_num_draft_tokens_total``.
        accepted_tokens_total: ``spec_decode_num_accepted_tokens_total``.
        accepted_per_pos: ``spec_decode_num_accepted_tokens_per_pos_total`` by position 0, 1, …
            (empty when the server has not exposed them yet).
    """

    drafts_total: int
    draft_tokens_total: int
    accepted_tokens_total: int
    accepted_per_pos: tuple[int, ...] = ()

    @property
    def acceptance(self) -> float | None:
        """accepted ÷ drafted tokens, ``None`` when nothing was drafted."""
        return self.accepted_tokens_total / self.draft_tokens_total if self.draft_tokens_total else None

    @property
    def drafted_per_step(self) -> float | None:
        """Mean drafted tokens per verification step, ``None`` without drafts."""
        return self.draft_tokens_total / self.drafts_total if self.drafts_total else None

    def minus(self, before: PerPositionCounts | None) -> PerPositionCounts:
        """Counters accumulated since ``before`` (a previous scrape of the same server)."""
        if before is None:
            return self
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        a = list(self.accepted_per_pos) + [0] * (n - len(self.accepted_per_pos))
        b = list(before.accepted_per_pos) + [0] * (n - len(before.accepted_per_pos))
        return PerPositionCounts(
            drafts_total=self.drafts_total - before.drafts_total,
            draft_tokens_total=self.draft_tokens_total - before.draft_tokens_total,
            accepted_tokens_total=self.accepted_tokens_total - before.accepted_tokens_total,
            accepted_per_pos=tuple(x - y for x, y in zip(a, b)),
        )

    def accepted_per_step(self, k: int) -> float | None:
        """Predicted accepted tokens per verification step at draft length ``k`` (Σ_{i<k} per_pos[i] / drafts).

        Returns ``None`` without drafts or per-position counters. ``k`` beyond the probe's length uses
        the probe's counters only (a lower bound).
        """
        if not self.drafts_total or not self.accepted_per_pos or k < 1:
            return None
        return sum(self.accepted_per_pos[:k]) / self.drafts_total

    def predicted_acceptance(self, k: int) -> float | None:
        """Predicted acceptance rate (accepted ÷ drafted) at draft length ``k``; ``None`` when unknown."""
        a = self.accepted_per_step(k)
        d = self.drafted_per_step
        if a is None or not d:
            return None
        return min(1.0, a / min(float(k), d))

    def to_json(self) -> dict:
        """Plain-JSON form."""
        return {
            "drafts_total": self.drafts_total,
            "draft_tokens_total": self.draft_tokens_total,
            "accepted_tokens_total": self.accepted_tokens_total,
            "accepted_per_pos": list(self.accepted_per_pos),
        }


def parse_spec_metrics(text: str) -> PerPositionCounts:
    """Read the speculative counters from Prometheus text of llama-server's ``/metrics``
    (parsed by :func:`tuner.telemetry.prom.parse_metrics`, the one ``/metrics`` parser).

    Missing series count as 0 (they are absent until the first speculative request ends, S7 in the
    reference).

    Raises:
        tuner.telemetry.prom.MetricsParseError: ``text`` is not Prometheus text.
    """
    snap = parse_metrics(text)
    return PerPositionCounts(
        drafts_total=int(snap.drafts_total or 0),
        draft_tokens_total=int(snap.draft_tokens_total or 0),
        accepted_tokens_total=int(snap.accepted_tokens_total or 0),
        accepted_per_pos=tuple(int(v) for v in snap.accepted_per_pos_total),
    )


@dataclass(frozen=True)
class CostModel:
    """Relative cost of one verification step: ``1 + w + u·k`` target-token times at draft length k.

    Attributes:
        per_draft_token: ``u`` (≥ 0): drafting + verifying one more token, relative to a target token.
        per_step: ``w`` (≥ 0): fixed overhead of a speculative step.
        baseline_gen_tokens_per_s: measured baseline tokens/s of the same sweep.
    """

    per_draft_token: float
    per_step: float
    baseline_gen_tokens_per_s: float

    def predict_gen_tokens_per_s(self, accepted_per_step: float, k: float) -> float:
        """Predicted tokens/s at draft length ``k`` yielding ``accepted_per_step`` accepted tokens per step."""
        return self.baseline_gen_tokens_per_s * (1.0 + accepted_per_step) / self.step_cost(k)

    def step_cost(self, k: float) -> float:
        """Cost of one verification step drafting ``k`` tokens, in target-token times: ``1 + w + u·k``."""
        return 1.0 + self.per_step + self.per_draft_token * k


class StepCost(Protocol):
    """What a cost of verification can be asked (:func:`predicted_ratio`): :class:`CostModel` (fitted to
    measured runs), or a measured verify-cost curve of the target."""

    def step_cost(self, k: float) -> float:
        """Cost of one verification step drafting ``k`` tokens, in target-token times (≥ 1 for ``k`` ≥ 0)."""
        ...


class PricedCost(StepCost, Protocol):
    """A step cost with the baseline it predicts against (:func:`predict_curve`): :class:`CostModel`, or a measured
    verify-cost curve (``tuner.calibration.verifycost.PricedCurve``)."""

    @property
    def baseline_gen_tokens_per_s(self) -> float:
        """The target alone's tokens/s every prediction is relative to."""
        ...

    def predict_gen_tokens_per_s(self, accepted_per_step: float, k: float) -> float:
        """Predicted tokens/s drafting ``k`` tokens per step with ``accepted_per_step`` accepted."""
        ...


FREE_VERIFICATION = CostModel(0.0, 0.0, 1.0)
"""The optimistic cost: a verification step costs one plain step whatever it drafts (an upper bound on any
speedup, since verifying ``k`` drafted tokens never costs less than decoding one)."""


def accepted_tokens_at(counts: PerPositionCounts, k: int) -> float | None:
    """Accepted tokens over the run at draft length ``k`` from a run at length ``K`` (its per-position
    counters): ``Σ_{i<k} per_pos[i]`` for ``k ≤ K``; beyond ``K`` every step that accepted all ``K`` is taken
    to accept the next ``k − K`` too (an upper bound). ``None`` without counters."""
    pp = counts.accepted_per_pos
    if not pp or k < 1:
        return None
    if k <= len(pp):
        return float(sum(pp[:k]))
    return float(sum(pp) + pp[-1] * (k - len(pp)))


def _draft_share(counts: PerPositionCounts, generated: float) -> float | None:
    """Share of the run's verification steps that verified a draft: ``D ÷ S`` with ``S = n − A`` steps (each
    yields its accepted tokens and one more); ``None`` without drafts."""
    steps = generated - counts.accepted_tokens_total
    if not counts.drafts_total or steps <= 0:
        return None
    return min(1.0, counts.drafts_total / steps)


def _span_counts(counts: PerPositionCounts) -> list[tuple[int, int]]:
    """``(accepted a, draft steps that accepted exactly a)`` from the per-position counters; ``a`` = the counters'
    length means "all of them" (the span may go on)."""
    pp = counts.accepted_per_pos
    out = [(0, counts.drafts_total - pp[0])]
    out += [(a, pp[a - 1] - pp[a]) for a in range(1, len(pp))]
    out.append((len(pp), pp[-1]))
    return [(a, n) for a, n in out if n > 0]


def predicted_ratio(counts: PerPositionCounts, generated: float, k: int, cost: StepCost) -> float | None:
    """Predicted speedup over the target alone at draft length ``k``, from a measured run's counters (a run at a
    longer length ``K``, or any length for ``k`` ≤ it), counting the steps a run at ``k`` would take.

    A probe step that accepted ``a`` of its drafted tokens produced ``a + 1`` tokens (the target's own next one
    too); the per-position counters give how many steps accepted each ``a`` (:func:`_span_counts`). With a
    deterministic draft (greedy, ``p_min`` 0: the draft's guess depends only on the text so far) a run at ``k``
    covers the same ``a + 1`` tokens in ``⌈(a + 1) ÷ (k + 1)⌉`` steps — it accepts ``k`` and the target's next token
    while the span lasts — and a step that accepted all ``K`` in ``(a + 1) ÷ (k + 1)`` (its span may go on). The
    run's steps without a draft (an n-gram type that found no match: ``generated − accepted − drafts``) cost one
    target token each; every draft step costs ``cost.step_cost(min(k, drafted tokens per step))``. Speedup =
    ``generated`` ÷ that time. At ``K`` itself this is the run's own ``(1 + f·a) ÷ ((1 − f) + f·cost)``.

    Counting steps rather than averaging acceptance per probe step matters where acceptance is uneven (easy
    stretches and hard ones): a short ``n_max`` takes several steps through an easy stretch that the probe crossed
    in one, which the average per probe step leaves out. On simulated streams of uneven acceptance the average
    missed a run at ``k`` by up to 22 % and this count by under 1 % (closing note of issue 28); on the quality
    family of ``bench/n_max_prediction.py`` the average undershot ``n_max`` 5–12 by 13–16 %.

    Args:
        counts: the run's speculative counters (per-position ones needed).
        generated: the run's generated tokens (Σ ``predicted_n − 1``).
        k: the draft length to predict (≥ 1).
        cost: the cost of a verification step (:class:`StepCost`).

    Returns:
        The predicted speedup, ``None`` without per-position counters or drafts.
    """
    f = _draft_share(counts, generated)
    dps = counts.drafted_per_step
    if f is None or not dps or not counts.accepted_per_pos or k < 1:
        return None
    full = len(counts.accepted_per_pos)
    steps_k = sum(n * ((a + 1) / (k + 1) if a == full else -(-(a + 1) // (k + 1))) for a, n in _span_counts(counts))
    plain = max(0.0, generated - counts.accepted_tokens_total - counts.drafts_total)
    time = plain + steps_k * cost.step_cost(min(float(k), dps))
    return generated / time if time > 0 else None


def fit_run_cost(counts: PerPositionCounts, generated: float, ratio: float) -> CostModel | None:
    """The :class:`CostModel` (``w`` = 0) under which :func:`predicted_ratio` at the run's own length gives its
    measured speedup ``ratio`` (its verification steps' cost, whatever share of the steps drafted: an n-gram
    type too); ``None`` without counters, drafts or a ratio."""
    f = _draft_share(counts, generated)
    dps = counts.drafted_per_step
    if f is None or not dps or ratio <= 0 or not counts.accepted_per_pos:
        return None
    a = counts.accepted_tokens_total / counts.drafts_total
    per_step = ((1.0 + f * a) / ratio - (1.0 - f)) / f  # one verification step, in target-token times
    return CostModel(max(0.0, (per_step - 1.0) / dps), 0.0, 1.0)


def step_cost_ratio(gen_tokens_per_s: float, baseline_gen_tokens_per_s: float, accepted_per_step: float) -> float:
    """Measured cost of one verification step relative to one baseline token: ``(1 + a) · base / tps``."""
    return (1.0 + accepted_per_step) * baseline_gen_tokens_per_s / gen_tokens_per_s


def fit_cost_model(
    baseline_gen_tokens_per_s: float,
    runs: Sequence[tuple[float, float, float]],
) -> CostModel:
    """Fit ``u`` and ``w`` of :class:`CostModel` to measured runs of one draft.

    Args:
        baseline_gen_tokens_per_s: baseline tokens/s (> 0).
        runs: ``(k, accepted_per_step, gen_tokens_per_s)`` per measured draft length ``k`` (drafted
            tokens per step, if smaller than ``n_max``, may be passed as ``k``).

    Returns:
        With one run: ``w`` = 0 and ``u`` from that run. With runs at two or more distinct ``k``: a
        least-squares line through the step costs (both clamped at ≥ 0).

    Raises:
        ValueError: no runs, or a non-positive throughput.
    """
    if baseline_gen_tokens_per_s <= 0:
        raise ValueError("baseline_gen_tokens_per_s must be > 0")
    pts: list[tuple[float, float]] = []
    for k, a, tps in runs:
        if tps <= 0 or k <= 0:
            raise ValueError(f"bad run (k={k}, gen_tokens_per_s={tps})")
        pts.append((float(k), step_cost_ratio(tps, baseline_gen_tokens_per_s, a) - 1.0))
    if not pts:
        raise ValueError("fit_cost_model needs at least one run")
    ks = {k for k, _ in pts}
    if len(ks) < 2:
        u = max(0.0, sum(c / k for k, c in pts) / len(pts))
        return CostModel(u, 0.0, baseline_gen_tokens_per_s)
    n = len(pts)
    mk = sum(k for k, _ in pts) / n
    mc = sum(c for _, c in pts) / n
    var = sum((k - mk) ** 2 for k, _ in pts)
    u = sum((k - mk) * (c - mc) for k, c in pts) / var
    w = mc - u * mk
    if u < 0 or w < 0:
        # Fall back to a line through the origin (noise made the slope or intercept negative).
        u = max(0.0, sum(c * k for k, c in pts) / sum(k * k for k, _ in pts))
        w = 0.0
    return CostModel(u, w, baseline_gen_tokens_per_s)


def predict_curve(
    counts: PerPositionCounts, model: PricedCost, lengths: Sequence[int], generated: float | None = None,
) -> list[tuple[int, float, float]]:
    """Predicted ``(k, acceptance, gen_tokens_per_s)`` for each draft length in ``lengths``.

    Lengths beyond the probe's per-position series are skipped. Drafted tokens per step are capped
    at the probe's mean (drafts shorten near the end of a generation). With ``generated`` (the probe's
    Σ ``predicted_n − 1``) each length's tokens/s is :func:`predicted_ratio` (the steps a run at ``k`` takes,
    counted from the spans) × the model's baseline, the prediction the pruning rule and the Monitor make;
    without it, the acceptance averaged per probe step (:meth:`PerPositionCounts.accepted_per_step`), which
    undershoots short drafts where easy and hard stretches alternate.
    """
    out: list[tuple[int, float, float]] = []
    cap = counts.drafted_per_step or 0.0
    for k in lengths:
        if k > len(counts.accepted_per_pos):
            continue
        a = counts.accepted_per_step(k)
        acc = counts.predicted_acceptance(k)
        if a is None or acc is None:
            continue
        k_eff = min(float(k), cap) if cap else float(k)
        ratio = predicted_ratio(counts, generated, k, model) if generated else None
        tps = ratio * model.baseline_gen_tokens_per_s if ratio else model.predict_gen_tokens_per_s(a, k_eff)
        out.append((k, acc, tps))
    return out
