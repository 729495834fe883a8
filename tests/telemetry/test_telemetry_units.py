"""Telemetry core: ring buffers, /metrics parsing, counter-delta rates, the acceptance watch."""

from __future__ import annotations

import pytest

from tuner.telemetry.collector import Collector
from tuner.telemetry.prom import MetricsParseError, parse_metrics
from tuner.telemetry.ring import RingBuffer
from tuner.telemetry.samplers import (
    MetricsSampler,
    ProcessSampler,
    ProcessUsage,
    VramSampler,
)
from tuner.telemetry.watch import AcceptanceWatch


def metrics_text(pred=0.0, pred_s=0.0, drafted=None, accepted=None, drafts=None, per_pos=(), processing=0):
    """A /metrics body shaped like llama-server's (server-task.cpp to_metrics)."""
    lines = [
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        "llamacpp:prompt_tokens_total 12",
        "# TYPE llamacpp:prompt_seconds_total counter",
        "llamacpp:prompt_seconds_total 0.5",
        "# TYPE llamacpp:tokens_predicted_total counter",
        f"llamacpp:tokens_predicted_total {pred}",
        "# TYPE llamacpp:tokens_predicted_seconds_total counter",
        f"llamacpp:tokens_predicted_seconds_total {pred_s}",
        "# TYPE llamacpp:predicted_tokens_seconds gauge",
        "llamacpp:predicted_tokens_seconds 999",
        "# TYPE llamacpp:requests_processing gauge",
        f"llamacpp:requests_processing {processing}",
        "# TYPE llamacpp:requests_deferred gauge",
        "llamacpp:requests_deferred 0",
    ]
    if drafted is not None:
        lines += [
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
            f"llamacpp:spec_decode_num_draft_tokens_total {drafted}",
            "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
            f"llamacpp:spec_decode_num_accepted_tokens_total {accepted}",
            "# TYPE llamacpp:spec_decode_num_drafts_total counter",
            f"llamacpp:spec_decode_num_drafts_total {drafts}",
        ]
    if per_pos:
        lines.append("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter")
        for i, v in enumerate(per_pos):
            lines.append(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}')
    return "\n".join(lines) + "\n"


def test_parse_reference_sample():
    # the b10434 sample from the reference (draft = target, n_max 4, 2 requests), positions listed out of order
    text = metrics_text(48, 0.02, 30, 30, 8, per_pos=(8, 8, 7, 6), processing=1)
    head, sep, tail = text.partition("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n")
    text = head + sep + "".join(reversed(tail.splitlines(keepends=True)))
    snap = parse_metrics(text)
    assert snap.draft_tokens_total == 30
    assert snap.accepted_tokens_total == 30
    assert snap.drafts_total == 8
    assert snap.accepted_per_pos_total == (8, 8, 7, 6)
    assert snap.tokens_predicted_total == 48
    assert snap.requests_processing == 1
    assert snap.prompt_tokens_total == 12


def test_parse_absent_spec_counters_are_none():
    snap = parse_metrics(metrics_text(10, 1.0))
    assert snap.draft_tokens_total is None
    assert snap.accepted_per_pos_total == ()
    assert snap.tokens_predicted_total == 10


def test_parse_malformed_raises_naming_metrics():
    with pytest.raises(MetricsParseError, match="/metrics"):
        parse_metrics("llamacpp:tokens_predicted_total not-a-number\n")


def test_ring_buffer_is_bounded_and_windows_by_time():
    rb = RingBuffer(5)
    for t in range(10):
        rb.append(t, t * 10)
    assert len(rb) == 5
    assert [s.t_s for s in rb.snapshot()] == [5, 6, 7, 8, 9]
    ages, vals = rb.window(now_s=9, span_s=2)
    assert ages == [-2, -1, 0] and vals == [70, 80, 90]
    rb.append(10, None)
    assert rb.last_value() == 90 and rb.latest().value is None
    with pytest.raises(ValueError):
        RingBuffer(0)


def test_metrics_sampler_rates_from_counter_deltas():
    bodies = iter([
        metrics_text(100, 2.0, 40, 30, 10),
        metrics_text(300, 4.0, 140, 80, 30, processing=1),  # +200 tok in 2 s; 50 of 100 drafts accepted
        metrics_text(300, 4.0, 140, 80, 30),                # idle interval
    ])
    s = MetricsSampler(lambda: next(bodies))
    first = s.sample(10.0)
    assert first.gen_tokens_per_s is None and first.acceptance_rate is None
    second = s.sample(12.0)
    assert second.gen_tokens_per_s == pytest.approx(100.0)
    assert second.throughput_tokens_per_s == pytest.approx(100.0)
    assert second.acceptance_rate == pytest.approx(0.5)
    assert second.draft_tokens == 100 and second.accepted_tokens == 50
    assert second.requests_processing == 1
    third = s.sample(13.0)
    assert third.gen_tokens_per_s is None and third.acceptance_rate is None
    assert third.throughput_tokens_per_s == 0


