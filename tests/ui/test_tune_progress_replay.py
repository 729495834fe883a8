"""The Tune tab replays a recorded slow sweep (a 3 tokens/s target on a 240 s budget, recorded from
tests/calibration/test_budget.py's simulated run): the bar never stands at 100 % while work remains and
never moves back, the ETA is unknown until the warm-up was timed and then always shown, and a step
that outlasts its estimate says so instead of "finishing…"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.calibration.tune import TuneEvent
from tuner.ui.state import AppState

pytestmark = [pytest.mark.gui]

RECORDING = Path(__file__).resolve().parent.parent / "data" / "slow_sweep_events.json"


@pytest.fixture
def tuning_tab(make_app):
    tab = make_app(tray_available=False).window.tune_tab
    tab.on_state(AppState.TUNING)
    tab._tick.stop()  # the replay drives time itself
    yield tab
    tab.on_state(AppState.IDLE)


def test_replayed_slow_sweep_progress_and_eta(tuning_tab):
    tab = tuning_tab
    events = json.loads(RECORDING.read_text())
    assert events[-1]["elapsed_s"] > 150  # a slow sweep: minutes of (simulated) work
    values: list[int] = []
    etas_seen = False
    for e in events:
        ev = TuneEvent(e["kind"], e["message"], progress=e["progress"], elapsed_s=e["elapsed_s"], eta_s=e["eta_s"])
        tab.on_event(ev)
        values.append(tab.progress.value())
        fmt = tab.progress.format()
        assert not fmt.startswith("100%") and tab.progress.value() < 1000, fmt
        if e["eta_s"] is None:
            assert "left" not in fmt
        elif e["eta_s"] >= 1.0:
            etas_seen = True
            assert "left" in fmt, fmt
        # between events the countdown moves on by a few seconds, never past what the estimate allows
        t0, p = tab._last_progress
        tab._last_progress = (t0 - 2.0, p)
        tab._count_down()
        tab._last_progress = (t0, p)
        values.append(tab.progress.value())
        assert tab.progress.value() < 1000
    assert values[-1] > 600  # it moved along with the work
    # far past the last estimate while the last step still runs: 99 % and "taking longer", not 100 %
    t0, p = tab._last_progress
    tab._last_progress = (t0 - 3600.0, p)
    tab._count_down()
    assert tab.progress.value() < 1000 and not tab.progress.format().startswith("100%")
    assert "taking longer than estimated" in tab.progress.format() or "finishing" in tab.progress.format()
    assert etas_seen
    assert all(b >= a for a, b in zip(values, values[1:]))  # never back
    tab.on_done(None)
    assert tab.progress.value() == 1000 and tab.progress.format() == "done"
