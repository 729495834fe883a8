"""The app's log: an exception a UI worker catches (and hands to the GUI as a message) still reaches
the log file with its traceback; Help ▸ Open log folder opens the folder that holds that file."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuner.logs import log_path, setup_logging


def _log_text() -> str:
    for h in logging.getLogger("tuner").handlers:
        h.flush()
    return log_path().read_text(encoding="utf-8")


def _forced_failure_in_the_worker(on_event: Callable[[Any], None], cancel: threading.Event) -> None:
    raise RuntimeError("forced failure 4711 in a CallWorker")


def test_a_worker_threads_exception_is_in_the_log_with_its_traceback(qtbot, draftwise_home: Path) -> None:
    from tuner.ui.workers import CallWorker

    path = setup_logging()
    assert path == draftwise_home / "logs" / "draftwise.log"
    w = CallWorker(_forced_failure_in_the_worker, "forced")
    failures: list[BaseException] = []
    w.failed.connect(failures.append)
    with qtbot.waitSignal(w.failed, timeout=10_000):
        w.start()
    w.wait(5000)
    assert len(failures) == 1 and "4711" in str(failures[0])  # the GUI still gets the exception itself
    text = _log_text()
    assert "forced worker failed" in text
    assert "Traceback (most recent call last)" in text
    assert "in _forced_failure_in_the_worker" in text  # the frame that raised, not only the message
    assert "RuntimeError: forced failure 4711 in a CallWorker" in text


def test_a_cancelled_worker_is_one_info_line_without_a_traceback(qtbot, draftwise_home: Path) -> None:
    from tuner.errors import Cancelled
    from tuner.ui.workers import CallWorker

    setup_logging()

    def cancelled(on_event: Callable[[Any], None], cancel: threading.Event) -> None:
        raise Cancelled()

    w = CallWorker(cancelled, "cancelme")
    with qtbot.waitSignal(w.failed, timeout=10_000):
        w.start()
    w.wait(5000)
    text = _log_text()
    assert "cancelme worker cancelled" in text and "Traceback" not in text


def test_a_failing_sampler_keeps_polling_and_is_logged(qtbot, draftwise_home: Path) -> None:
    from tuner.ui.workers import PollWorker

    setup_logging()
    calls: list[int] = []

    def sample() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("sampler bug 815")
        return len(calls)

    p = PollWorker(sample, interval_s=0.01)
    ticks: list[object] = []
    p.tick.connect(ticks.append)
    p.start()
    qtbot.waitUntil(lambda: len(ticks) >= 2, timeout=10_000)
    p.stop()
    text = _log_text()
    assert "telemetry poll failed" in text and "ValueError: sampler bug 815" in text
    assert "Traceback (most recent call last)" in text


def test_help_menu_opens_the_log_folder(qtbot, draftwise_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtGui import QDesktopServices

    from tuner.ui.controller import AppController
    from tuner.ui.window import MainWindow

    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url.toLocalFile()) or True))
    controller = AppController()
    window = MainWindow(controller, tray_available=True)
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    action = next(a for a in help_menu.actions() if a.text() == "Open log folder")
    action.trigger()
    assert opened == [str(log_path().parent)]
    assert log_path().parent == draftwise_home / "logs" and log_path().parent.is_dir()
    controller.shutdown(timeout_s=2)
