"""The save step: the winner's configuration and exact argv saved with the decision, the budget and every
measurement; after a cancel, nothing saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.keys import staleness_keys
from tuner.calibration.pipeline.placement import plan_sweep
from tuner.calibration.pipeline.save import cancelled_result, save_result
from tuner.calibration.request import TuneEvent
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.profiles import ProfileStore

GOOD = Candidate(spec_type="ngram-mod")


def _outcome(winner: Candidate = GOOD, unmeasured: tuple[Candidate, ...] = ()) -> SearchOutcome:
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(winner, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                            acceptance=0.64, first_repetition=1)]
    return SearchOutcome.of(ms, unmeasured=unmeasured)


def test_the_profile_holds_the_winners_argv_decision_budget_and_evidence(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve(budget_s=240, server_args=("--no-repack",))
    keys, plan = staleness_keys(inputs), plan_sweep(inputs, None, Events(None))
    outcome = _outcome(unmeasured=(Candidate(spec_type="ngram-simple"),))
    decision = decide(outcome)
    events: list[TuneEvent] = []
    result = save_result(store, inputs, keys, plan, outcome, decision, Events(events.append))
    assert result.profile_path == store.path_for(inputs.target_path) and result.profile == store.load(inputs.target_path)
    p = result.profile
    assert p is not None and p.keys == keys and Candidate.from_json(p.winner) == GOOD
    assert p.argv[0] == str(inputs.binary.path) and p.argv[-1] == "--no-repack"  # the user's flags last
    assert "--spec-type" in p.argv and "ngram-mod" in p.argv and "--port" not in p.argv
    assert p.server_config["n_ctx"] == 512 and p.server_config["threads"] == 1
    assert p.decision["budget_s"] == 240.0 and p.decision["budget_spent_before"] == ["ngram-simple"]
    assert p.decision["reason"] == decision.reason and len(p.evidence) == len(outcome.measurements)
    assert result.decision is decision and result.measurements == outcome.measurements and not result.reused
    assert [(e.kind, e.message) for e in events] == [("saved", f"profile saved to {result.profile_path}")]


def test_a_winner_whose_argv_cannot_be_built_is_saved_with_a_note(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    odd = Candidate(spec_type="ngram-cache", ngram_n_max=16)  # ngram-cache has a fixed draft length
    outcome = _outcome(odd)
    events: list[TuneEvent] = []
    result = save_result(store, inputs, staleness_keys(inputs), plan_sweep(inputs, None, Events(None)), outcome,
                         decide(outcome), Events(events.append))
    assert result.profile is not None and result.profile.argv == ()
    assert [e.kind for e in events] == ["error", "saved"]
    assert events[0].message.startswith("could not build the winner's argv: ")


def test_a_cancelled_sweep_saves_nothing(resolve: Any, tmp_path: Path) -> None:
    inputs = resolve()
    plan = plan_sweep(inputs, None, Events(None))
    outcome = SearchOutcome.of(_outcome().measurements[:1], cancelled=True)
    result = cancelled_result(inputs, plan, outcome, Events(None))
    assert result.cancelled and result.decision is None and result.profile is None
    assert result.measurements == outcome.measurements and result.dropped == plan.dropped
    assert not ProfileStore(tmp_path / "profiles").folder.exists()


def test_the_profile_keeps_what_the_live_prediction_needs(resolve: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from tuner.calibration.advice import ProfileFacts, live_advice
    from tuner.calibration.predict import PerPositionCounts

    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    per_run = PerPositionCounts(40, 40 * 12, 90, (30, 25, 20, 10, 5) + (0,) * 59)  # ngram-mod: 64 positions
    ms = [replace(m, counts=per_run) if m.candidate == GOOD else m for m in _outcome().measurements]
    outcome = SearchOutcome.of(ms)
    decision = decide(outcome)
    result = save_result(store, inputs, staleness_keys(inputs), plan_sweep(inputs, None, Events(None)), outcome,
                         decision, Events(None))
    assert result.profile is not None
    facts = ProfileFacts.from_decision(result.profile.decision)
    assert facts is not None and facts.n_max == 64 and facts.speedup == decision.speedup
    # the winner's own counters, summed over its runs, predict the speedup it measured
    runs = [m for m in ms if m.candidate == GOOD]
    total = PerPositionCounts(40 * len(runs), 40 * 12 * len(runs), 90 * len(runs),
                              tuple(x * len(runs) for x in per_run.accepted_per_pos))
    gen = float(sum(max(1, (s.predicted_n or 1) - 1) for m in runs for s in m.samples))
    assert live_advice(total, gen, 50, facts).served_speedup == pytest.approx(decision.speedup)


def test_a_profile_without_counters_keeps_no_live_prediction(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    outcome = _outcome()  # synthetic rounds carry no per-position counters
    result = save_result(store, inputs, staleness_keys(inputs), plan_sweep(inputs, None, Events(None)), outcome,
                         decide(outcome), Events(None))
    assert result.profile is not None and "live_prediction" not in result.profile.decision
