"""tuner.hardware: devices, memory budgets and the per-configuration memory plan.

Facts about the machine only: this package never imports ``tuner.server`` (an import contract holds it).
The llama-server binary whose ``--list-devices`` it reads comes from the caller, and so does the probe of
what that build does with quantized weights (``tuner.crosscheck.build``); the checks of a plan against a
running llama-server live in ``tuner.crosscheck``.

Public API: :func:`detect_devices` → :class:`Devices`; :class:`LoadWatcher` (other programs' CPU); :mod:`tuner.hardware.memory` for
:func:`plan_memory` / :func:`max_target_ngl`.
"""

from tuner.hardware.devices import Device, Devices, Probes, detect_devices
from tuner.hardware.host import LoadWatcher

__all__ = ["Device", "Devices", "LoadWatcher", "Probes", "detect_devices"]
