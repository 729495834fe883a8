"""*Use demo model* offers the generated target + draft pair: generated off the GUI thread with its progress
shown, labelled, paired, and selected as the target the one-click flow tunes; the bundled model stays."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QThread

from tuner import paths
from tuner.catalog import demo
from tuner.ui import flow

pytestmark = [pytest.mark.gui]

#: A small recipe: the GUI path is the same, the writing takes a fraction of a second instead of seconds.
TINY = demo.DemoRecipe(n_embd=64, n_layers=3, draft_layers=1, seed=5)


def _rows(tree) -> list[tuple[int, str, str]]:
    out = []

    def walk(item, depth):
        out.append((depth, item.text(0), item.text(1)))
        for i in range(item.childCount()):
            walk(item.child(i), depth + 1)

    for i in range(tree.topLevelItemCount()):
        walk(tree.topLevelItem(i), 0)
    return out


@pytest.mark.server  # selecting the demo target computes its memory plan (llama-server --list-devices)
def test_use_demo_model_offers_the_generated_pair(make_app, qtbot, monkeypatch) -> None:
    monkeypatch.setattr(demo, "DEMO_RECIPE", TINY)
    app = make_app(tray_available=True)
    tab = app.window.models_tab
    assert tab.first_run.isVisibleTo(app.window) and "demo models" in tab.first_run.text()
    assert demo.DEMO_LABEL in tab.demo_btn.toolTip()
    seen = []
    shown = tab._demo_progress
    monkeypatch.setattr(tab, "_demo_progress",
                        lambda p: (seen.append((p, QThread.currentThread() is app.window.thread())), shown(p)))

    qtbot.mouseClick(tab.demo_btn, Qt.MouseButton.LeftButton)
    folder = paths.data_dir() / "demo"
    qtbot.waitUntil(lambda: any(r[2] == "target (selected)" for r in _rows(tab.tree)), timeout=120_000)

    assert seen and seen[-1][0].fraction == 1.0  # progress reached the GUI thread, in order
    assert all(in_gui for _, in_gui in seen)
    assert [p.done_bytes for p, _ in seen] == sorted(p.done_bytes for p, _ in seen)
    assert tab.demo_btn.isEnabled() and demo.DEMO_LABEL in tab.demo_note.text()
    assert Path(tab.folder_edit.text()) == folder and app.controller.settings.models_dir == folder
    rows = _rows(tab.tree)
    label = flow.DEMO_LABEL[0].upper() + flow.DEMO_LABEL[1:]
    fam = next(i for i, r in enumerate(rows) if r[0] == 0 and r[1] == label)
    target, draft = rows[fam + 1], rows[fam + 2]
    assert target[1:] == (demo.TARGET_FILE, "target (selected)"), rows
    assert draft[1:] == (demo.DRAFT_FILE, f"draft for {demo.TARGET_FILE}"), rows
    assert app.controller.selected_target == folder / demo.TARGET_FILE
    assert any(r[1:] == (demo.BUNDLED_FILE, "target") for r in rows), rows  # the bundled model is still offered
    assert demo.is_current(folder / demo.TARGET_FILE, TINY)


@pytest.mark.server
def test_a_failed_generation_says_why_and_allows_a_retry(make_app, qtbot, monkeypatch) -> None:
    monkeypatch.setattr(demo, "DEMO_RECIPE", TINY)
    folder = paths.data_dir() / "demo"
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the demo folder goes")
    app = make_app(tray_available=True)
    tab = app.window.models_tab
    qtbot.mouseClick(tab.demo_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "could not be prepared" in tab.demo_note.text(), timeout=60_000)
    assert str(folder) in tab.demo_note.text() and "not a folder" in tab.demo_note.text()
    assert tab.demo_btn.isEnabled()


def test_while_another_step_runs_the_offer_waits(make_app, qtbot, monkeypatch) -> None:
    from tuner.ui.controller import AppController

    app = make_app(tray_available=False)
    monkeypatch.setattr(AppController, "busy", property(lambda self: True))
    tab = app.window.models_tab
    qtbot.mouseClick(tab.demo_btn, Qt.MouseButton.LeftButton)
    assert "Another step is running" in tab.demo_note.text() and tab.demo_btn.isEnabled()
    assert not (paths.data_dir() / "demo").exists()
