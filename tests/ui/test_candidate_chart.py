"""Candidate chart labels are not clipped: long candidate names go on two lines (the draft over its
n_max) instead of being cut with "…", and the axis is tall enough for them."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui]

ROWS = [
    ("no speculation", 46.0, None, True),
    ("draft-simple draft-good.gguf n_max 4", 91.0, 0.81, False),
    ("draft-simple draft-good.gguf n_max 3", 87.0, 0.85, False),
    ("ngram-mod", 66.0, 0.89, False),
    ("draft-simple draft-good.gguf n_max 16", 61.0, 0.57, False),
    ("draft-simple draft-unrelated.gguf n_max 16", 7.0, 0.0, False),
    ("draft-simple draft-good.gguf n_max 4 p_min 0.5", 56.0, 1.0, False),
]


def test_seven_candidates_keep_whole_names(qtbot):
    from PySide6.QtGui import QFontMetrics

    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.resize(1060, 500)
    chart.set_rows(ROWS)
    axis = chart.getAxis("bottom")
    texts = [t for _x, t in axis._tickLevels[0]]
    assert texts[0] == "no speculation"
    assert "draft-unrelated\nn_max 16" in texts and "draft-good\nn_max 4 p_min 0.5" in texts, texts
    assert not any("…" in t for t in texts), texts
    line_px = QFontMetrics(axis.style.get("tickFont") or chart.font()).height()
    assert axis.minimumHeight() >= 3 * line_px  # two tick lines and the axis label


def test_short_rows_stay_on_one_line(qtbot):
    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.set_rows(ROWS[:2])
    texts = [t for _x, t in chart.getAxis("bottom")._tickLevels[0]]
    assert texts == ["no speculation", "draft-good n_max 4"]


def test_winner_is_marked_chosen(qtbot):
    from tuner.ui.graphs import WINNER_COLOR, CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.set_rows(ROWS, winner="draft-simple draft-good.gguf n_max 4")
    brushes = chart._bars.opts["brushes"]
    assert [b == WINNER_COLOR for b in brushes] == [False, True, False, False, False, False, False], brushes
    texts = [t.toPlainText() for t in chart._labels]
    assert [t.startswith("chosen") for t in texts] == [False, True, False, False, False, False, False], texts
    chart.set_rows(ROWS, winner=None)  # "no speculation": nothing is marked
    assert WINNER_COLOR not in chart._bars.opts["brushes"]
    assert not any(t.toPlainText().startswith("chosen") for t in chart._labels)


def test_empty_chart_says_what_will_appear_instead_of_blank_axes(qtbot):
    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    plot = chart.getPlotItem()
    assert chart.placeholder.isVisible() and "generation speed" in chart.placeholder.toPlainText()
    assert not plot.getAxis("left").isVisible() and not plot.getAxis("bottom").isVisible()
    chart.set_rows(ROWS[:1])
    assert not chart.placeholder.isVisible()
    assert plot.getAxis("left").isVisible() and plot.getAxis("bottom").isVisible()
    # one bar: the bottom axis label has no SI multiplier and the bar is not stretched across the plot
    assert plot.getAxis("bottom").labelString().find("x0.001") == -1
    (x0, x1), _y = plot.viewRange()
    assert x1 - x0 >= 3.0
    chart.set_rows([])  # a new sweep starts: back to the sentence
    assert chart.placeholder.isVisible() and not plot.getAxis("left").isVisible()


def test_bar_label_lines_are_centred(qtbot):
    from PySide6.QtCore import Qt

    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.set_rows(ROWS, winner="draft-simple draft-good.gguf n_max 4")
    for t in chart._labels:
        doc = t.textItem.document()
        assert doc.defaultTextOption().alignment() & Qt.AlignmentFlag.AlignHCenter
        assert doc.textWidth() > 0


def test_empty_time_plots_keep_their_units_scale(qtbot):
    """An empty acceptance plot spans 0-100 % (not 0-1 labelled "%"); requests in flight 0-2."""
    from tuner.ui.graphs import TimePlot

    acc = TimePlot("Draft acceptance rate", "acceptance", "%", y_scale=100.0, skip_gaps=True, min_top=100.0)
    req = TimePlot("Requests in flight", "requests", "count", min_top=2.0)
    for p in (acc, req):
        qtbot.addWidget(p)
    acc.set_series("", [], [])
    req.set_series("", [-2.0, -1.0], [0, 0])
    assert acc.getPlotItem().viewRange()[1] == [0.0, 100.0]
    assert req.getPlotItem().viewRange()[1] == [0.0, 2.0]
    req.set_series("", [-2.0, -1.0], [3, 4])
    assert req.getPlotItem().viewRange()[1][1] == pytest.approx(4.6)


NEVER = "ngram-simple never drafted at the served sampling (greedy (temperature 0)): these prompts repeat no " \
    "n-gram it could continue; no speedup is possible for these requests"


def test_types_that_never_drafted_get_a_bar_less_row(qtbot):
    """An n-gram type that ran but proposed no token has no speed to draw: it still gets its row (after
    the bars), with "drafted nothing" — the decision's words — and no bar."""
    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.set_rows(ROWS[:2], never=["ngram-simple", "ngram-map-k"])
    texts = [t for _x, t in chart.getAxis("bottom")._tickLevels[0]]
    assert texts == ["no speculation", "draft-good n_max 4", "ngram-simple", "ngram-map-k"]
    assert len(chart._bars.opts["height"]) == 2  # bars only for the measured rows
    labels = [t.toPlainText() for t in chart._labels]
    assert labels[2:] == ["drafted nothing", "drafted nothing"]
    (x0, x1), _y = chart.getPlotItem().viewRange()
    assert x0 < 0 and x1 > 3  # all four rows in view
    # a type both measured and listed as never drafted keeps its bar, not a second row
    chart.set_rows(ROWS[:2], never=["draft-simple draft-good.gguf n_max 4"])
    assert len(chart.getAxis("bottom")._tickLevels[0]) == 2
    # only never-drafted types (every n-gram type on prose, nothing else measured yet): rows, no blank axes
    chart.set_rows([], never=["ngram-mod"])
    assert not chart.placeholder.isVisible() and chart._bars is None
    assert [t.toPlainText() for t in chart._labels] == ["drafted nothing"]


