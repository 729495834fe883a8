"""tuner/units.py is the one byte formatter: the shapes every caller asks for, and no second
formatter left beside it in tuner/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.units import GIB, KIB, MIB, format_bytes

TUNER = Path(__file__).resolve().parents[1] / "tuner"


def test_automatic_unit_and_default_decimals() -> None:
    assert (KIB, MIB, GIB) == (1024, 1024 ** 2, 1024 ** 3)
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB"
    assert format_bytes(int(16.2 * GIB)) == "16.2 GiB" and format_bytes(None) == "?"
    assert format_bytes(3 * 1024 * 1024 * GIB) == "3072.0 TiB"  # TiB is the largest unit
    assert format_bytes(None, "unknown") == "unknown"


def test_the_shapes_the_callers_use() -> None:
    # Monitor tab: whole MiB below 1 GiB, two decimals in GiB
    assert format_bytes(300 * MIB, smallest="MiB", decimals={"MiB": 0, "GiB": 2}) == "300 MiB"
    assert format_bytes(GIB, smallest="MiB", decimals={"MiB": 0, "GiB": 2}) == "1.00 GiB"
    # memory plan sentences: whole MiB, GiB with one decimal; negative margins keep their sign
    assert format_bytes(-int(1.5 * GIB), "unknown", smallest="MiB", decimals={"MiB": 0}) == "-1.5 GiB"
    assert format_bytes(100 * KIB, smallest="MiB") == "0.1 MiB"
    # fixed units: device notes in MiB, the doctor's devices in GiB
    assert format_bytes(81559 * MIB, unit="MiB", decimals=0) == "81559 MiB"
    assert format_bytes(8 * GIB, "unknown", unit="GiB") == "8.0 GiB"
    with pytest.raises(ValueError):
        format_bytes(1, unit="GB")


def test_no_second_byte_formatter_in_tuner() -> None:
    """A byte count divided by 1024² / 2**20 / MIB and printed with a unit is format_bytes' job."""
    pattern = re.compile(r"/\s*(MIB|GIB|2\s*\*\*\s*(20|30)|1024\s*\*\*\s*[23]|\(1024 \* MIB\))[^\n]*\b(MiB|GiB)\b")
    offenders = []
    for path in TUNER.rglob("*.py"):
        if path.name == "units.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not pattern.search(line) or "set_unit" in line:  # a plot axis scale is not a formatter
                continue
            if "round(" in line and "}GiB" in line:
                # calibration.pipeline.keys.hardware_fingerprint: a staleness key (whole GiB, no space) whose
                # exact text saved profiles hold, not a number shown as a size
                continue
            offenders.append(f"{path.relative_to(TUNER.parent)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
