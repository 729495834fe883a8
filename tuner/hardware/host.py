"""Adapter for psutil: host RAM and CPU cores (the only hardware module that imports psutil)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostInfo:
    """Host memory and CPU. ``None`` = could not be read; ``note`` says why.

    ``cpu_cores`` counts physical cores when psutil knows them, else logical CPUs;
    ``cpu_threads`` counts logical CPUs. ``cpu_features``: the instruction-set flags that decide
    llama.cpp's CPU weight repacking (``avx2``, ``avx512f``; see :func:`cpu_features`).
    """

    ram_total_bytes: int | None
    ram_available_bytes: int | None
    cpu_cores: int | None
    cpu_threads: int | None
    note: str | None = None
    cpu_features: tuple[str, ...] = ()


def probe_host() -> HostInfo:
    """Read host RAM (total, available) and core counts through psutil; never raises."""
    try:
        import psutil
    except ImportError as exc:  # pragma: no cover - psutil is a dependency
        return HostInfo(None, None, None, None, f"psutil not importable: {exc}")
    notes = []
    total = avail = cores = threads = None
    try:
        vm = psutil.virtual_memory()
        total, avail = int(vm.total), int(vm.available)
    except Exception as exc:  # noqa: BLE001 - any psutil failure becomes a note
        notes.append(f"host RAM unreadable: {exc}")
    try:
        threads = psutil.cpu_count(logical=True)
        cores = psutil.cpu_count(logical=False) or threads
    except Exception as exc:  # noqa: BLE001
        notes.append(f"CPU count unreadable: {exc}")
    return HostInfo(total, avail, cores, threads, "; ".join(notes) or None, cpu_features())


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The x86 flags ``avx2`` / ``avx512f`` the CPU reports (Linux ``/proc/cpuinfo``), sorted; empty
    when unknown (other systems, unreadable file). ggml's CPU backend repacks some weight types into a
    ``CPU_REPACK`` buffer when they are present (ggml/src/ggml-cpu/repack.cpp
    ``ggml_repack_get_optimal_repack_type``). Never raises."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return tuple(sorted(flags & {"avx2", "avx512f"}))
    except OSError:
        pass
    return ()


def process_rss_bytes(pid: int) -> int | None:
    """Resident set size of process ``pid`` in bytes, or None when it cannot be read."""
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001
        return None
