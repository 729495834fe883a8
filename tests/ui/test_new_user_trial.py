"""What a new user ran into in the app (issue 26): a failed scan turned the whole app red, a bad extra
llama-server flag was saved unchecked, the decision's details could not be read in full, a typed folder was not
scanned on Enter nor normalised, the Monitor's first line was field terms, and the tray's progress lagged the
window's."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QTextBrowser

from tuner.calibration import Candidate, Rendered, TuneEvent
from tuner.calibration.results import Measurement, Sample, synthetic_samples
from tuner.calibration.tune import TuneResult
from tuner.settings import Settings, load_settings
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.state import AppState

pytestmark = pytest.mark.gui


def _serving(path: Path, label: str = "no speculation", words: str = "") -> flow.ServingInfo:
    extra = {"spec_words": words} if words else {}
    return flow.ServingInfo(path.name, path, "http://127.0.0.1:1/v1", "http://127.0.0.1:1", (), None, label, **extra)


# ---- 1: a failed scan ---------------------------------------------------------------------------------------
def test_a_failed_scan_is_the_models_tabs_news_not_the_servers(qtbot, tmp_path):
    from tuner.ui.tab_models import ModelsTab

    c = AppController(Settings())
    tab = ModelsTab(c)
    qtbot.addWidget(tab)
    c.serving = _serving(tmp_path / "t.gguf")
    c.set_state(AppState.SERVING, "Serving t.gguf")
    states: list[AppState] = []
    errors: list[str] = []
    balloons: list[tuple[str, str]] = []
    c.state_changed.connect(states.append)
    c.error.connect(errors.append)
    c.notify.connect(lambda title, msg: balloons.append((title, msg)))
    missing = tmp_path / "no-such-folder"
    tab.folder_edit.setText(str(missing))
    tab.scan()
    qtbot.waitUntil(lambda: bool(balloons) and not c.busy, timeout=10000)
    assert c.state is AppState.SERVING and states == [] and errors == [], (c.state, states, errors)
    assert c.last_error is None and "error" not in c.tooltip()
    assert str(missing) in balloons[0][1] and "scan" in balloons[0][0]
    assert tab.scan_note.isVisibleTo(tab) and str(missing) in tab.scan_note.text()
    good = tmp_path / "models"
    good.mkdir()
    tab.folder_edit.setText(str(good))
    with qtbot.waitSignal(c.scan_done, timeout=10000):
        tab.scan()
    assert not tab.scan_note.isVisibleTo(tab) and c.state is AppState.SERVING


# ---- 2: extra llama-server flags ----------------------------------------------------------------------------
def test_a_bad_flag_value_is_refused_on_save_and_nothing_is_saved(qtbot):
    from tuner.ui.tab_serve import ServeTab

    c = AppController(Settings())
    tab = ServeTab(c)
    qtbot.addWidget(tab)
    tab.server_args_edit.setText("-tb=abc")
    tab.server_args_edit.editingFinished.emit()
    assert tab.settings_msg.text() == "Extra llama-server flags: -tb needs a whole number, not 'abc'"
    assert c.settings.server_args == () and load_settings().server_args == ()
    tab.server_args_edit.setText("--no-repack -tb=2")
    tab.server_args_edit.editingFinished.emit()
    assert c.settings.server_args == ("--no-repack", "-tb=2") == load_settings().server_args
    # a new list of flags makes the saved profiles stale: the next start tunes first, and the tab says so
    assert "tunes again" in tab.settings_msg.text() and "flags" in tab.settings_msg.text()


# ---- 3: details ---------------------------------------------------------------------------------------------
def test_the_details_scroll_and_the_chart_keeps_its_height(qtbot):
    from tuner.ui.tab_tune import TuneTab

    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    tab.resize(900, 620)
    tab.show()
    qtbot.waitExposed(tab)
    details = tuple(f"Sentence {i}: draft-simple d.gguf n_max {i} was measured on 6 prompts. Not launched: "
                    f"ngram-mod n_max {i} (the budget ran out)." for i in range(40))
    tab.set_decision(Rendered("Fastest here: the model alone.", details, ""))
    qtbot.mouseClick(tab.details_btn, Qt.MouseButton.LeftButton)
    QApplication.processEvents()
    box = tab.details_label
    assert isinstance(box, QTextBrowser) and box.isReadOnly() and box.isVisible()
    assert box.toPlainText().endswith(details[-1]), box.toPlainText()[-200:]  # the whole text, not cut
    assert box.height() <= tab.DETAILS_MAX_PX and box.verticalScrollBar().maximum() > 0  # it scrolls
    assert tab.chart.height() >= tab.chart.minimumHeight()


def test_the_chosen_bars_label_stays_inside_a_short_chart(qtbot):
    from tuner.ui.graphs import CandidateChart

    chart = CandidateChart()
    qtbot.addWidget(chart)
    chart.resize(700, chart.minimumHeight())
    chart.show()
    qtbot.waitExposed(chart)
    win = "draft-simple generated-demo-draft.gguf n_max 15"
    rows = [("the model alone", 120.0, None, True), (win, 347.5, 0.93, False), ("ngram-mod", 118.0, 1.0, False)]
    chart.set_rows(rows, winner=win, points={win: [340.0, 347.5, 355.0], "the model alone": [120.0]})
    QApplication.processEvents()
    chosen = next(t for t in chart._labels if t.toPlainText().startswith("chosen"))
    assert len(chosen.toPlainText().split("\n")) == 4
    view = chart.getPlotItem().getViewBox().sceneBoundingRect()
    assert chosen.sceneBoundingRect().top() >= view.top() - 1, (chosen.sceneBoundingRect(), view)


# ---- 4: the typed folder ------------------------------------------------------------------------------------
def test_enter_scans_the_typed_folder_stored_normalised(qtbot, tmp_path, monkeypatch):
    from tuner.ui.tab_models import ModelsTab

    c = AppController(Settings())
    tab = ModelsTab(c)
    qtbot.addWidget(tab)
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    chosen: list[Path] = []
    tab.folder_chosen.connect(chosen.append)
    tab.folder_edit.setText("models/../models")
    with qtbot.waitSignal(c.scan_done, timeout=10000) as got:
        qtbot.keyClick(tab.folder_edit, Qt.Key.Key_Return)
    folder = (tmp_path / "models").resolve()
    assert chosen == [folder] and Path(got.args[0].folder) == folder
    assert tab.folder_edit.text() == str(folder)


def test_the_demo_caption_only_under_the_demo_folder(qtbot, tmp_path):
    from tuner.ui.tab_models import ModelsTab

    c = AppController(Settings())
    tab = ModelsTab(c)
    qtbot.addWidget(tab)
    demo, mine = tmp_path / "demo", tmp_path / "mine"
    demo.mkdir()
    mine.mkdir()
    tab._demo_folder = demo.resolve()  # as _demo_ready leaves it
    tab.demo_note.setText("Demo folder: stories260K.gguf, … their text is noise.")
    tab.show_scan(flow.scan(demo))
    assert tab.demo_note.isVisibleTo(tab)
    tab.show_scan(flow.scan(mine))
    assert not tab.demo_note.isVisibleTo(tab)


def test_a_new_folder_clears_the_old_targets_chart(qtbot, tmp_path):
    from tuner.ui.tab_tune import TuneTab

    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    old = tmp_path / "old" / "old-target.gguf"
    base = Measurement(Candidate(), samples=(Sample(0, "code", 0, 50.0),), stage="baseline")
    tab.on_event(TuneEvent("measured", "no speculation: 50.0 tokens/s", measurement=base, progress=0.5))
    tab.on_done(TuneResult(target_path=old, decision=None, elapsed_s=10.0))
    assert tab.chart.rows
    new_folder = tmp_path / "new"
    new_folder.mkdir()
    scanned = flow.scan(new_folder)
    c.selected_target = new_folder / "new-target.gguf"
    c.scan_done.emit(scanned)
    assert not tab.chart.rows and not tab.results
    line = tab.step_label.text()
    assert "models folder changed" in line and "old-target.gguf" in line and "new-target.gguf" in line, line


# ---- 5: the Monitor's first line ----------------------------------------------------------------------------
def test_the_monitor_says_what_is_served_in_plain_words_first(qtbot, tmp_path):
    from tuner.ui.tab_monitor import MonitorTab, acceptance_words, serving_words

    label = "draft-simple generated-demo-draft.gguf n_max 15 probabilistic drafts"
    words = flow.winner_words(Candidate(spec_type="draft-simple", draft_path="/d/generated-demo-draft.gguf",
                                        n_max=15, draft_sampling="probabilistic").to_json())
    info = _serving(tmp_path / "generated-demo-target.gguf", label, words)
    assert serving_words(info, "347.5 tokens/s", 347.5) == (
        "Serving generated-demo-target.gguf with the draft model generated-demo-draft.gguf (n_max 15): 347 tokens/s")
    assert serving_words(_serving(tmp_path / "t.gguf"), "idle (no request yet)", None) == (
        "Serving t.gguf on its own (no speculation) — idle (no request yet)")
    assert acceptance_words(0.93, 81.0, 100.0, 12) == (
        "draft acceptance 93% on the last request, 81% over the last 12 requests")
    assert acceptance_words(0.93, 93.0, 100.0, 1) == "draft acceptance 93% on the last request"
    c = AppController(Settings())
    tab = MonitorTab(c)
    qtbot.addWidget(tab)
    c.serving = info
    tab.redraw(now_s=0.0)
    first = tab.summary.text().split(" · ")[0]
    assert first.startswith("<b>Serving generated-demo-target.gguf with the draft model"), first
    assert tab.summary.text().endswith(f"configuration: {label}")  # the field terms come last


# ---- 6: the tray's progress, the chart's drafted tokens -----------------------------------------------------
def test_the_tray_shows_the_windows_progress(make_app):
    app = make_app(tray_available=False)
    c, tab, tray = app.controller, app.window.tune_tab, app.tray
    c.selected_target = Path("/m/t.gguf")
    c.set_state(AppState.TUNING, "Tuning…")
    tab._shown_fraction = 0.13  # the window's bar never moves back: it shows 13 %
    tray._on_tune_event(TuneEvent("launch", "probe", progress=0.11, eta_s=120.0))
    tab.on_event(TuneEvent("launch", "probe", progress=0.11, eta_s=120.0))
    assert tab.progress.format().startswith("13%")
    tray.rebuild_menu()
    line = next(t for t in tray.serve_actions() if t.startswith("Tuning"))
    assert line.startswith("Tuning t.gguf: 13%"), line
    tab._show_progress(0.2, 60.0)
    tray._refresh_progress()
    assert any(t.startswith("Tuning t.gguf: 20%") for t in tray.serve_actions()), list(tray.serve_actions())


def test_an_ngram_bar_says_how_few_tokens_it_drafted(qtbot):
    from tuner.ui.tab_tune import TuneTab

    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    ngram = Candidate(spec_type="ngram-mod", ngram_n_max=16)
    base = Measurement(Candidate(), samples=synthetic_samples([50.0], None), stage="baseline")
    probe = Measurement(ngram, samples=(Sample(0, "code", 0, 50.5, None, 100, 2000.0, 12, 12),), stage="probe")
    for m in (base, probe):
        tab.on_event(TuneEvent("measured", "m", measurement=m, progress=0.5))
    texts = [t.toPlainText() for t in tab.chart._labels]
    assert any("100% of 12 drafted" in t for t in texts), texts
