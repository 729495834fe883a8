"""Prompts tab: the built-in set, an editor, load from file, categories.

The prompt set is what calibration measures with (``tuner.calibration.prompts``). The editor works on
the JSONL form (one ``{"prompt": ..., "category": ...}`` per line); "Save" writes the user's set
under the data folder and selects it for the next sweep.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from tuner import paths, storage
from tuner.ui.controller import AppController
from tuner.ui.plaintext import plain, plain_label, rich, rich_label, tooltip

log = logging.getLogger(__name__)


USER_PROMPTS_FILE = "prompts.jsonl"


def load_prompt_set(path: Path | None):
    """The user's set at ``path`` or the built-in one (``tuner.calibration.prompts``).

    Raises:
        tuner.calibration.prompts.PromptFileError: names the file and line.
    """
    from tuner.calibration import default_prompts, load_prompts

    return load_prompts(path) if path is not None else default_prompts()


def to_jsonl(prompt_set) -> str:
    """The set as JSONL text for the editor (a conversation keeps its ``messages``)."""
    lines = []
    for p in prompt_set.prompts:
        obj: dict = ({"messages": [{"role": r, "content": c} for r, c in p.messages]} if p.messages
                     else {"prompt": p.text})
        if p.category:
            obj["category"] = p.category
        lines.append(json.dumps(obj, ensure_ascii=False))
    return "\n".join(lines) + "\n"


class PromptsTab(QWidget):
    """Table of the current prompt set + a JSONL editor.

    Signals:
        prompts_changed(object): the selected prompt file (Path) or None for the built-in set.
    """

    prompts_changed = Signal(object)

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        self.prompt_set = None
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.source_label = rich_label(QLabel())  # its file path and categories escaped (rich)
        self.source_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        top.addWidget(self.source_label, 1)
        self.builtin_btn = QPushButton("Use built-in set")
        self.builtin_btn.clicked.connect(lambda: self.select(None))
        top.addWidget(self.builtin_btn)
        self.load_btn = QPushButton("Load from file…")
        self.load_btn.clicked.connect(self.load_file)
        top.addWidget(self.load_btn)
        lay.addLayout(top)

        split = QSplitter(Qt.Orientation.Vertical)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Sweep", "Category", "Prompt"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(False)
        split.addWidget(self.table)

        editor_box = QWidget()
        ev = QVBoxLayout(editor_box)
        ev.setContentsMargins(0, 0, 0, 0)
        ev.addWidget(QLabel('Editor — one JSON object per line: {"prompt": "...", "category": "code"}'))
        self.editor = QPlainTextEdit()
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        ev.addWidget(self.editor, 1)
        row = QHBoxLayout()
        self.error_label = plain_label(QLabel())  # the prompt file's errors quote its lines
        self.error_label.setStyleSheet("color: #b91c1c")
        self.error_label.setWordWrap(True)
        row.addWidget(self.error_label, 1)
        self.save_btn = QPushButton("Save and use")
        self.save_btn.clicked.connect(self.save_editor)
        row.addWidget(self.save_btn)
        ev.addLayout(row)
        split.addWidget(editor_box)
        split.setSizes([300, 200])
        lay.addWidget(split, 1)
        self.select(controller.prompts_path, announce=False)

    def select(self, path: Path | None, announce: bool = True) -> bool:
        """Load and show a prompt set (None = built-in); returns False and shows the error on failure."""
        try:
            ps = load_prompt_set(path)
        except Exception as exc:  # PromptFileError names file and line
            log.debug("prompt file refused", exc_info=True)
            self.error_label.setText(plain(exc))
            return False
        self.error_label.setText("")
        self.prompt_set = ps
        self.controller.prompts_path = path
        cats = ", ".join(ps.categories) or "none"
        src = "built-in set" if path is None else str(path)
        used = self.sweep_prompt_indices(ps, path)
        n = len(ps.prompts)
        which = ("a sweep measures all of them" if len(used) == n else
                 f"a sweep measures {len(used)} of them, one per category (✓)")
        self.source_label.setText(f"<b>{n} prompts</b> from {rich(src)} — categories: {rich(cats)} — {rich(which)}")
        self.table.setRowCount(n)
        for i, p in enumerate(ps.prompts):
            mark = QTableWidgetItem("✓" if i in used else "")
            mark.setToolTip("measured by a sweep" if i in used else "not measured by a sweep")
            self.table.setItem(i, 0, mark)
            self.table.setItem(i, 1, QTableWidgetItem(plain(p.category or "—")))
            one_line = plain(" ".join(p.text.split()))
            item = QTableWidgetItem(one_line if len(one_line) < 200 else one_line[:199] + "…")
            item.setToolTip(tooltip(p.text[:2000]))  # shown as written, never as HTML
            self.table.setItem(i, 2, item)
        self.editor.setPlainText(to_jsonl(ps))
        if announce:
            self.prompts_changed.emit(path)
        return True

    def sweep_prompt_indices(self, ps, path: Path | None) -> set[int]:
        """Indices of the prompts a sweep measures: the calibration's own choice
        (``tuner.calibration.prompts.select_prompts``; the built-in set uses ``DEFAULT_SET_PROMPTS``
        of its prompts unless the tune options set ``max_prompts``)."""
        from tuner.calibration import DEFAULT_SET_PROMPTS, select_prompts

        max_p = (getattr(self.controller, "tune_options", None) or {}).get("max_prompts")
        if max_p is None and path is None:
            max_p = DEFAULT_SET_PROMPTS
        return {i for i, _p in select_prompts(ps, max_p)}

    def load_file(self) -> None:
        """Pick a JSONL or plain-text prompt file."""
        f, _ = QFileDialog.getOpenFileName(self, "Prompt file", str(Path.home()), "Prompts (*.jsonl *.json *.txt);;All files (*)")
        if f:
            self.select(Path(f))

    def save_editor(self) -> bool:
        """Validate the editor text, write it to ``data_dir()/prompts.jsonl`` atomically and select it."""
        path = paths.data_dir() / USER_PROMPTS_FILE
        tmp = path.with_name(".prompts-check.jsonl")
        storage.atomic_write_text(tmp, self.editor.toPlainText())
        try:
            load_prompt_set(tmp)
        except Exception as exc:
            log.debug("edited prompts refused", exc_info=True)
            self.error_label.setText(plain(str(exc).replace(str(tmp), "editor")))
            tmp.unlink(missing_ok=True)
            return False
        tmp.replace(path)
        return self.select(path)
