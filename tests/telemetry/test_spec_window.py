"""The collector keeps the speculative counters of the last requests (tuner.telemetry.spec_window), replayed
from /metrics texts recorded from a real llama-server (tests/calibration/record_live_metrics.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.calibration.predict import parse_spec_metrics
from tuner.telemetry.collector import Collector
from tuner.telemetry.samplers import MetricsRates, MetricsSampler
from tuner.telemetry.spec_window import SpecWindow

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "live_advice.json"


def _collector(bodies: list[str]) -> Collector:
    it, t = iter(bodies), [0.0]

    def clock() -> float:
        t[0] += 1.0
        return t[0]

    return Collector(metrics=MetricsSampler(lambda: next(it)), clock=clock)


def test_the_window_holds_the_counter_differences_of_the_requests():
    run = json.loads(DATA.read_text())["runs"]["good"]
    c = _collector([run["before"], run["after"]])
    c.poll()
    c.poll()
    w = c.spec_window.totals()
    diff = parse_spec_metrics(run["after"]).minus(parse_spec_metrics(run["before"]))
    assert w.requests == 1  # twelve requests ended within one poll: counted once (a lower bound)
    assert w.generated_tokens == sum(t["predicted_n"] for t in run["timings"])
    assert (w.drafts, w.draft_tokens, w.accepted_tokens) == (diff.drafts_total, diff.draft_tokens_total,
                                                             diff.accepted_tokens_total)
    assert w.accepted_per_pos == tuple(float(v) for v in diff.accepted_per_pos)
    assert len(w.accepted_per_pos) == 8


def test_counters_listed_for_the_first_time_count_whole_and_idle_polls_are_not_requests():
    run = json.loads(DATA.read_text())["runs"]["good"]
    fresh = "\n".join(line for line in run["before"].splitlines() if "spec_decode" not in line)
    c = _collector([fresh, run["after"], run["after"]])
    for _ in range(3):
        c.poll()
    w = c.spec_window.totals()
    after = parse_spec_metrics(run["after"])
    assert w.requests == 1 and w.drafts == after.drafts_total
    assert w.accepted_per_pos == tuple(float(v) for v in after.accepted_per_pos)


def test_a_new_server_starts_an_empty_window_and_the_window_is_bounded():
    run = json.loads(DATA.read_text())["runs"]["good"]
    c = _collector([run["before"], run["after"]])
    c.poll()
    c.poll()
    assert c.spec_window.totals().requests == 1
    c.attach(None, None)
    assert c.spec_window.totals().requests == 0 and c.spec_window.totals().accepted_per_pos == ()
    w = SpecWindow(size=3)
    for i in range(5):
        w.add(MetricsRates(t_s=i, generated_tokens=10.0, drafts=2.0, accepted_per_pos=(1.0,)))
    w.add(MetricsRates(t_s=9, generated_tokens=0.0))
    assert w.totals().requests == 3 and w.totals().accepted_per_pos == (3.0,)
