"""UI test fixtures: every test gets its own DRAFTWISE_HOME, so nothing touches the user's folders
and the single-instance socket name is unique per test."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from tests.conftest import seed_cpu_buffers
from tuner import process

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def draftwise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """A private DRAFTWISE_HOME for the test (config, data, cache, logs below it; a ``server`` test's seeded
    with the session's probe of the build's CPU buffers)."""
    home = tmp_path / "dwhome"
    seed_cpu_buffers(request, home)
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    if request.node.get_closest_marker("server") is None:
        _no_device_probe(monkeypatch)
    return home


def _no_device_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that starts no llama-server must not let the app's Models tab ask the real binary
    ``--list-devices`` either: a scan that lands late (the tab selects a target, the memory plan runs in a
    worker) would start it during tear-down, where the server rule fails the test. The plan then says the
    device list was not asked, as it does on a machine without llama-server."""
    from tuner.hardware import devices as devices_mod
    from tuner.hardware.listdevices import ListDevicesResult

    monkeypatch.setattr(devices_mod, "run_list_devices",
                        lambda binary, *a, **k: ListDevicesResult(False, (), "--list-devices not asked in this test"))


@pytest.fixture
def free_port() -> int:
    """A TCP port that was free a moment ago."""
    return process.free_port()


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


