"""The product's bounded burner: a child of Draftwise that keeps a core busy and stops by itself."""

from __future__ import annotations

import time

import psutil
import pytest

from tuner.hardware.burner import MAX_S, BoundedBurner


def test_it_burns_a_core_then_stops_by_itself() -> None:
    b = BoundedBurner(1.5).start()
    try:
        assert b.pid is not None
        proc = psutil.Process(b.pid)
        assert b.pid in [p.pid for p in psutil.Process().children(recursive=True)]  # ours: not "another program"
        proc.cpu_percent(None)
        time.sleep(0.6)
        assert proc.cpu_percent(None) > 30  # spinning (a busy shared machine still gives it a good share)
        deadline = time.monotonic() + 15
        while b.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not b.alive()  # nobody stopped it
    finally:
        b.stop()


def test_stop_ends_it_early_and_bad_lengths_are_refused() -> None:
    with BoundedBurner(60) as b:
        assert b.alive()
    assert not b.alive()
    for bad in (0, -1, MAX_S + 1):
        with pytest.raises(ValueError, match="bounded burner"):
            BoundedBurner(bad)
