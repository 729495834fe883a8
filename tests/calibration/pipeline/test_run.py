"""``run_tune`` as the list of its steps, driven end to end by the scripted server on a simulated clock: a
sweep saved, the same request answered from the profile without a launch, ``force`` measuring again, a
cancel saving nothing, a bad input refused before any launch. (tests/calibration/test_goldens.py pins one
run's every event and its profile byte for byte.)"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import pytest

import tuner.calibration.pipeline.sweep as sweep_step
from tests.fakes.scripted_server import ScriptedLaunch, SimClock
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import Launch
from tuner.calibration.pipeline import run_tune
from tuner.calibration.prompts import PromptFileError
from tuner.calibration.request import TuneEvent, TuneRequest
from tuner.calibration.sampling import GREEDY
from tuner.calibration.search import run_search
from tuner.profiles import ProfileStore


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, quiet_machine: Any) -> SimClock:
    clock = SimClock()
    monkeypatch.setattr(sweep_step, "run_search", functools.partial(run_search, clock=clock))
    return clock


def _speeds(c: Candidate) -> float:
    return 20.0 if c.is_baseline else 26.0 if c.spec_type == "ngram-mod" else 14.0


def _request(family: Path, **fields: Any) -> TuneRequest:
    return TuneRequest.create(family, **{"sampling": GREEDY, "budget_s": 120, "n_predict": 32, "n_ctx": 512,
                                         "threads": 1, "max_prompts": 2, "long_context": False, **fields})


def test_a_sweep_is_saved_then_reused_until_forced(family: Path, fake_binary: Any, clock: SimClock,
                                                  tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    events: list[TuneEvent] = []
    launch = ScriptedLaunch(_speeds, clock=clock)
    first = run_tune(_request(family), events.append, threading.Event(), store, launch_fn=launch, binary=fake_binary)
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-2:] == ["decision", "saved"] and "plan" in kinds
    assert kinds.index("plan") < kinds.index("launch") < kinds.index("decision")
    assert first.profile is not None and first.decision is not None and first.measurements and not first.reused
    assert launch.launched and launch.live == []

    events.clear()
    again = run_tune(_request(family), events.append, threading.Event(), store,
                     launch_fn=ScriptedLaunch(_speeds, clock=clock), binary=fake_binary)
    assert again.reused and again.profile == first.profile and [e.kind for e in events] == ["started", "reused"]
    assert again.decision is not None and again.decision.winner == first.decision.winner

    forced = ScriptedLaunch(_speeds, clock=clock)
    third = run_tune(_request(family, force=True), None, threading.Event(), store, launch_fn=forced, binary=fake_binary)
    assert not third.reused and forced.launched and third.profile is not None


def test_a_cancelled_sweep_returns_what_ran_and_saves_nothing(family: Path, fake_binary: Any, clock: SimClock,
                                                             tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    cancel = threading.Event()
    launch = ScriptedLaunch(_speeds, clock=clock)

    def cancels_at_the_first_launch(c: Candidate, ev: threading.Event) -> Launch:
        cancel.set()
        return launch(c, ev)

    events: list[TuneEvent] = []
    result = run_tune(_request(family), events.append, cancel, store, launch_fn=cancels_at_the_first_launch,
                      binary=fake_binary)
    assert result.cancelled and result.decision is None and result.profile is None
    assert events[-1].kind == "cancelled" and store.load(result.target_path) is None and launch.live == []


def test_a_bad_input_is_refused_before_any_launch(family: Path, fake_binary: Any, clock: SimClock,
                                                  tmp_path: Path) -> None:
    launch = ScriptedLaunch(_speeds, clock=clock)
    with pytest.raises(PromptFileError, match="cannot read prompt file"):
        run_tune(_request(family, prompts=tmp_path / "none.jsonl"), None, threading.Event(),
                 ProfileStore(tmp_path / "profiles"), launch_fn=launch, binary=fake_binary)
    assert launch.launched == []
