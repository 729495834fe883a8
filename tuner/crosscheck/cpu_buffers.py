"""What a llama-server build does with quantized weights on this CPU: which of ggml's extra CPU buffer
types (``AMX``, ``CPU_REPACK``) it copies them into, read from the build's own load log and cached per
(binary, CPU, kernel); and the ``--no-repack`` workaround recorded for it (``tuner.server.workarounds``).

Where the log comes from: :func:`probe_cpu_buffers` starts llama-server once, through the
``Supervisor`` (so on a CPU whose repacked kernels crash, the crash, the ``--no-repack`` retry and the
recorded workaround happen here first), on the doctor's tiny quantized self-test model
(``resources/selftest/``, ``tuner.server.selftest.selftest_model``) with ``-lv 4 -ngl 0`` (every layer on
the CPU, as the buffer lines must show what CPU-run layers get), reads its ``load_tensors: … model buffer
size`` and ``system_info`` lines (:func:`tuner.hardware.buffers.parse_cpu_build`, src/llama-model.cpp
``load_tensors``), stops it: about a second. The answer is kept in ``paths.cache_dir()/cpu-buffers.json``
under the build's identity (``tuner.server.workarounds.binary_identity``), the CPU and the kernel release.
The callers that know the binary hand it to ``detect_devices`` through ``tuner.crosscheck.build.build_probes``,
so it lands in ``Devices.cpu_buffers``, which the memory plan reads. A fact probed under ``--no-repack``
cannot show the build's types: it is probed again once the workaround is gone.

The pure side (the log parsing, the plan's model of the copies, the workaround's sentence) lives in
``tuner.hardware`` (buffers.py, memory.py, repack.py); this module is the part that starts a server.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.hardware.buffers import CpuBuffers, parse_cpu_build
from tuner.hardware.repack import NO_REPACK_FLAGS, no_repack_sentence
from tuner.server import workarounds
from tuner.server.workarounds import CpuWorkaround

if TYPE_CHECKING:
    from tuner.server.config import ServerConfig
    from tuner.server.dialect import Dialect
    from tuner.server.discovery import ServerBinary

log = logging.getLogger(__name__)


def recorded_no_repack(binary_path: str | os.PathLike[str] | None) -> tuple[str, tuple[str, ...]] | None:
    """The ``--no-repack`` workaround recorded for ``binary_path`` on this machine, as ``(cause, the build's
    extra CPU buffer types when known)`` (what ``tuner.hardware.repack.no_repack_sentence`` words), else None
    (also for None). Never raises."""
    if binary_path is None:
        return None
    w = current_cpu_workaround(binary_path)
    if w is None or not w.no_repack:
        return None
    known = _load_entry(fact_key(binary_path))
    return w.cause, tuple(known.get("types", ())) if known else ()


def workaround_sentence(binary_path: str | os.PathLike[str] | None) -> str | None:
    """``tuner.hardware.repack.no_repack_sentence`` when the ``--no-repack`` workaround is recorded for
    ``binary_path`` on this machine (:func:`recorded_no_repack`), else None (also for None). Never raises."""
    fact = recorded_no_repack(binary_path)
    return no_repack_sentence(*fact) if fact is not None else None


def current_cpu_workaround(binary_path: str | os.PathLike[str]) -> CpuWorkaround | None:
    """``tuner.server.workarounds.current_workaround(binary_path)``: the recorded ``--no-repack`` fact or None;
    never raises."""
    return workarounds.current_workaround(Path(binary_path))


def with_cpu_workarounds(config: ServerConfig, binary_path: str | os.PathLike[str]) -> ServerConfig:
    """``config`` as every launch of ``binary_path`` runs it on this machine
    (``tuner.server.workarounds.apply_workarounds``: ``--no-repack`` when recorded)."""
    return workarounds.apply_workarounds(config, Path(binary_path))


# --------------------------------------------------------------------------------------------------
# The cached fact

def fact_key(binary_path: str | os.PathLike[str]) -> str:
    """The cache key of the fact for ``binary_path`` on this CPU and kernel: a hash of the build's files
    (``tuner.server.workarounds.binary_identity``: the executable and its ggml-cpu libraries), the CPU's
    model and flags and the kernel release, as the workaround store keys its facts."""
    import platform

    try:
        build: object = workarounds.binary_identity(Path(binary_path))
    except OSError:
        build = str(binary_path)
    cpu = workarounds.cpu_identity()
    blob = json.dumps([build, cpu.model, sorted(cpu.flags), platform.release()])
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _store_path() -> Path:
    from tuner import paths

    return paths.cache_dir() / "cpu-buffers.json"


def _load_entries() -> dict[str, Any]:
    from tuner.storage import load_json

    try:
        data = load_json(_store_path())
    except (OSError, ValueError):
        log.warning("the CPU buffer facts cannot be read; probing again", exc_info=True)
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    return entries if isinstance(entries, dict) else {}


def _load_entry(key: str) -> dict[str, Any] | None:
    entry = _load_entries().get(key)
    ok = isinstance(entry, dict) and isinstance(entry.get("types"), list) and isinstance(entry.get("build_flags"), list)
    return entry if ok else None


def _save_entry(key: str, entry: dict[str, Any]) -> None:
    from tuner.storage import atomic_write_json

    entries = _load_entries()
    entries[key] = entry
    try:
        atomic_write_json(_store_path(), {"version": 1, "entries": entries})
    except OSError:
        log.warning("cannot save the CPU buffer fact", exc_info=True)


def _fact(entry: dict[str, Any], binary_path: str | os.PathLike[str]) -> CpuBuffers:
    w = current_cpu_workaround(binary_path)
    no_repack = bool(entry.get("probed_no_repack")) or (w is not None and w.no_repack)
    return CpuBuffers(tuple(str(t) for t in entry["types"]), tuple(str(f) for f in entry["build_flags"]),
                      no_repack, "load log", w.cause if w is not None else None)


def known_cpu_buffers(binary_path: str | os.PathLike[str] | None) -> CpuBuffers | None:
    """The cached fact for ``binary_path`` on this machine, in the mode in force, or None (never probed,
    or probed under a ``--no-repack`` workaround that is gone). Starts nothing; never raises."""
    if binary_path is None:
        return None
    entry = _load_entry(fact_key(binary_path))
    if entry is None:
        return None
    fact = _fact(entry, binary_path)
    if entry.get("probed_no_repack") and current_cpu_workaround(binary_path) is None:
        return None  # the types were never seen: probe again
    return fact


def record_cpu_buffers(binary_path: str | os.PathLike[str], lines: list[str], argv: list[str]) -> CpuBuffers:
    """Store what the load log ``lines`` of a launch with ``argv`` shows about ``binary_path`` on this
    machine and return the fact in the mode in force. Raises ``ValueError`` when the log has no model
    buffer line (see :func:`tuner.hardware.buffers.parse_cpu_build`)."""
    build = parse_cpu_build(lines)
    no_repack = any(a in NO_REPACK_FLAGS for a in argv)
    entry = {"types": [] if no_repack else list(build.extra_types), "build_flags": list(build.build_flags),
             "probed_no_repack": no_repack, "extra_bytes": [list(x) for x in build.extra_bytes],
             "recorded_unix_s": round(time.time(), 3), "binary": str(binary_path),
             "cpu": workarounds.cpu_identity().model}
    _save_entry(fact_key(binary_path), entry)
    return _fact(entry, binary_path)


def probe_cpu_buffers(binary: ServerBinary | str | os.PathLike[str], dialect: Dialect | None = None,
                      timeout_s: float = 60.0, use_cache: bool = True) -> CpuBuffers | None:
    """The fact for ``binary`` on this machine: from the cache (:func:`known_cpu_buffers`), else from one
    probe launch (see the module docs; ~1 s). None when the probe cannot tell (no self-test model, the
    server failed even after the supervisor's retries, no buffer lines): the plan then guesses. Never raises."""
    from tuner.server.discovery import ServerBinary as _Binary

    path = Path(binary.path) if isinstance(binary, _Binary) else Path(binary)
    if use_cache:
        known = known_cpu_buffers(path)
        if known is not None:
            return known
    try:
        lines, argv = _probe_log(binary, dialect, timeout_s)
        return record_cpu_buffers(path, lines, argv)
    except Exception as exc:  # noqa: BLE001 - a failed probe leaves the plan to its guess
        log.warning("probing the build's CPU buffers failed: %s", exc, exc_info=True)
        return None


def build_uses_openmp(binary: ServerBinary | str | os.PathLike[str], dialect: Dialect | None = None) -> bool | None:
    """Whether ``binary``'s CPU backend uses OpenMP (``tuner.hardware.buffers.CpuBuffers.openmp``), from the
    same once-per-build fact :func:`probe_cpu_buffers` keeps (a probe launch of about a second the first time).
    None when it cannot tell. Never raises."""
    fact = probe_cpu_buffers(binary, dialect)
    return fact.openmp if fact is not None else None


def _probe_log(binary: ServerBinary | str | os.PathLike[str], dialect: Dialect | None,
               timeout_s: float) -> tuple[list[str], list[str]]:
    """Start the self-test model through a Supervisor (``-lv 4`` where the build has it, ``-ngl 0``, 256
    cells), wait until it is ready, stop it; returns its whole log and the argv it ran with. Raises
    ``ServerStartError`` and friends."""
    from tuner.server.config import ServerConfig
    from tuner.server.discovery import ServerBinary as _Binary
    from tuner.server.selftest import load_log_args, selftest_model
    from tuner.server.supervisor import Supervisor

    model = selftest_model()
    if not model.is_file():
        raise FileNotFoundError(f"self-test model missing: {model}")
    sup = Supervisor(binary if isinstance(binary, _Binary) else Path(binary), dialect, liveness_timeout_s=None)
    cfg = ServerConfig(model_path=model, n_ctx=256, n_parallel=1, ngl=0, extra_args=load_log_args(sup.dialect))
    try:
        sup.start(cfg, startup_timeout_s=timeout_s)
        sup.wait_ready(timeout_s=timeout_s)
    finally:
        sup.stop(grace_s=3.0)
    argv = list(sup.argv or [])
    log_path = sup.log_path
    if log_path is None:
        raise RuntimeError("the probe left no log")
    with open(log_path, encoding="utf-8", errors="replace") as fh:
        return fh.read().splitlines(), argv


__all__ = ["build_uses_openmp", "current_cpu_workaround", "fact_key", "known_cpu_buffers", "probe_cpu_buffers", "record_cpu_buffers",
           "recorded_no_repack", "with_cpu_workarounds", "workaround_sentence"]
