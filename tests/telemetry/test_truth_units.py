"""Monitor truth, core side: breaks where nothing was measured, requests in flight counting the
queued ones and bursts shorter than a sample, idle detection, the no-drafts summary."""

from __future__ import annotations

import math

import pytest

from tests.telemetry.test_telemetry_units import metrics_text
from tuner.telemetry.collector import Collector
from tuner.telemetry.prom import parse_metrics
from tuner.telemetry.ring import with_breaks
from tuner.telemetry.samplers import MetricsSampler, in_flight


def test_with_breaks_inserts_a_break_in_each_gap():
    xs = [0.0, 1.0, 2.0, 3.0, 183.0, 184.0, 185.0]
    ys = [5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    bx, by = with_breaks(xs, ys)
    assert by.count(None) == 1
    i = by.index(None)
    assert bx[i - 1] == 3.0 and bx[i + 1] == 183.0
    # a series sampled every 5 s is continuous at 5 s spacing, broken at 30 s
    bx, by = with_breaks([0, 5, 10, 15, 45, 50], [1, 1, 1, 1, 1, 1])
    assert by.count(None) == 1 and bx[by.index(None) - 1] == 15
    # explicit limit, and short inputs unchanged
    assert with_breaks([0, 1, 2], [1, 2, 3], max_dt_s=0.5)[1] == [1, None, 2, None, 3]
    assert with_breaks([0.0], [1.0]) == ([0.0], [1.0])


def test_in_flight_counts_queued_and_bursts():
    assert in_flight(1, 19) == 20
    assert in_flight(0, 0) == 0
    assert in_flight(0, 0, active_in_interval=True) == 1  # a burst that ended between two scrapes
    assert in_flight(3, 0, active_in_interval=True) == 3
    assert in_flight(None, None) is None


def _body(pred, pred_s, processing=0, deferred=0, prompt=12, drafted=None, accepted=None, drafts=None):
    text = metrics_text(pred, pred_s, drafted, accepted, drafts, processing=processing)
    return (text.replace("llamacpp:requests_deferred 0", f"llamacpp:requests_deferred {deferred}")
                .replace("llamacpp:prompt_tokens_total 12", f"llamacpp:prompt_tokens_total {prompt}"))


def test_sampler_reports_deferred_and_burst():
    s = MetricsSampler(lambda: "")
    s.update(parse_metrics(_body(0, 0)), 0.0)
    r = s.update(parse_metrics(_body(0, 0, processing=1, deferred=7)), 1.0)
    assert r.requests_deferred == 7 and r.requests_in_flight == 8
    # gauges back at 0, but 40 tokens were generated in the interval: one request ran
    r = s.update(parse_metrics(_body(40, 0.2, prompt=20)), 2.0)
    assert r.requests_processing == 0 and r.requests_in_flight == 1 and r.generated_tokens == 40
    r = s.update(parse_metrics(_body(40, 0.2, prompt=20)), 3.0)
    assert r.requests_in_flight == 0 and r.gen_tokens_per_s is None


def test_collector_idle_and_no_draft_summary():
    t = [0.0]
    bodies = iter([_body(0, 0, drafted=0, accepted=0, drafts=0),
                   _body(100, 1.0, prompt=30, drafted=0, accepted=0, drafts=0),
                   _body(100, 1.0, prompt=30, drafted=0, accepted=0, drafts=0)])
    c = Collector(metrics=MetricsSampler(lambda: next(bodies)), clock=lambda: t[0])
    assert c.idle_for_s() is None and c.is_idle()
    c.poll()
    t[0] = 1.0
    c.poll()
    assert c.idle_for_s() == 0.0 and not c.is_idle()
    assert c.drafting_summary(1.0) == (100.0, 0.0)
    t[0] = 30.0
    c.poll()
    assert c.idle_for_s() == pytest.approx(29.0) and c.is_idle()
    assert c.series["requests_in_flight"].last_value() == 0
    assert not math.isnan(c.series["gen_tokens_per_s"].last_value())


def test_the_first_request_after_a_sleep_is_left_out_of_speed_acceptance_and_the_watch():
    from tuner.telemetry.watch import AcceptanceWatch

    t = [0.0]
    sleeps = [0]
    bodies = iter([
        _body(0, 0, drafted=0, accepted=0, drafts=0),
        _body(100, 1.0, prompt=30, drafted=80, accepted=70, drafts=20),  # a request before any sleep: counted
        _body(100, 1.0, prompt=30, drafted=80, accepted=70, drafts=20),  # idle; then the server sleeps
        _body(100, 1.0, prompt=30, drafted=80, accepted=70, drafts=20),  # asleep, woken, the request still runs
        _body(140, 3.0, prompt=40, drafted=120, accepted=80, drafts=30),  # the request that woke it ended
        _body(240, 4.0, prompt=70, drafted=200, accepted=150, drafts=50),  # the next one: counted again
    ])
    watch = AcceptanceWatch(0.5, hold_s=100.0, min_draft_tokens=1)
    c = Collector(clock=lambda: t[0])
    c.attach(MetricsSampler(lambda: next(bodies)), None, watch, sleeps=lambda: sleeps[0])
    speeds = []
    for i in range(6):
        t[0] = float(i)
        if i == 3:
            sleeps[0] = 1  # the supervisor saw it fall asleep
        tick = c.poll()
        latest = c.series["gen_tokens_per_s"].latest()
        speeds.append(latest.value if latest is not None else None)
        if i == 4:
            assert tick.watch is not None and tick.watch.acceptance_rate == pytest.approx(70 / 80), \
                "the woken request's drafts were not fed to the watch"
    assert speeds[1] == pytest.approx(100.0) and speeds[5] == pytest.approx(100.0)
    assert speeds[4] is None and c.left_out_after_wake == 1
    acceptance = [s.value for s in c.series["acceptance_rate"].snapshot()]
    assert acceptance[4] is None and acceptance[5] == pytest.approx((150 - 80) / (200 - 120))
    assert [s.value for s in c.series["generated_tokens"].snapshot()][4] == 40  # the counts still count it
    # a new launch counts its sleeps from 0 again: no request is left out for that
    sleeps[0] = 0
    c.attach(MetricsSampler(lambda: _body(240, 4.0)), None, sleeps=lambda: sleeps[0])
    assert not c._woke_request(None) and c.left_out_after_wake == 1
