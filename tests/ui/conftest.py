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


def _run_delays_s() -> tuple[float | None, dict[str, float]]:
    """Seconds spent runnable but waiting for a CPU (Linux schedstat run delay): ``(this thread,
    {thread id: seconds} for the process's other threads)``; ``(None, {})`` without schedstat."""
    try:
        with open("/proc/thread-self/schedstat") as fh:
            own = int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None, {}
    me = threading.get_native_id()
    others: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = []
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                others[tid] = int(fh.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between listdir and open
    return own, others


class LoopLatency:
    """Measures GUI event-loop stalls with a 10 ms QTimer on the GUI thread.

    For each gap between two timeouts it records the wall time and the part of it that is the
    *operating system's* doing, not ours: time the GUI thread spent runnable but waiting for a CPU,
    plus the longest time one of the process's other threads spent waiting for a CPU (it may
    hold the interpreter lock the GUI thread needs; Linux ``/proc/.../schedstat`` run delay, i.e. other
    processes on a shared 2-core box). A stall of ours is a gap whose remaining time (running,
    sleeping, blocked on I/O, a lock or the interpreter lock held by a running thread of ours)
    exceeds the limit. On an idle machine the excused part is ~0, so a ``time.sleep(0.3)`` on the
    GUI thread is always caught.
    """

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.gaps: list[tuple[float, float, float]] = []  # (time, wall gap ms, CPU-queue wait ms)
        self._last = None
        self._last_delay: tuple[float | None, dict[str, float]] = (None, {})
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        delay = _run_delays_s()
        if self._last is not None:
            own, others = delay
            own0, others0 = self._last_delay
            if own is not None and own0 is not None:
                # a thread started during the gap counts its whole run delay (all within the gap)
                # the longest CPU-queue wait of one other thread (say the one holding the interpreter
                # lock). Not the sum: threads *waiting* for that lock wake every 5 ms and queue for a
                # CPU too, so on a loaded box the sum would excuse a real 300 ms stall of ours
                others_waited = max((d - others0.get(tid, 0.0) for tid, d in others.items()), default=0.0)
                others_waited = max(0.0, others_waited)
                waited = (own - own0 + others_waited) * 1000.0
            else:
                waited = 0.0
            gap = (now - self._last) * 1000.0
            self.gaps.append((now, gap, min(gap, waited)))
        self._last, self._last_delay = now, delay

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def stalls(self, limit_ms: float = 100.0, exclude: tuple = ()) -> list[tuple[float, float]]:
        """``(wall ms, CPU-queue wait ms)`` of gaps whose wall time minus CPU-queue wait exceeds
        ``limit_ms`` and is at least half of the gap, outside the ``exclude`` ``(t0, t1)`` intervals.

        The second condition: when waiting for a CPU dominates a gap (a starved 2-core box), our
        threads hand the interpreter lock to each other late and the remainder is no longer a
        reliable measure of our own work; a real stall of ours (e.g. a 300 ms sleep on the GUI
        thread) is still most of its gap even when the box is busy."""
        out = []
        for t, gap, waited in self.gaps:
            if any(a <= t <= b for a, b in exclude):
                continue
            ours = gap - waited
            if ours > limit_ms and ours >= waited:
                out.append((round(gap), round(waited)))
        return out

    @property
    def max_gap_ms(self) -> float:
        return max((g for _t, g, _w in self.gaps), default=0.0)

    @property
    def gaps_ms(self) -> list[float]:
        return [g for _t, g, _w in self.gaps]


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
