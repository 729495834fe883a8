"""Adapter for NVML (nvidia-ml-py, module ``pynvml``): the only module that imports it.

Every NVML failure becomes a value with a note: the library missing (no driver, or WSL where it lives
in ``/usr/lib/wsl/lib``), the driver not loaded, a GPU that is lost/switched off, a memory query that
answers NOT_SUPPORTED (unified-memory GPUs such as Jetson / GB10), per-process memory that is N/A
(``usedGpuMemory`` None, e.g. Windows WDDM or containers) and MIG, where the device memory is that of the
whole GPU rather than the slice a process gets. ``lib`` parameters take a pynvml-like object so tests
inject each failure.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


# NVML return codes (nvml.h)
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

WSL_LIBRARY_PATHS = ("/usr/lib/wsl/lib/libnvidia-ml.so.1",)


@dataclass(frozen=True)
class MigSlice:
    """One MIG instance of a GPU: its own memory (what a CUDA process on it can use)."""

    index: int
    name: str | None
    total_bytes: int | None
    free_bytes: int | None


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML sees it (NVML index = PCI bus order).

    Memory fields are None when NVML cannot tell (``memory_note`` says why). ``memory_unsupported``: the
    memory query answered ``NVML_ERROR_NOT_SUPPORTED`` (a unified-memory GPU such as Jetson / GB10: its memory
    is the host's). ``mig_enabled`` None = unknown/not applicable. With MIG on, ``total_bytes``/``free_bytes``
    are the whole GPU's.
    """

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    mig_enabled: bool | None = None
    mig_slices: tuple[MigSlice, ...] = ()
    memory_note: str | None = None
    memory_unsupported: bool = False


@dataclass(frozen=True)
class NvmlResult:
    """Outcome of one NVML probe: ``ok`` False (with ``note``) when NVML could not be used at all."""

    ok: bool
    gpus: tuple[NvmlGpu, ...]
    driver_version: str | None
    note: str | None


@dataclass(frozen=True)
class GpuUsage:
    """One live sample of a GPU for graphs: memory in bytes, utilisation in percent; None = N/A."""

    index: int
    used_bytes: int | None
    total_bytes: int | None
    util_percent: int | None
    process_used_bytes: int | None
    note: str | None = None


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def explain_error(exc: BaseException, wsl_paths: tuple[str, ...] = WSL_LIBRARY_PATHS) -> str:
    """Plain-words reason for an NVML exception (used in notes)."""
    code = _code(exc)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        if any(os.path.exists(p) for p in wsl_paths):
            return (
                "NVML library not on the loader path (WSL: it lives in /usr/lib/wsl/lib; "
                "add that folder to LD_LIBRARY_PATH)"
            )
        return "NVML library (libnvidia-ml) not found: no NVIDIA driver installed"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (no NVIDIA GPU, or the discrete GPU is switched off)"
    if code == NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost (switched off or fell off the bus)"
    if code == NVML_ERROR_NO_PERMISSION:
        return "no permission to query the GPU"
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "NVML library and kernel driver versions differ (reboot after a driver update)"
    if code == NVML_ERROR_NOT_SUPPORTED:
        return "not supported by this GPU/driver"
    return f"NVML error: {exc}"


def _load_lib() -> Any:
    import pynvml  # the one import of pynvml in the project

    return pynvml


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _init(lib: Any, wsl_paths: tuple[str, ...]) -> str | None:
    """nvmlInit, retrying once with the WSL library path; returns a note on failure."""
    try:
        lib.nvmlInit()
        return None
    except Exception as exc:  # noqa: BLE001 - every NVML failure is a value
        # one line on a --verbose terminal; the traceback goes to the log file only (tuner.logs)
        if _code(exc) == NVML_ERROR_LIBRARY_NOT_FOUND and not any(os.path.exists(p) for p in wsl_paths):
            log.debug("no NVIDIA driver: NVML not available (%s)", exc, exc_info=True)
        else:
            log.debug("nvmlInit failed: %s", explain_error(exc, wsl_paths), exc_info=True)
        first = exc
    if _code(first) == NVML_ERROR_LIBRARY_NOT_FOUND:
        for path in wsl_paths:
            if not os.path.exists(path) or not hasattr(lib, "nvmlLib"):
                continue
            try:
                lib.nvmlLib = ctypes.CDLL(path)
                lib.nvmlInit()
                return None
            except Exception:  # noqa: BLE001
                log.debug("NVML from %s failed", path, exc_info=True)
                continue
    return f"NVML unavailable: {explain_error(first, wsl_paths)}"


