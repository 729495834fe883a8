"""Composition root: ``draftwise`` with no arguments starts the tray app.

The Qt application (tray, window, single-instance hand-over, no-tray fallback, the
``DRAFTWISE_SMOKE_QUIT_MS`` smoke mode) lives in :mod:`tuner.ui.app`, because only
``tuner/ui/`` may import PySide6. This module keeps ``tuner.app.main`` as the one
documented entry point and re-exports ``build`` for tests and benchmarks.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Start the tray app and run its event loop; returns the exit status (see :func:`tuner.ui.app.main`)."""
    from tuner.ui.app import main as ui_main

    return ui_main(argv)


def build(single_instance: bool = True, tray_available: bool | None = None):
    """Build the app without running the event loop (see :func:`tuner.ui.app.build`)."""
    from tuner.ui.app import build as ui_build

    return ui_build(single_instance=single_instance, tray_available=tray_available)