def test_metrics_sampler_server_restart_and_outage():
    bodies = [metrics_text(500, 5.0, 100, 90, 20), metrics_text(10, 0.1, 4, 2, 1), metrics_text(30, 0.3, 14, 7, 3)]

    def fetch():
        item = bodies.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    s = MetricsSampler(fetch)
    s.sample(1.0)
    restarted = s.sample(2.0)  # counters went down: new baseline, no bogus negative rate
    assert restarted.gen_tokens_per_s is None and restarted.acceptance_rate is None
    after = s.sample(3.0)
    assert after.acceptance_rate == pytest.approx(0.5)
    bodies.append(ConnectionRefusedError("refused"))
    down = s.sample(4.0)
    assert down.gen_tokens_per_s is None and "refused" in s.last_error


def test_first_speculative_request_after_plain_ones():
    # spec counters appear only after the first speculative request finishes (S7): count from zero
    bodies = iter([metrics_text(10, 1.0), metrics_text(40, 2.0, 20, 15, 5)])
    s = MetricsSampler(lambda: next(bodies))
    s.sample(0.0)
    r = s.sample(1.0)
    assert r.acceptance_rate == pytest.approx(0.75)


def test_process_sampler_cpu_percent():
    readings = iter([ProcessUsage(100, 10.0), ProcessUsage(200, 10.5), None, ProcessUsage(300, 11.0)])
    s = ProcessSampler(lambda: next(readings))
    assert s.sample(0.0).cpu_percent is None
    r = s.sample(1.0)
    assert r.cpu_percent == pytest.approx(50.0) and r.rss_bytes == 200
    gone = s.sample(2.0)
    assert gone.rss_bytes is None and gone.cpu_percent is None
    assert s.sample(3.0).cpu_percent is None  # no bogus rate across the gap


def test_vram_sampler_swallows_errors():
    def boom():
        raise RuntimeError("nvml gone")

    assert VramSampler(boom).sample() is None
    assert VramSampler(lambda: 123).sample() == 123


def test_acceptance_watch_alerts_once_after_hold():
    w = AcceptanceWatch(break_even_rate=0.6, hold_s=60, min_draft_tokens=50)
    verdicts = [w.feed(t, 20, 8) for t in range(0, 61, 10)]  # 40 % acceptance for a minute
    assert not any(v.alert for v in verdicts[:-1])
    assert verdicts[-1].alert and verdicts[-1].acceptance_rate == pytest.approx(0.4)
    assert not w.feed(70, 20, 8).alert  # only once
    for t in range(80, 200, 10):
        w.feed(t, 20, 18)  # recovered (90 %)
    assert w.feed(200, 20, 18).below is False
    alerts = [w.feed(t, 20, 2).alert for t in range(210, 300, 10)]
    assert alerts.count(True) == 1  # alerts again after recovery


def test_acceptance_watch_needs_enough_drafts():
    w = AcceptanceWatch(break_even_rate=0.6, hold_s=10, min_draft_tokens=100)
    v = [w.feed(t, 5, 0) for t in range(0, 30)]
    assert all(x.acceptance_rate is None and not x.alert for x in v[:19])
    with pytest.raises(ValueError):
        AcceptanceWatch(1.5)


def test_collector_fills_every_series():
    t = [0.0]
    bodies = iter([metrics_text(0, 0, 0, 0, 0), metrics_text(50, 1.0, 20, 10, 5, processing=1)])
    usage = iter([ProcessUsage(1000, 1.0), ProcessUsage(2000, 1.25)])
    c = Collector(
        metrics=MetricsSampler(lambda: next(bodies)),
        process=ProcessSampler(lambda: next(usage)),
        vram=VramSampler(lambda: 4096),
        capacity=10,
        clock=lambda: t[0],
        process_every=1,
    )
    c.watch = AcceptanceWatch(0.9, hold_s=0.5, min_draft_tokens=1)
    c.poll()
    t[0] = 1.0
    tick = c.poll()
    assert tick.metrics.gen_tokens_per_s == pytest.approx(50)
    assert tick.watch.alert  # 50 % < 90 % break-even over a covered window
    assert c.series["acceptance_rate"].last_value() == pytest.approx(0.5)
    assert c.series["cpu_percent"].last_value() == pytest.approx(25)
    assert c.series["ram_rss_bytes"].last_value() == 2000
    assert c.series["vram_used_bytes"].last_value() == 4096
    assert c.series["requests_processing"].last_value() == 1
    c.detach()
    c.poll()
    assert c.series["gen_tokens_per_s"].latest().value is None


def test_collector_samples_process_every_nth_poll():
    reads = []

    def read():
        reads.append(1)
        return ProcessUsage(100, float(len(reads)))

    t = [0.0]
    c = Collector(process=ProcessSampler(read), clock=lambda: t[0], process_every=3)
    for i in range(7):
        t[0] = float(i)
        c.poll()
    assert len(reads) == 3  # polls 0, 3, 6
    assert len(c.series["ram_rss_bytes"]) == 3
    assert len(c.series["gen_tokens_per_s"]) == 7
    assert c.series["cpu_percent"].last_value() == pytest.approx(100 / 3)
