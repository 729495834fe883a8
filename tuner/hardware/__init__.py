"""tuner.hardware: devices, memory budgets and the per-configuration memory plan.

Public API: :func:`detect_devices` → :class:`Devices`; :mod:`tuner.hardware.memory` for
:func:`plan_memory` / :func:`max_target_ngl`.
"""

from tuner.hardware.devices import Device, Devices, Probes, detect_devices

__all__ = ["Device", "Devices", "Probes", "detect_devices"]
