"""Poll the samplers once per tick into named ring buffers (no Qt; the UI calls :meth:`poll`
from a worker thread and reads the buffers from the GUI thread).

Series (name → unit):

* ``gen_tokens_per_s`` — generation tokens/s while generating (``/metrics`` deltas)
* ``acceptance_rate`` — draft acceptance rate 0..1 (``/metrics`` counter deltas)
* ``requests_processing`` — requests being decoded (gauge)
* ``requests_in_flight`` — requests decoding or queued, at least 1 for an interval with work
  (:attr:`tuner.telemetry.samplers.MetricsRates.requests_in_flight`)
* ``generated_tokens`` — tokens generated in the interval (Δ``tokens_predicted_total``)
* ``draft_tokens`` — draft tokens made in the interval (Δ``spec_decode_num_draft_tokens_total``)
* ``vram_used_bytes`` — device memory used (NVML), summed over devices
* ``ram_rss_bytes`` — resident memory of the llama-server process tree
* ``cpu_percent`` — CPU of the llama-server process tree, % of one core

Idle sleep: the first request after the server woke (it waited for the model to load again) is left out of
the speed and acceptance series and of the :class:`~tuner.telemetry.watch.AcceptanceWatch`: the interval whose
counters first grew after a sleep (llama-server adds a request's tokens and drafts to its counters when the
request ends, tools/server/server-context.cpp ``metrics_on_prediction``) records no speed and no acceptance,
and :attr:`Collector.left_out_after_wake` counts it. The sleeps come from a ``sleeps()`` source
(:meth:`Collector.attach`), e.g. the supervisor's :class:`tuner.server.sleep.SleepStatus`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tuner.telemetry.ring import RingBuffer
from tuner.telemetry.samplers import (
    MetricsRates,
    MetricsSampler,
    ProcessRates,
    ProcessSampler,
    VramSampler,
)
from tuner.telemetry.spec_window import SpecWindow
from tuner.telemetry.watch import AcceptanceWatch, CollapseVerdict, CollapseWatch, WatchVerdict

SERIES = (
    "gen_tokens_per_s",
    "acceptance_rate",
    "requests_processing",
    "requests_in_flight",
    "generated_tokens",
    "draft_tokens",
    "vram_used_bytes",
    "ram_rss_bytes",
    "cpu_percent",
)

#: No request in this many seconds = "idle" (header and tray tooltip stop quoting a live speed).
IDLE_AFTER_S = 10.0
#: Window of the "speculation configured, no drafts" check, seconds.
NO_DRAFT_WINDOW_S = 120.0
#: Fewest generated tokens in that window before the check speaks (a few tokens prove nothing).
NO_DRAFT_MIN_TOKENS = 64

#: One hour at 1 Hz plus slack: the longest range the Monitor tab shows is 60 minutes.
DEFAULT_CAPACITY = 3700


@dataclass(frozen=True)
class TelemetryTick:
    """Everything one :meth:`Collector.poll` measured (for the tray tooltip and notifications)."""

    t_s: float
    metrics: MetricsRates | None
    process: ProcessRates | None
    vram_used_bytes: int | None
    watch: WatchVerdict | None
    collapse: CollapseVerdict | None = None


class Collector:
    """Holds one ring buffer per series and the samplers feeding them.

    Args:
        metrics: ``/metrics`` sampler or None (no server yet).
        process: sampler of the server process or None.
        vram: NVML sampler or None.
        capacity: samples kept per series.
        clock: seconds clock (``time.monotonic`` by default; injectable in tests).
        process_every: sample the process (RAM/CPU) on every n-th poll only; reading a process
            tree costs ~5 ms of CPU (psutil walks /proc for the children), the other samplers ~2 ms,
            so n = 5 keeps a 1 Hz poll around 0.3 % of one core.
    """

    def __init__(
        self,
        metrics: MetricsSampler | None = None,
        process: ProcessSampler | None = None,
        vram: VramSampler | None = None,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
        process_every: int = 5,
    ) -> None:
        self.metrics = metrics
        self.process = process
        self.vram = vram
        self.watch: AcceptanceWatch | None = None
        #: the speed-collapse watch and its source of other programs' CPU in cores (:meth:`watch_collapse`)
        self.collapse: CollapseWatch | None = None
        self.other_cores: Callable[[], float | None] | None = None
        self.clock = clock
        self.process_every = max(1, int(process_every))
        self._n_polls = 0
        #: clock time of the last poll that saw a request in flight or tokens generated (None: never)
        self.last_active_t_s: float | None = None
        self.series: dict[str, RingBuffer] = {name: RingBuffer(capacity) for name in SERIES}
        self.sleeps: Callable[[], int] | None = None
        self._sleeps_seen = 0
        self._after_wake = False  # the server slept since the last request: the next one waited for a reload
        #: requests left out of the speed and acceptance figures because they woke the server
        self.left_out_after_wake = 0
        #: speculative counters of the last requests (the Monitor's live prediction); cleared on :meth:`attach`
        self.spec_window = SpecWindow()

    def attach(
        self,
        metrics: MetricsSampler | None,
        process: ProcessSampler | None,
        watch: AcceptanceWatch | None = None,
        sleeps: Callable[[], int] | None = None,
    ) -> None:
        """Point the collector at a (new) server; the buffers keep their history. ``sleeps()``: how many
        times the server fell asleep so far (idle sleep; None = it does not sleep)."""
        self.metrics = metrics
        self.process = process
        self.watch = watch
        self.sleeps = sleeps
        self._sleeps_seen, self._after_wake = self._read_sleeps(), False
        self.spec_window.clear()

    def watch_collapse(self, watch: CollapseWatch | None, other_cores: Callable[[], float | None] | None) -> None:
        """Compare each poll's speed with the profile's (``watch``) while ``other_cores()`` (other programs' CPU
        in cores, None = unknown) says the machine is busy; None turns it off."""
        self.collapse, self.other_cores = watch, other_cores

    def detach(self) -> None:
        """Stop sampling the server (VRAM keeps being sampled)."""
        self.metrics = None
        self.process = None
        self.watch = None
        self.sleeps = None
        self.collapse = self.other_cores = None

    def _collapse(self, t: float, m: MetricsRates | None, woke: bool) -> CollapseVerdict | None:
        if self.collapse is None or m is None:
            return None
        try:
            other = self.other_cores() if self.other_cores is not None else None
        except Exception:  # noqa: BLE001 - an unreadable CPU meter says nothing
            other = None
        tps = None if woke else m.gen_tokens_per_s
        gen_s = (m.generated_tokens or 0.0) / tps if tps else 0.0  # Δ generation seconds of the finished requests
        return self.collapse.feed(t, tps, other, gen_s)

    def _read_sleeps(self) -> int:
        try:
            return int(self.sleeps()) if self.sleeps is not None else 0
        except Exception:  # a gone supervisor: nothing new
            return self._sleeps_seen

    def _woke_request(self, m: MetricsRates | None) -> bool:
        """True when ``m``'s interval holds the first request after a sleep (its figures are left out)."""
        n = self._read_sleeps()
        if n > self._sleeps_seen:
            self._after_wake = True
        self._sleeps_seen = n  # fewer: a new launch counts from 0 again
        if not self._after_wake or m is None or not (m.generated_tokens or 0) > 0:
            return False
        self._after_wake = False
        self.left_out_after_wake += 1
        return True

    def idle_for_s(self, now_s: float | None = None) -> float | None:
        """Seconds since the last poll that saw work (a request in flight or tokens generated);
        None when no request has run since the collector started."""
        if self.last_active_t_s is None:
            return None
        now = self.clock() if now_s is None else now_s
        return max(0.0, now - self.last_active_t_s)

    def is_idle(self, now_s: float | None = None, after_s: float = IDLE_AFTER_S) -> bool:
        """True when no request ran in the last ``after_s`` seconds (or none ever ran)."""
        idle = self.idle_for_s(now_s)
        return idle is None or idle > after_s

    def drafting_summary(self, now_s: float, window_s: float = NO_DRAFT_WINDOW_S) -> tuple[float, float]:
        """``(generated tokens, draft tokens)`` summed over the polls of the last ``window_s`` seconds."""
        _a, gen = self.series["generated_tokens"].window(now_s, window_s)
        _b, drafted = self.series["draft_tokens"].window(now_s, window_s)
        return sum(v for v in gen if v), sum(v for v in drafted if v)

    def poll(self) -> TelemetryTick:
        """Sample every source once and append to the buffers (never raises)."""
        t = self.clock()
        m = self.metrics.sample(t) if self.metrics else None
        sample_process = self._n_polls % self.process_every == 0
        self._n_polls += 1
        p = self.process.sample(t) if self.process and sample_process else None
        v = self.vram.sample() if self.vram else None
        w = None
        woke = self._woke_request(m)
        if m is not None and self.watch is not None:
            w = self.watch.feed(t, None if woke else m.draft_tokens, None if woke else m.accepted_tokens)
        self.series["gen_tokens_per_s"].append(t, m.gen_tokens_per_s if m and not woke else None)
        self.series["acceptance_rate"].append(t, m.acceptance_rate if m and not woke else None)
        self.series["requests_processing"].append(t, m.requests_processing if m else None)
        self.series["requests_in_flight"].append(t, m.requests_in_flight if m else None)
        self.series["generated_tokens"].append(t, m.generated_tokens if m else None)
        self.series["draft_tokens"].append(t, m.draft_tokens if m else None)
        self.spec_window.add(m)  # a woken request's counters count: only its time waited for the reload
        if m is not None and ((m.requests_in_flight or 0) > 0 or (m.generated_tokens or 0) > 0):
            self.last_active_t_s = t
        self.series["vram_used_bytes"].append(t, v)
        if sample_process:
            self.series["ram_rss_bytes"].append(t, p.rss_bytes if p else None)
            self.series["cpu_percent"].append(t, p.cpu_percent if p else None)
        return TelemetryTick(t_s=t, metrics=m, process=p, vram_used_bytes=v, watch=w,
                             collapse=self._collapse(t, m, woke))
