"""Composition root: ``draftwise`` with no arguments starts the tray app.

The Qt application (tray, window, single-instance hand-over, no-tray fallback, the
``DRAFTWISE_SMOKE_QUIT_MS`` smoke mode) lives in :mod:`tuner.ui.app`, because only
``tuner/ui/`` may import PySide6. This module keeps ``tuner.app.main`` as the one
documented entry point and re-exports ``build`` for tests and benchmarks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

#: Qt platform plugins that draw without a display server (``QT_QPA_PLATFORM`` values).
HEADLESS_QPA = frozenset({"offscreen", "minimal", "minimalegl", "eglfs", "linuxfb", "vnc", "vkkhrdisplay"})

NO_DISPLAY_HINT = (
    "draftwise: no display found ({why}); the tray app needs one. Without a desktop use "
    "`draftwise tune --models DIR` and `draftwise serve --models DIR` (see `draftwise --help`)."
)


def missing_display(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why the tray app cannot open a window here, or None when it can (or may: non-Linux).

    On Linux Qt needs ``DISPLAY`` (X11) or ``WAYLAND_DISPLAY``, unless ``QT_QPA_PLATFORM`` names a
    plugin that needs no display server (:data:`HEADLESS_QPA`, e.g. ``offscreen``); without one,
    Qt aborts the process (SIGABRT, exit 134) with a message about the xcb plugin. Windows and
    macOS always have a display session for a desktop app, so they return None.

    Args:
        environ: the environment (default ``os.environ``); platform: ``sys.platform`` by default.

    Returns:
        e.g. ``"DISPLAY and WAYLAND_DISPLAY are not set"``, or None.
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    if not plat.startswith("linux"):
        return None
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    # "wayland;xcb" is a fallback list; "offscreen:fontengine=..." carries options after ':'
    plugins = [p.split(":", 1)[0].strip().lower() for p in qpa.split(";") if p.strip()]
    if any(p in HEADLESS_QPA for p in plugins):
        return None
    has_x = bool(env.get("DISPLAY"))
    has_wl = bool(env.get("WAYLAND_DISPLAY"))
    if plugins:
        if any(p == "xcb" for p in plugins) and has_x:
            return None
        if any(p.startswith("wayland") for p in plugins) and has_wl:
            return None
        if not any(p == "xcb" or p.startswith("wayland") for p in plugins):
            return None  # another plugin we do not know: let Qt decide
        return f"QT_QPA_PLATFORM={qpa} but " + ("DISPLAY is not set" if "xcb" in plugins else "WAYLAND_DISPLAY is not set")
    if has_x or has_wl:
        return None
    return "DISPLAY and WAYLAND_DISPLAY are not set"


def main(argv: list[str] | None = None) -> int:
    """Start the tray app and run its event loop; returns the exit status (see :func:`tuner.ui.app.main`).

    Returns 2 without importing Qt when there is no usable display (:func:`missing_display`),
    after printing one line that names what is missing and the headless commands.
    """
    why = missing_display()
    if why is not None:
        print(NO_DISPLAY_HINT.format(why=why), file=sys.stderr)
        return 2
    from tuner.logs import setup_logging
    from tuner.ui.app import main as ui_main

    setup_logging()
    return ui_main(argv)


def build(single_instance: bool = True, tray_available: bool | None = None):
    """Build the app without running the event loop (see :func:`tuner.ui.app.build`)."""
    from tuner.ui.app import build as ui_build

    return ui_build(single_instance=single_instance, tray_available=tray_available)
