"""Text from model files, file names and llama-server in the window, the tray and notifications (issue 27,
item 1): a label that shows it is plain text, or escapes it inside its own rich text, so a model named
``<img src=x>`` is shown as those characters, never as an image; control characters are visible escapes.

Real widgets offscreen (pytest-qt), real GGUF files for the Models tab (tests/synth.py); each check reads the
label's text format and what it renders (a rich label's text through a QTextDocument, as Qt draws it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import Qt as QtGuiNamespace
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel

from tests.synth import write_llama_gguf
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.controller import AppController

pytestmark = [pytest.mark.gui]

EVIL = "evil\x1b]0;PWNED\x07\x1b[2J\x1b[31m\nFAKE LINE"
SHOWN = r"evil\x1b]0;PWNED\x07\x1b[2J\x1b[31m\nFAKE LINE"
TAG = "<img src=x>"
NAME_FILE = TAG + "\x1b]0;PWNED\x07\nFAKE-ROW.gguf"  # a file name: the tag, the title sequence, a newline
NAME_SHOWN = TAG + r"\x1b]0;PWNED\x07\nFAKE-ROW.gguf"
RAW = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def rendered(text: str, fmt: Qt.TextFormat) -> str:
    """What Qt draws for ``text`` in format ``fmt`` (a rich text through a QTextDocument, as a label does)."""
    if fmt == Qt.TextFormat.PlainText:
        return text
    doc = QTextDocument()
    doc.setHtml(text)
    return doc.toPlainText()


def label_shows(label: QLabel, *expected: str) -> str:
    """The label's rendered text: no raw control character, no image or link tag of the file's, and each of
    ``expected`` shown as written. A label in automatic mode fails: it would guess."""
    fmt = label.textFormat()
    assert fmt in (Qt.TextFormat.PlainText, Qt.TextFormat.RichText), fmt
    if fmt == Qt.TextFormat.RichText:
        assert "<img" not in label.text() and "<a " not in label.text(), label.text()
    shown = rendered(label.text(), fmt)
    assert RAW.search(shown.replace("\n", " ")) is None, repr(shown)
    for e in expected:
        assert e in shown, (e, shown)
    return shown


def _serving(tmp_path: Path, **over) -> flow.ServingInfo:
    fields = dict(model_name=NAME_FILE, target_path=tmp_path / "t.gguf", endpoint_url="http://127.0.0.1:1/v1",
                  base_url="http://127.0.0.1:1", argv=("llama-server", "-m", str(tmp_path / NAME_FILE), "-a", EVIL),
                  pid=None, spec_label="draft-simple " + NAME_FILE + " n_max 3", model_id=EVIL)
    fields.update(over)
    return flow.ServingInfo(**fields)


def test_models_tab_rows_and_memory_plan_show_file_text_escaped(qtbot, tmp_path: Path) -> None:
    from tuner.ui.tab_models import ModelsTab

    folder = tmp_path / "models"
    write_llama_gguf(folder / NAME_FILE, n_embd=64, n_layers=2)
    write_llama_gguf(folder / "arch.gguf", n_embd=32, n_layers=1, architecture=EVIL)
    result = flow.scan(folder)
    tab = ModelsTab(AppController(Settings()))
    qtbot.addWidget(tab)
    tab.show_scan(result)
    texts = []

    def walk(item):
        texts.extend(item.text(i) for i in range(5))
        for i in range(item.childCount()):
            walk(item.child(i))

    for i in range(tab.tree.topLevelItemCount()):
        walk(tab.tree.topLevelItem(i))
    assert all(RAW.search(t) is None for t in texts), [t for t in texts if RAW.search(t)]
    assert NAME_SHOWN in texts  # the target's row, its name as written
    assert any(SHOWN in t for t in texts)  # the unknown architecture's reason
    target = next(m for m in result.models if m.path.name == NAME_FILE)
    tab._plan_for = target.path
    # the plan's words name the model; their own line break is kept
    tab._on_plan(target, f"plan for {TAG}\x1b[2J: weights in RAM\nWhile serving: the prompt cache")
    shown = label_shows(tab.plan_label, NAME_SHOWN + ": plan for " + TAG + r"\x1b[2J: weights in RAM")
    assert shown.endswith("\nWhile serving: the prompt cache")


def test_serve_tab_labels_error_and_log_are_plain(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.ui.tab_serve import ServeTab

    c = AppController(Settings())
    tab = ServeTab(c)
    qtbot.addWidget(tab)
    c.serving = _serving(tmp_path)
    c.server_changed.emit(c.serving)
    label_shows(tab.model_label, NAME_SHOWN + " — draft-simple " + NAME_SHOWN)
    assert tab.model_label.textFormat() == Qt.TextFormat.PlainText
    label_shows(tab.model_id_label, SHOWN)
    assert RAW.search(tab.cmd_edit.toPlainText()) is None and SHOWN in tab.cmd_edit.toPlainText()
    tab.show_error(f"llama-server failed: unknown model architecture: '{EVIL}' ({TAG})")
    label_shows(tab.error_label, f"'{SHOWN}' ({TAG})")
    assert tab.error_label.textFormat() == Qt.TextFormat.PlainText
    monkeypatch.setattr(c.runner, "log_tail", lambda n=200: [f"E llama_model_load: unknown architecture: '{EVIL}'",
                                                             "FAKE LINE'"])
    tab.show()
    tab.refresh_log()
    log = tab.log.toPlainText().split("\n")
    assert log == [f"E llama_model_load: unknown architecture: '{SHOWN}'", "FAKE LINE'"]


def test_monitor_and_chat_headers_escape_inside_their_rich_text(qtbot, tmp_path: Path) -> None:
    from tuner.ui.tab_chat import ChatTab
    from tuner.ui.tab_monitor import MonitorTab

    c = AppController(Settings())
    monitor, chat = MonitorTab(c), ChatTab(c)
    qtbot.addWidget(monitor)
    qtbot.addWidget(chat)
    c.serving = _serving(tmp_path)
    monitor._update_summary()
    label_shows(monitor.summary, "Serving " + NAME_SHOWN + " with draft-simple " + NAME_SHOWN,
                "configuration: draft-simple " + NAME_SHOWN)
    chat.refresh()
    label_shows(chat.header, "Chatting with " + SHOWN)
    c.serving = None
    chat.refresh()
    label_shows(chat.header, "Tune & serve")  # its own "&", shown as itself


def test_tune_and_prompts_tabs(qtbot, tmp_path: Path) -> None:
    import json

    from tuner.ui.tab_prompts import PromptsTab
    from tuner.ui.tab_tune import TuneTab

    c = AppController(Settings())
    tune = TuneTab(c)
    qtbot.addWidget(tune)
    assert tune.step_label.textFormat() == Qt.TextFormat.PlainText == tune.decision_label.textFormat()
    prompts_file = tmp_path / "p<b>x.jsonl"
    prompts_file.write_text(json.dumps({"prompt": f"Say {TAG} and {EVIL}", "category": TAG}) + "\n"
                            + json.dumps({"prompt": "plain", "category": "code"}) + "\n")
    tab = PromptsTab(c)
    qtbot.addWidget(tab)
    assert tab.select(prompts_file, announce=False)
    label_shows(tab.source_label, f"from {prompts_file} — categories: {TAG}")
    assert tab.table.item(0, 1).text() == TAG and RAW.search(tab.table.item(0, 2).text()) is None
    tip = tab.table.item(0, 2).toolTip()
    assert QtGuiNamespace.mightBeRichText(tip) and "<img" not in tip  # rich on purpose, the tag escaped
    # a prompt's own lines are kept; its controls are escaped
    assert rendered(tip, Qt.TextFormat.RichText) == f"Say {TAG} and " + SHOWN.replace(r"\n", "\n")


def test_tray_tooltip_menu_and_notification(qtbot, tmp_path: Path) -> None:
    from tuner.ui.tray import Tray

    c = AppController(Settings())
    tray = Tray(c, show_window=lambda: None, quit_app=lambda: None)
    c.serving = _serving(tmp_path)
    tray.refresh()
    tip = tray.icon.toolTip()
    assert "<img" not in tip and NAME_SHOWN + " at http://127.0.0.1:1/v1" in rendered(tip, Qt.TextFormat.RichText)
    tray.rebuild_menu()
    assert f"Serving {NAME_SHOWN}" in tray.actions()
    tray.notify("Draftwise: " + EVIL, f"serving {TAG}\x1b]0;PWNED\x07 & more")  # a message's own lines are kept
    title, body = tray.last_notification
    assert title == "Draftwise: " + SHOWN
    assert "<img" not in body and rendered(body, Qt.TextFormat.RichText) == rf"serving {TAG}\x1b]0;PWNED\x07 & more"
    tray.hide()
