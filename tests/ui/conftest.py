"""UI test fixtures: every test gets its own DRAFTWISE_HOME, so nothing touches the user's folders
and the single-instance socket name is unique per test."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def draftwise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private DRAFTWISE_HOME for the test (config, data, cache, logs below it)."""
    home = tmp_path / "dwhome"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    return home


@pytest.fixture
def free_port() -> int:
    """A TCP port that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def models_dir(tmp_path: Path, stories260k_session: Path) -> Path:
    """A models folder holding a copy of stories260K.gguf."""
    d = tmp_path / "models"
    d.mkdir()
    (d / "stories260K.gguf").write_bytes(stories260k_session.read_bytes())
    return d


class LoopLatency:
    """Measures GUI event-loop stalls: a 10 ms QTimer records the gap between its timeouts, and a
    plain Python thread records its own sleep overshoot at the same time (a machine-wide stall,
    e.g. other jobs on a shared CI box, shows in both; a GUI-thread stall only in the first)."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.gaps_ms: list[tuple[float, float]] = []  # (time, gap)
        self.control_ms: list[tuple[float, float]] = []
        self._last = None
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._control, daemon=True)

    def _tick(self) -> None:
        now = time.monotonic()
        if self._last is not None:
            self.gaps_ms.append((now, (now - self._last) * 1000.0))
        self._last = now

    def _control(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            self.control_ms.append((now, (now - last) * 1000.0))
            last = now

    def start(self) -> None:
        self._timer.start()
        self._thread.start()

    def stop(self) -> None:
        self._timer.stop()
        self._stop.set()
        self._thread.join(2)

    def gui_stalls(self, limit_ms: float = 100.0) -> list[float]:
        """GUI gaps over ``limit_ms`` that the control thread did not see at the same time (±0.2 s)."""
        out = []
        for t, gap in self.gaps_ms:
            if gap <= limit_ms:
                continue
            machine = any(abs(ct - t) < 0.2 + gap / 1000.0 and cg > gap * 0.5 for ct, cg in self.control_ms)
            if not machine:
                out.append(gap)
        return out

    @property
    def max_gap_ms(self) -> float:
        return max((g for _t, g in self.gaps_ms), default=0.0)


@pytest.fixture
def loop_latency(qapp):
    """A running :class:`LoopLatency`; stopped at teardown."""
    ll = LoopLatency()
    ll.start()
    yield ll
    ll.stop()


@pytest.fixture
def make_app(qapp):
    """Factory: ``make_app(tray_available=True|False)`` builds the full app (controller, tray,
    window) without the single-instance socket; everything is torn down after the test."""
    from tuner import app as app_mod

    built = []

    def make(tray_available: bool | None = True, single_instance: bool = False):
        a = app_mod.build(single_instance=single_instance, tray_available=tray_available)
        built.append(a)
        return a

    yield make
    for a in built:
        if a is None:
            continue
        a.controller.shutdown()
        a.tray.hide()
        if a.instance is not None:
            a.instance.close()
        a.window.allow_close = True
        a.window.close()
        a.window.deleteLater()
