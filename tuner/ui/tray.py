"""The tray icon and its menu (rebuilt every time it opens, from the controller's current state)."""

from __future__ import annotations

from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from tuner.ui.controller import RETUNE_ON_SERVED_TIP, AppController, capture_text
from tuner.ui.icons import state_icon
from tuner.ui.plaintext import notification_body, plain, tooltip
from tuner.ui.state import AppState

#: Menu entries in order (text of the action), for tests and docs.
MENU_ITEMS = ("Tune & serve", "Open Draftwise", "Chat…", "Start server", "Stop server", "Copy endpoint URL", "Re-tune",
              "Re-tune on recent requests", "Quit")
"""``Re-tune on recent requests`` is there only while captured requests exist for the served model."""


class Tray:
    """Owns the ``QSystemTrayIcon``; ``available`` is False where the desktop has no tray.

    Args:
        controller: the app controller (state, actions).
        show_window: callable that shows and raises the main window.
        quit_app: callable that stops the server and quits.
        show_chat: callable that shows the window on the Chat tab (None: "Chat…" opens the window).
    """

    def __init__(self, controller: AppController, show_window, quit_app, show_chat=None) -> None:
        self.controller = controller
        self.show_window = show_window
        self.show_chat = show_chat or show_window
        self.quit_app = quit_app
        self.available = QSystemTrayIcon.isSystemTrayAvailable()
        self.last_notification: tuple[str, str] | None = None
        self.icon = QSystemTrayIcon(state_icon(controller.state))
        self.menu = QMenu()
        self.menu.aboutToShow.connect(self.rebuild_menu)
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
        a.setEnabled(not busy and not serving)
        a.triggered.connect(c.tune_and_serve)
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
        if c.recent_requests() > 0:  # only with captured requests of the served model
            a = m.addAction("Re-tune on recent requests")
            a.setToolTip(RETUNE_ON_SERVED_TIP)
            a.setEnabled(not busy)
            a.triggered.connect(c.retune_on_served)
        m.addSeparator()
        if served is not None:
            asleep = c.sleep.sleeping
            info = m.addAction((f"Serving {plain(served.model_name)}"
                                + (" — sleeping, memory freed" if asleep else "")).replace("&", "&&"))  # no mnemonic
            info.setEnabled(False)
            capturing = capture_text(c.capture_status())
            if capturing is not None:  # the indicator while served requests are kept
                m.addAction(capturing[0].upper() + capturing[1:]).setEnabled(False)
        m.addAction("Quit").triggered.connect(self.quit_app)

    def actions(self) -> dict[str, QAction]:
        """The current menu's actions by text (separators left out)."""
        return {a.text().replace("&&", "&"): a for a in self.menu.actions() if not a.isSeparator()}

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

    def _on_activated(self, reason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_window()

    def hide(self) -> None:
        """Remove the icon (on quit)."""
        self.icon.hide()
