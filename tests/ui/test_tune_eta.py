"""The Tune tab's ETA counts down between calibration events (one launch — a model load and its
requests — can run a minute without an event) instead of standing still."""

from __future__ import annotations

import pytest

from tuner.calibration.tune import TuneEvent
from tuner.ui import flow
from tuner.ui.state import AppState
from tuner.ui.tab_tune import format_eta

pytestmark = [pytest.mark.gui]


def test_progress_extrapolates_from_the_last_event():
    p = flow.tune_progress(TuneEvent("started", "baseline", progress=0.2, elapsed_s=10.0, eta_s=40.0))
    assert p.at(0.0) == (pytest.approx(0.2), pytest.approx(40.0))
    frac, eta = p.at(15.0)
    assert eta == pytest.approx(25.0) and frac == pytest.approx(25.0 / 50.0)
    frac, eta = p.at(100.0)  # the estimate ran out: stays at 0, never negative
    assert eta == 0.0 and frac == pytest.approx(1.0)
    assert flow.TuneProgress(fraction=0.3).at(5.0) == (0.3, None)  # no ETA: nothing to count down


def test_format_eta():
    assert format_eta(95) == "about 1 min 35 s left"
    assert format_eta(7.4) == "about 7 s left"
    assert format_eta(0.2) == "finishing…"
    assert format_eta(None) == ""


def test_tune_tab_counts_down_while_tuning(make_app, qtbot):
    app = make_app(tray_available=False)
    tab = app.window.tune_tab
    tab._tick.setInterval(100)
    tab.on_state(AppState.TUNING)
    tab.on_event(TuneEvent("started", "loading the target", progress=0.1, elapsed_s=5.0, eta_s=45.0))
    assert tab.progress.format() == "10%  about 45 s left"
    # two seconds later without an event, the ETA has moved on (by time, not by a new estimate)
    t0, p = tab._last_progress
    tab._last_progress = (t0 - 2.0, p)
    qtbot.waitUntil(lambda: "43 s left" in tab.progress.format(), timeout=3000)
    assert tab.progress.value() > 100
    tab.on_state(AppState.IDLE)
    assert not tab._tick.isActive()


def test_zero_eta_early_is_unknown_not_finishing(make_app):
    app = make_app(tray_available=False)
    tab = app.window.tune_tab
    tab.on_state(AppState.TUNING)
    tab.on_event(TuneEvent("started", "planning", progress=0.0, elapsed_s=0.5, eta_s=0.0))
    assert tab.progress.format() == "0%"
    tab.on_event(TuneEvent("measured", "last one", progress=0.97, elapsed_s=60.0, eta_s=0.0))
    assert tab.progress.format() == "97%  finishing…"
    tab.on_state(AppState.IDLE)
