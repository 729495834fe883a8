"""Chat tab: talk to the served model through its OpenAI-compatible endpoint.

The reply is streamed (``tuner.server.client.ServerClient.chat_stream``, the project's one HTTP
adapter) in a worker thread; the GUI thread only appends the new text at the end of the transcript, a few
times a second (the transcript is never laid out again while a reply streams). Under each reply: its generated
tokens, its generation tokens/s and, when the server speculates, the draft tokens accepted /
drafted in that reply — the figures of one reply, not a speedup measurement (the Tune tab's sweep
measures speedups, side by side with the baseline).

Sampling: ``temperature``, ``top_p``, ``top_k``, ``min_p`` come from the settings when the settings
have those keys (the served-workload settings), else llama-server's own defaults (b11434 ``--help``,
declared in :mod:`tuner.options`); the controls here change them for this chat only.

The API key (LAN mode) is the served one (``ServingInfo.api_key``), sent as a Bearer header.
Chats are stored only with "Keep chat history" (:mod:`tuner.chat_history`, a 0600 file).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QKeySequence, QShortcut, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from tuner import chat_history
from tuner.options import SERVER_DEFAULT_SAMPLING, option
from tuner.ui.controller import AppController
from tuner.ui.options import spin_box
from tuner.ui.plaintext import plain, plain_label, rich, rich_label
from tuner.ui.workers import CallWorker

log = logging.getLogger(__name__)


#: llama-server b11434's sampling defaults (``--help``), used when the settings have no such key: a view of
#: :data:`tuner.options.SERVER_DEFAULT_SAMPLING`.
SAMPLING_DEFAULTS = SERVER_DEFAULT_SAMPLING
DEFAULT_MAX_TOKENS = int(option("chat_max_tokens").default or 0)
#: Coalesce streamed text into one append per this many ms: the streamed text is appended at the end of the
#: transcript, never laid out again from the start (a full re-render while a reply streamed took the CPU
#: llama-server needed: replies showed a third of a plain client's tokens/s on 2 cores).
RENDER_MS = 60

NOT_SERVING = "Not serving: start the server (Tune & serve, or the Serve tab) to chat with the model."
BASE_MODEL_NOTE = (
    "{name} has no chat template: it is a base model, not one tuned for chat. llama-server wraps your messages in "
    "a generic chat format (ChatML) the model does not know, so replies may wander or show tags such as "
    "<|im_start|>. Other programs can send it plain text through /v1/completions instead.")
"""The Chat tab's note for a base model (``draftwise serve`` prints the same finding: common/chat.cpp
``common_chat_templates_init`` falls back to ChatML when the GGUF has no template)."""
ONE_REPLY_NOTE = (
    "Figures under a reply are for that one reply: its length, prompt and sampling vary, so it is not "
    "a speedup measurement (the Tune tab compares against the baseline side by side)."
)


def sampling_from_settings(settings: Any) -> dict[str, float]:
    """``{temperature, top_p, top_k, min_p}`` from ``settings`` where it has the key, else
    :data:`SAMPLING_DEFAULTS`."""
    out: dict[str, float] = {}
    for key, default in SAMPLING_DEFAULTS.items():
        v = getattr(settings, key, None)
        out[key] = default if v is None else v
    return out


def reply_figures(timings: dict | None, speculative: bool, n_chars: int = 0) -> str:
    """The line under one reply, from its ``timings`` (server-common.cpp ``server_slot_stats::to_json``).

    Args:
        timings: the reply's ``timings`` dict, or None (the stream was stopped before the end).
        speculative: the served configuration uses speculation.
        n_chars: characters received (for a stopped reply, which has no timings).

    Returns:
        e.g. ``"48 tokens · 31.2 tokens/s · draft tokens accepted 30 / drafted 40"``;
        ``"stopped after 120 characters (no timings for a stopped reply)"``.
    """
    if not timings:
        return f"stopped after {n_chars} characters (no timings for a stopped reply)"
    parts = []
    n = timings.get("predicted_n")
    if isinstance(n, (int, float)):
        parts.append(f"{int(n)} token{'' if int(n) == 1 else 's'}")
    tps = timings.get("predicted_per_second")
    if isinstance(tps, (int, float)) and (not isinstance(n, (int, float)) or n > 1):
        parts.append(f"{tps:.1f} tokens/s")
    drafted = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    if isinstance(drafted, (int, float)) and drafted > 0:
        parts.append(f"draft tokens accepted {int(accepted or 0)} / drafted {int(drafted)}")
    elif speculative:
        parts.append("no draft tokens in this reply")
    else:
        parts.append("no speculation")
    return " · ".join(parts)


class ChatTab(QWidget):
    """A conversation with the served model.

    Signals:
        reply_done(dict): a reply ended: ``{"text", "timings" (dict|None), "stopped" (bool),
            "figures" (str), "error" (str|None)}``.
    """

    reply_done = Signal(dict)

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        self.messages: list[dict[str, str]] = []
        self.figures: list[str] = []  # one line per assistant message
        self._worker: CallWorker | None = None
        self._reply = ""
        self._pending = ""
        """Text streamed since the last append to the transcript."""
        self._placeholder_at: int | None = None
        """Where the "…" of a reply with no text yet starts (it is replaced by the first text)."""
        self._dirty = False
        self._started_unix = time.time()
        self._stopped = False

        lay = QVBoxLayout(self)
        self.header = rich_label(QLabel(rich(NOT_SERVING)))  # its values escaped (rich)
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.header)

        samp = QHBoxLayout()
        s = sampling_from_settings(controller.settings)
        self.temp_spin = spin_box("temperature", s["temperature"], unset=False)
        self.top_p_spin = spin_box("top_p", s["top_p"], unset=False)
        self.min_p_spin = spin_box("min_p", s["min_p"], unset=False)
        self.top_k_spin = spin_box("top_k", s["top_k"], unset=False)
        self.max_tokens_spin = spin_box("chat_max_tokens", DEFAULT_MAX_TOKENS, unset=False)
        for label, w in (("Temperature", self.temp_spin), ("top-p", self.top_p_spin), ("top-k", self.top_k_spin),
                         ("min-p", self.min_p_spin), ("Max tokens", self.max_tokens_spin)):
            samp.addWidget(QLabel(label + ":"))
            samp.addWidget(w)
        samp.addStretch(1)
        self.history_check = QCheckBox("Keep chat history")
        self.history_check.setToolTip(f"Save conversations to {chat_history.history_path()} (readable only by you)")
        self.history_check.setChecked(bool(getattr(controller.settings, "keep_chat_history", False)))
        self.history_check.toggled.connect(self._toggle_history)
        samp.addWidget(self.history_check)
        lay.addLayout(samp)

        self.transcript = QTextBrowser()
        self.transcript.setOpenExternalLinks(False)
        self.transcript.setPlaceholderText("The conversation appears here.")
        lay.addWidget(self.transcript, 1)
        self.note = QLabel(ONE_REPLY_NOTE)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color:#6b7280")
        lay.addWidget(self.note)
        self.base_note = plain_label(QLabel())  # "<|im_start|>" is text, not a tag; the note names the model file
        self.base_note.setWordWrap(True)
        self.base_note.setStyleSheet("background:#fef3c7; color:#78350f; padding:6px; border-radius:4px")
        self.base_note.setVisible(False)
        lay.insertWidget(1, self.base_note)  # under the header: read before the first message

        row = QHBoxLayout()
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message the model (Ctrl+Enter sends)")
        self.input.setFixedHeight(self.input.fontMetrics().lineSpacing() * 3 + 14)
        row.addWidget(self.input, 1)
        col = QVBoxLayout()
        self.send_btn = QPushButton("Send")
        self.send_btn.clicked.connect(self.send)
        col.addWidget(self.send_btn)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.clicked.connect(self.stop)
        col.addWidget(self.stop_btn)
        self.new_btn = QPushButton("New chat")
        self.new_btn.clicked.connect(self.new_chat)
        col.addWidget(self.new_btn)
        row.addLayout(col)
        lay.addLayout(row)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self.input).activated.connect(self.send)
        self.status = plain_label(QLabel())  # errors name files and quote the server
        self.status.setStyleSheet("color:#b91c1c")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)

        self._render_timer = QTimer(self)
        self._render_timer.setInterval(RENDER_MS)
        self._render_timer.timeout.connect(self._render_if_dirty)
        controller.server_changed.connect(lambda _i: self.refresh())
        self.refresh()

    # ------------------------------------------------------------ state
    @property
    def streaming(self) -> bool:
        """True while a reply is being received."""
        return self._worker is not None

    def model_id(self) -> str | None:
        """The id the chat requests name (the served ``--alias``), None when not serving."""
        info = self.controller.serving
        if info is None:
            return None
        return getattr(info, "model_id", None) or info.model_name

    def refresh(self) -> None:
        """Header and buttons for the current serving state."""
        info = self.controller.serving
        if info is None:
            self.header.setText(rich(NOT_SERVING))
        else:
            key = " · API key sent (LAN mode)" if info.api_key else ""
            self.header.setText(
                f"Chatting with <b>{rich(self.model_id() or '')}</b> ({rich(info.spec_label)}) "
                f"at {rich(info.endpoint_url)}{key}"
            )
        base = info is not None and info.base_model
        self.base_note.setText(plain(BASE_MODEL_NOTE.format(name=info.model_name)) if base and info is not None else "")
        self.base_note.setVisible(base)
        self.send_btn.setEnabled(info is not None and not self.streaming)
        self.stop_btn.setEnabled(self.streaming)
        self.new_btn.setEnabled(not self.streaming)

    def sampling(self) -> dict[str, float]:
        """The request's sampling fields as set in the controls."""
        return {
            "temperature": round(self.temp_spin.value(), 2),
            "top_p": round(self.top_p_spin.value(), 2),
            "top_k": int(self.top_k_spin.value()),
            "min_p": round(self.min_p_spin.value(), 2),
        }

    # ------------------------------------------------------------ actions
    def send(self, text: str | None = None) -> bool:
        """Send ``text`` (default: the input box) and stream the reply; False when not possible
        (not serving, already streaming, empty text)."""
        info = self.controller.serving
        if text is None or isinstance(text, bool):
            text = self.input.toPlainText()
        text = text.strip()
        if info is None or self.streaming or not text:
            return False
        self.input.clear()
        self.status.setText("")
        self.messages.append({"role": "user", "content": text})
        self._reply = ""
        self._stopped = False
        messages = [dict(m) for m in self.messages]
        params: dict[str, Any] = dict(self.sampling())  # chat_stream's **params: sampling fields and the model
        if info.model_id:
            params["model"] = info.model_id
        max_tokens = int(self.max_tokens_spin.value())
        base_url, api_key = info.base_url, info.api_key

        def job(on_event, cancel):
            from tuner.server import ServerClient

            timings = None
            with ServerClient(base_url, api_key=api_key) as client:
                for d in client.chat_stream(messages, max_tokens, cancel=cancel, **params):
                    if d.text:
                        on_event(d.text)
                    if d.timings is not None:
                        timings = d.timings
            return {"timings": None if cancel.is_set() else timings, "stopped": cancel.is_set()}

        w = CallWorker(job, "chat")
        w.event.connect(self._on_text)
        w.done.connect(lambda r, w=w: self._finish(w, r.get("timings"), bool(r.get("stopped")), None))
        w.failed.connect(lambda exc, w=w: self._finish(w, None, False, str(exc)))
        self._worker = w
        self._start_reply()
        self._render_timer.start()
        w.start()
        self.refresh()
        return True

    def stop(self) -> None:
        """Stop the reply being streamed (the connection is closed; llama-server stops generating)."""
        if self._worker is not None:
            self._stopped = True
            self._worker.cancel()
            self.stop_btn.setEnabled(False)

    def new_chat(self) -> None:
        """Start an empty conversation (the previous one stays in the history file when kept)."""
        if self.streaming:
            return
        self.messages = []
        self.figures = []
        self._started_unix = time.time()
        self._render()

    def _toggle_history(self, on: bool) -> None:
        c = self.controller
        try:
            if hasattr(c.settings, "keep_chat_history"):
                c.update_settings(c.settings.replace(keep_chat_history=on))
            if on:
                self._save_history()
            else:
                chat_history.delete_history()
        except Exception as exc:
            log.warning("chat history setting failed", exc_info=True)
            self.status.setText(plain(f"Chat history: {exc}"))

    def _save_history(self) -> None:
        if not self.history_check.isChecked() or not self.messages:
            return
        try:
            chat_history.save_conversation(
                {"started_unix": self._started_unix, "model": self.model_id() or "", "messages": list(self.messages)}
            )
        except OSError as exc:
            self.status.setText(plain(f"Chat history not saved: {exc}"))

    # ------------------------------------------------------------ streaming
    def _on_text(self, text: str) -> None:
        if self._stopped:
            return  # the stop button was pressed: chunks still in the queue are not shown
        self._reply += text
        self._pending += text
        self._dirty = True

    def _render_if_dirty(self) -> None:
        """Append the text streamed since the last tick at the end of the reply (every :data:`RENDER_MS`): the
        transcript is never laid out again while a reply streams."""
        if not self._dirty:
            return
        self._dirty = False
        text, self._pending = self._pending, ""
        if not text:
            return
        follow = self._at_bottom()
        cur = self._end()
        if self._placeholder_at is not None:  # the first text replaces the "…"
            cur.setPosition(self._placeholder_at, QTextCursor.MoveMode.KeepAnchor)
            cur.removeSelectedText()
            self._placeholder_at = None
        cur.insertText(text, QTextCharFormat())
        if follow:
            self._scroll_down()

    def _finish(self, worker: CallWorker, timings: dict | None, stopped: bool, error: str | None) -> None:
        if worker is not self._worker:
            return
        worker.wait(2000)
        self._render_if_dirty()
        self._worker = None
        self._render_timer.stop()
        stopped = stopped or self._stopped
        speculative = bool(self.controller.serving and self.controller.serving.spec_label != "no speculation")
        if error:
            figures = "no reply: " + error
            self.status.setText(plain(error))
        elif stopped:
            figures = reply_figures(None, speculative, len(self._reply))
        else:
            figures = reply_figures(timings, speculative)
        self.messages.append({"role": "assistant", "content": self._reply})
        self.figures.append(figures)
        reply = self._reply
        self._reply = ""
        self._pending = ""
        if self._placeholder_at is not None:  # nothing arrived: the "…" goes
            cur = self._end()
            cur.setPosition(self._placeholder_at, QTextCursor.MoveMode.KeepAnchor)
            cur.removeSelectedText()
            self._placeholder_at = None
        self._append_figures(figures)
        self._scroll_down()
        self.refresh()
        self._save_history()
        self.reply_done.emit({"text": reply, "timings": timings, "stopped": stopped, "figures": figures,
                              "error": error})

    # ------------------------------------------------------------ the transcript
    def _end(self) -> QTextCursor:
        cur = QTextCursor(self.transcript.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def _at_bottom(self) -> bool:
        sb = self.transcript.verticalScrollBar()
        return sb.value() >= sb.maximum() - 4

    def _scroll_down(self) -> None:
        sb = self.transcript.verticalScrollBar()
        sb.setValue(sb.maximum())

    def _append_turn(self, who: str, color: str, text: str) -> QTextCursor:
        """Append a turn at the end (its name in bold, then its text as plain text); returns the cursor after it."""
        cur = self._end()
        if not self.transcript.document().isEmpty():
            cur.insertBlock()
            cur.insertBlock()  # a blank line between turns
        bold = QTextCharFormat()
        bold.setFontWeight(QFont.Weight.Bold)
        bold.setForeground(QColor(color))
        cur.insertText(who, bold)
        cur.insertBlock()
        cur.insertText(text, QTextCharFormat())
        return cur

    def _append_figures(self, line: str) -> None:
        """The small grey line under a reply."""
        cur = self._end()
        cur.insertBlock()
        grey = QTextCharFormat()
        grey.setForeground(QColor("#6b7280"))
        grey.setFontPointSize(max(6.0, self.transcript.font().pointSizeF() * 0.85))
        cur.insertText(line, grey)

    def _start_reply(self) -> None:
        """The user's turn just sent and the model's, empty ("…" until its first text)."""
        self._append_turn("You", "#2563eb", self.messages[-1]["content"])
        cur = self._append_turn("Model", "#16a34a", "")
        self._placeholder_at = cur.position()
        cur.insertText("…", QTextCharFormat())
        self._scroll_down()

    def _render(self) -> None:
        """Lay the whole transcript out again (a new chat; never while a reply streams: that appends)."""
        self._dirty = False
        self.transcript.clear()
        fig = iter(self.figures)
        for m in self.messages:
            if m["role"] == "user":
                self._append_turn("You", "#2563eb", m["content"])
            else:
                self._append_turn("Model", "#16a34a", m["content"])
                self._append_figures(next(fig, ""))
        self._scroll_down()

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Stop a running reply and wait for its thread (on quit)."""
        w = self._worker
        if w is not None:
            w.cancel()
            w.wait(timeout_ms)
