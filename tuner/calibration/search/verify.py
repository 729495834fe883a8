"""The verify-cost stage: each draft model's (and MTP head's) measured cost of a verification step.

After each draft model's (or MTP head's) probe (``tuner.calibration.verifycost.measurable``), the sweep takes
its :class:`~tuner.calibration.verifycost.VerifyCostCurve` from the cache, or — when the probe drafted and did
not lose clearly — measures it with synthetic acceptance (``tuner.calibration.verifycost.measure_curve``: a few
launches of a few short greedy requests) when its estimated time fits the budget left (the paired rounds'
reserve kept, as for a probe) and the stage's :data:`SHARE` of the budget; the ETA counts it while it runs. Where a curve exists, the screening stage predicts that draft's lengths and prunes
them with it instead of the cost model fitted to its own runs (one mechanism:
:meth:`~tuner.calibration.search.screening.Screening.predict`). No source (a build without the flag, a caller
that gives none): nothing happens.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..candidates import Candidate, CandidatePlan
from ..measure import LaunchError, RequestError
from ..results import Measurement
from ..sentences import Sentence, Slot
from ..verifycost import N_PREDICT, PROMPTS, CurveSource, VerifyCostCurve, launches_needed, measurable
from .budget import Budget, Estimates
from .eta import Eta
from .events import SweepEvents
from .record import Record

SHARE = 0.2
"""At most this fraction of the budget goes to measuring curves (all drafts together): a draft whose curve does
not fit keeps the cost model fitted to its own runs."""


class VerifyCostStage:
    """The verify-cost stage of one sweep (module docstring); ``source`` None: no stage."""

    def __init__(self, plan: CandidatePlan, source: CurveSource | None, record: Record, budget: Budget,
                 estimates: Estimates, eta: Eta, events: SweepEvents, cancel: threading.Event,
                 busy: Callable[[], bool]) -> None:
        self.plan = plan
        self.source = source
        self.record = record
        self.budget = budget
        self.estimates = estimates
        self.eta = eta
        self.events = events
        self.cancel = cancel
        self.busy = busy
        self.spent_s = 0.0
        """Seconds the curves' launches took so far."""

    def estimate_s(self) -> float:
        """One curve: its launches, each a load, a warm-up and the requests at the baseline's speed."""
        tps = self.record.base_tps or self.estimates.tps() or 20.0
        per_launch = self.estimates.load() + (8 + len(PROMPTS) * N_PREDICT * 2) / max(tps, 1e-3)
        return launches_needed(self.source.lengths if self.source else ()) * per_launch

    def ensure(self, c: Candidate, probe: Measurement) -> None:
        """Take ``c``'s curve from the cache, or measure it (module docstring) after its ``probe`` run, unless
        that run lost clearly (stopped early) or drafted nothing: such a draft's lengths are not refined anyway.

        Raises:
            Cancelled: the user cancelled.
        """
        group = self.record.group(c)
        if self.source is None or not measurable(c) or group in self.record.verify_costs:
            return
        curve = self.source.known(c)
        if curve is None:
            if probe.stopped_early or not probe.ok or probe.counts is None or not probe.counts.drafts_total:
                return
            curve = self._measure(c)
            if curve is None:
                return
        self.record.verify_costs[group] = curve
        self.record.notes.append(Sentence(Slot.SWEEP, "sweep.verify_cost", {
            "label": Path(c.draft_path).name if c.draft_path else c.spec_type, "lengths": list(curve.lengths),
            "costs": list(curve.costs)}))
        costs = ", ".join(f"{x:.2f}" for x in curve.per_length(8))
        self.events("verifycost", f"{c.label}: verification cost measured ({costs} × a plain step at draft "
                    "lengths 1–8)", candidate=c, detail={"verify_cost": curve.to_json()})

    def _measure(self, c: Candidate) -> VerifyCostCurve | None:
        """Measure ``c``'s curve when it fits the budget left (the paired rounds' reserve kept) and the stage's
        share (:data:`SHARE` of the budget, all curves together); ``None`` when skipped or failed (an event)."""
        assert self.source is not None
        est = self.estimate_s()
        if self.spent_s + est > SHARE * self.budget.budget_s or not self.estimates.fits(
                self.budget, est, True, False, self.busy()):
            self.events("skipped", f"{c.label}: verification cost not measured, the time budget is spent (its cost "
                        "is fitted to its runs)", candidate=c)
            return None
        self.eta.pending_s += est
        t0 = self.budget.elapsed_s()
        try:
            return self.source.measure(c, self.cancel)
        except (LaunchError, RequestError, ValueError) as exc:
            self.events("skipped", f"{c.label}: verification cost not measured ({exc})", candidate=c)
            return None
        finally:
            self.spent_s += self.budget.elapsed_s() - t0
            self.eta.pending_s = max(0.0, self.eta.pending_s - est)


__all__ = ["VerifyCostStage"]
