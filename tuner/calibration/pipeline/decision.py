"""From the sweep's outcome to the reported decision: ``decide`` (statistics only) and the report's
sentences about the machine and the sweep (``tuner.calibration.report.finish_decision``)."""

from __future__ import annotations

from ..decide import Decision, decide
from ..prompts import SERVED_SOURCE_PREFIX
from ..report import NoRepack, ReportFacts, RpcPlacement, finish_decision
from .events import Events
from .inputs import TuneInputs
from .placement import SweepPlan
from .sweep import SweepResult


def reach_decision(inputs: TuneInputs, plan: SweepPlan, sweep: SweepResult, events: Events) -> Decision:
    """The decision on ``sweep.outcome`` with its report: the machine's load and other llama-servers, the
    requests measured, the speedup at depth, the CPU workaround every launch ran with
    (``tuner.crosscheck.cpu_buffers.recorded_no_repack``), where it ran over RPC. Emits ``"decision"``
    (``detail``: the load watcher's figures, the search's protocol). Raises nothing of its own."""
    from tuner.crosscheck.cpu_buffers import recorded_no_repack

    no_repack = recorded_no_repack(inputs.binary.path)
    devices = inputs.devices
    facts = ReportFacts(
        workload=inputs.workload,
        depth_categories=tuple(p.category for _, p in inputs.prompts.chosen if p.fill is not None and p.category),
        placement=RpcPlacement(devices, inputs.target.model.n_layers, plan.candidates.baseline)
        if inputs.rpc_used and devices is not None else None,
        machine=sweep.machine,
        cpu_workaround=NoRepack(*no_repack) if no_repack is not None else None,
        captured={i: p.captured_unix_s for i, p in inputs.prompts.chosen if p.captured_unix_s is not None},
        served_model_id=inputs.prompts.set.source.removeprefix(SERVED_SOURCE_PREFIX)
        if inputs.prompts.set.captured else None,
    )
    outcome, load = sweep.outcome, sweep.load
    decision = finish_decision(decide(outcome), outcome, facts)
    events("decision", decision.reason, decision=decision,
           detail={"load": {"other_cpu_mean": load.other_cpu_mean, "other_cpu_max": load.other_cpu_max,
                            "steal_mean": load.steal_mean, "samples": load.samples, "busy": load.busy},
                   "protocol": dict(outcome.protocol)})
    return decision
