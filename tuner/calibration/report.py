"""The decision as the tune reports it: ``decide``'s words followed by the sentences about the machine and
the sweep itself (what was measured with what, what was left out, where it ran).

:func:`finish_decision` takes the facts from the :class:`~tuner.calibration.outcome.SearchOutcome` and a
:class:`ReportFacts` the tune gathers around the search; the order of the sentences is the one
``tuner.calibration.sentences`` describes (machine load, then the sweep's own sentences).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .candidates import Candidate
from .decide import Decision
from .outcome import SearchOutcome
from .remote import where_it_ran

if TYPE_CHECKING:
    from tuner.hardware.devices import Devices


@dataclass(frozen=True)
class MachineLoad:
    """What else ran on the machine during the sweep.

    Attributes:
        load_note: the load watcher's sentence (``tuner.hardware.host.LoadSummary.note``), ``None`` when
            the machine was not busy.
        competing_pids: other llama-server processes seen when the sweep started (not ours).
    """

    load_note: str | None = None
    competing_pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class RpcPlacement:
    """Where a sweep over RPC hosts ran its launches.

    Attributes:
        devices: this machine's and the hosts' devices (``Devices.rpc_endpoints`` not empty).
        n_layers: the target's block count (``None`` = unknown).
        baseline: the plan's baseline candidate (named beside a winner).
    """

    devices: Devices
    n_layers: int | None
    baseline: Candidate


@dataclass(frozen=True)
class ReportFacts:
    """What the report says besides the outcome.

    Attributes:
        workload_text: the requests measured, in words (``Workload.describe()`` after the sweep, which
            knows the server's own sampling defaults then).
        depth_categories: prompt categories of the long-context requests (the speedup at depth).
        placement: the RPC placement, ``None`` when the sweep ran on this machine only.
        machine: other programs and llama-servers during the sweep, ``None`` when none were watched.
        cpu_workaround: the sentence about a CPU workaround every launch ran with (issue 23's recorded
            ``--no-repack``), ``None`` when none was in force.
    """

    workload_text: str
    depth_categories: tuple[str, ...] = ()
    placement: RpcPlacement | None = None
    machine: MachineLoad | None = None
    cpu_workaround: str | None = None


def machine_note(machine: MachineLoad | None) -> str | None:
    """The decision's sentence about other work on the machine (the load watcher's note, and other
    llama-server processes seen at the start), ``None`` when there was none."""
    if machine is None:
        return None
    parts = [machine.load_note] if machine.load_note else []
    n = len(machine.competing_pids)
    if n:
        parts.append(f"{n} other llama-server process{'es' if n != 1 else ''} ran on "
                     "this machine during the sweep and competed with it.")
    return " ".join(parts) or None


def describe_depth(decision: Decision, categories: tuple[str, ...], noise: float = 0.05) -> str | None:
    """A sentence on the speedup of the long-context requests when it differs from the overall one by more
    than ``noise`` (relative), e.g. ``"At depth (≥ half the context: long document 1.05×, long code 1.10×)
    the speedup differs from the overall 1.31×."``; ``None`` when they agree or were not measured. The
    overall figure is the winner's speedup, or the best speculative one's when the baseline won."""
    overall = decision.best_speculative_speedup if decision.winner.is_baseline else decision.speedup
    rows = [(c.category, c.speedup) for c in decision.per_category if c.category in categories and c.speedup]
    if not rows or not overall:
        return None
    parts = [f"{category} {speedup:.2f}×" for category, speedup in rows]
    if all(abs(speedup / overall - 1.0) <= noise for _, speedup in rows):
        return None
    return f"At depth (≥ half the context: {', '.join(parts)}) the speedup differs from the overall {overall:.2f}×."


def finish_decision(decision: Decision, outcome: SearchOutcome, facts: ReportFacts) -> Decision:
    """``decision`` (from :func:`tuner.calibration.decide.decide_outcome`) with the machine's load in its
    ``busy_note`` and its reason followed by, in this order: that load, the sweep's notes, "Measured with
    …", why the long-context requests were left out, the speedup at depth, the types that never drafted
    (unless the reason named them), the CPU workaround in force, and where the winner (and the baseline or
    the best speculative configuration) ran over RPC."""
    note = machine_note(facts.machine)
    reason = decision.reason + ((" " + note.strip()) if note else "")
    extra = [*(s.words() for s in outcome.notes), f"Measured with {facts.workload_text}."]
    if outcome.long_context is not None:
        extra.append(outcome.long_context.words())
    depth = describe_depth(decision, facts.depth_categories)
    if depth:
        extra.append(depth)
    never = sorted({m.candidate.label for m in outcome.measurements if m.no_drafts_at
                    and f"{m.candidate.label}: " not in reason
                    and "drafted any token on these prompts" not in reason})  # named there already
    if never:
        extra.append(f"{', '.join(never)} never drafted at these sampling settings.")
    if facts.cpu_workaround:
        extra.append(facts.cpu_workaround)
    if facts.placement is not None:
        extra.append(_where_it_ran(decision, facts.placement))
    return replace(decision, reason=(reason.rstrip() + " " + " ".join(extra)).strip(), busy_note=note)


def _where_it_ran(decision: Decision, placement: RpcPlacement) -> str:
    devices, n_layers = placement.devices, placement.n_layers
    other = placement.baseline if not decision.winner.is_baseline else decision.best_speculative
    return (f"Where it ran: {decision.winner.label}: {where_it_ran(decision.winner, devices, n_layers)}"
            + (f"; {other.label}: {where_it_ran(other, devices, n_layers)}" if other is not None else "")
            + ".")


__all__ = ["MachineLoad", "ReportFacts", "RpcPlacement", "describe_depth", "finish_decision", "machine_note"]
