"""Cross-check of our memory plan against ``llama-fit-params``, run with the subset of the server's own argv.

``llama-fit-params`` (tools/fit-params/fit-params.cpp) measures a model with no-alloc loads
(common/fit.cpp ``common_fit_params`` / ``common_fit_print``) and prints on stdout either the fitted
arguments (``-c N -ngl N [-ts a,b] [-ot "..."]``) or, with ``--fit-print on``, one line per device
``<DEV> <model MiB> <context MiB> <compute MiB>`` and a ``Host`` line. It ignores draft/MTP models
(reference 5.2), so :func:`cross_check` compares the target alone: cheap (a no-alloc measurement, about a
second), fed by the argv ``tuner.server.argv.build_argv`` gives the server for the same request
(:func:`fit_params_argv`). The tool reserves logits for every token of the ubatch (it leaves
``n_outputs_max`` at n_batch), so it is compared with our plan of the target alone evaluated with that
``n_outputs_max``. A part differing by more than 10 % (and more than the tool's MiB rounding) is a
disagreement, returned in plain words. One short run per call (``tuner.process.run_output``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.hardware.memory import (
    MIB,
    MemoryPlan,
    MemoryRequest,
    device_list,
    max_target_ngl,
    plan_memory,
)
from tuner.units import format_bytes

if TYPE_CHECKING:
    from tuner.hardware.devices import Device, Devices

Runner = Callable[[list[str], float], "tuple[int, str, str]"]


@dataclass(frozen=True)
class FitBreakdown:
    """One ``--fit-print`` row: llama.cpp's estimate for one place (``device`` = ggml name or ``Host``)."""

    device: str
    model_bytes: int
    context_bytes: int
    compute_bytes: int


@dataclass(frozen=True)
class FitCrossCheck:
    """Outcome of a cross-check. ``ok`` False = the tool could not answer (``note`` says why).

    ``fitted_ngl``/``fitted_n_ctx``: what ``llama-fit-params`` chose (None = not asked / no answer);
    ``planned_ngl``: our largest target ngl for the same request without a draft. ``disagreements``:
    plain-words differences beyond the tolerance (empty = the two agree).
    """

    ok: bool
    tool_path: str | None
    fitted_ngl: int | None
    fitted_n_ctx: int | None
    planned_ngl: int | None
    breakdown: tuple[FitBreakdown, ...]
    disagreements: tuple[str, ...]
    note: str | None = None

    @property
    def agrees(self) -> bool | None:
        """True when the tool answered and nothing disagrees; None when it could not answer."""
        return None if not self.ok else not self.disagreements


