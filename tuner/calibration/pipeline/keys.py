"""The staleness keys of the tune: what a saved profile must still match to be reused (the hardware, the
llama-server file, build and flags, the model files, the prompts, the context, the workload, the share, the
user's extra flags). A new setting that changes what is measured becomes one more key here (and a field of
``tuner.profiles.StalenessKeys``)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.profiles import ModelFileKey, Profile, StalenessKeys

from ..prompts import SERVED_SOURCE_PREFIX

if TYPE_CHECKING:
    from tuner.hardware.devices import Devices

    from ..request import TuneRequest
    from .inputs import TuneInputs


def staleness_keys(inputs: TuneInputs) -> StalenessKeys:
    """The keys of this tune (``tuner.profiles.StalenessKeys``); the prompt key is :func:`prompt_key`."""
    request, binary = inputs.request, inputs.binary
    return StalenessKeys(
        hardware_fingerprint=hardware_fingerprint(inputs.devices) if inputs.devices is not None else None,
        server_binary=file_identity(Path(binary.path)),
        server_build=(f"{binary.build} ({binary.commit})" if binary.commit else str(binary.build))
        if binary.build is not None else None,
        dialect_fingerprint=inputs.dialect.help_sha256,
        model_files=(ModelFileKey.of(inputs.target_path), *(ModelFileKey.of(d.path) for d in inputs.drafts)),
        prompt_set_sha256=prompt_key(inputs),
        n_ctx=inputs.n_ctx,
        workload=inputs.workload.key(),
        long_share=inputs.long_share,
        server_args=tuple(request.server_args),
    )


def prompt_key(inputs: TuneInputs) -> str:
    """The prompt key: the set's hash, the chosen requests' indices, ``n_predict`` and whether the long-context
    requests were added; for captured requests, their source and ``n_predict`` only (never their text or how
    many there are: new captures do not make the profile stale, they only make a re-tune available)."""
    prompts, request = inputs.prompts, inputs.request
    if prompts.set.captured:
        return served_prompt_key(prompts.set.source.removeprefix(SERVED_SOURCE_PREFIX), request.n_predict)
    return hashlib.sha256(
        (prompts.set.sha256 + ":" + ",".join(str(i) for i, _ in prompts.chosen) + f":{request.n_predict}"
         + (":long-context" if request.long_context else "")).encode()
    ).hexdigest()


def served_prompt_key(model_id: str, n_predict: int) -> str:
    """The prompt key of a tune on ``model_id``'s captured requests (no file is read: the key never depends on
    what was captured, so a profile's freshness can be checked when none is kept any more)."""
    source_sha = hashlib.sha256((SERVED_SOURCE_PREFIX + model_id).encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{source_sha}:{n_predict}".encode()).hexdigest()


def keys_for_saved_source(saved: Profile, request: TuneRequest, keys: StalenessKeys) -> StalenessKeys:
    """``keys`` (of ``request``) as the saved profile's own prompt source records them, when ``saved`` was tuned on
    a model's captured requests (``decision.prompt_source``, kind ``served``) and ``request`` names no prompts of
    its own (no file, not ``prompts_from_served``: the app's *Serve at start*, *Start server*, a plain ``tune``):
    the prompt key of that source and the captured workload at the request's sampling. Reads no captured file, so
    new or deleted captures never make such a profile stale; ``keys`` unchanged otherwise."""
    source = saved.decision.get("prompt_source")
    model_id = source.get("model_id") if isinstance(source, dict) and source.get("kind") == "served" else None
    if not isinstance(model_id, str) or request.prompts is not None or request.prompts_from_served:
        return keys
    from ..workload import Workload

    return replace(keys, prompt_set_sha256=served_prompt_key(model_id, request.n_predict),
                   workload=Workload(captured=True, sampling=request.sampling).key())


def hardware_fingerprint(devices: Devices) -> str:
    """Stable summary of the hardware: each device's backend, name and total memory (whole GiB), host RAM
    (GiB), CPU cores, e.g. ``"CUDA:CUDA0:8GiB;ram:64GiB;cpu:8"``; an RPC host's device carries its endpoint
    (``RPC:RPC0@192.168.1.20:50052:24GiB``), so the profile is stale when the hosts or their devices change.
    Free memory is left out (it changes from one minute to the next)."""
    parts = []
    for d in devices.devices:
        where = f"@{d.rpc_endpoint}" if d.rpc_endpoint else ""
        total = f"{round(d.total_bytes / 2**30)}" if d.total_bytes else "?"
        parts.append(f"{d.backend}:{d.name}{where}:{total}GiB")
    ram = devices.ram_total_bytes
    parts.append(f"ram:{round(ram / 2**30) if ram else '?'}GiB")
    parts.append(f"cpu:{devices.cpu_cores or '?'}")
    return ";".join(parts)


def file_identity(path: Path) -> str:
    """``"<resolved path>:<size>:<mtime_ns>"`` of ``path`` (the path alone when it cannot be read)."""
    try:
        st = path.stat()
        return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return str(path)
