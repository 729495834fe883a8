"""The decision step: ``decide`` on the sweep's outcome, then the report's sentences from the facts around
it (the machine's load, other llama-servers, the requests measured); one ``"decision"`` event with the load
watcher's figures and the search's protocol."""

from __future__ import annotations

from typing import Any

from tuner.calibration.candidates import Candidate
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pipeline.decision import reach_decision
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.placement import plan_sweep
from tuner.calibration.pipeline.sweep import SweepResult
from tuner.calibration.request import TuneEvent
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.hardware.host import LoadSummary

GOOD = Candidate(spec_type="ngram-mod")
QUIET = LoadSummary(samples=4, other_cpu_mean=0.01, other_cpu_max=0.02, steal_mean=0.0, busy_share=0.0)
BUSY = LoadSummary(samples=10, other_cpu_mean=0.4, other_cpu_max=0.55, steal_mean=0.0, busy_share=0.5)


def _outcome() -> SearchOutcome:
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                            acceptance=0.64, first_repetition=1)]
    return SearchOutcome.of(ms, protocol={"n_predict": 64})


def test_the_decision_and_its_event(resolve: Any) -> None:
    inputs = resolve()
    plan = plan_sweep(inputs, None, Events(None))
    events: list[TuneEvent] = []
    decision = reach_decision(inputs, plan, SweepResult(_outcome(), QUIET), Events(events.append))
    assert decision.winner == GOOD and decision.busy_note is None
    assert "sweep.measured_with" in [s.kind for s in decision.sentences]
    (event,) = events
    assert (event.kind, event.message, event.decision) == ("decision", decision.reason, decision)
    assert event.detail == {"load": {"other_cpu_mean": 0.01, "other_cpu_max": 0.02, "steal_mean": 0.0, "samples": 4,
                                     "busy": False}, "protocol": {"n_predict": 64}}


def test_a_busy_machine_and_another_llama_server_are_in_the_words(resolve: Any) -> None:
    inputs = resolve()
    plan = plan_sweep(inputs, None, Events(None))
    decision = reach_decision(inputs, plan, SweepResult(_outcome(), BUSY, (4242,)), Events(None))
    assert decision.busy_note is not None and "40 % of the CPU" in decision.busy_note
    assert [s.params for s in decision.sentences if s.kind == "machine.load"] == [
        {"load": {"other_cpu_mean": 0.4, "other_cpu_max": 0.55, "steal_mean": 0.0}, "competing": 1}]
