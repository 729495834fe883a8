"""The Monitor never misleads (pytest-qt, offscreen, a real llama-server on stories260K):

* samples recorded from a real server, replayed with a 3-minute stretch where nothing was measured
  and a server restart: the plotted lines break at both, and the header says "idle" afterwards;
* 20 concurrent requests on a one-slot server (``-np 1``, as speculation needs): requests in flight
  rise above 1, because the queued ones (``requests_deferred``) count;
* a request that starts and ends between two scrapes still shows as one in flight.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tuner.server.config import ServerConfig, default_alias
from tuner.server.supervisor import Supervisor
from tuner.settings import Settings
from tuner.telemetry.collector import Collector
from tuner.telemetry.samplers import MetricsSampler, ProcessSampler, ProcessUsage
from tuner.ui.controller import AppController, activity_text
from tuner.ui.flow import ServingInfo
from tuner.ui.tab_monitor import MonitorTab

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.timeout(300)]


def config(model: Path) -> ServerConfig:
    return ServerConfig(model_path=model, n_ctx=512, threads=1, n_parallel=1, alias=default_alias(model))


def start(binary, model: Path) -> Supervisor:
    cfg = config(model)
    sup = Supervisor(binary)
    sup.start(cfg)
    sup.wait_ready(timeout_s=120)
    return sup


def monitor_for(qtbot, collector: Collector, model: Path, spec_label: str = "no speculation",
                cache_ram_mib: int | None = None):
    c = AppController(Settings())
    c.collector = collector
    c.serving = ServingInfo(model_name=model.name, target_path=model, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=(), pid=None, spec_label=spec_label,
                            cache_ram_mib=cache_ram_mib)
    tab = MonitorTab(c)
    qtbot.addWidget(tab)
    return c, tab


def test_replayed_gap_and_restart_break_the_lines(qtbot, llama_server_bin, stories260k_session):
    # 1. record real /metrics bodies at a simulated 1 Hz, with traffic between scrapes
    recorded: list[tuple[float, str | None]] = []
    t = 0.0
    sup = start(llama_server_bin, stories260k_session)
    try:
        client = sup.client()

        def traffic_then_scrape(n: int) -> None:
            nonlocal t
            for i in range(n):
                client.completion("Once upon a time", n_predict=24, cache_prompt=False, seed=i)
                t += 1.0
                recorded.append((t, client.metrics_text()))

        recorded.append((t, client.metrics_text()))
        traffic_then_scrape(4)                      # t = 1..4
        t += 180.0                                  # 3 minutes in which nothing was measured
        traffic_then_scrape(4)                      # t = 185..188
        sup.stop()                                  # a re-tune restart: the server is away...
        t += 1.0
        recorded.append((t, None))                  # ...and its /metrics scrape fails (t = 189)
        sup.start(config(stories260k_session))
        sup.wait_ready(timeout_s=120)
        client = sup.client()
        t += 1.0
        recorded.append((t, client.metrics_text()))  # counters start again from 0 (t = 190)
        traffic_then_scrape(4)                      # t = 191..194
    finally:
        sup.stop()

    # 2. replay them through the collector and the Monitor tab
    clock = [0.0]
    bodies = iter(recorded)

    def fetch() -> str:
        _t, body = next(bodies)
        if body is None:
            raise ConnectionError("connection refused")
        return body

    col = Collector(metrics=MetricsSampler(fetch), clock=lambda: clock[0], process=ProcessSampler(
        lambda: ProcessUsage(rss_bytes=300 * 2**20, cpu_seconds=clock[0])))
    for ts, _body in list(recorded):
        clock[0] = ts
        col.poll()
    c, tab = monitor_for(qtbot, col, stories260k_session, cache_ram_mib=1024)
    tab.set_range(5)
    tab.redraw(now_s=clock[0])
    segs = tab.tps_plot.segments()  # minutes before now
    now = clock[0]
    in_seconds = [(round(a * 60 + now), round(b * 60 + now)) for a, b in segs]
    # t = 0 and the first scrape after the restart (t = 190) are baselines: no rate there
    assert in_seconds == [(1, 4), (185, 188), (191, 194)], in_seconds
    assert tab.tps_plot.point_count() == 4 + 4 + 4
    # no line crosses the 3-minute gap or the restart
    for a, b in in_seconds:
        assert not (a < 100 < b) and not (a < 189.5 < b)
    # while requests ran the header quotes the speed; a minute later it says idle
    assert "tokens/s" in tab.summary.text() and "idle" not in tab.summary.text()
    assert "RAM 300 MiB (prompt cache ≤ 1.00 GiB)" in tab.summary.text()
    clock[0] = now + 60.0
    tab.redraw(now_s=clock[0])
    assert "idle" in tab.summary.text()
    assert activity_text(col).startswith("idle (last generation ")
    assert "idle" in c.tooltip()


def test_twenty_concurrent_requests_show_in_flight_above_one(qtbot, llama_server_bin, stories260k_session):
    sup = start(llama_server_bin, stories260k_session)
    try:
        col = Collector(metrics=MetricsSampler(sup.client().metrics_text))
        col.poll()
        # a burst shorter than a sample: one request between two scrapes still counts
        with sup.client() as one:
            one.completion("Once upon a time", n_predict=16, cache_prompt=False)
        col.poll()
        assert col.series["requests_in_flight"].last_value() == 1
        assert col.series["requests_processing"].last_value() == 0

        errors: list[BaseException] = []

        def request(i: int) -> None:
            try:
                with sup.client(timeout_s=120) as cl:
                    cl.completion(f"Tom and Lily {i}", n_predict=64, cache_prompt=False, seed=i)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=request, args=(i,)) for i in range(20)]
        for th in threads:
            th.start()
        while any(th.is_alive() for th in threads):
            col.poll()
            time.sleep(0.1)
        for th in threads:
            th.join()
        col.poll()
    finally:
        sup.stop()
    assert not errors, errors
    _ages, in_flight = col.series["requests_in_flight"].window(col.clock(), 600)
    _a, processing = col.series["requests_processing"].window(col.clock(), 600)
    peak = max(v for v in in_flight if v is not None)
    print("peak requests in flight", peak)
    assert peak > 1, peak
    assert max(v for v in processing if v is not None) <= 1  # the one slot: the gauge alone never showed it
    c, tab = monitor_for(qtbot, col, stories260k_session)
    tab.redraw()
    _x, y = tab.req_plot.curves[""].getData()
    assert max(v for v in y if v == v) > 1


@pytest.mark.parametrize("spec", ["ngram-mod", "draft-simple"])
def test_speculation_without_drafts_is_said(qtbot, llama_server_bin, stories260k_session, spec):
    """Sampled stories on an n-gram server: no draft tokens at all (measured: 0 of 260 tokens), and
    the Monitor says so; the same traffic on a draft model that drafts shows no such note."""
    kw = dict(spec_type=spec, n_max=4 if spec == "draft-simple" else None,
              draft_path=stories260k_session if spec == "draft-simple" else None)
    cfg = ServerConfig(model_path=stories260k_session, n_ctx=512, threads=1, **kw)
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        col = Collector(metrics=MetricsSampler(sup.client().metrics_text))
        col.poll()
        with sup.client() as cl:
            for i in range(3):
                cl.completion("Once upon a time", n_predict=40, temperature=1.5, seed=i, cache_prompt=False)
                col.poll()
    finally:
        sup.stop()
    generated, drafted = col.drafting_summary(col.clock())
    assert generated >= 64
    label = spec if spec.startswith("ngram") else f"draft-simple {stories260k_session.name} n_max 4"
    c, tab = monitor_for(qtbot, col, stories260k_session, spec_label=label)
    tab.redraw()
    note = tab.no_drafts_text(col.clock())
    if spec == "ngram-mod":
        assert drafted == 0
        assert note is not None and "sampled traffic rarely matches n-gram lookups" in note
        assert f"the last {generated:.0f} tokens" in note
        assert tab.note.text() == note and not tab.note.isHidden()
    else:
        assert drafted > 0 and note is None and tab.note.isHidden()
