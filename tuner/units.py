"""Human-readable units shared by the CLI tables and the window (binary units, as llama.cpp logs them)."""

from __future__ import annotations

KIB = 1024
"""Bytes in one KiB."""
MIB = 1024 * KIB
"""Bytes in one MiB (llama.cpp's ``MiB`` in its logs and ``--list-devices``)."""
GIB = 1024 * MIB
"""Bytes in one GiB."""


def format_bytes(n: int | None, missing: str = "?") -> str:
    """Format a byte count in binary units: ``1536`` → ``"1.5 KiB"``, ``512`` → ``"512 B"``.

    Args:
        n: bytes, or ``None`` when unknown.
        missing: what to print for ``None``.

    Returns:
        One decimal from KiB upwards (``"1.1 MiB"``, ``"16.2 GiB"``), up to TiB.
    """
    if n is None:
        return missing
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
