"""The Tune tab replays a RECORDED slow sweep: tests/data/slow_sweep_events.json is the event stream
(kind, message, progress, elapsed_s, eta_s) of one real ``tune`` on a generated ≤ 10 tokens/s target,
recorded with ``python -m bench.slow_target --budget 240 --record tests/data/slow_sweep_events.json``
(the file says when, at which machine load, and what the sweep decided).

The replay keeps the recording's timings, compressed: a virtual clock stands in for the tab's
``time.monotonic`` and moves from one event's ``elapsed_s`` to the next in 1 s steps, each step one tick
of the tab's countdown timer (what its 1 s ``QTimer`` does between events), so minutes of sweep replay
in well under a second. Checked at every tick and every event, against what the user reads:

* the bar never moves back and never stands at 100 % while work remains (only the result fills it);
* from the first ETA shown on (the ETA is unknown, not shown, until the first warm-up was timed), the
  ETA on the bar is within a factor of ``FACTOR`` of the real time left (the recording's decision
  time minus now), give or take ``SLACK_S`` seconds near the end;
* the ETA does not jump: at an event, the shown ETA differs from the countdown of the previous one
  by at most ``JUMP`` of the whole sweep's duration.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest

from tuner.calibration.tune import TuneEvent
from tuner.ui.state import AppState

pytestmark = [pytest.mark.gui]

RECORDING = Path(__file__).resolve().parent.parent / "data" / "slow_sweep_events.json"
FACTOR = 2.0
"""The shown ETA is within [real / FACTOR − SLACK_S, real × FACTOR + SLACK_S]."""
SLACK_S = 20.0
JUMP = 0.25
"""At most this fraction of the sweep's duration between the ETA an event shows and the previous
event's ETA counted down to that moment."""


def shown_eta_s(fmt: str) -> float | None:
    """The ETA the bar reads (``"41%  about 1 min 35 s left"`` → 95), 0 for "finishing…", None when
    none is shown."""
    if "finishing" in fmt:
        return 0.0
    m = re.search(r"about (?:(\d+) min )?(\d+) s left", fmt)
    if m is None:
        return None
    return 60.0 * int(m.group(1) or 0) + int(m.group(2))


def test_shown_eta_parser():
    assert shown_eta_s("41%  about 1 min 35 s left") == 95
    assert shown_eta_s("3%  about 7 s left") == 7
    assert shown_eta_s("97%  finishing…") == 0
    assert shown_eta_s("0%") is None


class VirtualClock:
    def __init__(self) -> None:
        self.t = 5000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def tuning_tab(make_app, monkeypatch):
    from tuner.ui import tab_tune

    clock = VirtualClock()
    monkeypatch.setattr(tab_tune.time, "monotonic", clock)
    tab = make_app(tray_available=False).window.tune_tab
    tab.on_state(AppState.TUNING)
    tab._tick.stop()  # the replay ticks it, on the virtual clock
    yield tab, clock
    tab.on_state(AppState.IDLE)


def test_replayed_recorded_slow_sweep_progress_and_eta(tuning_tab):
    tab, clock = tuning_tab
    rec = json.loads(RECORDING.read_text())
    events = rec["events"]
    assert rec["source"].startswith("bench/slow_target.py")  # recorded from a real server, not simulated
    assert rec["warmup_gen_tokens_per_s"] <= 10.0  # a slow target
    decision_at = next(e["elapsed_s"] for e in events if e["kind"] == "decision")
    assert decision_at > 150  # minutes of real work
    start = clock.t - events[0]["elapsed_s"]

    values: list[int] = []
    etas: list[tuple[float, float, float]] = []  # (elapsed, shown ETA, real time left)
    jumps: list[float] = []
    prev: tuple[float, float] | None = None  # (elapsed, ETA shown) right after the previous event

    def look(at: float) -> float | None:
        fmt = tab.progress.format()
        values.append(tab.progress.value())
        assert tab.progress.value() < 1000 and not fmt.startswith("100%"), (at, fmt)
        eta = shown_eta_s(fmt)
        if eta is not None and at < decision_at:
            etas.append((at, eta, decision_at - at))
        return eta

    for e in events:
        if e["kind"] == "decision":
            break
        # the tab's 1 s countdown between the previous event and this one
        while prev is not None and clock.t + 1.0 < start + e["elapsed_s"]:
            clock.t += 1.0
            tab._count_down()
            look(clock.t - start)
        clock.t = start + e["elapsed_s"]
        before = None
        if prev is not None and prev[1] is not None:
            before = max(0.0, prev[1] - (e["elapsed_s"] - prev[0]))
        tab.on_event(TuneEvent(e["kind"], e["message"], progress=e["progress"], elapsed_s=e["elapsed_s"],
                               eta_s=e["eta_s"]))
        eta = look(e["elapsed_s"])
        if before is not None and eta is not None:
            jumps.append(abs(eta - before))
        if eta is not None or prev is None:
            prev = (e["elapsed_s"], eta)

    assert all(b >= a for a, b in pairwise(values)), "the bar moved back"
    assert values[-1] >= 900, values[-1]  # it moved along with the work
    assert etas, "no ETA was ever shown"
    first_eta_at = etas[0][0]
    assert first_eta_at <= 0.2 * decision_at  # shown from the first warm-up on, not late in the sweep
    bad = [(round(t), eta, round(real)) for t, eta, real in etas
           if not (real / FACTOR - SLACK_S <= eta <= real * FACTOR + SLACK_S)]
    assert not bad, f"ETA off by more than {FACTOR}x (elapsed, shown, real): {bad[:8]}"
    assert max(jumps) <= JUMP * decision_at, f"ETA jumped by {max(jumps):.0f} s on a {decision_at:.0f} s sweep"

    tab.on_done(None)
    assert tab.progress.value() == 1000 and tab.progress.format() == "done"