def _steal_s() -> dict[str, float]:
    """Per-CPU hypervisor steal time in seconds (``/proc/stat``, USER_HZ ticks): time a virtual
    CPU was runnable but the host ran something else. Empty where /proc/stat is missing."""
    out: dict[str, float] = {}
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                parts = line.split()
                if parts and parts[0].startswith("cpu") and parts[0] != "cpu" and len(parts) > 8:
                    out[parts[0]] = int(parts[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return {}
    return out


#: A GUI-thread gap longer than this (ms, after the operating system's share is taken out) is a
#: stall. Users perceive a response over ~200 ms as lag; below it are the paint hitches of a
#: software-rendered (offscreen) pyqtgraph chart on a 2-core box whose both cores run llama-server
#: (50-120 ms measured). What the check exists to catch — network, disk or process work on the GUI
#: thread — costs 300 ms to seconds (tests/ui/test_loop_latency.py proves a 300 ms block is caught).
STALL_LIMIT_MS = 200.0


class LoopLatency:
    """Measures GUI event-loop stalls with a 10 ms QTimer on the GUI thread.

    For each gap between two timeouts it records the wall time and the part of it that is the
    *operating system's* doing, not ours: time the GUI thread spent runnable but waiting for a CPU,
    plus the longest time one of the process's other threads spent waiting for a CPU (it may
    hold the interpreter lock the GUI thread needs; Linux ``/proc/.../schedstat`` run delay, i.e. other
    processes on a shared 2-core box), plus the hypervisor's steal time (``/proc/stat``) on a virtual
    machine. A stall of ours is a gap whose remaining time (running,
    sleeping, blocked on I/O, a lock or the interpreter lock held by a running thread of ours)
    exceeds the limit. On an idle machine the excused part is ~0, so a ``time.sleep(0.3)`` on the
    GUI thread is always caught.
    """

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.gaps: list[tuple[float, float, float]] = []  # (time, wall gap ms, excused ms)
        self._last = None
        self._last_delay: tuple[float | None, dict[str, float]] = (None, {})
        self._last_steal: dict[str, float] = {}
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)
        # A watchdog samples the GUI thread's Python stack while a gap is open, so a reported stall
        # says what the GUI thread was doing (the sample nearest the middle of the gap is kept).
        self._gui_ident = threading.get_ident()
        self._samples: list[tuple[float, str]] = []  # (time, stack) of the current open gap
        self.stacks: dict[float, str] = {}  # gap end time -> GUI-thread stack sampled inside the gap
        self._watch_stop = threading.Event()
        self._watch = threading.Thread(target=self._watchdog, name="loop-latency-watchdog", daemon=True)

    def _tick(self) -> None:
        now = time.monotonic()
        delay = _run_delays_s()
        steal = _steal_s()
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
            # the hypervisor's share: the most any virtual CPU was stolen during the gap
            waited += max((v - self._last_steal.get(k, v) for k, v in steal.items()), default=0.0) * 1000.0
            gap = (now - self._last) * 1000.0
            self.gaps.append((now, gap, min(gap, waited)))
            samples, self._samples = self._samples, []
            if gap > 50.0 and samples:
                self.stacks[now] = samples[len(samples) // 2][1]
        self._last, self._last_delay, self._last_steal = now, delay, steal

    def _watchdog(self) -> None:
        while not self._watch_stop.wait(0.02):
            last = self._last
            if last is None or time.monotonic() - last < 0.04:
                continue
            frame = sys._current_frames().get(self._gui_ident)
            if frame is None:
                continue
            stack = "".join(traceback.format_stack(frame, limit=12))
            self._samples.append((time.monotonic(), stack))

    def start(self) -> None:
        self._timer.start()
        self._watch.start()

    def stop(self) -> None:
        self._timer.stop()
        self._watch_stop.set()
        self._watch.join(timeout=2)

    def _stall_gaps(self, limit_ms: float, exclude: tuple):
        """The recorded ``(time, wall ms, excused ms)`` gaps that are stalls (see :meth:`stalls`)."""
        for t, gap, waited in self.gaps:
            if any(a <= t <= b for a, b in exclude):
                continue
            ours = gap - waited
            if ours > limit_ms and ours >= waited:
                yield t, gap, waited

    def stalls(self, limit_ms: float = STALL_LIMIT_MS, exclude: tuple = ()) -> list[tuple[float, float]]:
        """``(wall ms, excused ms)`` of gaps whose wall time minus the excused time (CPU-queue wait
        and steal) exceeds ``limit_ms`` and is at least half of the gap, outside the ``exclude``
        ``(t0, t1)`` intervals.

        The second condition: when waiting for a CPU dominates a gap (a starved 2-core box), our
        threads hand the interpreter lock to each other late and the remainder is no longer a
        reliable measure of our own work; a real stall of ours (e.g. a 300 ms sleep on the GUI
        thread) is still most of its gap even when the box is busy."""
        return [(round(gap), round(waited)) for _t, gap, waited in self._stall_gaps(limit_ms, exclude)]

    def stall_stacks(self, limit_ms: float = STALL_LIMIT_MS, exclude: tuple = ()) -> str:
        """The GUI thread's Python stacks sampled inside the gaps :meth:`stalls` reports (text)."""
        return "".join(
            f"--- gap of {gap:.0f} ms (excused {waited:.0f} ms):\n"
            + self.stacks.get(t, "(no sample: the GUI thread was in Qt's C++ code)\n")
            for t, gap, waited in self._stall_gaps(limit_ms, exclude)
        )

    @property
    def max_gap_ms(self) -> float:
        return max((g for _t, g, _w in self.gaps), default=0.0)

    @property
    def gaps_ms(self) -> list[float]:
        return [g for _t, g, _w in self.gaps]


@pytest.fixture
def loop_latency(qapp):
    """A running :class:`LoopLatency`; stopped at teardown.

    Before measuring, the objects every earlier test of this pytest process left behind are collected
    and frozen (``gc.freeze``): after ~600 tests the process's heap is far larger than the app's, and
    one full collection of it (which holds the GIL, whichever thread triggers it) can land inside a
    measured gap — one 313 ms gap with 21 ms of CPU-queue wait appeared only in a full-suite run, never
    in the test run alone (gaps there ≤ 124 ms outside the tab-switch windows, 7 runs). The app's own
    allocations during the test are still collected as usual; the heap is unfrozen at teardown."""
    import gc

    gc.collect()
    gc.freeze()
    ll = LoopLatency()
    ll.start()
    try:
        yield ll
    finally:
        ll.stop()
        gc.unfreeze()


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
