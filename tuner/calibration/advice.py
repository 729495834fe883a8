"""Live advice: what the served traffic's acceptance predicts for the served profile (issue 28 item 4).

While a profile is served, llama-server's ``/metrics`` per-position acceptance counters over the last requests
(:class:`~tuner.calibration.predict.PerPositionCounts`, a difference of two scrapes; tools/server/server-context.cpp
folds them in at slot release) predict the speedup of every ``n_max`` up to the served one
(:func:`~tuner.calibration.predict.predicted_ratio`, ``p_min`` 0) with the cost of a verification step at each
draft length the sweep measured with synthetic acceptance (:mod:`tuner.calibration.verifycost`), or, for a profile
without that curve, the cost fitted to the winner's own run (:func:`~tuner.calibration.predict.fit_run_cost`); both
kept in the profile by :func:`live_facts_json`. No speculation is 1.0 by definition: every prediction is a ratio to the model alone.

:func:`live_advice` compares them and gives one verdict. A prediction only changes the verdict when it beats the
served ``n_max`` by more than the profile's own measured interval (the sequential test's lower bound,
``speedup_ci_low``, relative to its speedup): a difference the tune itself could not resolve is not advice.
Nothing here changes what is served; the tray only offers a re-tune.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .candidates import Candidate
from .predict import CostModel, PerPositionCounts, StepCost, fit_run_cost, predicted_ratio
from .results import Measurement
from .search.record import Record
from .search.rules import draft_length
from .verifycost import CurveError, VerifyCurve

if TYPE_CHECKING:  # the Monitor's window; not loaded with the calibration package
    from tuner.telemetry.spec_window import SpecTotals

#: Fewest finished requests before a verdict: one head's acceptance ranges 0.41–0.81 from prompt to prompt
#: (llama.cpp PR #22673), so a handful of requests can sit anywhere in that range; at 10 the mean of such a
#: spread is within about ±0.06 (0.2 ÷ √10), below the gaps between draft lengths a verdict acts on.
MIN_REQUESTS = 10
#: Share of draft steps that accepted every drafted token at or above which a longer ``n_max`` might pay:
#: then the draft ran out before the target disagreed in most steps. At 0.6, even if the next position's own
#: acceptance were only 0.6 too, one more drafted token adds about 0.36 accepted tokens per step, more than
#: the per-token cost ``u`` the sweeps fit for drafts that win (well under 0.3 of a target token).
LONGER_MIGHT_PAY = 0.6
#: Relative margin used when the profile kept no interval (a profile decided on screening only): 5 %, the
#: smallest gain the sweep itself calls a win by default.
DEFAULT_MARGIN = 0.05

KEEP = "keep"
SHORTER = "shorter"
ALONE = "alone"
LONGER = "longer"
TOO_FEW = "too_few"
VERDICTS = (KEEP, SHORTER, ALONE, LONGER, TOO_FEW)

_FACTS_KEY = "live_prediction"


@dataclass(frozen=True)
class ProfileFacts:
    """What the live prediction needs from the served profile.

    Attributes:
        n_max: the draft length served (``--spec-draft-n-max``, or the n-gram type's ``n_max``).
        cost: the winner's fitted cost of a verification step (``u``, ``w``; baseline tokens/s of its sweep).
        speedup: the profile's measured speedup (winner ÷ the model alone, paired).
        speedup_ci_low: the sequential test's lower bound of that speedup, ``None`` when it kept none.
        curve: the measured verify-cost curve of the served draft, ``None`` when the sweep had none for it.
    """

    n_max: int
    cost: CostModel
    speedup: float
    speedup_ci_low: float | None
    curve: VerifyCurve | None = None

    @property
    def step_cost(self) -> StepCost:
        """What a prediction prices a verification step with: the measured :attr:`curve`, else the fitted :attr:`cost`."""
        return self.curve if self.curve is not None else self.cost

    @property
    def margin(self) -> float:
        """Relative width of the measured interval, ``speedup ÷ lower bound − 1`` (:data:`DEFAULT_MARGIN`
        without a bound)."""
        if not self.speedup_ci_low or self.speedup_ci_low <= 0:
            return DEFAULT_MARGIN
        return max(0.0, self.speedup / self.speedup_ci_low - 1.0)

    @classmethod
    def from_decision(cls, decision: Mapping[str, Any]) -> ProfileFacts | None:
        """The facts a saved profile's ``decision`` keeps (:func:`live_facts_json`); ``None`` for a profile
        saved before live predictions, or one that serves no speculation."""
        f = decision.get(_FACTS_KEY)
        if not isinstance(f, Mapping):
            return None
        try:
            cost = CostModel(float(f["per_draft_token"]), float(f["per_step"]), float(f["baseline_gen_tokens_per_s"]))
            low = decision.get("speedup_ci_low")
            curve = VerifyCurve.from_json(f["verify_cost"]) if "verify_cost" in f else None
            return cls(int(f["n_max"]), cost, float(decision["speedup"]), float(low) if low else None, curve)
        except CurveError:
            return cls.from_decision({**decision, _FACTS_KEY: {k: v for k, v in f.items() if k != "verify_cost"}})
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Advice:
    """The verdict on the served traffic.

    Attributes:
        verdict: one of :data:`VERDICTS`: ``keep``; ``shorter`` (a shorter ``n_max`` would be faster);
            ``alone`` (no speculation would be faster); ``longer`` (a longer ``n_max`` might pay); ``too_few``
            (fewer than :data:`MIN_REQUESTS` requests, or none drafted).
        requests: finished requests behind the prediction.
        predicted: ``{n_max: predicted speedup over the model alone}`` for 1 … the served ``n_max``.
        served_n_max: the draft length served.
        served_speedup: the prediction at the served ``n_max`` (``None`` when nothing could be predicted).
        best_n_max: the fastest predicted ``n_max`` (``None`` when nothing could be predicted).
        measured_speedup: the profile's measured speedup, for "measured when tuned".
        margin: the relative margin a prediction had to clear (:attr:`ProfileFacts.margin`).
        last_position_acceptance: share of draft steps that accepted all ``served_n_max`` drafted tokens.
    """

    verdict: str
    requests: int
    predicted: dict[int, float]
    served_n_max: int
    served_speedup: float | None
    best_n_max: int | None
    measured_speedup: float
    margin: float
    last_position_acceptance: float | None = None

    @property
    def offers_retune(self) -> bool:
        """True when the verdict calls for a re-tune (not ``keep``, not ``too_few``)."""
        return self.verdict not in (KEEP, TOO_FEW)

    @property
    def alone_ratio(self) -> float | None:
        """How no speculation compares: 1.0 (the model alone) ÷ the served prediction; > 1 = alone is faster."""
        return 1.0 / self.served_speedup if self.served_speedup else None


def live_advice(window: PerPositionCounts, generated_tokens: float, requests: int, facts: ProfileFacts) -> Advice:
    """The verdict on the served traffic of the last ``requests`` requests.

    Args:
        window: the speculative counters accumulated over those requests (a difference of two ``/metrics``
            scrapes; per-position counters as long as the served ``n_max``).
        generated_tokens: tokens generated by them after each request's first (Δ``tokens_predicted_total`` −
            ``requests``), the ``generated`` of :func:`~tuner.calibration.predict.predicted_ratio`.
        requests: finished requests in the window (≥ 0).
        facts: the served profile's :class:`ProfileFacts`.

    Returns:
        :class:`Advice`. Order of the verdicts: ``too_few`` below :data:`MIN_REQUESTS` requests or without drafts
        or per-position counters; then ``alone`` when ``1 ÷ served prediction − 1`` exceeds the margin (and no
        shorter ``n_max`` beats no speculation by more); ``shorter`` when the best shorter ``n_max`` beats the
        served one by more than the margin; ``longer`` when :attr:`Advice.last_position_acceptance` ≥
        :data:`LONGER_MIGHT_PAY`; else ``keep``. Raises nothing.
    """
    k_served = facts.n_max
    predicted: dict[int, float] = {}
    for k in range(1, k_served + 1):
        r = predicted_ratio(window, generated_tokens, k, facts.step_cost)
        if r is not None:
            predicted[k] = r
    served = predicted.get(k_served)
    last = _last_position(window, k_served)
    best = max(predicted, key=lambda k: predicted[k]) if predicted else None
    return Advice(verdict=_verdict(predicted, served, best, last, requests, facts.margin), requests=requests,
                  predicted=predicted, served_n_max=k_served, served_speedup=served, best_n_max=best,
                  measured_speedup=facts.speedup, margin=facts.margin, last_position_acceptance=last)


def advice_on_window(window: SpecTotals, facts: ProfileFacts) -> Advice:
    """:func:`live_advice` on the Monitor's window of the last requests
    (:meth:`tuner.telemetry.spec_window.SpecWindow.totals`): its counters, its generated tokens less one per
    request (each request's first token is not a step's), its requests."""
    counts = PerPositionCounts(int(window.drafts), int(window.draft_tokens), int(window.accepted_tokens),
                               tuple(int(v) for v in window.accepted_per_pos))
    return live_advice(counts, max(0.0, window.generated_tokens - window.requests), window.requests, facts)


def _verdict(predicted: Mapping[int, float], served: float | None, best: int | None, last: float | None,
             requests: int, margin: float) -> str:
    if requests < MIN_REQUESTS or served is None or best is None:
        return TOO_FEW
    bar = served * (1.0 + margin)  # what an alternative must beat: the served prediction and the interval
    top = predicted[best]
    shorter_wins = top > bar and top > served  # best is a shorter n_max when it beats the served one
    if 1.0 > bar and (not shorter_wins or 1.0 >= top):
        return ALONE
    if shorter_wins:
        return SHORTER
    if last is not None and last >= LONGER_MIGHT_PAY:
        return LONGER
    return KEEP


def _last_position(window: PerPositionCounts, k: int) -> float | None:
    """Share of draft steps that accepted ``k`` or more drafted tokens (``per_pos[k-1] ÷ drafts``)."""
    if not window.drafts_total or len(window.accepted_per_pos) < k or k < 1:
        return None
    return window.accepted_per_pos[k - 1] / window.drafts_total


def live_facts_json(winner: Candidate, measurements: Sequence[Measurement], speedup: float,
                    baseline_gen_tokens_per_s: float | None,
                    curves: Mapping[str, VerifyCurve] | None = None) -> dict[str, Any] | None:
    """What a saved profile keeps for live predictions (the decision's ``live_prediction``): the served draft
    length, the cost of a verification step fitted to the winner's own measured runs at its measured
    ``speedup`` (:func:`~tuner.calibration.predict.fit_run_cost`, ``w`` = 0), and the winner's measured verify-cost
    curve when ``curves`` (``{draft group: curve}``, ``Record.group``) has one (``verify_cost``: it prices the
    prediction then). ``None`` for no speculation, a chain or autotune (no single draft length), or a winner
    without per-position counters."""
    k = None if winner.is_baseline else draft_length(winner)
    counts: PerPositionCounts | None = None
    generated = 0.0
    for m in measurements:
        if m.candidate.key != winner.key or not m.ok or m.counts is None:
            continue
        counts = m.counts if counts is None else _sum(counts, m.counts)
        generated += sum(max(1, (s.predicted_n or 1) - 1) for s in m.samples)
    if k is None or counts is None or speedup <= 0:
        return None
    cost = fit_run_cost(counts, generated, speedup)
    if cost is None:
        return None
    curve = (curves or {}).get(Record.group(winner))
    return {"n_max": k, "per_draft_token": cost.per_draft_token, "per_step": cost.per_step,
            "baseline_gen_tokens_per_s": baseline_gen_tokens_per_s or 0.0,
            **({"verify_cost": curve.to_json()} if curve is not None else {})}


def _sum(a: PerPositionCounts, b: PerPositionCounts) -> PerPositionCounts:
    n = max(len(a.accepted_per_pos), len(b.accepted_per_pos))
    pa = list(a.accepted_per_pos) + [0] * (n - len(a.accepted_per_pos))
    pb = list(b.accepted_per_pos) + [0] * (n - len(b.accepted_per_pos))
    return PerPositionCounts(a.drafts_total + b.drafts_total, a.draft_tokens_total + b.draft_tokens_total,
                             a.accepted_tokens_total + b.accepted_tokens_total,
                             tuple(x + y for x, y in zip(pa, pb)))


FACTS_KEY = _FACTS_KEY
"""The key of :func:`live_facts_json` in a saved profile's ``decision``."""
