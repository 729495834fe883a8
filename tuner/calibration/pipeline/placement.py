"""The sweep plan: the candidates (``tuner.calibration.candidates.plan_candidates``), placed on the GPU
and over RPC hosts, checked against the memory plan, with the search's settings and budget.

The memory plan (``tuner.hardware.memory``) drops what cannot fit before launch; with a GPU it sets each
draft's two placements (``draft-on-gpu``, ``target-whole``), with RPC hosts ``tuner.calibration.remote``
places the target over them; a cached llama-server disagreement with the plan is a note
(``tuner.crosscheck.lines.plan_check_lines``, cache only). A plan failure is a note, never the end of the
tune: the server's ``--fit`` then places the launch (common/fit.cpp ``common_fit_params``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.units import format_bytes

from ..candidates import (
    Candidate,
    CandidatePlan,
    DroppedCandidate,
    MemoryCheck,
    add_draft_sampling_variants,
    apply_memory_check,
    plan_candidates,
)
from ..pairing import MIN_PAIRS
from ..search import SearchSettings
from ..verifycost import curves_in, sweep_identity
from .events import Events
from .inputs import TuneInputs

if TYPE_CHECKING:
    import os

    from tuner.hardware.devices import Devices
    from tuner.hardware.memory import ModelMemorySpec
    from tuner.profiles import Profile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepPlan:
    """What the search is given.

    Attributes:
        candidates: the planned candidates (and those dropped before launch, with reasons).
        settings: the search's settings.
        budget_s: the time budget, seconds (first launch to decision).
    """

    candidates: CandidatePlan
    settings: SearchSettings
    budget_s: float

    @property
    def dropped(self) -> tuple[DroppedCandidate, ...]:
        """The candidates removed before launch."""
        return self.candidates.dropped


def plan_sweep(inputs: TuneInputs, settings: SearchSettings | None, events: Events,
               saved: Profile | None = None) -> SweepPlan:
    """Plan the sweep; emits the plan's notes, then ``"plan"`` (the probes, what was dropped and why, the
    prompts' indices).

    Args:
        inputs: the tune's inputs.
        settings: the search's settings (tests); ``None`` = from the request (``n_predict``, at most
            ``2 × repetitions`` pairs per finalist, at least ``MIN_PAIRS``; side by side without a GPU).
        events: the tune's events.

    Raises nothing of its own (a plan failure is a note).
    """
    notes: list[str] = []
    plan = _candidates(inputs, notes)
    for note in notes:
        events.note(note)
    events("plan",
           f"{len(plan.all_probes)} configurations to probe ({len(plan.drafts)} draft, {len(plan.ngram)} n-gram"
           + (", MTP" if plan.mtp else "") + f"), {len(plan.dropped)} dropped before launch",
           detail={"dropped": [{"label": d.candidate.label, "reason": d.reason} for d in plan.dropped],
                   "probes": [c.label for c in plan.all_probes],
                   "prompts": [i for i, _ in inputs.prompts.chosen]})
    return SweepPlan(plan, _with_verify_cost(_settings(inputs, settings), inputs, settings is not None, saved, events),
                     inputs.request.budget_s)


def _with_verify_cost(settings: SearchSettings, inputs: TuneInputs, given: bool, saved: Profile | None,
                      events: Events) -> SearchSettings:
    """The verify-cost stage's settings (``tuner.calibration.search.verify``): this tune's identity, and the curves
    the target's saved profile keeps (a bad entry is a note and measured again). Settings given by the caller
    (tests) keep theirs."""
    if given:
        return settings
    known, problems = curves_in(saved.decision) if saved is not None else ((), [])
    for p in problems:
        events.note(f"{inputs.target_path.name}'s saved profile: {p}; measured again")
    identity = sweep_identity(inputs.binary.path, f"{inputs.binary.build}", inputs.target_path, inputs.request.threads)
    return dataclasses.replace(settings, verify_identity=identity, known_curves=known)


def _settings(inputs: TuneInputs, settings: SearchSettings | None) -> SearchSettings:
    request = inputs.request
    given = settings is not None
    settings = settings or SearchSettings(
        n_predict=request.n_predict,
        max_pairs=max(MIN_PAIRS, 2 * request.repetitions),
        # weights mmapped in host memory: the baseline's and a finalist's server share the page cache,
        # so the paired rounds run them side by side; with a GPU, alternate launches instead
        side_by_side=not inputs.gpu,
    )
    if inputs.long_share is not None:
        settings = dataclasses.replace(settings, long_share=inputs.long_share)
    cores = inputs.devices.cpu_cores if inputs.devices is not None else None
    if not given and request.threads is None and cores:  # the thread stage (search/threads.py); tests set it
        from tuner.crosscheck.cpu_buffers import build_uses_openmp

        settings = dataclasses.replace(settings, thread_cores=cores,
                                       thread_openmp=build_uses_openmp(inputs.binary, inputs.dialect))
    return settings


def _candidates(inputs: TuneInputs, notes: list[str]) -> CandidatePlan:
    """The candidate plan, placed and checked; what went wrong or is worth knowing goes to ``notes``."""
    devices, dialect, path, n_ctx = inputs.devices, inputs.dialect, inputs.target_path, inputs.n_ctx
    check = memory_check(path, devices, n_ctx, notes) if devices is not None else None
    plan = plan_candidates(path, inputs.drafts, spec_types=dialect.spec_types, mtp_layers=inputs.target.model.mtp_layers,
                           memory_check=None if inputs.gpu else check, gpu=inputs.gpu, heads=inputs.heads,
                           autotune=dialect.has_spec_autotune, supports=dialect.supports_spec_type)
    if inputs.request.rpc_hosts and devices is not None:
        notes += devices.rpc_notes
        if not inputs.rpc_used:
            notes.append("no RPC host reachable: tuning on this machine only")
    if inputs.gpu and devices is not None:
        plan = place_on_gpu(plan, path, devices, n_ctx, notes)
        if inputs.rpc_used:
            from ..remote import place_over_rpc

            plan = place_over_rpc(plan, path, devices, n_ctx, notes)
        if check is not None:
            plan = apply_memory_check(plan, check, drafts_only=True)
    plan = add_draft_sampling_variants(plan, inputs.workload, dialect)
    if devices is not None:
        notes += cross_check_lines(path, devices, n_ctx, inputs.binary.path)
    return plan


def memory_check(target_path: Path, devices: Devices, n_ctx: int, notes: list[str]) -> MemoryCheck | None:
    """A ``(Candidate) -> reason | None`` from the memory plan (``tuner.hardware.memory.plan_memory``, one
    slot, ``n_ctx`` tokens): ``"does not fit in memory (short by about 120 MiB)"`` or ``None``. Each model
    file's spec is read once. A failed plan for one candidate is a note in ``notes`` and lets it through;
    ``None`` (and a note) when the memory plan cannot be imported."""
    try:
        from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory
    except Exception as exc:  # noqa: BLE001
        log.debug("memory plan unavailable", exc_info=True)
        notes.append(f"memory plan unavailable ({exc})")
        return None
    specs: dict[str, ModelMemorySpec] = {}

    def spec(path: str) -> ModelMemorySpec:
        if path not in specs:
            specs[path] = load_model_spec(path)
        return specs[path]

    def check(c: Candidate) -> str | None:
        try:
            plan = plan_memory(MemoryRequest(
                target=spec(str(target_path)), draft=spec(c.draft_path) if c.draft_path else None,
                spec_type=c.spec_type, ngl=c.ngl, draft_ngl=c.draft_ngl, n_ctx=n_ctx, n_parallel=1), devices)
        except Exception as exc:  # noqa: BLE001 - a plan failure must not block tuning
            log.debug("memory plan failed for %s", c.label, exc_info=True)
            notes.append(f"memory plan failed for {c.label}: {exc}")
            return None
        if plan.fits:
            return None
        short = format_bytes(-(plan.margin_bytes or 0), unit="MiB", decimals=0)
        return f"does not fit in memory (short by about {short})"

    return check


def place_on_gpu(plan: CandidatePlan, target_path: Path, devices: Devices, n_ctx: int,
                 notes: list[str]) -> CandidatePlan:
    """Set ``ngl``/``draft_ngl`` for the two GPU placements of each draft.

    ``draft-on-gpu``: the draft fully on the GPU, the target gets the most layers that still fit
    (``tuner.hardware.memory.max_target_ngl``). ``target-whole``: every target layer on the GPU, the draft
    on the CPU (``draft_ngl`` 0). When the first already keeps the target whole, the second is dropped. A
    file the memory plan cannot read leaves the plan (or that draft) as it was, with a note in ``notes``.
    """
    try:
        from tuner.hardware.memory import MemoryRequest, load_model_spec, max_target_ngl
    except Exception as exc:  # noqa: BLE001
        log.debug("GPU placement unavailable", exc_info=True)
        notes.append(f"GPU placement unavailable ({exc}); the server's --fit decides")
        return plan
    try:
        tspec = load_model_spec(str(target_path))
    except Exception as exc:  # noqa: BLE001
        log.debug("cannot read %s for the memory plan", target_path, exc_info=True)
        notes.append(f"cannot read {target_path.name} for the memory plan ({exc}); the server's --fit decides")
        return plan
    full = tspec.n_layer + 1
    out: list[Candidate] = []
    for c in plan.drafts:
        try:
            dspec = load_model_spec(c.draft_path) if c.draft_path else None
            if c.placement == "draft-on-gpu":
                ngl = max_target_ngl(MemoryRequest(target=tspec, draft=dspec, spec_type=c.spec_type, draft_ngl=None,
                                                   n_ctx=n_ctx, n_parallel=1), devices)
                out.append(dataclasses.replace(c, ngl=ngl, draft_ngl=None))
            elif c.placement == "target-whole":
                twin = next((o for o in out if o.draft_path == c.draft_path and o.placement == "draft-on-gpu"), None)
                if twin is None or twin.ngl is None or twin.ngl < full:
                    out.append(dataclasses.replace(c, ngl=full, draft_ngl=0))
            else:
                out.append(c)
        except Exception as exc:  # noqa: BLE001
            log.debug("memory plan failed for %s", c.label, exc_info=True)
            notes.append(f"memory plan failed for {c.label}: {exc}")
            out.append(c)
    return dataclasses.replace(plan, drafts=tuple(out))


def cross_check_lines(target_path: Path, devices: Devices, n_ctx: int,
                      server_binary: str | os.PathLike[str] | None) -> list[str]:
    """The memory plan's cross-check lines for the tune log (:func:`tuner.crosscheck.lines.plan_check_lines`,
    which reads the cache only and never starts a server): only those where llama-server's cached report
    disagrees with the plan (``CheckLine.disagrees``), each as ``"memory plan: …"``. Raises nothing: a
    failed check is one line."""
    try:
        from tuner.crosscheck.lines import plan_check_lines
        from tuner.hardware.memory import MemoryRequest, load_model_spec

        lines = plan_check_lines(MemoryRequest(target=load_model_spec(str(target_path)), n_ctx=n_ctx),
                                 devices, server_binary)
    except Exception as exc:  # noqa: BLE001 - the sweep stands without the cross-check
        log.debug("memory plan cross-check unavailable", exc_info=True)
        return [f"memory plan cross-check unavailable ({exc})"]
    return [f"memory plan: {c.text}" for c in lines if c.disagrees]
