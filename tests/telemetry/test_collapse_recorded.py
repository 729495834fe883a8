"""A recorded collapse replayed through the Collector: llama-server at its default thread count on the 12-block
F16 target of tests/synth.py, generating one request after another; after 20 s another program keeps one core
busy. The ``/metrics`` scrapes and the load watcher's readings were recorded once a second on the shared 2-core
build machine (tests/telemetry/record_collapse.py) while other engineers' llama-servers ran too (others used
about 1.4 cores before the burner): the "profile" speed is the recording's own before the burner, 18.9
tokens/s; with the burner one 64-token request took 24 s (2.6 tokens/s). The watch must call it a collapse
only once the burner runs, and only after 10 s of slow generation."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.telemetry.collector import Collector
from tuner.telemetry.samplers import MetricsSampler
from tuner.telemetry.watch import CollapseWatch

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "collapse_default_threads.json"


def _replay(rec: dict, profile_tps: float) -> list[tuple[dict, object]]:
    samples = rec["samples"]
    i = {"n": 0}
    now = {"t": 0.0}

    def fetch() -> str:
        return samples[i["n"]]["metrics"]

    col = Collector(metrics=MetricsSampler(fetch), clock=lambda: now["t"])
    col.watch_collapse(CollapseWatch(profile_tps), lambda: samples[i["n"]]["other_cores"])
    out = []
    for n, s in enumerate(samples):
        i["n"], now["t"] = n, s["t_s"]
        out.append((s, col.poll().collapse))
    return out


def test_the_recorded_collapse_is_called_once_after_the_burner_started() -> None:
    rec = json.loads(DATA.read_text())
    ticks = _replay(rec, rec["profile_tps"])
    alerts = [s for s, v in ticks if v is not None and v.alert]
    assert len(alerts) == 1
    assert alerts[0]["burner"] and alerts[0]["t_s"] >= rec["burn_at_s"] + 10
    assert not any(v is not None and v.collapsed for s, v in ticks if not s["burner"])
    slow = [v.live_tps for s, v in ticks if s["burner"] and v is not None and v.live_tps]
    assert slow and max(slow) < 0.3 * rec["profile_tps"]  # what the recording shows: a collapse, not a dip


def test_the_same_recording_is_no_collapse_against_a_slow_profile() -> None:
    rec = json.loads(DATA.read_text())
    slow = [v.live_tps for s, v in _replay(rec, rec["profile_tps"]) if s["burner"] and v is not None and v.live_tps]
    ticks = _replay(rec, 2 * max(slow))  # a profile only twice the collapsed speed: 0.5×, above 0.3×
    assert not any(v is not None and v.collapsed for _s, v in ticks)