def test_tune_tab_shows_never_drafted_types_live_and_in_the_result(make_app):
    """Live: the "measured" event of a type that never drafted adds its bar-less row; at the end the
    result's measurements give the same rows next to the decision's pooled bars."""
    from pathlib import Path

    from tuner.calibration.candidates import Candidate
    from tuner.calibration.decide import decide
    from tuner.calibration.outcome import SearchOutcome
    from tuner.calibration.results import Measurement, Sample
    from tuner.calibration.tune import TuneEvent, TuneResult
    from tuner.ui.state import AppState

    tab = make_app(tray_available=False).window.tune_tab
    tab.on_state(AppState.TUNING)
    base = Measurement(Candidate(), samples=(Sample(0, "code", 0, 50.0),), stage="baseline")
    ng = Candidate(spec_type="ngram-simple")
    never = Measurement(ng, samples=(Sample(0, "code", 0, 49.0),), stage="probe", error=NEVER,
                        no_drafts_at="greedy (temperature 0)")
    tab.on_event(TuneEvent("measured", "no speculation: 50.0 tokens/s", measurement=base, progress=0.2,
                           elapsed_s=5.0, eta_s=20.0))
    tab.on_event(TuneEvent("measured", NEVER, measurement=never, progress=0.4, elapsed_s=10.0, eta_s=15.0))
    assert tab.chart.never == ["ngram-simple"]
    # the line says what was measured, not the run's error words ("these prompts repeat no n-gram …")
    assert tab.step_label.text() == ("ngram-simple: drafted nothing in 1 request at the served sampling (greedy "
                                     "(temperature 0))")
    assert [r[0] for r in tab.chart.rows] == ["the model alone"]
    d = decide(SearchOutcome.of([base, never]))
    assert "ngram-simple drafted nothing" in d.reason  # the chart's words are the decision's
    tab.on_done(TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=(base, never), elapsed_s=12.0))
    assert tab.chart.never == ["ngram-simple"]
    assert "drafted nothing" in [t.toPlainText() for t in tab.chart._labels]
    tab.on_state(AppState.IDLE)


def test_each_bar_draws_its_launches_and_their_count(qtbot):
    """A pooled bar hides launches that disagree (one sweep's baseline launches read 694, 390 and 127 tokens/s
    under a bar at 410): each launch is a point on its bar, spread over its width in launch order, and the
    bar's label counts them; the view holds the fastest point."""
    from tuner.ui.graphs import CandidateChart, point_offsets

    chart = CandidateChart()
    qtbot.addWidget(chart)
    points = {"no speculation": [694.0, 390.0, 127.0], "draft-simple draft-good.gguf n_max 4": [91.0]}
    chart.set_rows(ROWS[:2] + [("ngram-mod", 66.0, 0.89, False)], points=points)
    assert chart.point_count() == 4
    xs = [float(x) for x in chart._points.data["x"]]
    ys = [float(y) for y in chart._points.data["y"]]
    assert ys == [694.0, 390.0, 127.0, 91.0]
    assert xs == pytest.approx([0.0 + d for d in point_offsets(3)] + [1.0])
    assert all(abs(d) < 0.3 for d in point_offsets(3))  # on the bar (0.6 wide)
    labels = [t.toPlainText() for t in chart._labels]
    assert labels[0].endswith("3 launches") and labels[1].endswith("1 launch") and "launch" not in labels[2]
    _x, (y0, y1) = chart.getPlotItem().viewRange()
    assert y1 >= 694.0
    chart.set_rows([])  # a new sweep: no points left over
    assert chart.point_count() == 0


