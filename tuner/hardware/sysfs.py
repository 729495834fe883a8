"""Adapter for Linux sysfs: display-class PCI devices, their runtime power state, AMD memory.

Reads ``/sys/bus/pci/devices/*/`` (``class`` 0x03xxxx = display controller, ``vendor``, ``driver``
symlink, ``power/runtime_status``) and, for ``amdgpu``, ``mem_info_vram_total``/``_used`` and
``mem_info_gtt_total``/``_used`` (drivers/gpu/drm/amd/amdgpu/amdgpu_vram_mgr.c / amdgpu_gtt_mgr.c).
A device whose ``runtime_status`` is ``suspended`` is not touched further: reading ``mem_info_*``
resumes an amdgpu device, and NVML/CUDA resume an NVIDIA one. Never raises; the root is a parameter
so tests build a fake tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel", "0x106b": "apple"}


@dataclass(frozen=True)
class PciGpu:
    """One display-class PCI device.

    ``slot`` = PCI address (``0000:01:00.0``); ``runtime_status`` = ``active``/``suspended``/... or None.
    AMD fields are None when not amdgpu, unreadable, or skipped because the device is suspended.
    GTT (system memory the GPU can map) is reported separately and never added to VRAM.
    """

    slot: str
    vendor: str
    driver: str | None
    runtime_status: str | None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    gtt_total_bytes: int | None = None
    gtt_used_bytes: int | None = None
    note: str | None = None

    @property
    def suspended(self) -> bool:
        """True when the kernel has runtime-suspended the device (do not wake it)."""
        return self.runtime_status == "suspended"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def probe_pci_gpus(sys_root: str | os.PathLike[str] = "/sys") -> tuple[PciGpu, ...]:
    """List display-class PCI devices (class ``0x03xxxx``) under ``sys_root/bus/pci/devices``
    in PCI order, with their ``power/runtime_status`` and, for ``amdgpu``, VRAM and GTT bytes
    (``mem_info_vram_total``/``_used``, ``mem_info_gtt_*``; GTT is never added to VRAM).

    A runtime-suspended AMD GPU's memory files are not read (that would wake it). Never raises:
    an unreadable tree gives ``()``, an unreadable file ``None``."""
    base = Path(sys_root) / "bus" / "pci" / "devices"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return ()
    gpus: list[PciGpu] = []
    for dev in entries:
        cls = _read(dev / "class") or ""
        if not cls.startswith("0x03"):
            continue
        vendor_id = (_read(dev / "vendor") or "").lower()
        vendor = VENDORS.get(vendor_id, vendor_id or "unknown")
        driver_link = dev / "driver"
        driver = os.path.basename(os.readlink(driver_link)) if driver_link.is_symlink() else None
        status = _read(dev / "power" / "runtime_status")
        if driver == "amdgpu":
            if status == "suspended":
                gpus.append(
                    PciGpu(dev.name, vendor, driver, status,
                           note="runtime-suspended: memory not read (reading would wake the GPU)")
                )
                continue
            gpus.append(
                PciGpu(
                    dev.name,
                    vendor,
                    driver,
                    status,
                    vram_total_bytes=_read_int(dev / "mem_info_vram_total"),
                    vram_used_bytes=_read_int(dev / "mem_info_vram_used"),
                    gtt_total_bytes=_read_int(dev / "mem_info_gtt_total"),
                    gtt_used_bytes=_read_int(dev / "mem_info_gtt_used"),
                )
            )
        else:
            gpus.append(PciGpu(dev.name, vendor, driver, status))
    return tuple(gpus)


def runtime_status(slot: str, sys_root: str | os.PathLike[str] = "/sys") -> str | None:
    """``power/runtime_status`` of PCI device ``slot`` (cheap; does not wake the device)."""
    return _read(Path(sys_root) / "bus" / "pci" / "devices" / slot / "power" / "runtime_status")
