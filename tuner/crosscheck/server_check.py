"""Cross-check of our memory plan against llama-server itself, started with exactly the argv it would get.

:func:`server_cross_check` (expensive: one real start of llama-server up to "model loaded", i.e. the weights
are read once — seconds for small models, up to a minute for big ones): the argv ``tuner.server.argv.build_argv``
gives the server for the same request (:func:`server_config_for`, so the check cannot "agree" while
measuring other settings) plus ``--fit on -lv 4 --no-warmup`` and a free port (:func:`check_argv`). It reads
the server's own start-up projection (common/fit.cpp ``common_memory_breakdown_print``, per model) and the
buffers it then really allocates (``-lv 4`` "buffer size" lines, parsed by ``tuner.hardware.buffers``), and
compares both with the plan per part (:func:`compare_with_server`). The answer is cached per (binary, model
files, argv without the port) under ``tuner.paths.cache_dir()/memcheck``, so the Models tab and the tune log
can show it without starting anything (:func:`cached_server_report`).

A part differing by more than 10 % (and more than the reports' MiB rounding) is a disagreement, returned in
plain words for ``draftwise plan``, the Models tab and the tune log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.crosscheck.fit_params import within, without_flags
from tuner.hardware.memory import MIB, MemoryPlan, MemoryRequest, PlacementBytes, plan_memory
from tuner.spectypes import DRAFT_MODEL_TYPES
from tuner.units import format_bytes

if TYPE_CHECKING:
    from tuner.hardware.devices import Device, Devices
    from tuner.server.config import ServerConfig
    from tuner.server.dialect import Dialect

log = logging.getLogger(__name__)

#: A disagreement: a part differs by more than this fraction ...
REL_TOL = 0.10
#: ... and by more than this (the projection table prints whole MiB, rounded down; small buffers such
#: as a 1 MiB output buffer would otherwise "disagree" by rounding alone).
ABS_SLACK_BYTES = 2 * MIB

ServerRunner = Callable[[list[str], float], "list[str]"]


@dataclass(frozen=True)
class PartCheck:
    """One compared number: ``source`` (``"start-up projection"`` / ``"allocated buffers"``), ``model``
    (``target`` / ``draft``), ``place`` (``Host``, a ggml device name, or ``all`` for sums over places),
    ``part`` (``weights`` / ``KV`` / ``compute`` / ``output`` / ``total``), both sides in bytes."""

    source: str
    model: str
    place: str
    part: str
    planned_bytes: int
    reported_bytes: int

    @property
    def rel_error(self) -> float | None:
        """(planned − reported) ÷ reported; None when nothing was reported."""
        return None if self.reported_bytes <= 0 else (self.planned_bytes - self.reported_bytes) / self.reported_bytes

    @property
    def agrees(self) -> bool:
        """Within :data:`REL_TOL` or :data:`ABS_SLACK_BYTES`."""
        return within(self.planned_bytes, self.reported_bytes, REL_TOL, ABS_SLACK_BYTES)

    def sentence(self) -> str:
        """The disagreement in plain words."""
        err = self.rel_error
        pct = f" ({err:+.0%})" if err is not None else ""
        return (f"{self.model} {self.part} on {self.place}: plan {format_bytes(self.planned_bytes, unit='MiB')}, "
                f"llama-server {self.source} {format_bytes(self.reported_bytes, unit='MiB')}{pct}")


@dataclass(frozen=True)
class ServerCrossCheck:
    """Answer of :func:`server_cross_check`. ``ok`` False = no answer (``note`` says why).

    ``argv``: what was run (the server's argv + the check flags); ``key``: the cache key;
    ``parts``: every compared number; ``disagreements``: plain-words sentences for the parts beyond
    tolerance (empty = agrees); ``cost_s``: seconds the server run took (when it ran, not when cached);
    ``cached``: the answer came from the cache.
    """

    ok: bool
    argv: tuple[str, ...]
    key: str
    parts: tuple[PartCheck, ...] = ()
    disagreements: tuple[str, ...] = ()
    note: str | None = None
    cost_s: float | None = None
    cached: bool = False

    @property
    def agrees(self) -> bool | None:
        """True when it answered and nothing disagrees; None when it could not answer."""
        return None if not self.ok else not self.disagreements

    def to_json(self) -> dict:
        """JSON form (for ``plan --json``)."""
        return {"ok": self.ok, "argv": list(self.argv), "key": self.key, "parts": [asdict(p) for p in self.parts],
                "disagreements": list(self.disagreements), "note": self.note, "cost_s": self.cost_s,
                "cached": self.cached}


def server_config_for(request: MemoryRequest, threads: int | None = None,
                      binary: str | os.PathLike[str] | None = None) -> ServerConfig:
    """The ``tuner.server.config.ServerConfig`` that launches what ``request`` plans (port unset).

    Settings the config has no field for go to ``extra_args`` in llama-server's spelling:
    ``--n-cpu-moe`` / ``--cpu-moe``, ``-b`` / ``-ub`` when not the defaults (2048 / 512), ``-fa on|off``
    when set, ``-ctkd`` / ``-ctvd`` when not f16; ``request.no_repack`` is ``no_repack``. With ``binary``,
    the launch as every launch of that binary runs on this machine: its recorded workarounds applied
    (``tuner.crosscheck.cpu_buffers.with_cpu_workarounds``: ``--no-repack`` where this CPU crashed in the
    repacked kernels). Raises ``ValueError`` when a model has no path.
    """
    from tuner.server.config import ServerConfig

    t, d = request.target, request.draft
    if t.path is None:
        raise ValueError("target has no file path: the cross-check needs the GGUF")
    types = {x.strip() for x in request.spec_type.split(",")}
    draft_path: Path | None = None  # set when the spec type uses the draft model
    if d is not None and types & DRAFT_MODEL_TYPES:
        if d.path is None:
            raise ValueError("draft has no file path: the cross-check needs the GGUF")
        draft_path = Path(d.path)
    uses_draft = draft_path is not None
    extra: list[str] = []
    if request.cpu_moe:
        extra.append("--cpu-moe")
    elif request.n_cpu_moe:
        extra += ["--n-cpu-moe", str(request.n_cpu_moe)]
    if request.n_batch != 2048:
        extra += ["-b", str(request.n_batch)]
    if request.n_ubatch != 512:
        extra += ["-ub", str(request.n_ubatch)]
    if request.flash_attn is not None:
        extra += ["-fa", "on" if request.flash_attn else "off"]
    if uses_draft and request.cache_type_k_draft != "f16":
        extra += ["-ctkd", request.cache_type_k_draft]
    if uses_draft and request.cache_type_v_draft != "f16":
        extra += ["-ctvd", request.cache_type_v_draft]
    cfg = ServerConfig(
        model_path=Path(t.path), draft_path=draft_path,
        spec_type=request.spec_type, n_max=request.n_max if uses_draft else None,
        ngl=request.ngl, draft_ngl=request.draft_ngl if uses_draft else None, n_ctx=request.n_ctx,
        n_parallel=request.n_parallel, cache_type_k=request.cache_type_k, cache_type_v=request.cache_type_v,
        threads=threads, extra_args=tuple(extra), no_repack=request.no_repack)
    if binary is None:
        return cfg
    from tuner.crosscheck.cpu_buffers import with_cpu_workarounds

    return with_cpu_workarounds(cfg, binary)


_CHECK_FLAGS = ("--fit", "-fit", "-lv", "--verbosity", "--log-verbosity")


def check_argv(server_argv: Sequence[str], port: int) -> list[str]:
    """The server's argv for the check: its ``--port`` replaced by ``port``, any ``--fit`` / ``-lv``
    replaced by ``--fit on -lv 4`` (the projection is logged only by fit, at TRACE level), plus
    ``--no-warmup`` (the warm-up decode allocates nothing new). Everything else unchanged."""
    argv = without_flags(list(server_argv), _CHECK_FLAGS)
    out = []
    i = 0
    while i < len(argv):
        if argv[i] == "--port" and i + 1 < len(argv):
            out += ["--port", str(port)]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    if "--port" not in out:
        out += ["--port", str(port)]
    return out + ["--fit", "on", "-lv", "4", "--no-warmup"]


def _file_id(path: str | os.PathLike[str] | None) -> list:
    if path is None:
        return [None]
    p = Path(path)
    try:
        st = p.stat()
        return [str(p.resolve()), st.st_size, int(st.st_mtime)]
    except OSError:
        return [str(p), None, None]


def cache_key(server_argv: Sequence[str], model_paths: Sequence[str | os.PathLike[str] | None]) -> str:
    """Key of one check: the binary and model files (path, size, mtime) and the argv without the port."""
    argv = list(server_argv)
    norm = []
    i = 0
    while i < len(argv):
        if argv[i] == "--port":
            i += 2
            continue
        norm.append(argv[i])
        i += 1
    blob = json.dumps([_file_id(argv[0] if argv else None), [_file_id(p) for p in model_paths], norm[1:]])
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _cache_path(key: str) -> Path:
    from tuner import paths

    return paths.cache_dir() / "memcheck" / f"{key}.json"


_KEEP_LINE = ("buffer size", "memory breakdown", "|   - ", "device memory data", "loading draft model",
              "projected to use", "n_outputs_max")


def _report_lines(lines: Sequence[str]) -> list[str]:
    """The lines of a server log the comparison reads (what the cache keeps)."""
    return [ln.rstrip("\n") for ln in lines if any(k in ln for k in _KEEP_LINE)]


def cached_server_report(server_argv: Sequence[str], model_paths: Sequence[str | os.PathLike[str] | None]
                         ) -> tuple[list[str], float | None] | None:
    """The cached server report (its relevant log lines and the run's cost in seconds) for this argv
    and these model files, or None. Never runs anything (for the Models tab)."""
    from tuner.storage import load_json

    try:
        data = load_json(_cache_path(cache_key(server_argv, model_paths)))
        if not isinstance(data, dict) or not isinstance(data.get("lines"), list):
            return None
        return [str(x) for x in data["lines"]], data.get("cost_s")
    except (OSError, ValueError):
        return None


def run_server_log(argv: list[str], timeout_s: float) -> list[str]:
    """Start llama-server with ``argv`` (clean environment), collect its log until ``model loaded`` /
    ``listening on`` / exit / ``timeout_s``, stop it, return the lines (``tuner.process.spawn``)."""
    import threading

    from tuner.process import clean_env, spawn

    done = threading.Event()

    def on_line(line: str) -> None:
        if "model loaded" in line or "listening on" in line or "exiting due to" in line:
            done.set()

    child = spawn(argv, env=clean_env(os.environ), on_line=on_line, tail_lines=20000)
    try:
        deadline = time.monotonic() + timeout_s
        while not done.is_set() and child.is_alive() and time.monotonic() < deadline:
            done.wait(0.1)
    finally:
        child.stop(grace_s=5.0)
    return child.log_lines()


def _target_and_draft_plans(request: MemoryRequest, devices: Devices | Sequence[Device]) -> tuple[MemoryPlan, MemoryPlan]:
    full = plan_memory(request, devices)
    alone = plan_memory(replace(request, draft=None), devices)
    return full, alone


def _places(plan: MemoryPlan) -> list[tuple[str, PlacementBytes]]:
    return [(d.device_name, d.need) for d in plan.devices] + [("Host", plan.host.need)]


def compare_with_server(request: MemoryRequest, devices: Devices | Sequence[Device], lines: Sequence[str]) -> tuple[PartCheck, ...]:
    """Every comparable number of a ``-lv 4 --fit on`` server log against the plan of ``request``.

    Start-up projection rows (per place, per model: weights, KV, compute) and allocated buffers (per
    model, summed over places: weights, KV, compute, output). Raises ``ValueError`` when the log has
    neither (see :mod:`tuner.hardware.buffers`)."""
    from tuner.hardware.buffers import parse_load_buffers, parse_startup_projection

    full, alone = _target_and_draft_plans(request, devices)
    by_t = dict(_places(alone))
    by_f = dict(_places(full))

    # the projection (a no-alloc measurement) counts a weight that an extra CPU buffer type took only there,
    # while the mapped file (the allocated CPU_Mapped buffer) still spans it
    moved = {"target": alone.extra_moved_bytes, "draft": full.extra_moved_bytes - alone.extra_moved_bytes}

    def planned(model: str, place: str | None, what: str) -> int:
        # target: the plan of the target alone; draft: what the full plan adds to it
        total = 0
        for n in ([place] if place is not None else list(by_f)):
            nt, nf = by_t.get(n), by_f.get(n)
            if nf is None:
                continue
            if model == "target":
                if nt is not None:
                    total += {"weights": nt.target_weights_bytes, "KV": nt.target_kv_bytes + nt.mtp_kv_bytes,
                              "compute": nt.compute_bytes, "output": nt.output_bytes}[what]
            else:
                total += {"weights": nf.draft_weights_bytes, "KV": nf.draft_kv_bytes,
                          "compute": nf.compute_bytes - (nt.compute_bytes if nt is not None else 0),
                          "output": nf.output_bytes - (nt.output_bytes if nt is not None else 0)}[what]
        return total

    out: list[PartCheck] = []
    proj = None
    try:
        proj = parse_startup_projection(lines)
    except ValueError:
        pass
    if proj is not None:
        for model, rows in (("target", proj.target), ("draft", proj.draft)):
            if model == "draft" and (request.draft is None or not rows):
                continue
            # rows that are no device of the plan (CPU_REPACK and other host buffer types) are host memory
            merged: dict[str, list[int]] = {}
            for r in rows:
                place = r.place if r.place in by_f else "Host"
                acc = merged.setdefault(place, [0, 0, 0])
                acc[0] += r.model_bytes
                acc[1] += r.context_bytes
                acc[2] += r.compute_bytes
            for place, (mb, cb, kb) in merged.items():
                for what, theirs in (("weights", mb), ("KV", cb), ("compute", kb)):
                    ours = planned(model, place, what) - (moved[model] if (place, what) == ("Host", "weights") else 0)
                    out.append(PartCheck("start-up projection", model, place, what, ours, theirs))
    bufs = None
    try:
        bufs = parse_load_buffers(lines)
    except ValueError:
        pass
    if bufs is not None:
        for model, b in (("target", bufs.target), ("draft", bufs.draft)):
            if b is None or (model == "draft" and request.draft is None):
                continue
            kv = b.kv_bytes + b.recurrent_bytes
            for what, theirs in (("weights", b.model_bytes), ("KV", kv), ("compute", b.compute_bytes),
                                 ("output", b.output_bytes)):
                out.append(PartCheck("allocated buffers", model, "all", what, planned(model, None, what), theirs))
        out.append(PartCheck("allocated buffers", "all", "all", "total", full.total_bytes, bufs.total_bytes))
    if proj is None and bufs is None:
        raise ValueError("the llama-server log has neither a start-up projection nor buffer lines "
                         "(it needs --fit on and -lv 4)")
    return tuple(out)


def server_cross_check(request: MemoryRequest, devices: Devices | Sequence[Device], server_binary: str | os.PathLike[str],
                       dialect: Dialect | None = None, runner: ServerRunner | None = None,
                       timeout_s: float = 300.0, use_cache: bool = True, threads: int | None = None,
                       extra_args: Sequence[str] = ()) -> ServerCrossCheck:
    """Run llama-server once with the argv it would get for ``request`` (``tuner.server.argv.build_argv``
    of :func:`server_config_for`, then :func:`check_argv`), stop it once the model is loaded, and
    compare its start-up projection and allocated buffers with :func:`plan_memory` part by part.

    Cost: one model load (the weights are read). The server's report (its relevant log lines) is
    cached per :func:`cache_key`, so a second call with the same binary, files and settings costs a
    file read and a fresh comparison with the current plan (``use_cache`` False runs it again). ``runner(argv, timeout_s) -> log lines`` replaces the real run (tests). Never raises:
    a failure is an answer with ``ok`` False and a ``note``. ``extra_args``: the user's own llama-server
    flags (``plan --server-arg``), appended as every launch gets them.
    """
    request = replace(request, prompt_cache_bytes=0)  # grows while serving; not a start-up buffer
    from tuner.process import free_port
    from tuner.server.argv import UnsupportedConfigError, build_argv
    from tuner.storage import atomic_write_json

    try:
        cfg = server_config_for(request, threads=threads, binary=server_binary)
        cfg = replace(cfg, extra_args=(*cfg.extra_args, *extra_args))
        if dialect is None:
            from tuner.server.dialect import probe_dialect

            dialect = probe_dialect(Path(server_binary))
        server_argv = build_argv(Path(server_binary), cfg.with_port(free_port()), dialect)
    except (ValueError, UnsupportedConfigError, OSError) as exc:
        return ServerCrossCheck(False, (), "", note=f"cannot build the server's argv: {exc}")
    except Exception as exc:  # noqa: BLE001 - DialectError and friends: an answer, not a crash
        log.debug("no server argv for the cross-check", exc_info=True)
        return ServerCrossCheck(False, (), "", note=f"cannot build the server's argv: {exc}")
    models = [cfg.model_path, cfg.draft_path]
    key = cache_key(server_argv, models)
    argv = check_argv(server_argv, free_port())
    hit = cached_server_report(server_argv, models) if use_cache else None
    cached = hit is not None
    if hit is not None:
        lines, cost = hit
    else:
        run = runner or run_server_log
        t0 = time.monotonic()
        try:
            lines = list(run(argv, timeout_s))
        except OSError as exc:
            return ServerCrossCheck(False, tuple(argv), key, note=f"llama-server did not start: {exc}")
        cost = round(time.monotonic() - t0, 2)
    try:
        parts = compare_with_server(request, devices, lines)
    except ValueError as exc:
        tail = " | ".join(line.strip() for line in list(lines)[-3:])
        return ServerCrossCheck(False, tuple(argv), key, note=f"{exc}; last lines: {tail}", cost_s=cost,
                                cached=cached)
    if not cached:
        try:
            atomic_write_json(_cache_path(key), {"argv": argv, "lines": _report_lines(lines), "cost_s": cost})
        except OSError:
            pass
    bad = tuple(p.sentence() for p in parts if not p.agrees)
    return ServerCrossCheck(True, tuple(argv), key, parts, bad, None, cost, cached)
