"""Models tab: folder picker, families (target and draft roles), incompatible pairs with the failed
rule, broken files with the reason, and the memory plan of the selected model."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.plaintext import plain, plain_label, rich, rich_label
from tuner.ui.serve_targets import draft_only
from tuner.units import format_bytes


def _model_name(m) -> str:
    """The row label of a model: its file name (``general.name`` is often just the architecture,
    e.g. "llama"; the file is what the user recognises and what the API serves as the model id), made safe
    to show (:func:`tuner.ui.plaintext.plain`)."""
    return plain(Path(m.path).name)


def _item(*texts: object) -> QTreeWidgetItem:
    """A tree row whose texts (file names, header strings, verdicts) are shown escaped."""
    return QTreeWidgetItem([plain(t) for t in texts])


def family_label(fam) -> str:
    """A family's row label from its shared tokenizer, e.g. ``"llama tokenizer, 512 tokens"``; the generated
    demo pair says what it is (:data:`tuner.ui.flow.DEMO_LABEL`)."""
    if flow.is_demo_family(fam.members):
        return flow.DEMO_LABEL[0].upper() + flow.DEMO_LABEL[1:]
    tok = fam.members[0].tokenizer if fam.members else None
    if tok is None:
        return "Shared tokenizer"
    kind = plain(getattr(tok, "vocab_type", None) or tok.model or "unknown")
    return f"{kind} tokenizer, {tok.n_tokens:,} tokens" if tok.n_tokens else f"{kind} tokenizer"


class ModelsTab(QWidget):
    """Shows the last scan; "Scan" runs one in a worker through the controller.

    Signals:
        folder_chosen(Path): the user picked a new models folder (the window saves it in settings).
    """

    folder_chosen = Signal(object)

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        lay = QVBoxLayout(self)
        self.first_run = QLabel(
            "<b>Welcome to Draftwise.</b> Choose the folder that holds your GGUF models (Browse…), "
            "or try the whole flow on the demo models (Use demo model): a tiny real model, and a generated "
            "model with a draft that shows speculation at work. The folder is remembered."
        )
        self.first_run.setWordWrap(True)
        self.first_run.setStyleSheet("background:#dbeafe; color:#1e3a8a; padding:8px; border-radius:4px")
        self.first_run.setVisible(False)
        lay.addWidget(self.first_run)
        row = QHBoxLayout()
        row.addWidget(QLabel("Models folder:"))
        self.folder_edit = QLineEdit(str(controller.settings.models_dir or ""))
        self.folder_edit.setPlaceholderText("Choose the folder that holds your .gguf files")
        self.folder_edit.returnPressed.connect(self.scan)  # Enter scans the typed folder, as *Scan* does
        row.addWidget(self.folder_edit, 1)
        self.browse_btn = QPushButton("Browse…")
        self.browse_btn.clicked.connect(self.browse)
        row.addWidget(self.browse_btn)
        self.demo_btn = QPushButton("Use demo model")
        self.demo_btn.setToolTip("Try the whole flow on the demo models: the bundled stories260K and a generated "
                                 "target + draft pair (about 200 MB, made on first use; " + flow.DEMO_LABEL + ")")
        self.demo_btn.clicked.connect(self.use_demo)
        row.addWidget(self.demo_btn)
        self.scan_btn = QPushButton("Scan")
        self.scan_btn.clicked.connect(self.scan)
        row.addWidget(self.scan_btn)
        lay.addLayout(row)
        self.demo_note = QLabel("")
        self.demo_note.setWordWrap(True)
        self.demo_note.setVisible(False)
        lay.addWidget(self.demo_note)
        self._demo_folder: Path | None = None
        """The demo folder once prepared: its caption (:attr:`demo_note`) shows only while it is the one shown."""
        self.scan_note = plain_label(QLabel(""))  # a failed scan, in words (it names the folder)
        self.scan_note.setWordWrap(True)
        self.scan_note.setStyleSheet("color:#b91c1c")
        self.scan_note.setVisible(False)
        lay.addWidget(self.scan_note)

        self.tree = QTreeWidget()
        self.tree.setColumnCount(5)
        self.tree.setHeaderLabels(["Model", "Role", "Size", "Details", "File"])
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        hdr = self.tree.header()
        hdr.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        hdr.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        hdr.setSectionResizeMode(4, QHeaderView.ResizeMode.Interactive)
        self.tree.currentItemChanged.connect(self._on_current)
        lay.addWidget(self.tree, 1)

        lay.addWidget(QLabel("<b>Memory plan of the selected target</b>"))
        self.plan_label = rich_label(QLabel("Select a target to see where its weights and KV cache go."))
        self.plan_label.setWordWrap(True)
        self.plan_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.plan_label)
        controller.scan_done.connect(self.show_scan)
        controller.scan_failed.connect(self.show_scan_failure)
        controller.plan_ready.connect(self._on_plan)
        self._plan_for = None
        self._plan_model = None
        self._plan_at = 0.0

    def show_first_run_prompt(self) -> None:
        """Ask for the models folder (first run: no folder in the settings yet)."""
        self.first_run.setVisible(True)

    # -------------------------------------------------------------- actions
    def browse(self) -> None:
        """Folder dialog; a chosen folder is remembered and scanned."""
        d = QFileDialog.getExistingDirectory(self, "Models folder", self.folder_edit.text() or str(Path.home()))
        if d:
            self.folder_edit.setText(d)
            self.scan()

    def use_demo(self) -> None:
        """Write the demo folder in a worker (the generated pair on first use, with its progress shown
        here), then point at it and scan it."""
        self.demo_note.setVisible(True)
        if self.controller.prepare_demo(self._demo_ready, self._demo_progress, self._demo_failed):
            self.demo_note.setText("Preparing the demo models…")
            self.demo_btn.setEnabled(False)
        else:
            self.demo_note.setText("Another step is running: try again when it has finished.")

    def _demo_progress(self, p) -> None:
        self.demo_note.setText(f"Generating the demo models (first use only, {format_bytes(p.total_bytes)}): "
                               f"{100 * p.fraction:.0f} %")

    def _demo_failed(self, exc: BaseException) -> None:
        self.demo_btn.setEnabled(True)
        self.demo_note.setText(f"The demo models could not be prepared: {exc}")

    def _demo_ready(self, demo) -> None:
        self.demo_btn.setEnabled(True)
        self.demo_note.setText(f"Demo folder: {demo.bundled.name}, a tiny real model, and {demo.target.name} with "
                               f"its draft {demo.draft.name}: {flow.DEMO_LABEL}.")
        self._demo_folder = Path(demo.folder).resolve()
        self.folder_edit.setText(str(demo.folder))
        self.folder_chosen.emit(demo.folder)
        self.scan()

    def scan(self) -> None:
        """Scan the folder in the edit box (worker thread). A folder typed there is remembered like one
        chosen with *Browse…* (``folder_chosen``), so *Tune & serve* tunes the folder the tab shows; a folder
        that does not exist is not remembered (the scan's error names it). A ``~`` or relative folder is
        made absolute and normalised first (``~/m/../m`` → ``/home/u/m``), in the box too."""
        self.first_run.setVisible(False)
        text = self.folder_edit.text().strip()
        folder = Path(text).expanduser().resolve() if text else None
        if folder is not None and str(folder) != self.folder_edit.text():
            self.folder_edit.setText(str(folder))
        if folder is not None and folder.is_dir() and folder != self.controller.settings.models_dir:
            self.folder_chosen.emit(folder)
        self.controller.scan_models(folder)

    # -------------------------------------------------------------- display
    def show_scan(self, result: flow.ScanResult) -> None:
        """Fill the tree from a :class:`tuner.ui.flow.ScanResult`."""
        self.tree.clear()
        self.scan_note.setVisible(False)
        demo = self._demo_folder is not None and Path(result.folder).resolve() == self._demo_folder
        if not demo and self.demo_note.text().startswith("Demo folder:"):
            self.demo_note.setVisible(False)  # its "their text is noise" is about the demo models only
        elif demo:
            self.demo_note.setVisible(True)
        if str(result.folder) != self.folder_edit.text():
            self.folder_edit.setText(str(result.folder))
        in_family: set[Path] = set()
        selected_item = None
        for i, fam in enumerate(result.families, start=1):
            # a model that is only ever a draft here (no drafts of its own, listed under a larger
            # target) gets one row, as a draft: not a second "target … 0 draft candidates" row
            draft_paths = {Path(dc.model.path) for e in fam.targets for dc in e.drafts}
            only_drafts = draft_only(fam)  # the tray's Serve menu leaves the same ones out
            shown = [e for e in fam.targets if Path(e.target.path) not in only_drafts]
            n_t, n_d = len(shown), len(draft_paths)
            fam_item = _item(
                family_label(fam), "", "",
                f"{len(fam.members)} model{'s' if len(fam.members) != 1 else ''} with one tokenizer: {n_t} target{'s' if n_t != 1 else ''}, "
                f"{n_d} draft{'s' if n_d != 1 else ''}", "")
            f = fam_item.font(0)
            f.setBold(True)
            fam_item.setFont(0, f)
            self.tree.addTopLevelItem(fam_item)
            in_family.update(Path(m.path) for m in fam.members)
            for entry in shown:
                t = entry.target
                in_family.add(Path(t.path))
                n_drafts = len(entry.drafts)
                details = f"{t.architecture or '?'}, {t.n_layers or '?'} layers, {t.quantization or '?'}"
                if t.mtp_layers:
                    details += f", MTP ({t.mtp_layers} layers)"
                details += (f"; {n_drafts} draft candidate{'s' if n_drafts != 1 else ''} below" if n_drafts
                            else "; no smaller draft: n-gram speculation only")
                it = _item(_model_name(t), "target", format_bytes(t.size_bytes), details, t.path)
                it.setData(0, Qt.ItemDataRole.UserRole, t)
                fam_item.addChild(it)
                if self.controller.selected_target and Path(t.path) == Path(self.controller.selected_target):
                    it.setText(1, "target (selected)")
                    selected_item = it
                for dc in entry.drafts:
                    dm = dc.model
                    warn = ("; " + "; ".join(dc.warnings)) if dc.warnings else ""
                    ch = _item(
                        _model_name(dm), f"draft for {_model_name(t)}", format_bytes(dm.size_bytes),
                        f"{dm.architecture or '?'}, {dm.n_layers or '?'} layers, {dm.quantization or '?'}; "
                        f"draft rank score {dc.score:.2f}{warn}", dm.path)
                    it.addChild(ch)
                for dm, verdict in entry.incompatible:
                    ch = _item(_model_name(dm), "incompatible", format_bytes(dm.size_bytes),
                               f"rule '{verdict.rule}': {verdict.message}", dm.path)
                    ch.setForeground(1, Qt.GlobalColor.darkRed)
                    it.addChild(ch)
            fam_item.setExpanded(True)
            for j in range(fam_item.childCount()):
                if (child := fam_item.child(j)) is not None:
                    child.setExpanded(True)
        others = [m for m in result.models if Path(m.path) not in in_family]
        if others:
            other_item = QTreeWidgetItem(["Other files", "", "", "not usable as target or draft", ""])
            f = other_item.font(0)
            f.setBold(True)
            other_item.setFont(0, f)
            self.tree.addTopLevelItem(other_item)
            for m in others:
                why = m.error or m.kind
                ch = _item(Path(m.path).name, m.kind, format_bytes(m.size_bytes), why, m.path)
                if m.kind == "broken":
                    ch.setForeground(1, Qt.GlobalColor.darkRed)
                other_item.addChild(ch)
            other_item.setExpanded(True)
        if not result.models:
            self.tree.addTopLevelItem(_item("No .gguf files found", "", "", result.folder, ""))
        if selected_item is not None:
            self.tree.setCurrentItem(selected_item)

    def show_scan_failure(self, message: str) -> None:
        """A scan that failed (a folder that does not exist): its words under the folder box; the tree keeps
        the last good scan, and the server's state is not touched (:meth:`AppController.scan_models`)."""
        self.scan_note.setText(plain(f"Could not scan: {message}"))
        self.scan_note.setVisible(True)

    #: A memory plan older than this (seconds) is computed again when the tab is shown: the free memory it
    #: rests on moves while other programs run (GiBs within minutes on a busy machine).
    PLAN_FRESH_S = 30.0

    def _on_current(self, item: QTreeWidgetItem | None, _prev) -> None:
        if item is None:
            return
        model = item.data(0, Qt.ItemDataRole.UserRole)
        if model is None:
            return
        self.controller.selected_target = Path(model.path)
        self._plan_for = model.path
        self._plan_model = model
        self._plan_at = time.monotonic()
        self.plan_label.setText(f"Computing the memory plan of {rich(Path(model.path).name)}…")
        self.controller.plan_memory(model)

    def showEvent(self, ev) -> None:  # noqa: N802 - Qt override
        """Coming back to the tab: a memory plan older than :attr:`PLAN_FRESH_S` is computed again, so its
        free-memory figures are today's, as ``draftwise plan`` run now would read them."""
        super().showEvent(ev)
        model = self._plan_model
        if model is not None and time.monotonic() - self._plan_at > self.PLAN_FRESH_S:
            self._plan_at = time.monotonic()
            self.controller.plan_memory(model)

    def _on_plan(self, model, text: str) -> None:
        if model.path == self._plan_for:
            self.plan_label.setText(f"<b>{rich(Path(model.path).name)}</b>: {rich(text, lines=True)}")
