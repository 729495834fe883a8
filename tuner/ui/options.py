"""Qt's side of the option declarations (:mod:`tuner.options`): spin boxes built from them.

:func:`spin_box` gives a spin box the option's range (with this machine's limits, e.g. the prompt cache at
most the physical RAM), step, decimals, unit, tooltip (:func:`tuner.options.help_text`) and the words for
unset or a special value at its minimum ("automatic", "server default (…)", "no limit");
:func:`spin_value` reads it back in the option's own unit (a budget shown in minutes is seconds again).
"""

from __future__ import annotations

import math

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

from tuner.options import Limits, Option, help_text, high_of, machine_limits, option

_NAME = "draftwise_option"
_UNSET = "draftwise_unset"


def _unset_text(opt: Option) -> str:
    """The words a spin box shows for unset: ``"server default (0.8)"`` for a sampling option, else the
    declaration's (``"automatic"``)."""
    if opt.server_default is not None:
        return f"server default ({opt.server_default:g})"
    return opt.unset or ""


def _bounds(opt: Option, limits: Limits | None) -> tuple[float, float]:
    """The spin box's range in its own unit (``value × gui_scale``), before any unset or special value."""
    low = (opt.low or 0) * opt.gui_scale
    high = high_of(opt, limits)
    top = (high if high is not None else 2**31 - 1) * opt.gui_scale
    if opt.decimals == 0:
        return math.ceil(low - 1e-9), min(math.floor(top + 1e-9), 2**31 - 1)
    return low, top


def spin_box(name: str, value: float | None, *, unset: bool = True,
             limits: Limits | None = None) -> QSpinBox | QDoubleSpinBox:
    """A spin box for option ``name`` showing ``value`` (None: unset).

    Args:
        name: the option (:data:`tuner.options.OPTIONS`).
        value: the current value in the option's unit; None = unset (the minimum, showing the unset words).
        unset: offer unset below the range (only for an option that may be unset); False for a control that
            always sends a value (the Chat tab's sampling).
        limits: the machine's limits (default :func:`tuner.options.machine_limits`).

    Returns:
        A ``QSpinBox`` (no decimals) or ``QDoubleSpinBox``; read it with :func:`spin_value`.
    """
    opt = option(name)
    limits = limits or machine_limits()
    spin: QSpinBox | QDoubleSpinBox = QSpinBox() if opt.decimals == 0 else QDoubleSpinBox()
    if isinstance(spin, QDoubleSpinBox):
        spin.setDecimals(opt.decimals)
    low, high = _bounds(opt, limits)
    below = None
    if unset and opt.unset is not None:
        below = _unset_text(opt)
    elif opt.special:
        below = opt.special[0][1]  # one special value, just below the range (cache RAM: -1, no limit)
    step = opt.step if opt.decimals else max(1, int(opt.step))
    bottom = low - (step if isinstance(spin, QDoubleSpinBox) else 1) if below is not None else low
    spin.setRange(bottom, high)  # type: ignore[arg-type]
    spin.setSingleStep(step)  # type: ignore[arg-type]
    if below is not None:
        spin.setSpecialValueText(below)
    if opt.gui_suffix:
        spin.setSuffix(opt.gui_suffix)
    spin.setToolTip(help_text(name, limits=limits))
    spin.setProperty(_NAME, name)
    spin.setProperty(_UNSET, below is not None and unset and opt.unset is not None)
    set_spin_value(spin, value)
    return spin


def set_spin_value(spin: QSpinBox | QDoubleSpinBox, value: float | None) -> None:
    """Show ``value`` (the option's unit; None = unset, or the special value) in a :func:`spin_box`. A value
    that rounds below the range in the box's unit (idle sleep of 30 s in minutes) shows the range's lowest, never
    the unset or special words."""
    opt = option(str(spin.property(_NAME)))
    special = opt.special[0][0] if opt.special else None
    if value is None or (special is not None and value == special):
        spin.setValue(spin.minimum())  # type: ignore[arg-type]  # an int for QSpinBox, a float otherwise
        return
    shown = value * opt.gui_scale
    low = _bounds(opt, None)[0]
    if isinstance(spin, QSpinBox):
        spin.setValue(max(int(low), int(round(shown))))
    else:
        spin.setValue(max(float(low), float(shown)))


def spin_value(spin: QSpinBox | QDoubleSpinBox) -> int | float | None:
    """The value of a :func:`spin_box` in the option's unit: None for unset, the special value (cache RAM -1)
    at the minimum, else ``shown ÷ gui_scale`` (whole for an ``int`` option)."""
    opt = option(str(spin.property(_NAME)))
    shown = spin.value()
    if spin.specialValueText() and shown == spin.minimum():
        return None if spin.property(_UNSET) else opt.special[0][0]
    value = shown / opt.gui_scale
    return int(round(value)) if opt.kind is int else round(value, 6)


__all__ = ["set_spin_value", "spin_box", "spin_value"]
