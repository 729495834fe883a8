"""Tune tab: budget, start / cancel, progress with ETA, a live chart of each candidate's tokens/s
against the baseline with its acceptance rate, and the decision in words: its plain first sentence, the
evidence behind a *Details* expander."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from tuner.calibration import Rendered
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.graphs import CandidateChart
from tuner.ui.options import spin_box, spin_value
from tuner.ui.plaintext import plain, plain_label
from tuner.ui.recent_requests import TIP as RECENT_TIP
from tuner.ui.state import AppState

log = logging.getLogger(__name__)


def format_eta(eta_s: float | None) -> str:
    """``95`` → ``"about 1 min 35 s left"``; ``0`` → ``"finishing…"``; None → ``""``."""
    if eta_s is None:
        return ""
    eta_s = max(0, int(round(eta_s)))
    if eta_s == 0:
        return "finishing…"
    if eta_s >= 60:
        return f"about {eta_s // 60} min {eta_s % 60:02d} s left"
    return f"about {eta_s} s left"


class TuneTab(QWidget):
    """Runs the sweep through the controller and shows its events."""

    #: The most height (px) the open *Details* take; longer evidence scrolls inside them.
    DETAILS_MAX_PX = 220

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        self.results: dict[str, tuple[str, float, float | None, bool]] = {}
        self.never: list[str] = []
        """Labels of n-gram types that ran but never drafted (bar-less "never drafted" chart rows)."""
        self.points: dict[str, list[float]] = {}
        """Each configuration's launches so far (tokens/s per launch), drawn as points on its bar."""
        self.measured: list = []
        """The sweep's measurements so far (their drafted tokens beside each bar's acceptance)."""
        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(QLabel("Time budget:"))
        self.budget = spin_box("budget_s", controller.settings.tune_budget_s)  # shown in minutes
        self.budget.setToolTip("How long the calibration sweep may take (model loads dominate): "
                               + self.budget.toolTip())
        row.addWidget(self.budget)
        row.addSpacing(16)
        self.start_btn = QPushButton("Tune && serve")
        self.start_btn.clicked.connect(self.start)
        row.addWidget(self.start_btn)
        self.retune_btn = QPushButton("Re-tune")
        self.retune_btn.setToolTip("Measure again even when a fresh profile exists")
        self.retune_btn.clicked.connect(self.retune)
        row.addWidget(self.retune_btn)
        self.served_btn = QPushButton("Re-tune on recent requests")  # shown only with captured requests
        self.served_btn.setToolTip(RECENT_TIP)
        self.served_btn.clicked.connect(self.retune_on_served)
        row.addWidget(self.served_btn)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        self.cancel_btn.clicked.connect(controller.cancel)
        row.addWidget(self.cancel_btn)
        row.addStretch(1)
        lay.addLayout(row)

        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.progress.setFormat("not started")
        self.progress.setTextVisible(True)
        lay.addWidget(self.progress)
        # between events (one launch can take a minute) the ETA counts down once a second
        self._last_progress: tuple[float, flow.TuneProgress] | None = None
        self._shown_fraction = 0.0  # the bar never moves back within one sweep (a re-plan only moves the ETA)
        self._shown_text = ""  # the bar's words now, for progress_text()
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._count_down)
        self.step_label = plain_label(QLabel())  # event messages name files
        self._prompt = ""
        """The "Press Tune & serve …" line last shown (replaced by the next target's while still shown)."""
        self.step_label.setWordWrap(True)
        lay.addWidget(self.step_label)

        self.chart = CandidateChart()
        lay.addWidget(self.chart, 1)

        head = QHBoxLayout()
        head.addWidget(QLabel("<b>Decision</b>"))
        # the first sentence is for everyone; the evidence (pairs, intervals, acceptance, how it was
        # measured) is one click away
        self.details_btn = QToolButton()
        self.details_btn.setText("Details")
        self.details_btn.setCheckable(True)
        self.details_btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_btn.setArrowType(Qt.ArrowType.RightArrow)
        self.details_btn.setAutoRaise(True)
        self.details_btn.toggled.connect(self._show_details)
        self.details_btn.setVisible(False)
        head.addWidget(self.details_btn)
        head.addStretch(1)
        lay.addLayout(head)
        self.decision_label = plain_label(QLabel("No decision yet."))  # names models and drafts
        self.decision_label.setWordWrap(True)
        self.decision_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.decision_label)
        self.details_label = self._details_box()
        lay.addWidget(self.details_label)
        self._finished_line: str | None = None
        """The "Tuning finished …" line of the last sweep (the serving part is added while it serves)."""

        controller.tune_event.connect(self.on_event)
        controller.tune_done.connect(self.on_done)
        controller.state_changed.connect(self.on_state)
        controller.server_changed.connect(lambda _info: self._show_finished())
        controller.error.connect(self.on_error)
        controller.restore_refused.connect(self.on_restore_refused)
        self._shown_target: Path | None = None
        """The target whose sweep the chart and the decision show (None: none shown)."""
        controller.scan_done.connect(self.on_scan)
        self.show_prompt()
        for signal in (controller.capture_changed, controller.server_changed, controller.telemetry):
            signal.connect(lambda *_a: self.show_served_action())
        self.on_state(controller.state)

    def _details_box(self) -> QTextBrowser:
        """The decision's evidence: it can run to dozens of lines, so a read-only text that scrolls, at most
        :attr:`DETAILS_MAX_PX` high, below the chart that keeps its minimum height (a label grew until the chart
        was squashed and its last lines were cut off). Hidden until *Details* opens it."""
        box = QTextBrowser()  # plain text (setPlainText): names models, drafts and files as they are
        box.setReadOnly(True)
        box.setOpenLinks(False)
        box.setMaximumHeight(self.DETAILS_MAX_PX)
        box.setStyleSheet("color:#374151; margin-left:18px")
        box.setVisible(False)
        return box

    def show_prompt(self) -> None:
        """Before any sweep, say what *Tune & serve* will tune: the target selected on the Models tab (or that a
        folder is needed first). Leaves any other line (progress, a result, an error) alone."""
        if self.step_label.text() != self._prompt:
            return
        target = self.controller.selected_target
        if target is None:
            line = ("Choose a models folder on the Models tab (or try the demo models), then press "
                    "“Tune & serve” to find the fastest way to run a model on this machine.")
        else:
            line = (f"Press “Tune & serve” to find the fastest way to run {Path(target).name} on this "
                    "machine: on its own, or with a draft model or n-gram lookup guessing the next tokens.")
        self._prompt = plain(line)
        self.step_label.setText(self._prompt)

    def on_scan(self, scan: flow.ScanResult) -> None:
        """A scan: the line names the target *Tune & serve* would tune (:meth:`show_prompt`). When the chart shows
        a target the scanned folder does not hold (the folder changed), its chart and decision are cleared and the
        line says so, naming the target *Tune & serve* and *Re-tune* tune now."""
        shown = self._shown_target
        if (shown is None or self.controller.state is AppState.TUNING
                or any(Path(m.path).resolve() == shown for m in scan.models)):
            self.show_prompt()
            return
        self._reset()
        self._shown_target = None
        self.progress.setValue(0)
        self.progress.setFormat("not started")
        target = self.controller.selected_target
        now = (f"“Tune & serve” and “Re-tune” tune {Path(target).name} there" if target is not None
               else "it holds no model to tune")
        self._prompt = plain(f"The models folder changed to {scan.folder}: the results of {shown.name} were "
                             f"cleared; {now}.")
        self.step_label.setText(self._prompt)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """The Models tab may have selected another target since: name it."""
        self.show_prompt()
        super().showEvent(event)

    def _budget_s(self) -> int:
        return int(spin_value(self.budget) or 0)

    def _apply_budget(self) -> None:
        st = self.controller.settings
        if st.tune_budget_s != self._budget_s():
            try:
                self.controller.update_settings(st.replace(tune_budget_s=self._budget_s()))
            except Exception as exc:
                log.debug("budget setting refused", exc_info=True)
                self.step_label.setText(plain(exc))

    def _reset(self) -> None:
        """A new sweep: no bars, no decision, the progress bar from 0 again."""
        self.results.clear()
        self.never = []
        self.points = {}
        self.measured = []
        self.chart.set_rows([])
        self.set_decision(None)
        self._finished_line = None
        self.step_label.setText("Starting…")
        self._shown_fraction = 0.0
        self._shown_text = ""

    def set_decision(self, words: Rendered | None) -> None:
        """Show a decision: its plain first sentence, and the rest behind *Details* (collapsed); None: none yet."""
        self.decision_label.setText(plain(words.first) if words is not None else "No decision yet.")
        details = words.details if words is not None else ()
        self.details_label.setPlainText(plain("\n\n".join(details), keep="\n"))
        self.details_btn.setVisible(bool(details))
        self.details_btn.setChecked(False)
        self._show_details(False)

    def _show_details(self, shown: bool) -> None:
        self.details_btn.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.details_label.setVisible(shown and bool(self.details_label.toPlainText()))

    def on_error(self, message: str) -> None:
        """A *Tune & serve* that failed: its words replace the step line (and any "serving …" of a sweep before),
        the decision of the failed attempt is none."""
        if self.controller.state is not AppState.TUNING:
            return  # another step failed (a scan, a stop): the Serve tab and the status bar say it
        self._finished_line = None
        self.step_label.setText(plain(f"Tune & serve did not finish: {message}"))

    def on_restore_refused(self, message: str) -> None:
        """*Serve at start* did not serve a stale profile: why, with *Re-tune* enabled next to it."""
        self._finished_line = None
        self.step_label.setText(plain(message))
        self.on_state(self.controller.state)

    def _show_finished(self) -> None:
        """The last sweep's line, with what is served now (nothing, once the server stopped)."""
        if self._finished_line is None or self.controller.state is AppState.TUNING:
            return
        serving = self.controller.serving
        line = self._finished_line
        if serving is not None:
            line += f"; serving {serving.model_name} at {serving.endpoint_url}"
        self.step_label.setText(plain(line + "."))

    def start(self) -> None:
        """Start "Tune & serve"."""
        self._apply_budget()
        self._reset()
        self.controller.tune_and_serve()

    def retune(self) -> None:
        """Force a new sweep."""
        self._apply_budget()
        self._reset()
        self.controller.retune()

    def retune_on_served(self) -> None:
        """Start *Re-tune on recent requests* (a sweep on the served model's captured requests)."""
        self._apply_budget()
        self._reset()
        self.controller.recent.retune()

    def show_served_action(self) -> None:
        """*Re-tune on recent requests* is shown while captured requests exist for the served model (its count in
        the tooltip), enabled while no sweep runs."""
        n = self.controller.recent.count()
        self.served_btn.setVisible(n > 0)
        self.served_btn.setEnabled(n > 0 and self.controller.state is not AppState.TUNING)
        if n:
            self.served_btn.setToolTip(f"{RECENT_TIP} ({n} request{'' if n == 1 else 's'} kept)")

    def on_state(self, state: AppState) -> None:
        """Enable the buttons that make sense now."""
        tuning = state is AppState.TUNING
        # the File and tray menus' rule: while serving, "Tune & serve" tunes the selected target and serves it too
        self.start_btn.setEnabled(not tuning)
        self.retune_btn.setEnabled(not tuning and self.controller.can_retune())
        self.show_served_action()
        self.cancel_btn.setEnabled(tuning)
        self.budget.setEnabled(not tuning)
        if tuning:
            self._tick.start()
        else:
            self._tick.stop()
            self._last_progress = None
        if not tuning and self.progress.format() not in ("done", "saved profile"):
            if state is AppState.ERROR:
                self.progress.setFormat("failed")
            elif self.progress.value() < 1000:
                self.progress.setFormat("not started" if not self.results else "stopped")

    def on_event(self, ev) -> None:
        """Show one calibration event (progress, ETA, candidate result)."""
        p = flow.tune_progress(ev)
        if p.fraction is not None:
            self._last_progress = (time.monotonic(), p)
            self._show_progress(p.fraction, p.eta_s)
        if p.message:
            self.step_label.setText(plain(p.message))
        if p.never is not None and p.never not in self.never:
            self.never.append(p.never)
        if p.result is not None or p.never is not None:
            if p.result is not None:
                self.results[p.result[0]] = p.result
                self.points.setdefault(p.result[0], []).append(p.result[1])  # one point per launch
                self.measured.append(ev.measurement)
            rows = sorted(self.results.values(), key=lambda r: (not r[3], -r[1]))
            self.chart.set_rows(rows, never=self.never, points=self.points,
                                drafted=flow.drafted_tokens(self.measured))

    #: While a sweep runs the bar stops short of 100 % (only the result fills it).
    MAX_WHILE_TUNING = 0.99

    def _show_progress(self, fraction: float | None, eta_s: float | None, overdue: bool = False) -> None:
        """Show ``fraction`` (never less than already shown, never 100 % before the result) and the ETA;
        ``overdue``: the last estimate ran out while the current step is still running."""
        if fraction is None:
            return
        fraction = min(max(fraction, self._shown_fraction), self.MAX_WHILE_TUNING)
        self._shown_fraction = fraction
        self.progress.setValue(int(fraction * 1000))
        pct = f"{int(fraction * 100)}%"  # floor: 99.6 % reads 99 %, never a rounded-up 100 %
        if overdue:
            self._shown_text = f"{pct}, taking longer than estimated"
            self.progress.setFormat(f"{pct}  taking longer than estimated")
            return
        if eta_s is not None and eta_s < 0.5 and fraction < 0.9:
            eta_s = None  # nothing planned yet (or the estimate ran out early): unknown, not "finishing"
        self._shown_text = ", ".join(t for t in (pct, format_eta(eta_s)) if t)
        self.progress.setFormat(f"{pct}  {format_eta(eta_s)}".strip())

    def progress_text(self) -> str | None:
        """The running sweep's progress as this tab's bar shows it now ("13%, about 2 min 05 s left"), for the
        tray's *Serve* menu (one figure in both places); None while no sweep runs or before its first estimate."""
        if self.controller.state is not AppState.TUNING:
            return None
        return self._shown_text or None

    def _count_down(self) -> None:
        """Once a second while tuning: move the bar and the ETA on from the last event's estimate."""
        if self._last_progress is None:
            return
        t, p = self._last_progress
        frac, eta = p.at(time.monotonic() - t)
        overdue = bool(p.eta_s) and eta is not None and eta <= 0.0
        self._show_progress(frac, eta, overdue=overdue)

    def on_done(self, result) -> None:
        """Show the decision: its first sentence, the rest behind *Details*. A saved profile served again says so
        ("Using the saved profile of DATE"), never "tuning finished": nothing was tuned."""
        self._tick.stop()  # the countdown must not overwrite "done" before the state change arrives
        self._shown_target = Path(result.target_path).resolve() if result is not None else None
        self._last_progress = None
        self.progress.setValue(1000)
        if result is not None and result.reused:
            self.progress.setFormat("saved profile")
            self._finished_line = f"Using the saved profile of {flow.profile_date(result.profile)} (still fresh)"
        else:
            self.progress.setFormat("done")
            took = result.elapsed_s if result is not None else None
            self._finished_line = "Tuning finished" + (f" in {took:.0f} s" if took else "")
        self._show_finished()
        self.set_decision(flow.decision_words(result))
        rows = flow.result_rows(result) if result is not None else []
        if rows:
            # the decision's pooled figures replace the live per-launch ones (chart = decision)
            self.results = {r[0]: r for r in rows}
        measured = flow.sweep_measurements(result)
        if measured:  # a fresh tune's launches, or a saved profile's as it kept them
            self.never = flow.never_drafted(result)
            self.points = flow.launch_points(result)
        elif measured is None:  # a profile saved without its launches: the bars say so (no points)
            self.never, self.points = [], {}
        self.measured = list(measured or ())
        d = result.decision if result is not None else None
        win_label = None
        if d is not None and d.winner is not None and d.winner.label in self.results:
            win_label = d.winner.label if not self.results[d.winner.label][3] else None
        # baseline first, then the chosen candidate, then the rest by speed
        self.chart.set_rows(sorted(self.results.values(), key=lambda r: (not r[3], r[0] != win_label, -r[1])),
                            winner=win_label, never=self.never, points=self.points,
                            launches_unknown=measured is None, drafted=flow.drafted_tokens(self.measured))
