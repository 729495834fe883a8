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


@pytest.fixture
def tuning_tab(make_app):
    """The app's Tune tab in the tuning state, its countdown ticking every 20 ms; idle afterwards."""
    tab = make_app(tray_available=False).window.tune_tab
    tab._tick.setInterval(20)
    tab.on_state(AppState.TUNING)
    yield tab
    tab.on_state(AppState.IDLE)


def test_tune_tab_counts_down_while_tuning(tuning_tab, qtbot):
    tab = tuning_tab
    tab.on_event(TuneEvent("started", "loading the target", progress=0.1, elapsed_s=5.0, eta_s=45.0))
    assert tab.progress.format() == "10%  about 45 s left"
    # two seconds later without an event, the ETA has moved on (by time, not by a new estimate)
    t0, p = tab._last_progress
    tab._last_progress = (t0 - 2.0, p)
    qtbot.waitUntil(lambda: "43 s left" in tab.progress.format(), timeout=3000)
    assert tab.progress.value() > 100
    tab.on_state(AppState.IDLE)
    assert not tab._tick.isActive()


def test_zero_eta_early_is_unknown_not_finishing(tuning_tab):
    tab = tuning_tab
    tab._tick.stop()  # only the events' own figures here
    tab.on_event(TuneEvent("started", "planning", progress=0.0, elapsed_s=0.5, eta_s=0.0))
    assert tab.progress.format() == "0%"
    tab.on_event(TuneEvent("measured", "last one", progress=0.97, elapsed_s=60.0, eta_s=0.0))
    assert tab.progress.format() == "97%  finishing…"


def test_chart_rows_pool_each_candidates_runs_like_the_decision():
    """A candidate measured in a probe and again in confirm rounds is one bar with the pooled figure
    (median tokens/s over every repetition, acceptance over every draft), not the last run's."""
    from dataclasses import replace
    from pathlib import Path

    from tuner.calibration.candidates import Candidate
    from tuner.calibration.request import TuneResult
    from tuner.calibration.results import Measurement, Sample

    def run(c, rep, tps, drafted=None, accepted=None, error=None):
        s = Sample(0, "code", rep, tps, predicted_n=64, predicted_ms=63_000 / tps, draft_n=drafted,
                   draft_n_accepted=accepted)
        return Measurement(candidate=c, samples=(s,), error=error)

    base, draft = Candidate(), Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=8)
    result = TuneResult(target_path=Path("/m/t.gguf"), decision=None, measurements=(
        run(base, 0, 50.0), run(draft, 0, 90.0, 100, 80),  # probe
        run(base, 1, 52.0), run(draft, 1, 80.0, 100, 60),  # confirm round 1
        run(base, 2, 54.0), run(draft, 2, 70.0, 100, 40),  # confirm round 2
        run(draft, 3, 10.0, error="crashed"),  # a failed launch adds nothing
    ))
    rows = {r[0]: r for r in flow.result_rows(result)}
    assert set(rows) == {flow.row_label(base), draft.label}
    assert rows[flow.row_label(base)][1] == pytest.approx(52.0) and rows[flow.row_label(base)][3] is True
    assert rows[draft.label][1] == pytest.approx(80.0)  # median of 90, 80, 70 (the last run alone: 70)
    assert rows[draft.label][2] == pytest.approx(0.6)  # 180 accepted of 300 drafted (the last run alone: 0.4)
    result = replace(result, measurements=(*result.measurements, run(draft, 4, 100.0, 100, 100)))
    rows = {r[0]: r for r in flow.result_rows(result)}
    assert rows[draft.label][1] == pytest.approx(85.0) and rows[draft.label][2] == pytest.approx(0.7)


def test_done_is_not_overwritten_by_a_late_countdown_tick(tuning_tab, qtbot):
    tab = tuning_tab
    tab.on_event(TuneEvent("measured", "last one", progress=0.9, elapsed_s=50.0, eta_s=5.0))
    tab.on_done(None)  # the result arrives before the state change (two queued signals)
    qtbot.wait(100)
    assert tab.progress.format() == "done" and tab.progress.value() == 1000


def test_progress_never_moves_back_within_a_sweep_and_a_new_sweep_clears_the_old_decision(tuning_tab):
    tab = tuning_tab
    tab._tick.stop()
    tab.decision_label.setText("old decision: no speculation")
    tab.on_event(TuneEvent("measured", "a", progress=0.75, elapsed_s=30.0, eta_s=10.0))
    tab.on_event(TuneEvent("plan", "re-planned: more to measure", progress=0.45, elapsed_s=31.0, eta_s=38.0))
    assert tab.progress.value() == 750 and tab.progress.format() == "75%  about 38 s left"
    tab._reset()  # what Tune & serve / Re-tune do first
    assert tab.decision_label.text() == "No decision yet." and tab.chart.rows == []
    tab.on_event(TuneEvent("started", "b", progress=0.05, elapsed_s=1.0, eta_s=20.0))
    assert tab.progress.value() == 50


def test_tune_button_follows_the_menus_rule_while_serving(tuning_tab):
    from types import SimpleNamespace

    tab = tuning_tab
    assert not tab.start_btn.isEnabled()  # tuning
    tab.controller.serving = SimpleNamespace(model_name="m", endpoint_url="http://127.0.0.1:1/v1")
    try:
        tab.on_state(AppState.SERVING)
        # while serving, Tune & serve tunes the selected target and serves it too (issue 26 item 2)
        assert tab.start_btn.isEnabled() and tab.retune_btn.isEnabled()
    finally:
        tab.controller.serving = None
    tab.on_state(AppState.IDLE)
    assert tab.start_btn.isEnabled()
