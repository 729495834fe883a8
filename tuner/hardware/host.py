"""Adapter for psutil: host RAM and CPU cores (the only hardware module that imports psutil)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostInfo:
    """Host memory and CPU. ``None`` = could not be read; ``note`` says why.

    ``cpu_cores`` counts physical cores when psutil knows them, else logical CPUs;
    ``cpu_threads`` counts logical CPUs. ``cpu_features``: the instruction-set flags that decide
    llama.cpp's CPU weight repacking (``avx2``, ``avx512f``; see :func:`cpu_features`).
    """

    ram_total_bytes: int | None
    ram_available_bytes: int | None
    cpu_cores: int | None
    cpu_threads: int | None
    note: str | None = None
    cpu_features: tuple[str, ...] = ()


def probe_host() -> HostInfo:
    """Read host RAM (total, available) and core counts through psutil; never raises."""
    try:
        import psutil
    except ImportError as exc:  # pragma: no cover - psutil is a dependency
        return HostInfo(None, None, None, None, f"psutil not importable: {exc}")
    notes = []
    total = avail = cores = threads = None
    try:
        vm = psutil.virtual_memory()
        total, avail = int(vm.total), int(vm.available)
    except Exception as exc:  # noqa: BLE001 - any psutil failure becomes a note
        log.debug("host RAM unreadable", exc_info=True)
        notes.append(f"host RAM unreadable: {exc}")
    try:
        threads = psutil.cpu_count(logical=True)
        cores = psutil.cpu_count(logical=False) or threads
    except Exception as exc:  # noqa: BLE001
        log.debug("CPU count unreadable", exc_info=True)
        notes.append(f"CPU count unreadable: {exc}")
    return HostInfo(total, avail, cores, threads, "; ".join(notes) or None, cpu_features())


def cpu_features(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The x86 flags ``avx2`` / ``avx512f`` the CPU reports (Linux ``/proc/cpuinfo``), sorted; empty
    when unknown (other systems, unreadable file). ggml's CPU backend repacks some weight types into a
    ``CPU_REPACK`` buffer when they are present (ggml/src/ggml-cpu/repack.cpp
    ``ggml_repack_get_optimal_repack_type``). Never raises."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return tuple(sorted(flags & {"avx2", "avx512f"}))
    except OSError:
        pass
    return ()


def process_rss_bytes(pid: int) -> int | None:
    """Resident set size of process ``pid`` in bytes, or None when it cannot be read."""
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001
        log.debug("RSS of pid %s unreadable", pid, exc_info=True)
        return None


@dataclass(frozen=True)
class LoadSample:
    """One interval of the load watcher.

    Attributes:
        t_s: seconds since the watcher started, at the end of the interval.
        other_cpu_fraction: CPU time used by processes outside our own process tree (this process
            and its children, e.g. the llama-server being measured), as a fraction of all CPUs'
            capacity over the interval (0..1).
        steal_fraction: CPU time stolen by the hypervisor (Linux ``steal``), same unit; 0 where the
            platform has no steal counter.
    """

    t_s: float
    other_cpu_fraction: float
    steal_fraction: float


@dataclass(frozen=True)
class LoadSummary:
    """What the watcher saw over a sweep.

    Attributes:
        samples: number of intervals.
        other_cpu_mean: mean of ``other_cpu_fraction`` (0..1).
        other_cpu_max: its maximum.
        steal_mean: mean of ``steal_fraction``.
        busy_share: fraction of the intervals in which others used at least ``BUSY_FRACTION``.
    """

    samples: int
    other_cpu_mean: float
    other_cpu_max: float
    steal_mean: float
    busy_share: float

    @property
    def busy(self) -> bool:
        """True when other programs (or the hypervisor) took a noticeable share of the CPU."""
        return self.samples > 0 and (self.other_cpu_mean + self.steal_mean >= BUSY_FRACTION or self.busy_share >= 0.25)


BUSY_FRACTION = 0.15
"""Others' mean CPU share (of all CPUs) from which the machine counts as busy."""


