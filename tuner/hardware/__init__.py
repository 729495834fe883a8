"""tuner.hardware: devices, memory budgets and the per-configuration memory plan.

Facts about the machine only: this package never imports ``tuner.server`` (an import contract holds it).
The llama-server binary whose ``--list-devices`` it reads comes from the caller, and so does the probe of
what that build does with quantized weights (``tuner.crosscheck.build``); the checks of a plan against a
running llama-server live in ``tuner.crosscheck``.

Public API, importable from this package: :func:`detect_devices` → :class:`Devices` and :class:`LoadWatcher`
(other programs' CPU; loaded with the package, with ``used_bytes_total`` from NVML and the RPC ``NO_AUTH_WARNING``); the memory plan
(:mod:`tuner.hardware.memory`: ``plan_memory``, ``max_target_ngl``, ``context_trade``, ``load_model_spec``,
``MemoryRequest``, ``MemoryPlan``, ``ModelMemorySpec``) is loaded on first use, since it reads GGUF files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.hardware.devices import Device, Devices, Probes, detect_devices
from tuner.hardware.host import LoadWatcher
from tuner.hardware.nvml import used_bytes_total
from tuner.hardware.rpc import NO_AUTH_WARNING
from tuner.lazyface import lazy_getattr

if TYPE_CHECKING:  # the names as the type checker sees them; at run time __getattr__ loads them
    from tuner.hardware.memory import (  # noqa: F401
        MemoryPlan,
        MemoryRequest,
        ModelMemorySpec,
        context_trade,
        load_model_spec,
        max_target_ngl,
        plan_memory,
    )

_LAZY = {name: "tuner.hardware.memory" for name in (
    "MemoryPlan", "MemoryRequest", "ModelMemorySpec", "context_trade", "load_model_spec", "max_target_ngl",
    "plan_memory")}

__all__ = ["NO_AUTH_WARNING", "Device", "Devices", "LoadWatcher", "Probes", "detect_devices", "used_bytes_total", *sorted(_LAZY)]

__getattr__ = lazy_getattr(__name__, _LAZY)
