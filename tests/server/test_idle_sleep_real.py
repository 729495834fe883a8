"""Idle sleep with the real llama-server (``--sleep-idle-seconds``): after the idle time the server reports
sleeping (``/props`` ``is_sleeping``) and its resident memory drops, no telemetry poll wakes it, a request
does and its reload time is measured, that request is left out of the speed figures, and a reload that
fails is a diagnosed crash the restart policy answers."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tuner import process
from tuner.server.client import NON_WAKING_PATHS, ServerClient, ServerClientError
from tuner.server.config import ServerConfig
from tuner.server.sleep import ENTER_LINE, EXIT_LINE
from tuner.server.supervisor import ServerState, Supervisor
from tuner.telemetry.collector import Collector
from tuner.telemetry.samplers import MetricsSampler, ProcessSampler, ProcessUsage
from tuner.units import MIB

pytestmark = [pytest.mark.server, pytest.mark.timeout(120)]

#: One line per wake (server-context.cpp handle_sleeping_state; server_queue::start_loop logs its own too).
WAKE_LINE = "server is " + EXIT_LINE


def _rss(pid: int) -> int:
    usage = process.tree_usage(pid)
    assert usage is not None, "llama-server is gone"
    return usage[0]


def _wait_state(sup: Supervisor, state: ServerState, within_s: float) -> bool:
    t_end = time.monotonic() + within_s
    while time.monotonic() < t_end:
        if sup.state is state:
            return True
        time.sleep(0.05)
    return False


def _lines(sup: Supervisor, text: str) -> int:
    return sum(text in line for line in sup.log_tail(2000))


class _Telemetry:
    """What the app polls while serving, every 0.25 s on its own thread: the Collector (``/metrics`` and the
    process's RSS/CPU) plus ``/health``, ``/props`` and ``/v1/models``, all through a client limited to
    :data:`NON_WAKING_PATHS`."""

    def __init__(self, sup: Supervisor) -> None:
        self.client = ServerClient(sup.base_url or "", paths=NON_WAKING_PATHS)
        pid = sup.pid

        def usage() -> ProcessUsage | None:
            u = process.tree_usage(pid) if pid else None
            return ProcessUsage(*u) if u else None

        self.collector = Collector(MetricsSampler(self.client.metrics_text), ProcessSampler(usage), process_every=1)
        self.collector.attach(self.collector.metrics, self.collector.process, sleeps=lambda: sup.sleep_status.sleeps)
        self.polls = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.25):
            self.collector.poll()
            self.client.health()
            self.client.props()
            self.client.models()
            self.polls += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.client.close()


def test_idle_sleep_frees_memory_no_poll_wakes_it_and_a_request_does(llama_server_bin: Path, gemma3_270m: Path):
    cfg = ServerConfig(model_path=gemma3_270m, n_ctx=512, threads=1, ngl=0, sleep_idle_s=2)
    with Supervisor(llama_server_bin, auto_restart=True, health_interval_s=0.5) as sup:
        sup.start_and_wait(cfg, timeout_s=90)
        assert "--sleep-idle-seconds" in (sup.argv or [])
        pid = sup.pid
        assert pid is not None
        rss_awake = _rss(pid)
        telemetry = _Telemetry(sup)
        try:
            # polled 4 times a second, it still falls asleep: no poll resets llama-server's idle timer
            assert _wait_state(sup, ServerState.SLEEPING, 30), f"not asleep: {sup.state}; {sup.log_tail(10)}"
            with ServerClient(sup.base_url or "") as client:
                assert client.props()["is_sleeping"] is True
            time.sleep(1.0)  # the weights are unmapped when the state is seen; give the kernel a moment
            rss_asleep = _rss(pid)
            freed = rss_awake - rss_asleep
            # Gemma 3 270M Q4_K_M: 241 MiB of weights; measured 328.8 -> 79.7 MiB here
            assert freed >= 0.6 * gemma3_270m.stat().st_size, \
                f"RSS {rss_awake / MIB:.1f} -> {rss_asleep / MIB:.1f} MiB: the model's memory was not freed"
            polls_asleep = telemetry.polls
            time.sleep(2.0)  # more telemetry polls while asleep
            assert telemetry.polls >= polls_asleep + 4
            assert sup.state is ServerState.SLEEPING and _lines(sup, WAKE_LINE) == 0, \
                "a telemetry poll woke the sleeping server"
            assert sup.sleep_status.sleeps == 1 and sup.pid == pid

            with ServerClient(sup.base_url or "") as client:
                t0 = time.monotonic()
                out = client.completion("Once upon a time", n_predict=8, temperature=0.0)
                wall_s = time.monotonic() - t0
            assert out.get("content") is not None
            assert _wait_state(sup, ServerState.READY, 10), sup.state
            assert _lines(sup, WAKE_LINE) == 1, "one request, one wake"
            reload_s = sup.sleep_status.last_reload_s
            assert reload_s is not None and 0.0 < reload_s <= wall_s, (reload_s, wall_s)
            assert _rss(pid) > rss_asleep + 0.6 * gemma3_270m.stat().st_size, "the model was not loaded again"
            # the request that woke it: left out of the speed figures (its counters arrive at its end)
            t_end = time.monotonic() + 5
            while telemetry.collector.left_out_after_wake == 0 and time.monotonic() < t_end:
                time.sleep(0.1)
            assert telemetry.collector.left_out_after_wake == 1
            assert telemetry.collector.series["gen_tokens_per_s"].latest_valued() is None, \
                "no request but the one that woke the server ran: no speed figure"
        finally:
            telemetry.close()
        assert _lines(sup, ENTER_LINE) >= 1 and sup.pid == pid


def test_a_reload_that_fails_after_sleep_is_diagnosed_and_restarted(llama_server_bin: Path, stories260k: Path):
    changes = []
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, threads=1, sleep_idle_s=1)
    with Supervisor(llama_server_bin, auto_restart=True, health_interval_s=0.5, backoff_s=(0.5,),
                    on_state=changes.append) as sup:
        sup.start_and_wait(cfg, timeout_s=60)
        first_pid = sup.pid
        assert _wait_state(sup, ServerState.SLEEPING, 20), sup.state
        away = stories260k.with_suffix(".moved")
        stories260k.rename(away)  # the model the server must load again is gone
        with ServerClient(sup.base_url or "") as client, pytest.raises(ServerClientError):
            client.completion("Once upon a time", n_predict=4, temperature=0.0)  # the server aborts under it
        t_end = time.monotonic() + 30
        ended = lambda: [c for c in changes if c.previous is ServerState.SLEEPING and c.state is not c.previous]  # noqa: E731
        while not ended() and time.monotonic() < t_end:
            time.sleep(0.05)
        shutil.move(away, stories260k)  # back, so the restart comes up
        assert any(c.message.startswith("waking up") for c in changes), "the wake was announced"
        crash = ended()[0]
        assert crash.state is ServerState.STARTING, crash  # the restart policy restarts it
        assert crash.diagnosis is not None and crash.diagnosis.code == "wake_failed", crash.diagnosis
        assert crash.diagnosis.returncode == -6  # GGML_ABORT: SIGABRT
        assert "could not load the model again" in crash.diagnosis.message
        assert "model file missing or unreadable" in crash.diagnosis.message  # the load's own error, as the cause
        assert "restarting" in crash.message
        sup.wait_ready(timeout_s=60)
        assert sup.restart_count >= 1 and sup.pid not in (None, first_pid)
