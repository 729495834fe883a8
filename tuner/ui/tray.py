"""The tray icon and its menu (rebuilt every time it opens, from the controller's current state).

The *Serve* submenu lists the folder's targets (the controller's :attr:`~tuner.ui.controller.AppController.targets`,
read in a worker): a tuned one with its decision in a few words, an untuned one as "tune and serve"; the one
served now is checked, and each says whether the router has it loaded or asleep. Picking one serves it
(:meth:`~tuner.ui.controller.AppController.serve_target`: the served router loads it, else it is tuned or its
profile reused). While a sweep runs the submenu shows its progress and *Cancel tuning*.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from tuner.ui import flow
from tuner.ui.controller import AppController, capture_text
from tuner.ui.icons import state_icon
from tuner.ui.live_advice import LiveAdvice, retune_action_text
from tuner.ui.plaintext import notification_body, plain, tooltip
from tuner.ui.recent_requests import TIP as RECENT_TIP
from tuner.ui.state import AppState

#: Menu entries in order (text of the action), for tests and docs.
MENU_ITEMS = ("Tune & serve", "Serve", "Open Draftwise", "Chat…", "Start server", "Stop server", "Copy endpoint URL",
              "Re-tune", "Re-tune on recent requests", "Quit")
"""``Re-tune on recent requests`` is there only while captured requests exist for the served model; it reads
"Re-tune on recent requests (about N s)" (N: the sweep budget) while the live prediction from the served requests
says another configuration would be faster, or a longer draft might pay (:mod:`tuner.ui.live_advice`)."""
#: The router's word for a model's process → what the *Serve* menu adds after its name.
_STATUS_WORDS = {"loaded": "loaded", "sleeping": "asleep, memory freed", "loading": "loading…"}


def _menu_text(text: str) -> str:
    """A menu entry's text shown as written (a single "&" would mark a mnemonic)."""
    return text.replace("&", "&&")


def progress_words(progress: flow.TuneProgress | None, seconds_later: float, target: str | None) -> str:
    """The sweep's progress in the tray: "Tuning X: 45 %, about 2 min left" (what is known of it)."""
    what = f"Tuning {target}" if target else "Tuning"
    if progress is None:
        return f"{what}…"
    fraction, eta = progress.at(seconds_later)
    parts = [f"{fraction:.0%}"] if fraction is not None else []
    if eta is not None:
        parts.append(f"about {eta:.0f} s left" if eta < 90 else f"about {eta / 60:.0f} min left")
    return f"{what}: {', '.join(parts)}" if parts else f"{what}…"