def _gpu(lib: Any, index: int) -> NvmlGpu:
    handle = lib.nvmlDeviceGetHandleByIndex(index)

    def opt(fn_name: str, *args: Any) -> Any:
        fn = getattr(lib, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001
            log.debug("optional NVML call failed", exc_info=True)
            return None

    name = _text(opt("nvmlDeviceGetName", handle))
    uuid = _text(opt("nvmlDeviceGetUUID", handle))
    pci = opt("nvmlDeviceGetPciInfo", handle)
    pci_bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
    total = used = free = None
    note = None
    unsupported = False
    try:
        mem = lib.nvmlDeviceGetMemoryInfo(handle)
        total, used, free = int(mem.total), int(mem.used), int(mem.free)
    except Exception as exc:  # noqa: BLE001
        if _code(exc) == NVML_ERROR_NOT_SUPPORTED:
            unsupported = True
            note = "NVML memory query NOT_SUPPORTED (unified-memory GPU: memory is shared with the host)"
        else:
            note = f"memory unreadable: {explain_error(exc)}"
    mig_enabled = None
    slices: list[MigSlice] = []
    mode = opt("nvmlDeviceGetMigMode", handle)
    if mode is not None:
        current = mode[0] if isinstance(mode, (tuple, list)) else mode
        mig_enabled = bool(current)
    if mig_enabled:
        count = opt("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        for i in range(int(count)):
            mig = opt("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            if mig is None:
                continue
            mmem = opt("nvmlDeviceGetMemoryInfo", mig)
            slices.append(
                MigSlice(
                    index=i,
                    name=_text(opt("nvmlDeviceGetName", mig)),
                    total_bytes=int(mmem.total) if mmem is not None else None,
                    free_bytes=int(mmem.free) if mmem is not None else None,
                )
            )
    return NvmlGpu(index, name, uuid, pci_bus_id, total, used, free, mig_enabled, tuple(slices), note,
                   unsupported)


def probe_nvml(lib: Any = None, wsl_paths: tuple[str, ...] = WSL_LIBRARY_PATHS) -> NvmlResult:
    """Read every NVIDIA GPU through NVML (init → query → shutdown); never raises.

    ``lib`` None imports pynvml. A GPU whose handle cannot be opened is skipped with a note.
    """
    try:
        lib = lib if lib is not None else _load_lib()
    except ImportError as exc:
        return NvmlResult(False, (), None, f"NVML unavailable: nvidia-ml-py not importable ({exc})")
    note = _init(lib, wsl_paths)
    if note:
        return NvmlResult(False, (), None, note)
    gpus: list[NvmlGpu] = []
    notes: list[str] = []
    driver = None
    try:
        try:
            driver = _text(lib.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            log.debug("NVML driver version unreadable", exc_info=True)
            driver = None
        try:
            count = int(lib.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001
            log.debug("NVML device count failed", exc_info=True)
            return NvmlResult(False, (), driver, f"NVML device count failed: {explain_error(exc)}")
        for i in range(count):
            try:
                gpus.append(_gpu(lib, i))
            except Exception as exc:  # noqa: BLE001
                log.debug("NVML GPU %s skipped", i, exc_info=True)
                notes.append(f"NVML GPU {i} skipped: {explain_error(exc)}")
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:  # noqa: BLE001
            log.debug("nvmlShutdown failed", exc_info=True)
    return NvmlResult(True, tuple(gpus), driver, "; ".join(notes) or None)


class NvmlSampler:
    """Keeps NVML initialised for live sampling (telemetry graphs); ``sample()`` never raises.

    ``open()`` returns False (and sets ``note``) when NVML cannot be used. Per-process memory is None
    when NVML reports it as N/A (``usedGpuMemory`` None).
    """

    def __init__(self, lib: Any = None, is_suspended: Callable[[int], bool] | None = None) -> None:
        """``is_suspended(nvml_index)``: when it answers True the GPU is not queried at all (a
        runtime-suspended laptop dGPU stays asleep); the sample then carries None values and a note."""
        self._lib = lib
        self._open = False
        self._is_suspended = is_suspended
        self.note: str | None = None

    def open(self) -> bool:
        """Initialise NVML; False with ``note`` on failure."""
        try:
            if self._lib is None:
                self._lib = _load_lib()
        except ImportError as exc:
            self.note = f"NVML unavailable: {exc}"
            return False
        self.note = _init(self._lib, WSL_LIBRARY_PATHS)
        self._open = self.note is None
        return self._open

    def sample(self, index: int, pid: int | None = None) -> GpuUsage:
        """Memory/utilisation of NVML GPU ``index`` (and memory of process ``pid`` on it)."""
        if not self._open:
            return GpuUsage(index, None, None, None, None, self.note or "NVML not open")
        if self._is_suspended is not None and self._is_suspended(index):
            return GpuUsage(index, None, None, None, None, "GPU runtime-suspended: not polled (would wake it)")
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001
            log.debug("NVML GPU %s handle failed", index, exc_info=True)
            return GpuUsage(index, None, None, None, None, explain_error(exc))
        used = total = util = proc = None
        notes = []
        try:
            mem = lib.nvmlDeviceGetMemoryInfo(handle)
            used, total = int(mem.used), int(mem.total)
        except Exception as exc:  # noqa: BLE001
            log.debug("NVML memory reading failed", exc_info=True)
            notes.append(f"memory: {explain_error(exc)}")
        try:
            util = int(lib.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception as exc:  # noqa: BLE001
            log.debug("NVML utilisation reading failed", exc_info=True)
            notes.append(f"utilisation: {explain_error(exc)}")
        if pid is not None:
            proc, pnote = _process_memory(lib, handle, pid)
            if pnote:
                notes.append(pnote)
        return GpuUsage(index, used, total, util, proc, "; ".join(notes) or None)

    def count(self) -> int:
        """Number of NVML GPUs (0 when NVML is not open or the query fails)."""
        if not self._open:
            return 0
        try:
            return int(self._lib.nvmlDeviceGetCount())
        except Exception:  # noqa: BLE001
            log.debug("NVML device count failed", exc_info=True)
            return 0

    def close(self) -> None:
        """Shut NVML down (safe to call twice)."""
        if self._open:
            try:
                self._lib.nvmlShutdown()
            except Exception:  # noqa: BLE001
                log.debug("nvmlShutdown failed", exc_info=True)
        self._open = False


def _process_memory(lib: Any, handle: Any, pid: int) -> tuple[int | None, str | None]:
    try:
        procs = list(lib.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception as exc:  # noqa: BLE001
        log.debug("NVML per-process memory failed", exc_info=True)
        return None, f"per-process memory: {explain_error(exc)}"
    for p in procs:
        if int(getattr(p, "pid", -1)) == pid:
            used = getattr(p, "usedGpuMemory", None)
            if used is None:
                return None, "per-process GPU memory is N/A on this system (driver does not report it)"
            return int(used), None
    return None, f"process {pid} not found on this GPU"


_shared: NvmlSampler | None = None


def used_bytes_total(lib: Any = None) -> int | None:
    """Device memory in use over all NVIDIA GPUs, in bytes, for the VRAM graph; None when NVML is
    unavailable or no GPU reports its memory. Keeps one NVML session open between calls."""
    global _shared
    if _shared is None or lib is not None:
        _shared = NvmlSampler(lib)
        if not _shared.open():
            return None
    total = None
    for i in range(_shared.count()):
        used = _shared.sample(i).used_bytes
        if used is not None:
            total = (total or 0) + used
    return total
