"""The Serve tab's rows for the capture of served requests, and the list of what was kept.

:class:`CaptureBox`: the setting in the words that say what it does ("Keep served requests — keeps your last 200
requests on this machine to re-tune on them"), where they go and that switching restarts llama-server and off
deletes them; the indicator (on, how many are kept now; off; not available on this llama-server, with why); *Show
captured requests…* and *Forget captured requests*. :class:`CapturedDialog`: one row per captured request (when,
size, its first words, escaped through :func:`tuner.ui.plaintext.plain`) with *Delete*, and *Forget* for all.
The core side is :mod:`tuner.server.capture`, reached through :mod:`tuner.ui.flow`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from tuner.server import KEEP_WORDS, MAX_CAPTURED_BYTES, MAX_CAPTURED_FILES, captures_root
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.plaintext import plain, plain_label
from tuner.units import format_bytes

log = logging.getLogger(__name__)

#: The check box's words: what the setting is, then what it does.
SETTING_WORDS = f"Keep served requests — {KEEP_WORDS}"


def help_words() -> str:
    """What the setting keeps, where, and what switching it does (under the check box)."""
    bound = f"the newest {MAX_CAPTURED_FILES}, at most {format_bytes(MAX_CAPTURED_BYTES, decimals=0)} per model"
    return (f"Their full text ({bound}) stays in a folder only you can read: {captures_root()}. Switching this "
            "restarts llama-server; switching it off deletes them.")


def indicator_words(status: flow.CaptureStatus, serving: bool) -> str:
    """The indicator: on (with how many requests are kept now), waiting for the server, off, or not available."""
    kept = f"{status.files} request{'' if status.files == 1 else 's'} kept now ({format_bytes(status.size_bytes)})"
    if status.problem is not None and status.setting:
        return f"Not available: {status.problem}."
    if status.active:
        return f"On: keeping the requests llama-server answers; {kept}."
    if status.setting:
        return ("On: starts with the server; " if not serving else "On: applying; ") + kept + "."
    return f"Off: no request is kept{'' if not status.files else '; ' + kept}."


class CaptureBox(QGroupBox):
    """The capture rows of the Serve tab (see the module docstring)."""

    def __init__(self, controller: AppController) -> None:
        super().__init__("Served requests")
        self.controller = controller
        lay = QVBoxLayout(self)
        self.check = QCheckBox(SETTING_WORDS)
        self.check.setChecked(controller.settings.capture_requests)
        self.check.toggled.connect(self._toggle)
        lay.addWidget(self.check)
        self.help = QLabel(help_words())
        self.help.setWordWrap(True)
        self.help.setStyleSheet("color:#6b7280")
        lay.addWidget(plain_label(self.help))
        row = QHBoxLayout()
        self.indicator = plain_label(QLabel())
        self.indicator.setWordWrap(True)
        row.addWidget(self.indicator, 1)
        self.show_btn = QPushButton("Show captured requests…")
        self.show_btn.clicked.connect(self.show_list)
        row.addWidget(self.show_btn)
        self.forget_btn = QPushButton("Forget captured requests")
        self.forget_btn.clicked.connect(self.forget)
        row.addWidget(self.forget_btn)
        lay.addLayout(row)
        self.dialog: CapturedDialog | None = None
        controller.capture_changed.connect(self.refresh)
        controller.server_changed.connect(lambda _i: self.refresh())
        controller.state_changed.connect(lambda _s: self.refresh())
        self.refresh()

    def refresh(self) -> None:
        """The check box, the indicator and the buttons from the controller's state."""
        c = self.controller
        status = c.captures.status()
        self.check.blockSignals(True)
        self.check.setChecked(c.settings.capture_requests)
        self.check.blockSignals(False)
        self.check.setEnabled(status.problem is None or c.settings.capture_requests)
        self.check.setToolTip(f"Not available: {status.problem}." if status.problem else help_words())
        self.indicator.setText(plain(indicator_words(status, c.serving is not None)))
        self.indicator.setStyleSheet("color:#15803d; font-weight:bold" if status.active else "")
        self.show_btn.setEnabled(status.files > 0)
        self.forget_btn.setEnabled(status.files > 0)

    def _toggle(self, on: bool) -> None:
        try:
            done = self.controller.captures.set_capture(on)
        except Exception as exc:  # the setting could not be saved, or a folder could not be made private
            log.warning("switching the capture of served requests failed", exc_info=True)
            self.controller.error.emit(f"Could not switch keeping served requests: {exc}")
            done = False
        if not done:
            self.refresh()  # the box shows the setting as it stands

    def forget(self) -> None:
        """*Forget captured requests*: every one is deleted."""
        try:
            self.controller.captures.forget_all()
        except OSError as exc:
            self.controller.error.emit(f"Could not delete every captured request: {exc}")

    def show_list(self) -> CapturedDialog:
        """Open the list of captured requests (one dialog, refreshed when it is shown again)."""
        if self.dialog is None:
            self.dialog = CapturedDialog(self.controller, self)
        self.dialog.refresh()
        self.dialog.show()
        self.dialog.raise_()
        return self.dialog


class CapturedDialog(QDialog):
    """The captured requests, newest first: when, size, first words, and a *Delete* button per row."""

    COLUMNS = ("Received", "Model", "Size", "First words", "")

    def __init__(self, controller: AppController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.setWindowTitle("Captured requests")
        self.resize(860, 420)
        lay = QVBoxLayout(self)
        self.summary = plain_label(QLabel())
        lay.addWidget(self.summary)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(list(self.COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        lay.addWidget(self.table, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.forget_btn = buttons.addButton("Forget captured requests", QDialogButtonBox.ButtonRole.DestructiveRole)
        self.forget_btn.clicked.connect(self._forget)
        buttons.rejected.connect(self.hide)
        lay.addWidget(buttons)
        self.paths: list[Path] = []
        controller.capture_changed.connect(self.refresh)

    def refresh(self) -> None:
        """List the captured requests again (only while shown or about to be)."""
        captured = flow.list_captured()
        self.paths = [f.path for f in captured]
        self.table.setRowCount(len(captured))
        for row, f in enumerate(captured):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f.mtime))
            for col, text in enumerate((when, f.model_id, format_bytes(f.size_bytes), f.first_words())):
                self.table.setItem(row, col, QTableWidgetItem(plain(text)))  # a prompt's words: never markup
            button = QPushButton("Delete")
            button.clicked.connect(lambda _checked=False, p=f.path: self._delete(p))
            self.table.setCellWidget(row, 4, button)
        total = sum(f.size_bytes for f in captured)
        self.summary.setText(plain(f"{len(captured)} captured request{'' if len(captured) == 1 else 's'} "
                                   f"({format_bytes(total)}), newest first."))
        self.forget_btn.setEnabled(bool(captured))

    def _delete(self, path: Path) -> None:
        try:
            self.controller.captures.delete(path)
        except (OSError, ValueError) as exc:
            self.controller.error.emit(f"Could not delete the captured request: {exc}")

    def _forget(self) -> None:
        try:
            self.controller.captures.forget_all()
        except OSError as exc:
            self.controller.error.emit(f"Could not delete every captured request: {exc}")