def _default_runner(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    from tuner.process import run_output  # the one module that runs child processes

    return run_output(argv, timeout_s)


def find_fit_params(server_binary: str | os.PathLike[str] | None) -> Path | None:
    """``llama-fit-params`` next to ``server_binary`` (same build), or None."""
    if server_binary is None:
        return None
    base = Path(server_binary).parent
    for name in ("llama-fit-params", "llama-fit-params.exe"):
        if (base / name).is_file():
            return base / name
    return None


_ARGS = re.compile(r"-c\s+(\d+)\s+-ngl\s+(-?\d+)")


def parse_fit_args(stdout: str) -> tuple[int, int]:
    """``(n_ctx, ngl)`` from the ``-c N -ngl N ...`` line. Raises ``ValueError`` if absent."""
    for line in stdout.splitlines():
        m = _ARGS.search(line)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise ValueError("no '-c N -ngl N' line in llama-fit-params output")


def parse_fit_print(stdout: str) -> tuple[FitBreakdown, ...]:
    """Rows of ``--fit-print on`` output (MiB → bytes). Raises ``ValueError`` without a ``Host`` row."""
    rows = []
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            rows.append(FitBreakdown(parts[0], int(parts[1]) * MIB, int(parts[2]) * MIB, int(parts[3]) * MIB))
    if not any(r.device == "Host" for r in rows):
        raise ValueError("no 'Host <model> <context> <compute>' row in llama-fit-params --fit-print output")
    return tuple(rows)


def _base_argv(tool: Path, req: MemoryRequest) -> list[str]:
    if req.target.path is None:
        raise ValueError("target has no file path: llama-fit-params needs the GGUF")
    argv = [str(tool), "-m", req.target.path, "-c", str(req.n_ctx), "-ctk", req.cache_type_k,
            "-ctv", req.cache_type_v, "-np", str(req.n_parallel or 4), "-ub", str(req.n_ubatch), "-b", str(req.n_batch)]
    if req.flash_attn is not None:
        argv += ["-fa", "on" if req.flash_attn else "off"]
    return argv


def without_flags(argv: list[str], flags: Sequence[str]) -> list[str]:
    """``argv`` without the given value flags (and their values), e.g. ``("-ngl", "--gpu-layers")``."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in flags:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def within(ours: int, theirs: int, rel: float, abs_bytes: int) -> bool:
    """True when two byte counts differ by at most ``rel`` of the larger or ``abs_bytes`` (whichever is more)."""
    return abs(ours - theirs) <= max(rel * max(ours, theirs), abs_bytes)


def fit_params_argv(server_argv: Sequence[str], tool: str | os.PathLike[str]) -> list[str]:
    """The ``llama-fit-params`` argv for a server argv: the tool path, then every server flag the tool
    also accepts (model, context, slots, layers, KV types, batch sizes, flash attention, splits,
    overrides, MoE offload, threads, ``--no-repack``: the tool takes every common flag), in the server's order
    and with the server's values. Server-only
    flags (``--host``, ``--port``, ``--metrics``, ``--slots``, API key, every ``--spec-*`` / draft flag:
    common/arg.cpp gives them no FIT_PARAMS example) are dropped; ``--fit X`` too (the tool always fits).
    """
    keep_val = {"-m", "--model", "-c", "--ctx-size", "-np", "--parallel", "-ngl", "--gpu-layers",
                "--n-gpu-layers", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-b", "--batch-size",
                "-ub", "--ubatch-size", "-fa", "--flash-attn", "-ts", "--tensor-split", "-ot",
                "--override-tensor", "-ncmoe", "--n-cpu-moe", "-t", "--threads", "-sm", "--split-mode",
                "-mg", "--main-gpu", "-dev", "--device", "-fitt", "--fit-target", "-fitc", "--fit-ctx"}
    keep_flag = {"-cmoe", "--cpu-moe", "--kv-unified", "-kvu", "--no-kv-offload", "-nkvo", "--no-mmap", "--mlock",
                 "-nr", "--no-repack", "--repack", "--no-host"}
    out = [str(tool)]
    argv = list(server_argv)[1:]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in keep_val and i + 1 < len(argv):
            out += [a, argv[i + 1]]
            i += 2
            continue
        if a in keep_flag:
            out.append(a)
        i += 1  # anything else: a dropped flag, or the value of one
    return out


def cross_check(request: MemoryRequest, devices: Devices | Sequence[Device], tool: str | os.PathLike[str] | None,
                runner: Runner | None = None, timeout_s: float = 120.0, rel_tol: float = 0.10,
                ngl_tol: int = 2, server_argv: Sequence[str] | None = None) -> FitCrossCheck:
    """Compare our plan for ``request``'s target (draft left out, as the tool does) with
    ``llama-fit-params``: the per-place breakdown at the request's ``ngl`` (``--fit-print on``) and,
    with GPUs, the fitted ``-ngl``. ``server_argv``: the server's argv for this request (see
    :func:`fit_params_argv`; None = built from the request alone). Our side is planned with the tool's
    ``n_outputs_max`` (= n_batch: it reserves logits for every ubatch token) and in the plan's mode of the
    extra CPU buffer types (``--no-repack`` is passed when the plan has them off). Differences over
    ``rel_tol`` (and 8 MiB, the tool's MiB rounding) or ``ngl_tol`` layers are reported. Never raises.
    """
    request = replace(request, prompt_cache_bytes=0)  # grows while serving; not a start-up buffer
    if tool is None:
        return FitCrossCheck(False, None, None, None, None, (), (), "llama-fit-params not shipped with this build")
    run = runner or _default_runner
    tool = Path(tool)
    alone = replace(request, draft=None, spec_type="none", n_outputs_max=request.n_batch)
    try:
        if server_argv is not None:
            base = without_flags(fit_params_argv(server_argv, tool), ("-ngl", "--gpu-layers", "--n-gpu-layers"))
        else:
            base = _base_argv(tool, alone)
    except ValueError as exc:
        return FitCrossCheck(False, str(tool), None, None, None, (), (), str(exc))
    devs = device_list(devices)
    plan: MemoryPlan = plan_memory(alone, devices)
    if (alone.no_repack or (plan.cpu_buffers is not None and plan.cpu_buffers.no_repack)) \
            and not {"--no-repack", "-nr"} & set(base):
        base.append("--no-repack")  # the tool measures the mode the plan models
    disagreements: list[str] = []
    ngl_arg = ["-ngl", str(request.ngl if request.ngl is not None else 999)]
    try:
        rc, out, err = run(base + ngl_arg + ["--fit-print", "on"], timeout_s)
        if rc != 0:
            raise ValueError(f"exited {rc}: {' | '.join((err or out).strip().splitlines()[-2:])}")
        rows = parse_fit_print(out)
    except (OSError, TimeoutError, ValueError) as exc:
        return FitCrossCheck(False, str(tool), None, None, None, (), (), f"{tool.name} --fit-print: {exc}")
    places = [(p.device_name, p.need) for p in plan.devices] + [("Host", plan.host.need)]
    by_name = {r.device: r for r in rows}
    slack = 8 * MIB
    for name, need in places:
        r = by_name.get(name)
        if r is None:
            if need.total_bytes > slack:
                disagreements.append(f"{name}: planned {format_bytes(need.total_bytes, unit='MiB', decimals=0)}, "
                                     "llama-fit-params has no row")
            continue
        ours_model = need.target_weights_bytes
        if name == "Host":
            # a no-alloc measurement counts a weight once, in its buffer type: the tool's Host row has
            # neither the extra CPU buffer types' copies nor the tensors they took (its rows for them,
            # when printed, are no device of ours)
            ours_model -= plan.repack_host_bytes + plan.extra_moved_bytes
        # "context" = the KV cache only (src/llama-context.cpp memory_breakdown: no output buffer)
        ours_ctx = need.target_kv_bytes + need.mtp_kv_bytes
        for what, ours, theirs in (("weights", ours_model, r.model_bytes), ("KV/context", ours_ctx, r.context_bytes),
                                   ("compute", need.compute_bytes, r.compute_bytes)):
            if not within(ours, theirs, rel_tol, slack):
                disagreements.append(f"{name} {what}: ours {format_bytes(ours, unit='MiB', decimals=0)}, "
                                     f"llama-fit-params {format_bytes(theirs, unit='MiB', decimals=0)}")
    fitted_ngl = fitted_ctx = planned = None
    if devs:
        margins = ",".join(str(request.margin_bytes // MIB) for _ in devs)
        try:
            rc, out, err = run(base + ["-fitt", margins], timeout_s)
            if rc == 0:
                fitted_ctx, fitted_ngl = parse_fit_args(out)
            else:
                disagreements.append(f"llama-fit-params could not fit the target alone (exit {rc})")
        except (OSError, TimeoutError, ValueError) as exc:
            disagreements.append(f"llama-fit-params fit run failed: {exc}")
        planned = max_target_ngl(replace(alone, ngl=None), devices)
        if fitted_ngl is not None:
            n_all = request.target.n_layer + 1
            f = n_all if fitted_ngl < 0 else min(fitted_ngl, n_all)
            if abs(f - planned) > ngl_tol:
                disagreements.append(f"target alone: llama-fit-params fits -ngl {f}, our plan {planned}")
    return FitCrossCheck(True, str(tool), fitted_ngl, fitted_ctx, planned, rows, tuple(disagreements))
