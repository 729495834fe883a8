"""The app speaks plainly (issue 26 items 1, 5 and 6, without a server): the Tune tab shows the decision's first
sentence with the rest behind *Details*; a failed *Tune & serve* replaces a stale "serving …" line with the app's
own words; a saved profile served again is never "tuning finished"; *Serve at start* turns on at the first serve
unless it was turned off."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tests.calibration.test_goldens import DECISIONS
from tuner import settings as settings_mod
from tuner.calibration.request import TuneResult
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.state import AppState
from tuner.ui.tab_tune import TuneTab

pytestmark = [pytest.mark.gui]


def serving_info(path: Path) -> flow.ServingInfo:
    return flow.ServingInfo(path.name, path, "http://127.0.0.1:1/v1", "http://127.0.0.1:1", (), None, "no speculation")


def test_the_tune_tab_shows_the_first_sentence_and_details_behind_it(qtbot):
    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    tab.show()
    decision = DECISIONS["slower, break-even"]()
    result = TuneResult(target_path=Path("/m/t.gguf"), decision=decision, elapsed_s=42.0)
    tab.on_done(result)
    assert tab.decision_label.text() == ("Fastest here: the model alone — speculation with the draft model good.gguf "
                                         "was slower on your prompts.")
    assert tab.details_btn.isVisible() and not tab.details_btn.isChecked() and not tab.details_label.isVisible()
    assert tab.step_label.text() == "Tuning finished in 42 s."
    qtbot.mouseClick(tab.details_btn, Qt.MouseButton.LeftButton)
    assert tab.details_label.isVisible()
    assert tab.details_label.toPlainText().startswith("The best speculative configuration (draft-simple good.gguf n_max 8) "
                                               "was slower than the target alone (0.85×")
    # a new sweep: no decision, no details, nothing said about the last one
    tab._reset()
    assert tab.decision_label.text() == "No decision yet." and not tab.details_btn.isVisible()
    assert not tab.details_label.isVisible() and tab.step_label.text() == "Starting…"


def test_a_reused_profile_is_not_tuning_finished(qtbot, tmp_path):
    from tuner.profiles import Profile, StalenessKeys

    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    keys = StalenessKeys("h", "s", "b", "d", (), "p")
    decision = DECISIONS["winner"]()
    prof = Profile(target_path=str(tmp_path / "m.gguf"), keys=keys, winner=decision.winner.to_json(),
                   server_config={}, argv=(), decision=decision.to_json(), created_unix_s=1.7e9)
    c.serving = serving_info(tmp_path / "m.gguf")
    tab.on_done(TuneResult(target_path=tmp_path / "m.gguf", decision=decision, profile=prof, reused=True))
    step = tab.step_label.text()
    assert step.startswith(f"Using the saved profile of {flow.profile_date(prof)} (still fresh); serving m.gguf at ")
    assert "Tuning finished" not in step and tab.progress.format() == "saved profile"
    assert flow.served_again_text(c.serving, prof) == f"Serving m.gguf again (profile of {flow.profile_date(prof)})."
    # the server stopped: the line no longer says it serves
    c.serving = None
    c.server_changed.emit(None)
    assert "serving" not in tab.step_label.text()


@pytest.mark.server  # the scan at start selects a target: its memory plan asks llama-server --list-devices
def test_a_failed_tune_and_serve_clears_the_serving_line_in_the_apps_words(make_app, qtbot, models_dir):
    settings_mod.save_settings(Settings(models_dir=models_dir))
    app = make_app(tray_available=True)
    c = app.controller
    qtbot.waitUntil(lambda: c.scan is not None and not c.busy, timeout=30_000)
    tab = app.window.tune_tab
    tab._finished_line = "Tuning finished in 30 s"
    tab.step_label.setText("Tuning finished in 30 s; serving stories260K.gguf at http://127.0.0.1:8088/v1.")
    c.selected_target = models_dir.parent / "elsewhere" / "gemma.gguf"  # not in the folder Tune & serve tunes
    qtbot.mouseClick(tab.start_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: c.state is AppState.ERROR, timeout=30_000)
    step = tab.step_label.text()
    assert step == (f"Tune & serve did not finish: gemma.gguf is not in the models folder {models_dir}: pick a model "
                    "in the Models tab, or choose the folder that holds it."), step
    assert "serving" not in step and "--target" not in step
    assert app.window.serve_tab.error_label.text() == step.removeprefix("Tune & serve did not finish: ")
    # the failure of another step (a scan) does not touch the Tune tab's line
    c.scan_models(models_dir / "missing")
    qtbot.waitUntil(lambda: not c.busy, timeout=30_000)
    assert tab.step_label.text() == step


def test_serve_at_start_turns_on_at_the_first_serve_unless_turned_off(qapp, tmp_path):
    target = tmp_path / "m.gguf"
    c = AppController(Settings())
    assert c.settings.serve_at_start is None
    c.serve_at_start.remember(serving_info(target))
    assert c.settings.serve_at_start is True and c.settings.served_target == target
    assert settings_mod.load_settings().served_target == target  # saved, for the next start
    c.update_settings(c.settings.replace(serve_at_start=False))
    other = tmp_path / "n.gguf"
    c.serve_at_start.remember(serving_info(other))
    assert c.settings.serve_at_start is False and c.settings.served_target == other  # an explicit off stays off
    c.serve_at_start.forget()  # stopped by hand: nothing to serve again
    assert settings_mod.load_settings().served_target is None
    assert not AppController(settings_mod.load_settings()).serve_at_start.restore()


def test_serve_at_start_setting_is_checked(tmp_path):
    with pytest.raises(settings_mod.SettingsError, match="serve_at_start"):
        Settings(serve_at_start="yes")  # type: ignore[arg-type]
    loaded = settings_mod.from_json({"serve_at_start": None, "served_target": str(tmp_path / "m.gguf")})
    assert loaded.serve_at_start is None and loaded.served_target == tmp_path / "m.gguf"


def test_the_chat_tab_says_when_the_model_has_no_chat_template(qtbot, tmp_path):
    from dataclasses import replace

    from tuner.ui.tab_chat import ChatTab

    c = AppController(Settings())
    tab = ChatTab(c)
    qtbot.addWidget(tab)
    tab.show()
    assert not tab.base_note.isVisible()
    c.serving = replace(serving_info(tmp_path / "stories260K.gguf"), base_model=True)
    c.server_changed.emit(c.serving)
    assert tab.base_note.isVisible()
    assert tab.base_note.text().startswith("stories260K.gguf has no chat template: it is a base model")
    assert "<|im_start|>" in tab.base_note.text() and "/v1/completions" in tab.base_note.text()
    c.serving = replace(c.serving, base_model=False)  # a chat model: no note
    c.server_changed.emit(c.serving)
    assert not tab.base_note.isVisible()


def test_help_has_about_with_the_version_and_the_docs(qtbot, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from tuner import __version__
    from tuner.ui.window import MainWindow, about_text, docs_path

    c = AppController(Settings())
    window = MainWindow(c, tray_available=True)
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert [a.text() for a in help_menu.actions()] == ["Open log folder", "About Draftwise"]
    text = about_text()
    assert f"<b>Draftwise {__version__}</b>" in text
    readme = docs_path()
    assert readme is not None and readme.name == "README.md"  # this checkout's (pip install -e .)
    assert f'href="file://{readme}"' in text and "uninstalling and upgrading" in text
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: shown.append(box.text()) or 0)
    next(a for a in help_menu.actions() if a.text() == "About Draftwise").trigger()
    assert shown == [text]
    c.shutdown(timeout_s=2)
