"""The verify-cost stage: each draft model's (and MTP head's) measured cost of a verification step.

Right after the baseline, for each draft the plan probes (``tuner.calibration.verifycost.measurable``), the
sweep takes its :class:`~tuner.calibration.verifycost.VerifyCostCurve` from the cache, or measures it with
synthetic acceptance (``tuner.calibration.verifycost.measure_curve``: a few launches of a few short greedy
requests) when its estimated time fits the budget left (the paired rounds' reserve kept, as for a probe); the
ETA counts it while it runs. Where a curve exists, the screening stage predicts that draft's lengths and prunes
them with it instead of the cost model fitted to its own runs (one mechanism:
:meth:`~tuner.calibration.search.screening.Screening.predict`). No source (a build without the flag, a caller
that gives none): nothing happens.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..candidates import CandidatePlan
from ..measure import LaunchError, RequestError
from ..sentences import Sentence, Slot
from ..verifycost import N_PREDICT, PROMPTS, CurveSource, launches_needed, measurable
from .budget import Budget, Estimates
from .eta import Eta
from .events import SweepEvents
from .record import Record


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

    def estimate_s(self) -> float:
        """One curve: its launches, each a load, a warm-up and the requests at the baseline's speed."""
        tps = self.record.base_tps or self.estimates.tps() or 20.0
        per_launch = self.estimates.load() + (8 + len(PROMPTS) * N_PREDICT * 2) / max(tps, 1e-3)
        return launches_needed(self.source.lengths if self.source else ()) * per_launch

    def run(self) -> None:
        """Take or measure each probed draft's curve (module docstring).

        Raises:
            Cancelled: the user cancelled.
        """
        if self.source is None:
            return
        drafts = [c for c in (*self.plan.drafts, *([self.plan.mtp] if self.plan.mtp else [])) if measurable(c)]
        for c in drafts:
            group = self.record.group(c)
            curve = self.source.known(c)
            if curve is None:
                est = self.estimate_s()
                if not self.estimates.fits(self.budget, est, True, False, self.busy()):
                    self.events("skipped", f"{c.label}: verification cost not measured, the time budget is "
                                "spent (its cost is fitted to its runs)", candidate=c)
                    continue
                self.eta.pending_s += est
                try:
                    curve = self.source.measure(c, self.cancel)
                except (LaunchError, RequestError, ValueError) as exc:
                    self.events("skipped", f"{c.label}: verification cost not measured ({exc})", candidate=c)
                    continue
                finally:
                    self.eta.pending_s = max(0.0, self.eta.pending_s - est)
            self.record.verify_costs[group] = curve
            self.record.notes.append(Sentence(Slot.SWEEP, "sweep.verify_cost", {
                "label": Path(c.draft_path).name if c.draft_path else c.spec_type, "lengths": list(curve.lengths), "costs": list(curve.costs)}))
            costs = ", ".join(f"{x:.2f}" for x in curve.per_length(8))
            self.events("verifycost", f"{c.label}: verification cost measured ({costs} × a plain step at "
                        "draft lengths 1–8)", candidate=c, detail={"verify_cost": curve.to_json()})


__all__ = ["VerifyCostStage"]
