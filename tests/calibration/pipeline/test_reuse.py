"""The reuse-or-stale step: a fresh saved profile answers without measuring, a stale one says why, ``force``
re-tunes, an unreadable one is kept aside; a saved decision is rebuilt with its figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.keys import staleness_keys
from tuner.calibration.pipeline.reuse import check_saved, decision_from_profile, reused_result
from tuner.calibration.request import TuneEvent
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.profiles import Profile, ProfileStore

GOOD = Candidate(spec_type="ngram-mod")


def _decision() -> Any:
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                            acceptance=0.64, first_repetition=1)]
    return decide(SearchOutcome.of(ms))


def _save(store: ProfileStore, inputs: Any, decision: dict[str, Any] | None = None, **keys: Any) -> Profile:
    d = _decision()
    profile = Profile(target_path=str(inputs.target_path), keys=dataclasses.replace(staleness_keys(inputs), **keys),
                      winner=d.winner.to_json(), server_config={}, argv=(), decision=decision or d.to_json())
    store.save(profile)
    return profile


def _check(store: ProfileStore, inputs: Any) -> tuple[Any, list[TuneEvent]]:
    events: list[TuneEvent] = []
    return check_saved(store, inputs, staleness_keys(inputs), Events(events.append)), events


def test_no_profile_runs_the_sweep_and_a_fresh_one_answers(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    reuse, events = _check(store, inputs)
    assert reuse.profile is None and not reuse.fresh and events == []
    _save(store, inputs)
    reuse, events = _check(store, inputs)
    assert reuse.fresh and reuse.reasons == () and events == [] and reuse.profile is not None
    got: list[TuneEvent] = []
    result = reused_result(store, inputs, reuse.profile, Events(got.append))
    assert result.reused and result.profile == reuse.profile and result.profile_path == store.path_for(inputs.target_path)
    assert result.decision is not None and result.decision.winner == GOOD and result.measurements == ()
    assert [(e.kind, e.message) for e in got] == [
        ("reused", "using the saved profile for stories260K.gguf (still fresh; --force re-tunes)")]


def test_force_re_tunes_a_fresh_profile_without_calling_it_stale(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    _save(store, resolve())
    reuse, events = _check(store, resolve(force=True))
    assert reuse.profile is not None and not reuse.fresh and reuse.reasons == () and events == []


def test_a_stale_profile_says_why(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    _save(store, inputs, n_ctx=4096, server_args=("--no-repack",))
    reuse, events = _check(store, inputs)
    assert not reuse.fresh and len(reuse.reasons) == 2
    assert [e.kind for e in events] == ["stale"] and events[0].detail == {"reasons": list(reuse.reasons)}
    assert events[0].message == "the saved profile is stale: " + "; ".join(reuse.reasons)


def test_a_sweep_that_ran_out_of_time_is_stale_for_a_larger_budget(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    short = resolve(budget_s=120)
    spent = {**_decision().to_json(), "budget_s": 120.0, "budget_spent_before": ["a", "b", "c", "d"]}
    _save(store, short, decision=spent)
    assert _check(store, short)[0].fresh  # the same budget: the same answer
    reuse, _ = _check(store, resolve(budget_s=600))  # the keys are the same: only the budget differs
    assert not reuse.fresh and reuse.reasons == (
        "its 120 s budget was spent before a, b, c and others were measured; this sweep has 600 s",)


def test_an_unreadable_profile_is_a_note_and_kept_aside(resolve: Any, tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    inputs = resolve()
    path = store.path_for(inputs.target_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json", encoding="utf-8")
    reuse, events = _check(store, inputs)
    assert reuse.profile is None and not reuse.fresh
    assert [e.kind for e in events] == ["error"]
    assert events[0].message.startswith("the saved profile was unreadable and has been kept aside: ")
    assert not path.exists() and list(path.parent.glob(f"{path.name}.corrupt-*"))


def test_a_saved_decision_comes_back_with_its_figures() -> None:
    d = _decision()
    again = decision_from_profile(Profile(target_path="/m/t.gguf", keys=None, winner=d.winner.to_json(),  # type: ignore[arg-type]
                                          server_config={}, argv=(), decision=d.to_json()))
    assert (again.winner, again.speedup, again.pairs, again.lossless) == (d.winner, d.speedup, d.pairs, d.lossless)
    assert again.break_even == d.break_even and again.per_category == d.per_category and again.reason == d.reason
    broken = {**d.to_json(), "break_even": [{"no": "fields"}], "per_category": "not a list"}
    again = decision_from_profile(Profile(target_path="/m/t.gguf", keys=None, winner=d.winner.to_json(),  # type: ignore[arg-type]
                                          server_config={}, argv=(), decision=broken))
    assert again.break_even == () and again.winner == d.winner
