"""The sweep step: the search under the load watcher, after a look for other llama-servers; a cancel is an
outcome (its event sent before the servers stop), a baseline that cannot run ends the tune with its evidence."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest

import tuner.calibration.pipeline.sweep as sweep_step
import tuner.hardware.host
from tests.fakes.scripted_server import ScriptedLaunch, SimClock
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import Launch, LaunchError
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.placement import plan_sweep
from tuner.calibration.pipeline.sweep import run_sweep
from tuner.calibration.request import TuneError, TuneEvent
from tuner.calibration.sampling import GREEDY
from tuner.calibration.search import run_search


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> SimClock:
    """The search on a simulated clock (a sweep of minutes in milliseconds)."""
    clock = SimClock()
    monkeypatch.setattr(sweep_step, "run_search", functools.partial(run_search, clock=clock))
    return clock


def _speeds(c: Candidate) -> float:
    return 20.0 if c.is_baseline else 12.0  # every speculative candidate loses: a short sweep


def test_a_sweep_with_another_llama_server_running(resolve: Any, scripted: SimClock,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tuner.hardware.host, "foreign_processes", lambda name: [(4242, "llama-server -m x.gguf")])
    events: list[TuneEvent] = []
    inputs = resolve(sampling=GREEDY, budget_s=60, n_predict=16)
    plan = plan_sweep(inputs, None, Events(None))
    launch = ScriptedLaunch(_speeds, clock=scripted)
    result = run_sweep(plan, inputs, launch, threading.Event(), Events(events.append))
    assert not result.outcome.cancelled and result.outcome.measurements[0].candidate.is_baseline
    assert result.competing_pids == (4242,) and result.load.samples == 3
    assert result.machine.competing_pids == (4242,) and result.machine.load is result.load
    note = events[0]
    assert note.kind == "error" and note.message.startswith("1 other llama-server process running on this machine "
                                                             "(pid 4242): the measurements compete with them")
    assert note.detail == {"competing": [{"pid": 4242, "cmdline": "llama-server -m x.gguf"}]}
    assert launch.live == []  # the search stops what it launched


def test_a_cancel_is_an_outcome_with_its_event(resolve: Any, scripted: SimClock) -> None:
    events: list[TuneEvent] = []
    inputs = resolve(sampling=GREEDY, budget_s=60, n_predict=16)
    cancel = threading.Event()
    launch = ScriptedLaunch(_speeds, clock=scripted)

    def cancelled_after_the_baseline(c: Candidate, ev: threading.Event) -> Launch:
        if not c.is_baseline:
            cancel.set()
        return launch(c, ev)

    result = run_sweep(plan_sweep(inputs, None, Events(None)), inputs, cancelled_after_the_baseline, cancel,
                       Events(events.append))
    assert result.outcome.cancelled and result.outcome.measurements
    assert events[-1].kind == "cancelled" and events[-1].message == "tuning cancelled; nothing was saved"


def test_a_baseline_that_cannot_run_ends_the_tune_with_the_servers_evidence(resolve: Any, scripted: SimClock) -> None:
    def fails(c: Candidate, cancel: threading.Event) -> Launch:
        raise LaunchError("llama-server exited while loading the model", ("error: out of memory",))

    inputs = resolve(sampling=GREEDY, budget_s=60, n_predict=16)
    with pytest.raises(TuneError) as info:
        run_sweep(plan_sweep(inputs, None, Events(None)), inputs, fails, threading.Event(), Events(None))
    assert str(info.value).startswith("stories260K.gguf could not be measured on its own: ")
    assert "error: out of memory" in info.value.evidence and not info.value.bad_input
