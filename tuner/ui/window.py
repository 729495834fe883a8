"""The main window: tabs Models / Prompts / Tune / Serve / Chat / Monitor, a status bar, and the one-line
hint shown when the desktop has no system tray."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QTabWidget, QVBoxLayout, QWidget

from tuner.ui.controller import AppController
from tuner.ui.icons import state_icon
from tuner.ui.plaintext import plain
from tuner.ui.state import AppState
from tuner.ui.tab_chat import ChatTab
from tuner.ui.tab_models import ModelsTab
from tuner.ui.tab_monitor import MonitorTab
from tuner.ui.tab_prompts import PromptsTab
from tuner.ui.tab_serve import ServeTab
from tuner.ui.tab_tune import TuneTab

log = logging.getLogger(__name__)


NO_TRAY_HINT = (
    "No system tray found on this desktop: Draftwise keeps running in this window; "
    "closing it minimises instead of quitting (use File ▸ Quit)."
)

TAB_NAMES = ("Models", "Prompts", "Tune", "Serve", "Chat", "Monitor")


def docs_path() -> Path | None:
    """The README of the Draftwise checkout this app runs from (``pip install -e .``, the README's set-up), None
    where it is not beside the package (a wheel or a bundle without it)."""
    import tuner

    readme = Path(tuner.__file__).resolve().parent.parent / "README.md"
    return readme if readme.is_file() else None


def about_text() -> str:
    """Help ▸ About's words (rich text): the version, what Draftwise does, a link to the documentation and the
    folders it keeps its settings, profiles and log in."""
    import html

    from tuner import __version__, paths
    from tuner.logs import log_path

    readme = docs_path()
    docs = (f'<a href="{QUrl.fromLocalFile(str(readme)).toString()}">{html.escape(str(readme))}</a> (set-up, using '
            "the app, uninstalling and upgrading, troubleshooting)" if readme is not None
            else "README.md in the Draftwise source folder")

    def folder(p: Path) -> str:
        return f'<a href="{QUrl.fromLocalFile(str(p)).toString()}">{html.escape(str(p))}</a>'

    return (f"<b>Draftwise {html.escape(__version__)}</b><br>"
            "Finds out whether speculative decoding makes llama.cpp's llama-server faster on this machine, and "
            "serves the fastest configuration (often the model alone).<br><br>"
            f"Documentation: {docs}<br>"
            f"Settings: {folder(paths.config_dir())}<br>"
            f"Profiles: {folder(paths.profiles_dir())}<br>"
            f"Log: {folder(log_path().parent)}")


class MainWindow(QMainWindow):
    """The Draftwise window (menus: File ▸ Tune & serve / Stop server / Quit; Help ▸ Open log folder / About).

    Args:
        controller: the app controller.
        tray_available: False → show :data:`NO_TRAY_HINT` and minimise on close instead of hiding.
        quit_app: callable for the Quit action.
    """

    def __init__(self, controller: AppController, tray_available: bool = True, quit_app=None) -> None:
        super().__init__()
        self.controller = controller
        self.tray_available = tray_available
        self.quit_app = quit_app
        self.allow_close = False
        self.setWindowTitle("Draftwise")
        self.setWindowIcon(state_icon(AppState.SERVING))
        self.resize(1100, 720)
        central = QWidget()
        v = QVBoxLayout(central)
        v.setContentsMargins(8, 8, 8, 4)
        self.hint = QLabel(NO_TRAY_HINT)
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("background:#fef3c7; color:#78350f; padding:6px; border-radius:4px")
        self.hint.setVisible(not tray_available)
        v.addWidget(self.hint)
        self.tabs = QTabWidget()
        self.models_tab = ModelsTab(controller)
        self.prompts_tab = PromptsTab(controller)
        self.tune_tab = TuneTab(controller)
        self.serve_tab = ServeTab(controller)
        self.chat_tab = ChatTab(controller)
        self.monitor_tab = MonitorTab(controller)
        tabs = (self.models_tab, self.prompts_tab, self.tune_tab, self.serve_tab, self.chat_tab, self.monitor_tab)
        for name, tab in zip(TAB_NAMES, tabs):
            self.tabs.addTab(tab, name)
        v.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        menu = self.menuBar().addMenu("&File")
        self._tune_action = menu.addAction("Tune && serve", controller.tune_and_serve)
        self._stop_action = menu.addAction("Stop server", controller.stop_server)
        menu.addSeparator()
        menu.addAction("Quit", self._quit)
        # Same rules as the tray menu: no second "Tune & serve" while tuning; while serving it tunes the selected
        # target and serves it too (one endpoint for the folder's models where llama-server's router runs).
        menu.aboutToShow.connect(self._update_file_menu)
        help_menu = self.menuBar().addMenu("&Help")
        self._log_action = help_menu.addAction("Open log folder", self.open_log_folder)
        self._about_action = help_menu.addAction("About Draftwise", self.show_about)

        self.models_tab.folder_chosen.connect(self._remember_folder)
        self.prompts_tab.prompts_changed.connect(self._remember_prompts)
        controller.status.connect(lambda m: self.statusBar().showMessage(plain(m), 15000))  # names files
        controller.state_changed.connect(lambda s: self.setWindowIcon(state_icon(s)))

    def _update_file_menu(self) -> None:
        """Enable the File menu's actions for the current state (called on ``aboutToShow``)."""
        c = self.controller
        serving = c.serving is not None
        self._tune_action.setEnabled(c.state is not AppState.TUNING)
        self._stop_action.setEnabled(serving)

    def prewarm(self) -> None:
        """Render every tab once off screen (called at start-up, before the event loop): the first
        paint of the plots costs ~100 ms, which would otherwise stall the first switch to a tab."""
        size = self.tabs.size()
        for i in range(self.tabs.count()):
            tab = self.tabs.widget(i)
            if tab is None:
                continue
            tab.resize(size)
            tab.grab()

    def _quit(self) -> None:
        if self.quit_app is not None:
            self.quit_app()

    def open_log_folder(self) -> Path:
        """Help ▸ Open log folder: show the folder of Draftwise's log (``tuner.logs.log_path().parent``,
        created when missing) in the desktop's file manager, for a bug report; returns the folder."""
        from tuner import paths
        from tuner.logs import log_path

        folder = log_path().parent
        try:
            paths.ensure_private_dir(folder)
        except OSError as exc:
            self.statusBar().showMessage(plain(f"Cannot create the log folder {folder}: {exc}"))
            return folder
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.statusBar().showMessage(plain(f"Log folder: {folder}"))
        return folder

    def show_about(self) -> None:
        """Help ▸ About Draftwise: :func:`about_text` in a dialog."""
        box = QMessageBox(self)
        box.setWindowTitle("About Draftwise")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(about_text())
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        box.setIconPixmap(state_icon(AppState.SERVING).pixmap(48, 48))
        box.exec()

    def _remember_folder(self, folder: Path) -> None:
        c = self.controller
        if c.settings.models_dir != folder:
            try:
                c.update_settings(c.settings.replace(models_dir=folder))
            except Exception as exc:
                log.debug("models folder setting refused", exc_info=True)
                self.statusBar().showMessage(plain(exc))

    def _remember_prompts(self, path) -> None:
        c = self.controller
        if c.settings.prompts_path != path:
            try:
                c.update_settings(c.settings.replace(prompts_path=path))
            except Exception as exc:
                log.debug("prompts setting refused", exc_info=True)
                self.statusBar().showMessage(plain(exc))

    def bring_forward(self) -> None:
        """Show, un-minimise and raise the window (tray click, second launch)."""
        if self.isMinimized():
            self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.show()
        self.raise_()
        self.activateWindow()

    def show_chat(self) -> None:
        """Bring the window forward on the Chat tab (the tray's "Chat…")."""
        self.tabs.setCurrentWidget(self.chat_tab)
        self.bring_forward()
        self.chat_tab.input.setFocus()

    def closeEvent(self, ev) -> None:  # noqa: N802 - Qt override
        """Closing hides to the tray (or minimises without a tray); the server keeps running."""
        if self.allow_close:
            ev.accept()
            return
        ev.ignore()
        if self.tray_available:
            self.hide()
        else:
            self.showMinimized()