class Tray:
    """Owns the ``QSystemTrayIcon``; ``available`` is False where the desktop has no tray.

    Args:
        controller: the app controller (state, actions).
        show_window: callable that shows and raises the main window.
        quit_app: callable that stops the server and quits.
        show_chat: callable that shows the window on the Chat tab (None: "Chat…" opens the window).
    """

    def __init__(self, controller: AppController, show_window, quit_app, show_chat=None, progress=None) -> None:
        self.controller = controller
        self.progress = progress
        """Callable → the window's progress words of the running sweep (``TuneTab.progress_text``), or None."""
        self._progress_action: QAction | None = None
        self._progress_timer = QTimer()  # while the menu is open, its progress line follows the window's
        self._progress_timer.setInterval(1000)
        self._progress_timer.timeout.connect(self._refresh_progress)
        self.show_window = show_window
        self.show_chat = show_chat or show_window
        self.quit_app = quit_app
        self.available = QSystemTrayIcon.isSystemTrayAvailable()
        self.last_notification: tuple[str, str] | None = None
        self._progress: tuple[flow.TuneProgress, float] | None = None  # the sweep's last progress, when it came
        self.live = LiveAdvice(controller)  # the live prediction's offer of a re-tune; it never starts one itself
        self.icon = QSystemTrayIcon(state_icon(controller.state))
        self.menu = QMenu()
        self.serve_menu = QMenu("Serve", self.menu)  # one submenu, refilled with the menu (no leak per opening)
        self.menu.aboutToShow.connect(self.rebuild_menu)
        self.menu.aboutToShow.connect(self._progress_timer.start)
        self.menu.aboutToHide.connect(self._progress_timer.stop)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._on_activated)
        self.icon.messageClicked.connect(controller.serve_at_start.clicked)  # e.g. the re-tune a stale profile offers
        self.rebuild_menu()
        self.refresh()
        controller.state_changed.connect(lambda _s: self.refresh())
        controller.telemetry.connect(lambda _t: self.icon.setToolTip(tooltip(controller.tooltip())))
        controller.sleep_changed.connect(lambda _s: self.icon.setToolTip(tooltip(controller.tooltip())))
        controller.capture_changed.connect(lambda: self.icon.setToolTip(tooltip(controller.tooltip())))
        controller.notify.connect(self.notify)
        controller.telemetry.connect(lambda _t: self.advise())
        controller.tune_event.connect(self._on_tune_event)
        controller.state_changed.connect(self._forget_progress)
        if self.available:
            self.icon.show()

    def refresh(self) -> None:
        """Update icon and tooltip from the controller's state."""
        self.icon.setIcon(state_icon(self.controller.state))
        self.icon.setToolTip(tooltip(self.controller.tooltip()))  # model names and errors: never markup

    def rebuild_menu(self) -> None:
        """Recreate the menu for the current state (connected to ``aboutToShow``)."""
        c = self.controller
        m = self.menu
        m.clear()
        busy = c.state is AppState.TUNING
        served = c.serving
        serving = served is not None

        a = m.addAction("Tune && serve")  # "&&" shows one "&" (a single "&" marks a mnemonic)
        a.setEnabled(not busy)  # while serving: tunes the selected target and serves it too
        a.triggered.connect(c.tune_and_serve)
        self._add_serve_menu(m)
        if busy:
            m.addAction("Cancel tuning").triggered.connect(c.cancel)
        m.addAction("Open Draftwise").triggered.connect(self.show_window)
        a = m.addAction("Chat…")
        a.setEnabled(serving)
        a.setToolTip("Talk to the served model" if serving else "Start the server first")
        a.triggered.connect(self.show_chat)
        m.addSeparator()
        if serving:
            m.addAction("Stop server").triggered.connect(c.stop_server)
        else:
            a = m.addAction("Start server")
            a.setEnabled(not busy)
            a.triggered.connect(c.start_server)
        a = m.addAction("Copy endpoint URL")
        a.setEnabled(serving)
        a.triggered.connect(self.copy_endpoint)
        a = m.addAction("Re-tune")
        # nothing to re-tune before a first sweep or a served profile
        a.setEnabled(c.can_retune())
        a.triggered.connect(c.retune)
        if c.recent.count() > 0:  # only with captured requests of the served model
            offer = self.live.offer() is not None
            a = m.addAction(retune_action_text(self.live.budget_s()) if offer else "Re-tune on recent requests")
            a.setToolTip(RECENT_TIP)
            a.setEnabled(not busy)
            a.triggered.connect(c.recent.retune)
        m.addSeparator()
        if served is not None:
            asleep = c.sleep.sleeping
            paused = " — paused while tuning" if c.paused_for_retune else ""
            info = m.addAction((f"Serving {plain(served.model_name)}{paused}"
                                + (" — sleeping, memory freed" if asleep else "")).replace("&", "&&"))  # no mnemonic
            info.setEnabled(False)
            capturing = capture_text(c.captures.status())
            if capturing is not None:  # the indicator while served requests are kept
                m.addAction(capturing[0].upper() + capturing[1:]).setEnabled(False)
        m.addAction("Quit").triggered.connect(self.quit_app)

    def actions(self) -> dict[str, QAction]:
        """The current menu's actions by text (separators left out)."""
        return {a.text().replace("&&", "&"): a for a in self.menu.actions() if not a.isSeparator()}

    def serve_actions(self) -> dict[str, QAction]:
        """The *Serve* submenu's actions by text (separators left out; empty before the menu was built)."""
        return {a.text().replace("&&", "&"): a for a in self.serve_menu.actions() if not a.isSeparator()}

    def _add_serve_menu(self, m: QMenu) -> None:
        """The *Serve* submenu (see the module docstring)."""
        c = self.controller
        sub = self.serve_menu
        sub.clear()
        m.addMenu(sub)
        busy = c.state is AppState.TUNING
        self._progress_action = None
        if busy:
            self._progress_action = sub.addAction(_menu_text(plain(self.progress_line())))
            self._progress_action.setEnabled(False)
            sub.addAction("Cancel tuning").triggered.connect(c.cancel)
            sub.addSeparator()
        router = c.runner.router
        views = {v.model_id: v for v in router.models()} if router is not None else {}
        served = c.serving.model_id if c.serving is not None else None
        for t in c.targets:
            v = views.get(t.model_id)
            text = f"{t.name} — {t.words}" if t.tuned else f"{t.name} — tune and serve"
            status = _STATUS_WORDS.get(v.status, "") if v is not None else ""
            if v is not None and v.given_up:
                status = f"could not be served: {v.problem}"
            a = sub.addAction(_menu_text(plain(f"{text} ({status})" if status else text)))
            a.setCheckable(True)
            a.setChecked(t.model_id == served or (c.serving is not None and t.path == c.serving.target_path))
            a.setEnabled(not busy and not (v is not None and v.given_up))
            a.setToolTip(tooltip(t.problem or (v.problem if v is not None else "")))
            a.triggered.connect(lambda _checked=False, path=t.path: c.serve_target(path))
        if not c.targets:
            sub.addAction("No models yet: choose a folder in the Models tab").setEnabled(False)

    def progress_line(self) -> str:
        """The *Serve* menu's progress line: the window's figure while it shows one (its bar never moves back, so
        the two never disagree), else the sweep's last event's."""
        c = self.controller
        target = c.selected_target.name if c.selected_target is not None else None
        shown = self.progress() if self.progress is not None else None
        if shown:
            return f"Tuning {target}: {shown}" if target else f"Tuning: {shown}"
        seconds = time.monotonic() - self._progress[1] if self._progress is not None else 0.0
        return progress_words(self._progress[0] if self._progress else None, seconds, target)

    def _refresh_progress(self) -> None:
        """Once a second while the menu is open: the progress line again."""
        if self._progress_action is not None and self.controller.state is AppState.TUNING:
            self._progress_action.setText(_menu_text(plain(self.progress_line())))

    def _on_tune_event(self, event) -> None:
        """Keep the sweep's last progress for the *Serve* menu (the flow's own status steps carry none)."""
        progress = flow.tune_progress(event)
        if progress.fraction is not None or progress.eta_s is not None:
            self._progress = (progress, time.monotonic())

    def _forget_progress(self, state: AppState) -> None:
        if state is not AppState.TUNING:
            self._progress = None

    def copy_endpoint(self) -> None:
        """Put the endpoint URL on the clipboard."""
        url = self.controller.endpoint_url()
        if url:
            QGuiApplication.clipboard().setText(url)

    def notify(self, title: str, message: str) -> None:
        """Desktop notification through the tray (not shown without a tray; the last one is kept
        in :attr:`last_notification` as ``(title, message)`` as shown, either way): the title escaped
        (:func:`tuner.ui.plaintext.plain`), the message escaped and HTML-escaped, since notification servers
        read markup in it (:func:`tuner.ui.plaintext.notification_body`)."""
        title, message = plain(title), notification_body(message)
        self.last_notification = (title, message)
        if self.available and QSystemTrayIcon.supportsMessages():
            self.icon.showMessage(title, message, state_icon(self.controller.state), 10000)

    def advise(self) -> None:
        """One notification when the live prediction first calls for a re-tune (:meth:`LiveAdvice.notice`); the
        re-tune itself runs only from the menu."""
        text = self.live.notice()
        if text is None:
            return
        if self.controller.recent.count() > 0:
            text += f" The tray menu offers {retune_action_text(self.live.budget_s())}."
        else:
            text += " Keep the served requests (Settings) to re-tune on them."
        self.notify("The served requests could run faster", text)

    def _on_activated(self, reason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_window()

    def hide(self) -> None:
        """Remove the icon (on quit)."""
        self.icon.hide()
