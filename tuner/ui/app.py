"""Composition root of the tray app (``draftwise`` with no arguments).

Wires settings → :class:`~tuner.ui.controller.AppController` → tray + window, enforces a single
instance (a second launch brings the first window forward and exits 0), and never exits for lack
of a system tray (the window opens with a one-line hint instead).

Environment:
    DRAFTWISE_SMOKE_QUIT_MS=N: open the window, quit after N ms, return 0 (bundle smoke check).
    DRAFTWISE_HOME: redirect every folder (tests, portable installs); see :mod:`tuner.paths`.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from tuner.ui.controller import AppController
    from tuner.ui.single_instance import InstanceServer
    from tuner.ui.tray import Tray
    from tuner.ui.window import MainWindow

SMOKE_ENV = "DRAFTWISE_SMOKE_QUIT_MS"


class DraftwiseApp:
    """The running app's parts, built by :func:`build`.

    Attributes:
        qapp: the ``QApplication``.
        controller: :class:`tuner.ui.controller.AppController`.
        tray: :class:`tuner.ui.tray.Tray` (``tray.available`` False without a system tray).
        window: :class:`tuner.ui.window.MainWindow`.
        instance: :class:`tuner.ui.single_instance.InstanceServer` or None.
        settings_error: why the settings file could not be used (defaults were used), or None.
    """

    def __init__(self, qapp: QApplication, controller: AppController, tray: Tray, window: MainWindow,
                 instance: InstanceServer | None, settings_error: str | None) -> None:
        self.qapp = qapp
        self.controller = controller
        self.tray = tray
        self.window = window
        self.instance = instance
        self.settings_error = settings_error
        self._quitting = False

    def quit(self) -> None:
        """Stop the server cleanly, remove the tray icon and leave the event loop."""
        if self._quitting:
            return
        self._quitting = True
        self.window.statusBar().showMessage("Stopping llama-server…")
        self.window.chat_tab.shutdown()
        self.controller.shutdown()
        self.tray.hide()
        if self.instance is not None:
            self.instance.close()
        self.window.allow_close = True
        self.window.close()
        # exit(), not quit(): Qt 6's quit() first asks every window to close and gives up when one refuses
        self.qapp.exit(0)


def _qapp() -> QApplication:
    from PySide6.QtWidgets import QApplication

    existing = QApplication.instance()
    if existing is None:
        app = QApplication(sys.argv[:1])
    elif isinstance(existing, QApplication):
        app = existing
    else:
        raise RuntimeError("a non-GUI QCoreApplication already runs in this process; the app needs a QApplication")
    app.setApplicationName("Draftwise")
    app.setOrganizationName("Draftwise")
    app.setDesktopFileName("io.github.draftwise.Draftwise")
    app.setQuitOnLastWindowClosed(False)
    return app


def build(single_instance: bool = True, tray_available: bool | None = None) -> DraftwiseApp | None:
    """Create the app (QApplication, controller, tray, window) without entering the event loop.

    Args:
        single_instance: hand over to a running instance and return None when there is one.
        tray_available: override tray detection (tests); None = ask Qt.

    Returns:
        The app, or None when another instance took over.
    """
    qapp = _qapp()
    from tuner.ui import qt_guard

    qt_guard.install()
    from tuner import settings as settings_mod

    # importing the controller imports tuner.ui.flow, which imports every core module the workers use:
    # their import time is paid here, before the event loop runs (see tuner.ui.flow's docstring)
    from tuner.ui.controller import AppController
    from tuner.ui.single_instance import InstanceServer, notify_running_instance
    from tuner.ui.tray import Tray
    from tuner.ui.window import MainWindow

    instance = None
    if single_instance:
        if notify_running_instance():
            return None
        instance = InstanceServer()
        instance.listen()

    loaded = settings_mod.load_settings_keeping_valid()  # a bad key costs only that key; file kept aside
    st = loaded.settings
    settings_error = loaded.message()

    controller = AppController(st)
    holder: dict[str, DraftwiseApp] = {}

    def quit_app() -> None:
        holder["app"].quit()

    window = MainWindow(controller, tray_available=True, quit_app=quit_app)
    tray = Tray(controller, window.bring_forward, quit_app, show_chat=window.show_chat,
                progress=window.tune_tab.progress_text)
    if tray_available is not None:
        tray.available = tray_available
        if not tray_available:
            tray.icon.hide()
    window.prewarm()
    window.tray_available = tray.available
    window.hint.setVisible(not tray.available)
    app = DraftwiseApp(qapp, controller, tray, window, instance, settings_error)
    holder["app"] = app
    if instance is not None:
        instance.show_requested.connect(window.bring_forward)
    if settings_error:
        from tuner.ui.plaintext import plain

        window.statusBar().showMessage(plain(settings_error))  # quotes the file's values
    if st.models_dir is None:
        window.tabs.setCurrentWidget(window.models_tab)
        window.models_tab.show_first_run_prompt()
    elif not controller.serve_at_start.restore():  # Serve at start: what was served comes back (it scans too)
        controller.scan_models(st.models_dir)
    return app


def main(argv: list[str] | None = None) -> int:
    """Run the tray app; returns the exit status (0 also when another instance took over)."""
    app = build()
    if app is None:
        print("Draftwise is already running; brought its window forward.", file=sys.stderr)
        return 0
    from PySide6.QtCore import QTimer

    smoke_ms = os.environ.get(SMOKE_ENV)
    first_run = app.controller.settings.models_dir is None
    if smoke_ms or not app.tray.available or first_run:
        app.window.bring_forward()
    if smoke_ms:
        QTimer.singleShot(int(smoke_ms), app.quit)
    rc = app.qapp.exec()
    if not app._quitting:
        app.quit()
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
