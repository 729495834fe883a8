"""What a sweep has measured so far, and the sentences it has to say about itself.

The :class:`Record` is the one place a sweep's stages write what they found (each launch's
:class:`~tuner.calibration.results.Measurement`, in launch order: pairing needs the order) and read it
back (the baseline's speed, a draft's runs, the sequential test's look at a finalist). It holds no
reference to a stage; the stages and rules (``tuner.calibration.search.rules``) read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..candidates import Candidate
from ..pairing import SIDE_BY_SIDE, Look, Mix, Pair, adjacent_pairs, paired_requests, pooled_tokens_per_s
from ..predict import CostModel
from ..results import Measurement, Sample
from ..sentences import JsonValue, Sentence, Slot
from ..sequential import request_looks
from ..verifycost import PricedCurve, VerifyCurve
from ..workload import SweepMemory

Curve = list[tuple[int, float, float]]
"""A draft's predicted curve: ``(n_max, accepted tokens per draft, tokens/s)`` per draft length."""


@dataclass
class Record:
    """One sweep's measurements and what it learned (mutable; filled as the sweep runs).

    Attributes:
        mix: the served mix every ratio of the sweep is weighted by (``None`` = every request the same).
        memory: what the launches share (the greedy reference, the server's sampling defaults, the
            long-context verdict), handed to every measurement.
        measurements: every launch's measurement, in launch order.
        unmeasured: speculative candidates the time budget left unmeasured.
        cut_by_budget: labels of the launches the hard time limit cut short or kept from starting.
        notes: sentences about the sweep itself (a re-measured or unsteady baseline).
        baseline_outputs: ``(prompt index, repetition) → text`` of the baseline (the lossless check).
        base_tps: the screening baseline's tokens/s (``None`` before it ran).
        curves: each draft group's predicted curve (:meth:`group` → :data:`Curve`).
        cost_models: each draft group's cost of a verification step (the curve's; the pruning rule's): its
            measured verify-cost curve where there is one, else the model fitted to its runs.
        verify_curves: each draft group's measured verify-cost curve (``tuner.calibration.search.verify``).
        fitted_curves: where a measured verify-cost curve prices a draft group, the curve the cost model fitted to
            the group's own runs predicts: a second opinion the refine stage measures where the two disagree.
        pruned: candidates not launched because they could not beat the leader on these prompts
            (``tuner.calibration.search.rules.Pruned.to_json``), in the order they were skipped.
        baseline_rechecked: the baseline was already measured again once (at most once per sweep).
        baseline_unsteady: the model alone measured inconsistently across launches and no
            re-measurement settled it: screening comparisons are then not evidence either way.
    """

    mix: Mix | None = None
    memory: SweepMemory = field(default_factory=SweepMemory)
    measurements: list[Measurement] = field(default_factory=list)
    unmeasured: list[Candidate] = field(default_factory=list)
    cut_by_budget: list[str] = field(default_factory=list)
    notes: list[Sentence] = field(default_factory=list)
    baseline_outputs: dict[tuple[int, int], str] = field(default_factory=dict)
    base_tps: float | None = None
    curves: dict[str, Curve] = field(default_factory=dict)
    cost_models: dict[str, CostModel | PricedCurve] = field(default_factory=dict)
    verify_curves: dict[str, VerifyCurve] = field(default_factory=dict)
    fitted_curves: dict[str, Curve] = field(default_factory=dict)
    pruned: list[dict[str, JsonValue]] = field(default_factory=list)
    baseline_rechecked: bool = False
    baseline_unsteady: bool = False

    # ---- writing ------------------------------------------------------------------------------------
    def add(self, m: Measurement) -> None:
        """Append one launch's measurement (launch order)."""
        self.measurements.append(m)

    def keep_outputs(self, m: Measurement) -> None:
        """Keep a baseline measurement's outputs as the reference of the lossless check."""
        for smp in m.samples:
            if smp.content is not None:
                self.baseline_outputs[(smp.prompt_index, smp.repetition)] = smp.content

    def book_cut(self, c: Candidate, measured: bool) -> None:
        """Book a launch the hard time limit ended (``measured``: it kept some requests); a speculative
        candidate kept from running at all is also :attr:`unmeasured`."""
        self.cut_by_budget.append(c.label)
        if not measured and not c.is_baseline and c not in self.unmeasured \
                and not any(m.candidate == c for m in self.measurements):
            self.unmeasured.append(c)

    def supersede(self, position: int, why: str) -> None:
        """Mark the measurement at ``position`` superseded (kept, never quoted as the model's speed)."""
        self.measurements[position] = replace(self.measurements[position], superseded=why)

    # ---- reading ------------------------------------------------------------------------------------
    @staticmethod
    def group(c: Candidate) -> str:
        """The draft group of ``c``: the same type, draft, placement and draft sampling (any ``n_max``)."""
        return f"{c.spec_type}|{c.draft_path}|{c.placement}" + (f"|{c.draft_sampling}" if c.draft_sampling else "")

    def runs_of(self, probe: Candidate) -> list[Measurement]:
        """Successful measurements of the same draft/type/placement/``p_min`` as ``probe`` (any n_max)."""
        return [
            m for m in self.measurements
            if m.ok and m.candidate.spec_type == probe.spec_type and m.candidate.draft_path == probe.draft_path
            and m.candidate.placement == probe.placement and m.candidate.p_min == probe.p_min
            and m.candidate.draft_sampling == probe.draft_sampling
        ]

    def measured_n_max(self, probe: Candidate) -> set[int]:
        """Draft lengths measured in ``probe``'s group."""
        return {m.candidate.n_max for m in self.measurements if self.group(m.candidate) == self.group(probe)
                and m.candidate.n_max is not None}

    def screening_baseline(self) -> tuple[int, Measurement] | None:
        """``(position, measurement)`` of the baseline launch in use for screening (not superseded)."""
        for i, m in enumerate(self.measurements):
            if m.candidate.is_baseline and m.stage == "baseline" and m.ok and m.superseded is None:
                return i, m
        return None

    def baseline_tps_on(self, samples: Sequence[Sample]) -> float | None:
        """The baseline's pooled tokens/s on the same (prompt, repetition) keys, ``None`` if it ran none."""
        base = {(s.prompt_index, s.repetition): s for m in self.measurements
                if m.candidate.is_baseline and m.ok and m.superseded is None for s in m.samples}
        same = [base[k] for k in ((s.prompt_index, s.repetition) for s in samples) if k in base]
        return pooled_tokens_per_s(same) if len(same) == len(samples) else None

    def contender_seen(self) -> bool:
        """True once a speculative run has beaten the baseline's screening speed. Only then do the probes
        keep the paired rounds' reserve: with no contender the reserve would be kept for nobody while
        candidates went unmeasured (a new user's sweep skipped three n-gram probes at 53 s of a 180 s
        budget, then ended with nothing to confirm)."""
        return any(m.ok and not m.candidate.is_baseline and (m.gen_tokens_per_s or 0.0) > (self.base_tps or 0.0)
                   for m in self.measurements)

    def look(self, c: Candidate, min_gain: float, alpha: float, max_pairs: int, finalists: int,
             extra: Sequence[Pair] = (), layout: str = SIDE_BY_SIDE) -> Look:
        """The sequential test's latest look at finalist ``c`` (``tuner.calibration.sequential``): the paired
        requests of its adjacent pairs so far (weighted by :attr:`mix`), then those of ``extra``, pairs of a
        launch still running; ``layout`` is how the paired rounds run."""
        pairs = [*adjacent_pairs(self.measurements, c, self.mix), *extra]
        return request_looks(paired_requests(pairs), min_gain, alpha, max_pairs, finalists, layout)

    def sweep_notes(self, limit_s: float, budget_s: float) -> list[Sentence]:
        """The sentences about the sweep for the decision: :attr:`notes`, what was not launched because it could
        not beat the leader, then which launches the hard time limit (``limit_s`` of a ``budget_s`` budget,
        seconds) cut short or kept from starting."""
        out = list(self.notes)
        if self.pruned:
            out.append(Sentence(Slot.SWEEP, "sweep.pruned", {"pruned": list(self.pruned)}))
        if self.cut_by_budget:
            out.append(Sentence(Slot.SWEEP, "sweep.time_limit", {
                "limit_s": limit_s, "budget_s": budget_s, "cut": list(dict.fromkeys(self.cut_by_budget))}))
        return out


__all__ = ["Curve", "Record"]