_Reading = tuple[float, float, float, float]
"""``(monotonic s, machine busy CPU s, steal s, our tree's CPU s)``: one reading of the counters."""


class LoadWatcher:
    """Samples the machine's CPU use by other processes in a background thread (psutil).

    ``start()`` / ``stop() -> LoadSummary``; also a context manager. Every ``interval_s`` seconds: the
    whole machine's busy CPU time minus our own process tree's (``own_pid`` and its children,
    recursively, with the children each has reaped — psutil ``cpu_times().children_user/system``, so a
    llama-server that stopped is not "another program"), over the interval's capacity (``interval × logical CPUs``). Never raises: without
    psutil or readable counters the summary has 0 samples. NVML utilisation by other processes is not
    sampled here (``tuner.hardware.nvml`` owns NVML).
    """

    def __init__(self, interval_s: float = 1.0, own_pid: int | None = None, keep: int | None = None) -> None:
        import os
        import threading

        self.keep = keep  # at most this many samples kept (the newest; a watcher that runs while serving)
        self.interval_s = interval_s
        self.own_pid = own_pid or os.getpid()
        self.samples: list[LoadSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._t0 = 0.0  # monotonic seconds when the loop started (samples' t_s count from it)
        self._prev: _Reading | None = None  # the last reading (the loop's thread)

    def _own_cpu_s(self, psutil) -> float:
        total = 0.0
        try:
            me = psutil.Process(self.own_pid)
            procs = [me, *me.children(recursive=True)]
        except Exception:  # noqa: BLE001
            log.debug("own process tree unreadable", exc_info=True)
            return 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                # a child that has exited and been reaped leaves the tree, and its CPU time moves to its
                # parent's children_user/children_system: counting those keeps the tree's total continuous
                # (without them every llama-server that stopped read as "another program at 100 %")
                total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
            except Exception:  # noqa: BLE001 - a child that just exited
                log.debug("CPU times of pid %s unreadable (exited?)", p.pid, exc_info=True)
                continue
        return total

    def _read(self, psutil) -> _Reading:
        """The counters now."""
        import time

        ct = psutil.cpu_times()
        busy = sum(getattr(ct, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        return time.monotonic(), busy, getattr(ct, "steal", 0.0), self._own_cpu_s(psutil)

    def _interval(self, prev: _Reading, cur: _Reading, n_cpu: int) -> LoadSample | None:
        """The sample of the interval from reading ``prev`` to ``cur`` (None when no time passed)."""
        wall = (cur[0] - prev[0]) * n_cpu
        if wall <= 0:
            return None
        other = max(0.0, (cur[1] - prev[1]) - (cur[3] - prev[3])) / wall
        steal = max(0.0, cur[2] - prev[2]) / wall
        return LoadSample(cur[0] - self._t0, min(1.0, other), min(1.0, steal))

    def _partial(self, psutil, n_cpu: int) -> tuple[LoadSample | None, _Reading | None]:
        """The interval in progress and the reading it ends at: the sample is None until at least
        ``min(0.2 s, interval/2)`` of it has passed (enough clock ticks for a share of the CPU)."""
        with self._lock:
            prev = self._prev
        if prev is None:
            return None, None
        cur = self._read(psutil)
        if cur[0] - prev[0] < min(0.2, self.interval_s / 2):
            return None, cur
        return self._interval(prev, cur, n_cpu), cur

    def _record(self, sample: LoadSample | None, cur: _Reading) -> None:
        with self._lock:
            self._prev = cur
            if sample is None:
                return
            self.samples.append(sample)
            if self.keep is not None and len(self.samples) > self.keep:
                del self.samples[: len(self.samples) - self.keep]

    def _loop(self) -> None:
        import time

        try:
            import psutil
        except ImportError:  # pragma: no cover
            return
        n_cpu = psutil.cpu_count(logical=True) or 1
        self._t0 = time.monotonic()
        try:
            prev = self._read(psutil)
        except Exception:  # noqa: BLE001
            log.debug("CPU meter cannot read CPU times", exc_info=True)
            return
        self._record(None, prev)
        while not self._stop.wait(self.interval_s):
            try:
                cur = self._read(psutil)
            except Exception:  # noqa: BLE001
                log.debug("CPU meter reading failed", exc_info=True)
                continue
            self._record(self._interval(prev, cur, n_cpu), cur)
            prev = cur
        # the part of an interval before stop(): a watch shorter than one interval (the doctor's self-test,
        # 0.2 s on a fast CPU) otherwise had no sample at all and never saw another program's load
        try:
            part, end = self._partial(psutil, n_cpu)
            if part is not None and end is not None:
                self._record(part, end)
        except Exception:  # noqa: BLE001
            log.debug("CPU meter reading failed", exc_info=True)

    def start(self) -> LoadWatcher:
        """Start sampling (idempotent)."""
        import threading

        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="load-watcher", daemon=True)
            self._thread.start()
        return self

    def latest_other_cores(self) -> float | None:
        """Other programs' CPU over the latest interval, in cores (``other_cpu_fraction`` × logical CPUs);
        None before the first interval."""
        import os

        with self._lock:
            last = self.samples[-1] if self.samples else None
        return last.other_cpu_fraction * (os.cpu_count() or 1) if last is not None else None

    def summary(self, early: bool = False) -> LoadSummary:
        """The summary so far. ``early``: before the first whole interval, the interval in progress stands in
        for it (once at least ``min(0.2 s, interval/2)`` of it has passed), so that a question asked that soon is
        answered from what the watcher has seen rather than "idle" for want of a sample — a sweep plans its
        protocol after the first warm-up, 0.6–1.0 s in with a small model (issue 28's busy quality runs: every
        one planned as idle beside the burner). Never raises."""
        with self._lock:
            ss = list(self.samples)
        if early and not ss and self._thread is not None and not self._stop.is_set():
            try:
                import psutil

                part, _cur = self._partial(psutil, psutil.cpu_count(logical=True) or 1)
            except Exception:  # noqa: BLE001
                log.debug("CPU meter reading failed", exc_info=True)
                part = None
            if part is not None:
                ss.append(part)
        return summarize_load(ss)

    def stop(self) -> LoadSummary:
        """Stop sampling and return the summary."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 1)
        return self.summary()

    def __enter__(self) -> LoadWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def summarize_load(samples: list[LoadSample]) -> LoadSummary:
    """:class:`LoadSummary` of recorded samples (empty → all zeros)."""
    if not samples:
        return LoadSummary(0, 0.0, 0.0, 0.0, 0.0)
    n = len(samples)
    others = [s.other_cpu_fraction for s in samples]
    return LoadSummary(n, sum(others) / n, max(others), sum(s.steal_fraction for s in samples) / n,
                       sum(1 for o in others if o >= BUSY_FRACTION) / n)


def foreign_processes(name_part: str) -> list[tuple[int, str]]:
    """Processes outside our own process tree whose executable name or first argv element contains
    ``name_part``: ``[(pid, command line), …]`` (e.g. a ``llama-server`` that a separate ``draftwise
    serve`` or the app runs while a headless ``tune`` measures). Never raises; zombies left out."""
    try:
        import os

        import psutil
    except ImportError:  # pragma: no cover
        return []
    try:
        me = psutil.Process(os.getpid())
        ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
    except Exception:  # noqa: BLE001
        log.debug("own process tree unreadable", exc_info=True)
        ours = set()
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = p.info.get("cmdline") or []
            if p.info["pid"] in ours:
                continue
            if name_part in (p.info.get("name") or "") or (cmd and name_part in cmd[0]):
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append((int(p.info["pid"]), " ".join(cmd)[:200]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out
