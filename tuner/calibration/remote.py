"""Placement of a sweep's candidates across this machine and llama.cpp RPC hosts.

With RPC hosts every forward pass of the target crosses the network (one round trip per pass at least,
ggml/src/ggml-rpc/ggml-rpc.cpp ``ggml_backend_rpc_graph_compute``), so speculation matters more there:
verifying ``n_max`` drafted tokens in one pass shares that round trip, and a draft on this machine costs
no network at all. The plan therefore keeps drafts local by default (``--spec-draft-ngl 0``: the draft on
this machine's CPU; llama.cpp's default would put the draft on the same devices as the target, the RPC
ones included: common/arg.cpp ``--spec-draft-device`` "default: follows --device") and offers, per draft:

* ``rpc-split``: the target over the remote and local devices (``--rpc``; layers split by free memory,
  RPC devices first: src/llama.cpp ``llama_model_load_from_file_impl``), the draft local;
* ``local-only``: no ``--rpc`` at all, the target on this machine's devices as far as it fits
  (``tuner.hardware.memory.max_target_ngl`` on the local devices; 0 = CPU only), the rest on its CPU, the
  draft local — so the sweep decides whether the network is worth it.

The baseline (and each n-gram type, MTP, heads) runs with the target over RPC: "no speculation" is the
configuration a user with those hosts would run by hand. :func:`local_fallback` picks what to serve when a
host disappears.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .candidates import Candidate, CandidatePlan

if TYPE_CHECKING:
    from tuner.hardware.devices import Devices
    from tuner.hardware.memory import ModelMemorySpec

RPC_SPLIT = "rpc-split"
LOCAL_ONLY = "local-only"


def _max_ngl(target_spec: ModelMemorySpec, draft_spec: ModelMemorySpec | None, spec_type: str, devices: Devices,
             n_ctx: int) -> int | None:
    from tuner.hardware.memory import MemoryRequest, max_target_ngl

    if not devices.devices:
        return 0
    try:
        return max_target_ngl(MemoryRequest(target=target_spec, draft=draft_spec, spec_type=spec_type,
                                            draft_ngl=0 if draft_spec is not None else None, n_ctx=n_ctx,
                                            n_parallel=1), devices)
    except Exception:  # noqa: BLE001 - no plan: let the server's --fit decide
        return None


def place_over_rpc(plan: CandidatePlan, target_path: str | Path, devices: Devices, n_ctx: int,
                   notes: list[str]) -> CandidatePlan:
    """Rewrite ``plan`` for ``devices.rpc_endpoints`` (a :class:`tuner.hardware.Devices` with RPC hosts).

    Every draft model gets the two placements of the module docstring (``rpc-split`` first), each at
    the probe's ``n_max``; the baseline, n-gram, MTP and head candidates get ``rpc`` and the most target
    layers that fit over all devices. Layer counts come from the memory plan; a plan failure leaves
    ``ngl`` None (the server's ``--fit``) with a note. Returns ``plan`` unchanged without RPC hosts.
    """
    endpoints = tuple(devices.rpc_endpoints)
    if not endpoints:
        return plan
    from tuner.hardware.memory import load_model_spec

    try:
        tspec = load_model_spec(str(target_path))
    except Exception as exc:  # noqa: BLE001
        notes.append(f"cannot read {Path(target_path).name} for the RPC placement ({exc}); the server's --fit decides")
        tspec = None
    local = devices.local_only()

    def ngl_for(draft_path: str | None, spec_type: str, devs: Devices) -> int | None:
        if tspec is None:
            return None
        try:
            dspec = load_model_spec(draft_path) if draft_path else None
        except Exception as exc:  # noqa: BLE001
            notes.append(f"cannot read {Path(draft_path or '').name} for the RPC placement ({exc})")
            dspec = None
        return _max_ngl(tspec, dspec, spec_type, devs, n_ctx)

    def over_rpc(c: Candidate) -> Candidate:
        return replace(c, rpc=endpoints, ngl=ngl_for(c.draft_path, c.spec_type, devices),
                       draft_ngl=0 if c.draft_path else None)

    drafts: list[Candidate] = []
    seen: set[tuple[str | None, str | None, str, int | None]] = set()
    for c in plan.drafts:
        ident = (c.spec_type, c.draft_path, c.draft_sampling or "", c.n_max)
        if ident in seen:
            continue  # the GPU placements of one draft collapse into the two below
        seen.add(ident)
        base = replace(c, placement=RPC_SPLIT)
        drafts.append(over_rpc(base))
        if c.spec_type == "draft-simple" and c.draft_path:
            drafts.append(replace(c, placement=LOCAL_ONLY, rpc=(), draft_ngl=0,
                                  ngl=ngl_for(c.draft_path, c.spec_type, local)))
    return replace(
        plan,
        baseline=over_rpc(plan.baseline),
        ngram=tuple(over_rpc(c) for c in plan.ngram),
        drafts=tuple(drafts),
        mtp=over_rpc(plan.mtp) if plan.mtp is not None else None,
    )


def local_fallback(profile_evidence: Sequence[dict[str, Any]], winner: Candidate) -> Candidate:
    """What to serve when an RPC host of ``winner`` is gone: the fastest measured local-only candidate
    (``rpc`` empty) in the profile's evidence (median generation tokens/s of its successful
    measurements), else the winner without ``--rpc`` and with ``ngl`` 0 (the target on this machine's
    CPU: always loadable). ``profile_evidence``: ``Profile.evidence`` (measurement JSON objects with a
    ``candidate`` and ``gen_tokens_per_s``)."""
    best: tuple[float, Candidate] | None = None
    for m in profile_evidence:
        cj = m.get("candidate") if isinstance(m, dict) else None
        if not isinstance(cj, dict) or cj.get("rpc"):
            continue
        tps = m.get("gen_tokens_per_s")
        if not isinstance(tps, (int, float)) or m.get("error"):
            continue
        try:
            cand = Candidate.from_json(cj)
        except (TypeError, ValueError):
            continue
        if best is None or tps > best[0]:
            best = (float(tps), cand)
    if best is not None:
        return best[1]
    return replace(winner, rpc=(), ngl=0, placement=LOCAL_ONLY if winner.draft_path else winner.placement)
