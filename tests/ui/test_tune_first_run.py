"""The Tune tab before any sweep says what *Tune & serve* will tune: the target selected on the Models tab (the
folder's default after a scan, another once the user picks one), or that a folder is needed first; a line of a
sweep, a result or an error is never replaced by that prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import make_family
from tuner.ui import flow

pytestmark = [pytest.mark.gui]


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tune-first-run")
    make_family(d, n_embd=64, n_layers=2, draft_layers=1, eps=0.05)
    return d


@pytest.mark.server  # the app asks llama-server --help what it supports
def test_the_prompt_names_the_target_to_tune(make_app, family_dir):
    app = make_app(tray_available=False)
    c, tab = app.controller, app.window.tune_tab
    assert "Choose a models folder" in tab.step_label.text()
    assert tab.progress.format() == "not started"

    c._on_scanned(flow.scan(family_dir))  # what a finished scan does (scan_done)
    assert c.selected_target is not None
    assert f"run {c.selected_target.name} on this machine" in tab.step_label.text()

    c.selected_target = family_dir / "draft-good.gguf"  # picked on the Models tab
    app.window.tabs.setCurrentWidget(app.window.models_tab)
    app.window.show()
    app.window.tabs.setCurrentWidget(tab)  # showing the tab names the new pick
    assert "run draft-good.gguf on this machine" in tab.step_label.text()

    tab.step_label.setText("Starting…")  # a sweep's line stays, whatever is scanned or shown next
    c._on_scanned(flow.scan(family_dir))
    app.window.tabs.setCurrentWidget(app.window.models_tab)
    app.window.tabs.setCurrentWidget(tab)
    assert tab.step_label.text() == "Starting…"
