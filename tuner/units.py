"""Human-readable units shared by the CLI tables and the window (binary units, as llama.cpp logs them)."""

from __future__ import annotations

from collections.abc import Mapping

KIB = 1024
"""Bytes in one KiB."""
MIB = 1024 * KIB
"""Bytes in one MiB (llama.cpp's ``MiB`` in its logs and ``--list-devices``)."""
GIB = 1024 * MIB
"""Bytes in one GiB."""


UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
"""The binary units :func:`format_bytes` writes, each 1024 times the one before."""


def format_bytes(n: float | None, missing: str = "?", *, unit: str | None = None,
                 decimals: int | Mapping[str, int] | None = None, smallest: str = "B") -> str:
    """Format a byte count in binary units: ``1536`` → ``"1.5 KiB"``, ``512`` → ``"512 B"``.

    The one byte formatter of the project (CLI tables, the window, plan sentences, notes).

    Args:
        n: bytes, or ``None`` when unknown.
        missing: what to print for ``None`` (e.g. ``"unknown"``).
        unit: a fixed unit from :data:`UNITS` (``"MiB"``: ``"812.0 MiB"``, also for gigabytes);
            None = the largest unit whose value stays at least 1, up to TiB.
        decimals: digits after the point: one number for every unit, a mapping unit → digits for
            some (the rest keep the default), or None: 0 for bytes, 1 from KiB upwards.
        smallest: the smallest unit the automatic choice uses (``"MiB"``: 300 KiB reads ``"0.3 MiB"``).

    Returns:
        ``"<value> <unit>"``, e.g. ``"1.1 MiB"``, ``"16.2 GiB"``.

    Raises:
        ValueError: ``unit`` or ``smallest`` is not one of :data:`UNITS`.
    """
    if n is None:
        return missing
    if unit is None:
        i = UNITS.index(smallest)
        while i < len(UNITS) - 1 and abs(n) >= 1024 ** (i + 1):
            i += 1
        unit = UNITS[i]
    value = n / 1024 ** UNITS.index(unit)
    default = 0 if unit == "B" else 1
    digits = decimals.get(unit, default) if isinstance(decimals, Mapping) else decimals
    return f"{value:.{default if digits is None else digits}f} {unit}"
