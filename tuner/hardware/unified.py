"""Unified-memory systems (Apple silicon, APUs, Jetson/GB10): how much of host RAM a GPU may use.

On macOS, Metal caps GPU allocations at ``recommendedMaxWorkingSetSize`` (llama.cpp's Metal device
reports it as the device total; ggml/src/ggml-metal ``ggml_metal_device_get_memory``); the admin can
raise it with ``sysctl iogpu.wired_limit_mb``. Without either figure the budget is host RAM minus a
reserve for the OS.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass

from tuner.units import GIB, MIB

# RAM kept for the OS and other programs when the budget comes from host RAM alone
HOST_RESERVE_BYTES = 4 * GIB


@dataclass(frozen=True)
class UnifiedInfo:
    """What the OS says about GPU use of host RAM.

    ``system`` = ``platform.system()``; ``apple_silicon`` True on arm64 macOS;
    ``wired_limit_bytes`` = ``iogpu.wired_limit_mb`` when set (> 0), else None.
    """

    system: str
    apple_silicon: bool
    wired_limit_bytes: int | None
    note: str | None = None


def _sysctl(name: str) -> str | None:
    from tuner.process import run_output  # the one module that runs child processes

    try:
        rc, out, _err = run_output(["sysctl", "-n", name], timeout_s=5, env=os.environ)
    except (OSError, TimeoutError):
        return None
    return out.strip() if rc == 0 else None


def probe_unified(
    system: str | None = None,
    machine: str | None = None,
    sysctl: Callable[[str], str | None] = _sysctl,
) -> UnifiedInfo:
    """Probe the OS for unified-memory facts; never raises. Only macOS runs ``sysctl``."""
    system = system or platform.system()
    machine = machine or platform.machine()
    apple = system == "Darwin" and machine in ("arm64", "aarch64")
    wired = None
    if system == "Darwin":
        value = sysctl("iogpu.wired_limit_mb")
        try:
            mb = int(value) if value else 0
        except ValueError:
            mb = 0
        wired = mb * MIB if mb > 0 else None
    return UnifiedInfo(system, apple, wired)


def default_working_set_bytes(ram_total_bytes: int) -> int:
    """macOS's default GPU working-set cap for a Mac with ``ram_total_bytes`` of RAM.

    Approximates ``recommendedMaxWorkingSetSize``: about 2/3 of RAM up to 36 GiB, 3/4 above.
    """
    frac = 2 / 3 if ram_total_bytes <= 36 * GIB else 3 / 4
    return int(ram_total_bytes * frac)


def unified_budget_bytes(
    ram_total_bytes: int | None,
    ram_available_bytes: int | None,
    cap_bytes: int | None,
    reserve_bytes: int = HOST_RESERVE_BYTES,
) -> int | None:
    """Budget of a unified-memory GPU: min(OS cap, host RAM − reserve, available RAM); None if unknown."""
    options = []
    if cap_bytes is not None:
        options.append(cap_bytes)
    if ram_total_bytes is not None:
        options.append(max(ram_total_bytes - reserve_bytes, 0))
    if ram_available_bytes is not None:
        options.append(ram_available_bytes)
    return min(options) if options else None
