"""Devices and their memory budgets, merged from every source into one answer in llama.cpp's order.

Sources (each behind its adapter): ``llama-server --list-devices`` (listdevices.py: what llama.cpp will
really use), NVML (nvml.py), sysfs (sysfs.py: AMD memory, runtime power state), the OS for unified
memory (unified.py) and psutil for the host (host.py). CPU-only is an ordinary answer: an empty
``devices`` tuple. Every failure is a note, never an exception. Probes are parameters so tests inject
each GPU situation.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from tuner.hardware.buffers import CpuBuffers
from tuner.hardware.host import HostInfo, probe_host
from tuner.hardware.listdevices import ListDevicesResult, ListedDevice, run_list_devices
from tuner.hardware.nvml import NvmlGpu, NvmlResult, probe_nvml
from tuner.hardware.rpc import (
    RpcDiscovery,
    RpcEndpoint,
    discover_rpc_devices,
    parse_rpc_hosts,
)
from tuner.hardware.sysfs import PciGpu, probe_pci_gpus
from tuner.hardware.unified import (
    UnifiedInfo,
    default_working_set_bytes,
    probe_unified,
    unified_budget_bytes,
)
from tuner.units import GIB, MIB, format_bytes

_T = TypeVar("_T")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Device:
    """One offload device, in llama.cpp's order (``index`` = position for ``--device``/``-ts``).

    ``name``: ggml device name (``CUDA0``, ``Vulkan0``, ``Metal``) when llama.cpp listed it.
    ``total_bytes``/``free_bytes``: device memory (None = unknown). ``budget_bytes``: what a plan may
    fill (free memory; for unified memory the smaller of the OS cap and host RAM less a reserve).
    ``source``: where the numbers came from (``llama-server``, ``nvml``, ``sysfs``, ``host``, joined by
    ``+``). ``gtt_total_bytes``: AMD GTT (host memory the GPU can map), never part of the budget.
    """

    index: int
    name: str
    backend: str
    total_bytes: int | None
    free_bytes: int | None
    budget_bytes: int | None
    source: str
    notes: tuple[str, ...] = ()
    unified_memory: bool = False
    description: str | None = None
    nvml_index: int | None = None
    pci_bus_id: str | None = None
    gtt_total_bytes: int | None = None
    runtime_suspended: bool = False
    rpc_endpoint: str | None = None

    @property
    def remote(self) -> bool:
        """True for a device of an RPC host (``backend`` ``RPC``; ``rpc_endpoint`` = its ``host:port``)."""
        return self.rpc_endpoint is not None


@dataclass(frozen=True)
class Devices:
    """The whole answer: GPUs (llama.cpp's order), host RAM/CPU, and notes for the UI.

    ``listed_by_llama`` is True when the list comes from ``--list-devices`` (authoritative order and
    names); False means it was pieced together from NVML/sysfs and may differ from llama.cpp's.
    ``cpu_features``: the host CPU's repack-relevant flags (``tuner.hardware.host.cpu_features``).
    ``cpu_buffers``: which extra CPU buffer types the llama-server build uses on this CPU, in the mode in
    force (``tuner.hardware.buffers.CpuBuffers``, read by ``tuner.crosscheck.cpu_buffers`` and handed in
    through ``Probes.cpu_buffers``); None = unknown (the memory plan then guesses from ``cpu_features``).
    ``rpc_notes``: the notes about the RPC hosts asked (one per host left out, or a malformed entry), also
    in ``notes``.
    """

    devices: tuple[Device, ...]
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    cpu_cores: int | None
    notes: tuple[str, ...] = ()
    cpu_threads: int | None = None
    driver_version: str | None = None
    listed_by_llama: bool = False
    cpu_features: tuple[str, ...] = ()
    rpc_endpoints: tuple[str, ...] = ()
    rpc_unreachable: tuple[str, ...] = ()
    cpu_buffers: CpuBuffers | None = None
    rpc_notes: tuple[str, ...] = ()

    @property
    def local_devices(self) -> tuple[Device, ...]:
        """This machine's own devices (no RPC ones), re-indexed as llama.cpp orders them without ``--rpc``."""
        local = [d for d in self.devices if not d.remote]
        return tuple(replace(d, index=i) for i, d in enumerate(local))

    @property
    def remote_devices(self) -> tuple[Device, ...]:
        """The RPC hosts' devices (first in llama.cpp's default order when ``--rpc`` is given)."""
        return tuple(d for d in self.devices if d.remote)

    def local_only(self) -> Devices:
        """The same answer without the RPC hosts (what a launch without ``--rpc`` sees)."""
        return replace(self, devices=self.local_devices, rpc_endpoints=())

    @property
    def cpu_only(self) -> bool:
        """True when there is no offload device."""
        return not self.devices


@dataclass(frozen=True)
class Probes:
    """Replaceable probe functions (defaults: the real adapters; ``cpu_buffers``: none, callers that know the
    build pass ``tuner.crosscheck.build.build_probes``)."""

    list_devices: Callable[[Path | None], ListDevicesResult] | None = None  # None: the server's --list-devices
    nvml: Callable[[], NvmlResult] = probe_nvml
    pci: Callable[[], tuple[PciGpu, ...]] = probe_pci_gpus
    host: Callable[[], HostInfo] = probe_host
    unified: Callable[[], UnifiedInfo] = probe_unified
    rpc: Callable[[Path | None, tuple[RpcEndpoint, ...]], RpcDiscovery] | None = None
    cpu_buffers: Callable[[Path | None], CpuBuffers | None] | None = None  # None: not asked (the plan guesses)


_BACKEND = re.compile(r"^([A-Za-z_]+?)(\d*)$")


def backend_of(name: str) -> str:
    """Backend of a ggml device name: ``CUDA0`` → ``CUDA``, ``Vulkan1`` → ``Vulkan``, ``Metal`` → ``Metal``."""
    m = _BACKEND.match(name)
    return m.group(1) if m else name


def _match_nvml(listed: ListedDevice, gpus: list[NvmlGpu]) -> NvmlGpu | None:
    """Pick the NVML GPU that is this llama.cpp device: same name, closest total, then free."""

    def name_ok(g: NvmlGpu) -> bool:
        if not g.name:
            return False
        return g.name.lower() in listed.description.lower() or listed.description.lower() in g.name.lower()

    pool = [g for g in gpus if name_ok(g)] or list(gpus)
    if not pool:
        return None

    def key(g: NvmlGpu) -> tuple[float, float]:
        total = abs((g.total_bytes or 0) - listed.total_bytes) if g.total_bytes else float("inf")
        free = abs((g.free_bytes or 0) - listed.free_bytes) if g.free_bytes else float("inf")
        return (total, free)

    best = min(pool, key=key)
    if best.total_bytes and listed.total_bytes and not name_ok(best):
        if abs(best.total_bytes - listed.total_bytes) > max(0.05 * best.total_bytes, 512 * MIB):
            return None
    return best


def _match_amd(listed: ListedDevice, gpus: list[PciGpu]) -> PciGpu | None:
    pool = [(g, vram) for g in gpus if (vram := g.vram_total_bytes)]
    if not pool:
        return gpus[0] if len(gpus) == 1 else None
    best, vram = min(pool, key=lambda gv: abs(gv[1] - listed.total_bytes))
    if abs(vram - listed.total_bytes) > max(0.1 * vram, 512 * MIB):
        return None
    return best


def _is_apu(g: PciGpu) -> bool:
    return bool(g.vram_total_bytes and g.gtt_total_bytes and g.vram_total_bytes <= 2 * GIB
                and g.gtt_total_bytes >= 4 * g.vram_total_bytes)


def detect_devices(server_binary: str | os.PathLike[str] | None, probes: Probes | None = None,
                   rpc_hosts: Sequence[RpcEndpoint | str] | str | None = None) -> Devices:
    """Find the offload devices and their budgets; never raises (failures become notes).

    ``server_binary``: the llama-server the caller found (``tuner.crosscheck.build.find_server_binary``) or
    was given; its ``--list-devices`` answer is authoritative. None = no ``--list-devices`` probe (a note says
    so): the list is pieced together from NVML/sysfs. ``probes`` replaces any source. Returns devices in
    llama.cpp's order when ``--list-devices`` worked; otherwise NVML/sysfs order, with a note.

    ``rpc_hosts`` (``host:port`` strings or :class:`~tuner.hardware.rpc.RpcEndpoint`): llama.cpp RPC
    hosts to ask (``tuner.hardware.rpc.discover_rpc_devices``: a bounded connect, then
    ``llama-server --rpc ENDPOINT --list-devices``). Their devices (backend ``RPC``, names ``RPC0``…,
    ``rpc_endpoint`` set, budget = the free memory the host reports) come first, as in llama.cpp's
    default device order with ``--rpc`` (src/llama.cpp ``llama_model_load_from_file_impl``), then the
    local ones; ``Devices.rpc_endpoints`` holds the reachable hosts (the ``--rpc`` value), each host left
    out is a note naming it (in ``notes`` and ``rpc_notes``). A malformed entry is a note too (callers
    validate with ``parse_rpc_hosts`` first to report it as a bad flag).

    ``Devices.cpu_buffers``: which extra CPU buffer types (AMX, CPU_REPACK) the build copies quantized
    weights into here, in the mode in force: ``probes.cpu_buffers(server_binary)`` (the callers pass
    ``tuner.crosscheck.build.build_probes``), None without that probe.
    """
    probes = probes or Probes()
    notes: list[str] = []
    host = probes.host()
    if host.note:
        notes.append(host.note)
    gpus = _probe_gpus(probes, notes)
    listed = (probes.list_devices or run_list_devices)(Path(server_binary) if server_binary is not None else None)
    if not listed.ok and listed.note:
        notes.append(listed.note)
    gpus = replace(gpus, nvml=_nvml_answer(probes, gpus, listed, notes))

    def unified_budget(cap: int | None) -> int | None:
        return unified_budget_bytes(host.ram_total_bytes, host.ram_available_bytes, cap)

    if listed.ok:
        devices = _listed_devices(listed, gpus, unified_budget, notes)
    else:  # no llama.cpp list: piece it together, and say so
        devices = _pieced_devices(gpus, host, unified_budget, notes)
    rpc = _rpc_devices(rpc_hosts, probes, server_binary)
    notes.extend(rpc.notes)
    devices = rpc.remote + [replace(d, index=len(rpc.remote) + i) for i, d in enumerate(devices)]
    cpu_probe = probes.cpu_buffers
    cpu_bufs = None if cpu_probe is None else _safe(
        lambda: cpu_probe(Path(server_binary) if server_binary is not None else None), None, notes, "CPU buffer probe")
    return Devices(tuple(devices), host.ram_total_bytes, host.ram_available_bytes, host.cpu_cores,
                   tuple(notes), host.cpu_threads, gpus.nvml.driver_version, listed.ok, host.cpu_features,
                   rpc.endpoints, rpc.unreachable, cpu_bufs, rpc.notes)


@dataclass(frozen=True)
class _Gpus:
    """What the GPU probes other than llama.cpp said: PCI/sysfs (runtime-suspended NVIDIA GPUs, amdgpu
    ones), the unified-memory facts and NVML (not queried while an NVIDIA GPU sleeps)."""

    pci: tuple[PciGpu, ...]
    unified: UnifiedInfo
    nvml: NvmlResult = NvmlResult(False, (), None, None)

    @property
    def suspended_nv(self) -> list[PciGpu]:
        """Runtime-suspended NVIDIA GPUs (power saving): NVML is not queried so polling does not wake them."""
        return [g for g in self.pci if g.vendor == "nvidia" and g.suspended]

    @property
    def amd(self) -> list[PciGpu]:
        """GPUs bound to the amdgpu driver."""
        return [g for g in self.pci if g.driver == "amdgpu"]


def _probe_gpus(probes: Probes, notes: list[str]) -> _Gpus:
    pci: tuple[PciGpu, ...] = _safe(probes.pci, (), notes, "PCI/sysfs probe")
    unified = _safe(probes.unified, UnifiedInfo("unknown", False, None), notes, "unified-memory probe")
    return _Gpus(pci, unified)


def _nvml_answer(probes: Probes, gpus: _Gpus, listed: ListDevicesResult, notes: list[str]) -> NvmlResult:
    """NVML's answer, or none while an NVIDIA GPU is runtime-suspended (a note says so); its note is kept when
    NVML answered, or when it failed on a machine that has an NVIDIA GPU."""
    if gpus.suspended_nv:
        slots = ", ".join(g.slot for g in gpus.suspended_nv)
        notes.append(
            f"NVIDIA GPU {slots} is runtime-suspended (power saving): NVML not queried so polling does not wake it"
        )
        return NvmlResult(False, (), None, None)
    nvml = _safe(probes.nvml, NvmlResult(False, (), None, "NVML probe failed"), notes, "NVML probe")
    if not nvml.ok and nvml.note and (listed.ok and any(backend_of(d.name) == "CUDA" for d in listed.devices)
                                      or any(g.vendor == "nvidia" for g in gpus.pci)):
        notes.append(nvml.note)
    elif nvml.note and nvml.ok:
        notes.append(nvml.note)
    return nvml


def _listed_devices(listed: ListDevicesResult, gpus: _Gpus, unified_budget: Callable[[int | None], int | None],
                    notes: list[str]) -> list[Device]:
    """llama.cpp's devices in its order, each matched with its NVML / sysfs GPU for notes and unified memory."""
    free_nvml = list(gpus.nvml.gpus)
    free_amd = gpus.amd
    order: list[tuple[str, int]] = []
    devices: list[Device] = []
    for ld in listed.devices:
        backend = backend_of(ld.name)
        if backend in ("BLAS", "ACCEL"):
            notes.append(f"{ld.name} ({ld.description}) is a compute accelerator, not an offload device")
            continue
        dev = Device(len(devices), ld.name, backend, ld.total_bytes, ld.free_bytes, ld.free_bytes, "llama-server",
                     description=ld.description)
        if free_nvml and (backend == "CUDA" or (backend == "Vulkan" and "nvidia" in ld.description.lower())):
            g = _match_nvml(ld, free_nvml)
            if g is not None:
                free_nvml.remove(g)
                order.append((ld.name, g.index))
                dev = _with_nvml(dev, g, ld)
        if backend in ("Vulkan", "ROCm", "HIP") and free_amd:
            a = _match_amd(ld, free_amd)
            if a is not None:
                free_amd.remove(a)
                dev = _with_amd(dev, a)
        if backend == "Metal" or (gpus.unified.apple_silicon and backend in ("Metal", "MTL", "BLAS")):
            dev = replace(dev, unified_memory=True, notes=(*dev.notes, "unified memory: budget is the Metal "
                                                           "working-set cap and host RAM less a reserve"))
        if dev.unified_memory:
            total, free = dev.total_bytes, dev.free_bytes
            dev = replace(dev, budget_bytes=unified_budget(
                min(x for x in (total, free) if x is not None) if total else None))
        devices.append(dev)
    notes.extend(_unmatched_notes(free_nvml, free_amd, devices, order))
    return devices


def _with_nvml(dev: Device, g: NvmlGpu, ld: ListedDevice) -> Device:
    dev = replace(dev, nvml_index=g.index, pci_bus_id=g.pci_bus_id, source="llama-server+nvml")
    if g.mig_enabled:
        return replace(dev, notes=(*dev.notes, f"MIG enabled: NVML reports the whole GPU ({_mib(g.total_bytes)}); "
                                               f"budget from the MIG slice llama.cpp sees ({_mib(ld.total_bytes)})"))
    if g.memory_unsupported:
        return replace(dev, unified_memory=True, notes=(*dev.notes, *([g.memory_note] if g.memory_note else [])))
    return dev


def _with_amd(dev: Device, a: PciGpu) -> Device:
    notes = list(dev.notes)
    if a.gtt_total_bytes:
        notes.append(f"GTT {_mib(a.gtt_total_bytes)} (host memory the GPU can map) reported separately, not in the budget")
    unified = dev.unified_memory
    if _is_apu(a):
        unified = True
        notes.append("AMD APU: small VRAM carve-out, memory is shared with the host")
    return replace(dev, pci_bus_id=a.slot, gtt_total_bytes=a.gtt_total_bytes, source="llama-server+sysfs",
                   notes=tuple(notes), unified_memory=unified)


def _unmatched_notes(free_nvml: list[NvmlGpu], free_amd: list[PciGpu], devices: list[Device],
                     order: list[tuple[str, int]]) -> list[str]:
    """Notes on GPUs NVML/sysfs see and llama.cpp does not list, and on a different GPU order."""
    notes = []
    unused = [g.name or f"NVML GPU {g.index}" for g in free_nvml]
    unused += [f"AMD GPU {a.slot}" for a in free_amd if not any(d.pci_bus_id == a.slot for d in devices)]
    if unused and not devices:
        notes.append(f"{', '.join(unused)} present, but this llama-server build lists no GPU (built without "
                     "CUDA/Vulkan/ROCm?): every layer will run on the CPU")
    elif unused:
        notes.append(f"{', '.join(unused)} present but not among llama.cpp's devices (not used)")
    if len(order) > 1 and [i for _, i in order] != sorted(i for _, i in order):
        mapping = ", ".join(f"{n} = NVML GPU {i}" for n, i in order)
        notes.append(f"NVML (PCI order) and llama.cpp list the GPUs in different orders; using llama.cpp's: {mapping}")
    return notes


def _pieced_devices(gpus: _Gpus, host: HostInfo, unified_budget: Callable[[int | None], int | None],
                    notes: list[str]) -> list[Device]:
    """The device list without llama.cpp's: NVML's GPUs, then sleeping NVIDIA ones, else amdgpu ones, else
    Apple's unified-memory GPU; with a note saying names and order may differ."""
    devices = [_device_from_nvml(i, g, unified_budget) for i, g in enumerate(gpus.nvml.gpus)]
    for sg in gpus.suspended_nv:
        devices.append(Device(len(devices), f"GPU {sg.slot}", "CUDA", None, None, None, "sysfs",
                              ("runtime-suspended: memory unknown without waking it",), False, None,
                              None, sg.slot, None, True))
    if not gpus.nvml.gpus and not gpus.suspended_nv:
        for a in gpus.amd:
            devices.append(_device_from_amd(len(devices), a, unified_budget))
    if not devices and gpus.unified.apple_silicon:
        cap = gpus.unified.wired_limit_bytes or (
            default_working_set_bytes(host.ram_total_bytes) if host.ram_total_bytes else None)
        devices.append(Device(0, "Metal", "Metal", cap, None, unified_budget(cap), "host",
                              ("unified memory: budget from host RAM and the Metal working-set cap (estimated)",),
                              True))
    if devices:
        notes.append("device list pieced together from NVML/sysfs: llama.cpp may name and order them differently")
    return devices


@dataclass(frozen=True)
class _Rpc:
    """The RPC hosts' part of the answer: their devices (first in llama.cpp's order), the reachable endpoints,
    the ones left out, and a note per problem (each names the host)."""

    remote: list[Device]
    endpoints: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _rpc_devices(rpc_hosts: Sequence[RpcEndpoint | str] | str | None, probes: Probes,
                 server_binary: str | os.PathLike[str] | None) -> _Rpc:
    if not rpc_hosts:
        return _Rpc([])
    try:
        endpoints = parse_rpc_hosts(rpc_hosts if isinstance(rpc_hosts, str)
                                    else [str(h) for h in rpc_hosts], where="RPC hosts")
    except ValueError as exc:
        return _Rpc([], notes=(str(exc),))
    if not endpoints:
        return _Rpc([])
    rpc_probe = probes.rpc or discover_rpc_devices
    found = rpc_probe(Path(server_binary) if server_binary is not None else None, endpoints)
    remote = [Device(i, ld.name, "RPC", ld.total_bytes, ld.free_bytes, ld.free_bytes, "rpc",
                     (f"remote: RPC host {ld.description}; its layers cross the network on every "
                      "forward pass",), False, ld.description, rpc_endpoint=ld.description)
              for i, ld in enumerate(found.devices)]
    return _Rpc(remote, tuple(str(e) for e in found.endpoints), tuple(str(e) for e in found.unreachable),
                tuple(found.notes))


def _device_from_nvml(index: int, g: NvmlGpu, unified_budget: Callable[[int | None], int | None]) -> Device:
    dnotes = ["name assumed (CUDA orders devices fastest-first, NVML by PCI bus)"]
    budget = g.free_bytes
    is_unified = False
    if g.memory_note:
        dnotes.append(g.memory_note)
    if g.memory_unsupported:
        is_unified = True
        budget = unified_budget(None)
    if g.mig_enabled:
        if len(g.mig_slices) == 1 and g.mig_slices[0].free_bytes is not None:
            budget = g.mig_slices[0].free_bytes
            dnotes.append(f"MIG enabled: NVML reports the whole GPU ({_mib(g.total_bytes)}); budget from the one MIG slice")
        else:
            budget = None
            dnotes.append(f"MIG enabled: NVML reports the whole GPU ({_mib(g.total_bytes)}); slice unknown, budget unknown")
    return Device(index, f"CUDA{index}", "CUDA", g.total_bytes, g.free_bytes, budget, "nvml", tuple(dnotes),
                  is_unified, g.name, g.index, g.pci_bus_id)


def _device_from_amd(index: int, a: PciGpu, unified_budget: Callable[[int | None], int | None]) -> Device:
    dnotes = ["name assumed (Vulkan/ROCm builds may name it differently)"]
    if a.note:
        dnotes.append(a.note)
    free = (a.vram_total_bytes - a.vram_used_bytes) if (a.vram_total_bytes is not None and a.vram_used_bytes is not None) else None
    budget = free
    is_unified = _is_apu(a)
    if a.gtt_total_bytes:
        dnotes.append(f"GTT {_mib(a.gtt_total_bytes)} (host memory the GPU can map) reported separately, not in the budget")
    if is_unified:
        dnotes.append("AMD APU: small VRAM carve-out, memory is shared with the host")
        budget = unified_budget(None)
    return Device(index, f"Vulkan{index}", "Vulkan", a.vram_total_bytes, free, budget, "sysfs", tuple(dnotes),
                  is_unified, None, None, a.slot, a.gtt_total_bytes, a.suspended)


def _safe(fn: Callable[[], _T], default: _T, notes: list[str], what: str) -> _T:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a probe bug must not crash detection
        log.warning("%s failed", what, exc_info=True)
        notes.append(f"{what} failed: {exc}")
        return default


def _mib(n: int | None) -> str:
    return format_bytes(n, "unknown", unit="MiB", decimals=0)


def with_budget(device: Device, budget_bytes: int | None) -> Device:
    """A copy of ``device`` with another budget (for what-if plans and tests)."""
    return replace(device, budget_bytes=budget_bytes)


def pci_slot_of(nvml_bus_id: str | None) -> str | None:
    """NVML bus id (``00000000:01:00.0``) → sysfs PCI slot (``0000:01:00.0``)."""
    if not nvml_bus_id:
        return None
    return nvml_bus_id.lower()[-12:]


def suspended_check(devices: Devices, sys_root: str = "/sys") -> Callable[[int], bool]:
    """A ``NvmlSampler(is_suspended=...)`` callback: True for an NVML GPU whose PCI device is
    runtime-suspended right now (reads only ``power/runtime_status``, which does not wake it)."""
    from tuner.hardware.sysfs import runtime_status

    slots = {d.nvml_index: pci_slot_of(d.pci_bus_id) for d in devices.devices if d.nvml_index is not None}

    def check(nvml_index: int) -> bool:
        slot = slots.get(nvml_index)
        return slot is not None and runtime_status(slot, sys_root) == "suspended"

    return check