def test_tune_tab_collects_each_launch_live_and_from_the_result(make_app):
    from pathlib import Path

    from tuner.calibration.candidates import Candidate
    from tuner.calibration.decide import decide
    from tuner.calibration.outcome import SearchOutcome
    from tuner.calibration.results import Measurement, Sample
    from tuner.calibration.tune import TuneEvent, TuneResult
    from tuner.ui.state import AppState

    tab = make_app(tray_available=False).window.tune_tab
    tab.on_state(AppState.TUNING)
    launches = [Measurement(Candidate(), samples=(Sample(0, "code", r, tps),), stage=stage)
                for r, (tps, stage) in enumerate([(694.0, "baseline"), (390.0, "confirm"), (127.0, "confirm")])]
    for i, m in enumerate(launches):
        tab.on_event(TuneEvent("measured", "no speculation", measurement=m, progress=0.1 * (i + 1), elapsed_s=5.0 * i,
                               eta_s=20.0))
    assert tab.chart.points == {"the model alone": [694.0, 390.0, 127.0]} and tab.chart.point_count() == 3
    d = decide(SearchOutcome.of(launches))
    tab.on_done(TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=tuple(launches), elapsed_s=12.0))
    assert tab.chart.points["the model alone"] == [694.0, 390.0, 127.0] and tab.chart.point_count() == 3
    assert tab.chart._labels[0].toPlainText().endswith("3 launches")
    tab.on_state(AppState.IDLE)


def test_ten_candidates_labels_fit_under_their_bars(qtbot):
    """A sweep's ten rows at the window's usual width: no bar's label runs into its neighbour's (each line no
    wider than one bar's room), and a narrower chart breaks them again when it is resized."""
    from PySide6.QtGui import QFontMetrics

    from tuner.ui.graphs import CandidateChart

    rows = [("no speculation", 151.0, None, True)] + [
        (f"draft-simple draft-good.gguf n_max {n} probabilistic drafts", 200.0 - n, 0.8, False) for n in (4, 5, 6)
    ] + [(f"draft-simple draft-good.gguf n_max {n}", 170.0 - n, 0.6, False) for n in (6, 16)] + [
        ("draft-simple draft-unrelated.gguf n_max 16 probabilistic drafts", 21.0, 0.0, False),
        ("draft-simple draft-unrelated.gguf n_max 16", 21.0, 0.0, False)]
    never = ["ngram-mod ngram n_max 16", "ngram-simple ngram n_max 16"]
    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.show()  # a hidden widget gets its resize events only when shown
    for width in (1070, 760):
        chart.resize(width, 450)
        chart.set_rows(rows, never=never)
        axis = chart.getAxis("bottom")
        fm = QFontMetrics(axis.style.get("tickFont") or chart.font())
        per_bar = (width - 60) / len(rows + never)  # the plot area is at most the widget less its left axis
        lines = [ln for _x, t in axis._tickLevels[0] for ln in t.split("\n")]
        assert all(fm.horizontalAdvance(ln) < per_bar for ln in lines), (width, per_bar, [(ln, fm.horizontalAdvance(ln)) for ln in lines if fm.horizontalAdvance(ln) >= per_bar])
        assert "n_max 5" in lines, lines
        if width > 1000:
            assert "probabilistic" in lines and "draft-unrelated" in lines and "ngram-mod" in lines, lines
    chart.resize(1070, 450)  # wider again: the labels get their room back without a new set_rows
    qtbot.waitUntil(lambda: chart.width() == 1070)
    wide = [t for _x, t in chart.getAxis("bottom")._tickLevels[0]]
    assert "draft-good\nn_max 5\nprobabilistic" in wide, wide


def test_many_candidates_break_drafted_nothing(qtbot):
    """Fourteen rows (a sweep that also tried every draft length): the bar-less rows' "drafted nothing" goes on two
    lines, so two of them side by side do not run together."""
    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.resize(1070, 450)
    rows = [("no speculation", 148.0, None, True)] + [
        (f"draft-simple draft-good.gguf n_max {n}", 190.0, 0.8, False) for n in range(3, 14)]
    chart.set_rows(rows, never=["ngram-mod ngram n_max 16", "ngram-simple ngram n_max 16"])
    assert [t.toPlainText() for t in chart._labels][-2:] == ["drafted\nnothing", "drafted\nnothing"]
