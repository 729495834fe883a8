"""The decision as the tune reports it: ``decide``'s sentences followed by those about the machine and the
sweep itself (what was measured with what, what was left out, where it ran), and a saved decision shown again.

:func:`finish_decision` takes the facts from the :class:`~tuner.calibration.outcome.SearchOutcome` and a
:class:`ReportFacts` the tune gathers around the search, and adds one sentence (data:
``tuner.calibration.sentences``) per fact; ``tuner.calibration.wording`` renders them in slot order.
:func:`reused_decision` gives a profile's saved decision its words when it is served again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .candidates import Candidate
from .decide import Decision
from .outcome import SearchOutcome
from .pairing import pooled_tokens_per_s
from .results import Measurement
from .sentences import JsonValue, Sentence, Slot
from .threads import threads_sentence
from .wording import words
from .workload import Workload

if TYPE_CHECKING:
    from tuner.hardware.devices import Devices
    from tuner.hardware.host import LoadSummary


@dataclass(frozen=True)
class MachineLoad:
    """What else ran on the machine during the sweep.

    Attributes:
        load: the load watcher's summary (``tuner.hardware.host.LoadSummary``); a sentence only when it
            says the machine was busy. ``None`` = not watched.
        competing_pids: other llama-server processes seen when the sweep started (not ours).
    """

    load: LoadSummary | None = None
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
class NoRepack:
    """The ``--no-repack`` workaround every launch ran with (issue 23: recorded for this binary on this CPU).

    Attributes:
        cause: the crash it cured (``"sigill"``, ``"sigsegv"``, ``"sigbus"``; ``tuner.server.workarounds``).
        build_types: the build's extra CPU buffer types when known (``("AMX", "CPU_REPACK")``).
    """

    cause: str | None
    build_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReportFacts:
    """What the report says besides the outcome.

    Attributes:
        workload: the requests measured (their shape, sampling and context; the server's own sampling
            defaults come from the outcome).
        depth_categories: prompt categories of the long-context requests (the speedup at depth).
        placement: the RPC placement, ``None`` when the sweep ran on this machine only.
        machine: other programs and llama-servers during the sweep, ``None`` when none were watched.
        cpu_workaround: the CPU workaround every launch ran with, ``None`` when none was in force.
        captured: for a re-tune on served traffic, the captured requests' prompt indices → when each was
            received (unix seconds); empty otherwise.
        served_model_id: the served model id whose captured requests were replayed (``None`` otherwise).
    """

    workload: Workload
    depth_categories: tuple[str, ...] = ()
    placement: RpcPlacement | None = None
    machine: MachineLoad | None = None
    cpu_workaround: NoRepack | None = None
    captured: Mapping[int, float] = field(default_factory=dict)
    served_model_id: str | None = None


def machine_sentence(machine: MachineLoad | None) -> Sentence | None:
    """The sentence about other work on the machine (the load watcher's figures when it was busy, and
    other llama-server processes seen at the start), ``None`` when there was none."""
    if machine is None:
        return None
    load = machine.load
    busy = load is not None and load.busy
    if not busy and not machine.competing_pids:
        return None
    figures: dict[str, Any] | None = {"other_cpu_mean": load.other_cpu_mean, "other_cpu_max": load.other_cpu_max,
               "steal_mean": load.steal_mean} if busy and load is not None else None
    return Sentence(Slot.MACHINE_LOAD, "machine.load", {"load": figures, "competing": len(machine.competing_pids)})


SPEED_VARIED = 2.0
"""A configuration whose launches ran more than this factor apart on the same prompts: the machine's speed varied
too much for the figures to mean much (issue 25: one sweep's baseline launches read 694, 390 and 127 tokens/s)."""


def launch_speeds(measurements: Sequence[Measurement]) -> dict[str, list[float]]:
    """Each configuration's tokens/s per launch (label → figures in launch order), each over the prompts every
    launch of that configuration ran (Σ tokens ÷ Σ time), so a launch cut short after one prompt is compared on
    that prompt; launches that failed or measured nothing are left out."""
    by: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.samples and (m.error is None or m.no_drafts_at is not None):
            by.setdefault(m.candidate.label, []).append(m)
    out: dict[str, list[float]] = {}
    for label, ms in by.items():
        common = set.intersection(*({s.prompt_index for s in m.samples} for m in ms))
        speeds = [pooled_tokens_per_s([s for s in m.samples if s.prompt_index in common]) for m in ms]
        out[label] = [x for x in speeds if x]
    return out


def speed_varied_sentence(measurements: Sequence[Measurement], factor: float = SPEED_VARIED) -> Sentence | None:
    """The sentence (slot SPEED_VARIED) when a configuration's launches ran more than ``factor`` apart on the same
    prompts (:func:`launch_speeds`): the one that varied most, its slowest and fastest figure and its launches,
    and how many configurations varied so; ``None`` when none did."""
    spread = [(max(v) / min(v), label, v) for label, v in launch_speeds(measurements).items() if len(v) >= 2]
    varied = sorted((t for t in spread if t[0] > factor), key=lambda t: -t[0])
    if not varied:
        return None
    _r, label, v = varied[0]
    return Sentence(Slot.SPEED_VARIED, "speed.varied", {"label": label, "low": min(v), "high": max(v),
                                                        "launches": len(v), "others": len(varied) - 1})


def depth_sentence(decision: Decision, categories: Sequence[str], noise: float = 0.05) -> Sentence | None:
    """The speedup of the long-context requests (``categories``) when it differs from the overall one by
    more than ``noise`` (relative); ``None`` when they agree or were not measured. The overall figure is
    the winner's speedup, or the best speculative one's when the baseline won."""
    overall = decision.best_speculative_speedup if decision.winner.is_baseline else decision.speedup
    rows = [(c.category, c.speedup) for c in decision.per_category if c.category in categories and c.speedup]
    if not rows or not overall or all(abs(speedup / overall - 1.0) <= noise for _, speedup in rows):
        return None
    return Sentence(Slot.SWEEP, "sweep.depth", {"rows": [list(r) for r in rows], "overall": overall})


def describe_depth(decision: Decision, categories: tuple[str, ...], noise: float = 0.05) -> str | None:
    """:func:`depth_sentence` in words, e.g. ``"At depth (≥ half the context: long document 1.05×, long code
    1.10×) the speedup differs from the overall 1.31×."``; ``None`` when there is none."""
    s = depth_sentence(decision, categories, noise)
    return words(s) if s is not None else None


def finish_decision(decision: Decision, outcome: SearchOutcome, facts: ReportFacts) -> Decision:
    """``decision`` (from :func:`tuner.calibration.decide.decide`) with the report's sentences added: the
    machine's speed when a configuration's launches varied more than :data:`SPEED_VARIED`, the machine's load
    (also its ``busy_note``), the sweep's notes, "Measured with …", why the long-context
    requests were left out, the speedup at depth, the types that never drafted (unless the decision named
    them), the CPU workaround in force, the thread setting served and its trade
    (``tuner.calibration.threads.threads_sentence``), and where the winner (and the baseline or the best speculative
    configuration) ran over RPC. Their order is their slots' (``tuner.calibration.sentences``)."""
    first = (speed_varied_sentence(outcome.measurements), machine_sentence(facts.machine))
    added = [s for s in first if s is not None]
    added += [*outcome.notes, _measured_with(facts.workload, outcome.server_sampling)]
    later = (outcome.long_context, depth_sentence(decision, facts.depth_categories), _never_drafted(decision, outcome))
    added += [s for s in later if s is not None]
    if facts.cpu_workaround is not None:
        added.append(Sentence(Slot.CPU_WORKAROUND, "cpu.no_repack", {
            "cause": facts.cpu_workaround.cause, "build_types": list(facts.cpu_workaround.build_types)}))
    if facts.placement is not None:
        added.append(_where_it_ran(decision, facts.placement))
    captured = captured_sentence(outcome, facts.captured, facts.served_model_id)
    if captured is not None:
        added.append(captured)
    if outcome.threads is not None and outcome.threads.served_label == decision.winner.label:
        added.append(threads_sentence(outcome.threads))
    return decision.with_sentences([*decision.sentences, *added])


def captured_sentence(outcome: SearchOutcome, received: Mapping[int, float], model_id: str | None) -> Sentence | None:
    """How many captured requests the decision rests on and over what period: those of ``received`` (prompt
    index → unix seconds it was received) that some launch measured; ``None`` when the sweep replayed none
    (kind ``captured.replayed``; params ``requests``, ``first_unix_s``, ``last_unix_s``, ``model_id``)."""
    measured = {s.prompt_index for m in outcome.measurements for s in m.samples} & set(received)
    if not measured:
        return None
    times = sorted(received[i] for i in measured)
    return Sentence(Slot.CAPTURED, "captured.replayed", {
        "requests": len(measured), "first_unix_s": times[0], "last_unix_s": times[-1], "model_id": model_id})


def _measured_with(workload: Workload, server_sampling: Mapping[str, float | int]) -> Sentence:
    """The measured requests (shape, sampling, context) and, at sampled settings, the short greedy check's size
    (``Workload.greedy_check_prompts`` prompts of ``greedy_check_n_predict`` tokens: the sentences about a type
    that drafted nothing say what that check measured)."""
    greedy: dict[str, JsonValue] | None = None
    if not workload.sampling.is_greedy and workload.greedy_check_prompts > 0:
        greedy = {"prompts": workload.greedy_check_prompts, "tokens": workload.greedy_check_n_predict}
    return Sentence(Slot.SWEEP, "sweep.measured_with", {
        "chat": workload.chat, "raw_endpoint": workload.raw_endpoint, "n_ctx": workload.n_ctx,
        "sampling": workload.sampling.describe(dict(server_sampling) or None), "greedy_check": greedy})


def _never_drafted(decision: Decision, outcome: SearchOutcome) -> Sentence | None:
    """The types that ran but never drafted, unless the decision's own sentences named them."""
    if decision.kind == "alone_never_drafted":  # its first sentence is about exactly these
        return None
    never = {m.candidate.label for m in outcome.measurements if m.no_drafts_at}
    labels: list[Any] = sorted(never - set(decision.named))
    return Sentence(Slot.SWEEP, "sweep.never_drafted", {"labels": labels}) if labels else None


def _where_it_ran(decision: Decision, placement: RpcPlacement) -> Sentence:
    other = placement.baseline if not decision.winner.is_baseline else decision.best_speculative
    runs: list[Any] = [_run(c, placement) for c in (decision.winner, other) if c is not None]
    return Sentence(Slot.SWEEP, "sweep.where_it_ran", {"runs": runs})


def _run(c: Candidate, placement: RpcPlacement) -> dict[str, Any]:
    """Where the target and the draft of ``c`` ran, as facts (words: ``tuner.calibration.wording.where_it_ran``)."""
    devices, n = placement.devices.devices, placement.n_layers
    return {
        "label": c.label,
        "rpc": list(c.rpc),
        "hosts": [[d.name, d.rpc_endpoint] for d in devices if d.remote and d.rpc_endpoint in c.rpc],
        "offloaded": min(c.ngl, n + 1) if c.rpc and c.ngl is not None and n is not None else None,
        "layers": n + 1 if n is not None else None,
        "local_gpus": any(not d.remote for d in devices),
        "ngl": c.ngl,
        "draft": None if not c.draft_path else ("cpu" if c.draft_ngl == 0 else "machine"),
    }


def reused_decision(decision: Decision, saved: Mapping[str, Any], created_unix_s: float | None) -> Decision:
    """``decision`` (rebuilt from a profile's saved ``decision`` object, ``saved``) with its words as the
    profile is served again.

    A profile that kept its sentences is rendered from them, with the sentence about other programs on
    the machine dated ("This profile was measured on 2026-12-01 at 11:50 UTC; other programs used …
    during that sweep …"), since the machine may be quiet now, and left out when the profile has no time
    (an undated "the machine was busy" would read as now). A profile saved before sentences were kept (or
    holding a kind this version cannot render) shows its saved ``reason`` verbatim, followed, when it has
    a time, by a separate sentence saying when it was measured (and, when its ``busy_note`` field is set,
    that what it says about other programs was true then).
    """
    sentences = _saved_sentences(saved.get("sentences"))
    if sentences is not None:
        if created_unix_s is None:
            sentences = tuple(s for s in sentences if s.slot != Slot.MACHINE_LOAD)
        kept = replace(decision, kind=str(saved.get("kind") or ""),
                       named=tuple(str(x) for x in saved.get("named") or ()))
        try:
            return kept.with_sentences(sentences, measured_unix_s=created_unix_s)
        except ValueError:  # a kind this version has no renderer for (a newer Draftwise saved it)
            pass
    reason = str(saved.get("reason") or "")
    legacy = [Sentence(Slot.HEADLINE, "saved.reason", {"reason": reason})] if reason else []
    if created_unix_s is not None:
        busy = bool(saved.get("busy_note"))
        legacy.append(Sentence(Slot.MACHINE_LOAD if busy else Slot.SWEEP, "saved.measured_on", {"busy": busy}))
    return decision.with_sentences(legacy, measured_unix_s=created_unix_s)


def _saved_sentences(obj: object) -> tuple[Sentence, ...] | None:
    """A saved decision's ``sentences`` list, ``None`` when absent or unreadable."""
    if not isinstance(obj, list):
        return None
    try:
        return tuple(Sentence.from_json(s) for s in obj)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


__all__ = [
    "SPEED_VARIED",
    "MachineLoad",
    "NoRepack",
    "ReportFacts",
    "RpcPlacement",
    "depth_sentence",
    "describe_depth",
    "finish_decision",
    "launch_speeds",
    "machine_sentence",
    "reused_decision",
    "speed_varied_sentence",
]
