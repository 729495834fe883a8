"""The verify-cost curve's own rules (tuner.calibration.verifycost) and where its synthetic flag may appear: only
on a verify-cost launch's argv, never on a served one or read back from a profile."""

from __future__ import annotations

import json

import pytest

from tuner.calibration.advice import ProfileFacts, live_advice, live_facts_json
from tuner.calibration.candidates import Candidate
from tuner.calibration.predict import PerPositionCounts, predicted_ratio
from tuner.calibration.serving import candidate_config, check_profile_extra_args
from tuner.calibration.verifycost import (
    CURVES_KEY,
    CurveError,
    VerifyCurve,
    curve_from_runs,
    curve_key,
    curves_in,
    synth_args,
)
from tuner.errors import DraftwiseError

CURVE = VerifyCurve(((1.0, 1.3), (4.0, 1.75), (5.0, 1.9), (6.0, 2.95), (16.0, 4.45)), "k1", 100.0)


def test_the_step_cost_is_linear_between_points_and_follows_the_end_segments_beyond_them() -> None:
    assert CURVE.step_cost(5) == pytest.approx(1.9)
    assert CURVE.step_cost(5.5) == pytest.approx(2.425)  # the jump between 5 and 6 is kept, not smoothed
    assert CURVE.step_cost(2) == pytest.approx(1.45)
    assert CURVE.step_cost(0.5) == pytest.approx(1.225)  # the first segment continued, never below 1
    assert CURVE.step_cost(0) == pytest.approx(1.15) and CURVE.step_cost(-20) == 1.0
    assert CURVE.step_cost(20) == pytest.approx(5.05)


def test_past_the_longest_point_a_falling_last_segment_is_not_continued_downward() -> None:
    noisy = VerifyCurve(((1.0, 1.6), (9.8, 6.45), (12.0, 4.44)), "k", 100.0)  # a smoke run's last two points
    assert noisy.step_cost(11.0) == pytest.approx(6.45 + (4.44 - 6.45) * 1.2 / 2.2)  # inside: as measured
    assert noisy.step_cost(16.0) == pytest.approx(4.44)  # beyond: held at the last point, not 1.5


def test_a_curve_from_synthetic_runs_is_the_baseline_over_each_run_never_below_one() -> None:
    c = curve_from_runs(100.0, {16.0: 25.0, 1.0: 80.0, 2.0: 104.0}, "key")
    assert c is not None and c.points == ((1.0, 1.25), (2.0, 1.0), (16.0, 4.0)) and c.key == "key"
    assert curve_from_runs(100.0, {1.0: 80.0}) is None and curve_from_runs(0.0, {1.0: 8.0, 2.0: 7.0}) is None


def test_the_curve_round_trips_and_a_bad_one_names_its_key() -> None:
    assert VerifyCurve.from_json(json.loads(json.dumps(CURVE.to_json()))) == CURVE
    bad = [{"points": [[1, 1.2]]}, {"points": [[2, 1.2], [1, 1.5]]}, {"points": [[1, "x"], [2, 1.5]]},
           {"points": [[1, 1e9], [2, 1.5]]}, {"points": [[1, float("nan")], [2, 1.5]]}, {"points": "no"}]
    for obj in bad:
        with pytest.raises(CurveError, match=r"^verify_cost\.points: "):
            VerifyCurve.from_json(obj)
    curves, problems = curves_in({CURVES_KEY: [CURVE.to_json(), bad[1], 7]})
    assert curves == (CURVE,) and len(problems) == 2 and problems[0].startswith(f"decision.{CURVES_KEY}[1]: ")


def test_the_key_changes_with_the_draft_the_placement_and_the_threads(tmp_path) -> None:
    d = tmp_path / "d.gguf"
    d.write_bytes(b"x" * 10)
    k = curve_key("id", d, "default ngl None", "")
    assert k == curve_key("id", d, "default ngl None", "")
    assert len({k, curve_key("id2", d, "default ngl None", ""), curve_key("id", d, "draft-on-gpu ngl 99", ""),
                curve_key("id", d, "default ngl None", "threads=1")}) == 4
    d.write_bytes(b"x" * 11)  # another file under the same name
    assert curve_key("id", d, "default ngl None", "") != k


def test_the_synthetic_flag_is_only_on_a_verify_cost_launch_and_never_read_back() -> None:
    probe = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=3, p_min=0.0)
    synth = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=3, p_min=0.0, synth_rates=(0, 0, 0))
    assert synth_args(synth.synth_rates) == ("--spec-synth-rates", "0,0,0") and synth_args(()) == ()
    assert candidate_config(synth, "/m/t.gguf").extra_args == ("--spec-synth-rates", "0,0,0")
    assert "--spec-synth-rates" not in candidate_config(probe, "/m/t.gguf").extra_args
    assert "synth_rates" not in probe.to_json() and synth.to_json()["synth_rates"] == [0.0, 0.0, 0.0]
    assert Candidate.from_json(synth.to_json()) == probe  # a configuration read back is never a benchmark
    assert synth.label.endswith("synthetic acceptance 0") and synth.key != probe.key
    with pytest.raises(DraftwiseError, match="--spec-synth-rates"):
        check_profile_extra_args(["--spec-synth-rates", "0,0,0"], "profile p.json")


def test_the_live_prediction_prices_steps_with_the_winners_curve() -> None:
    winner = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=5, p_min=0.0)
    group = f"{winner.spec_type}|{winner.draft_path}|{winner.placement}"
    counts = PerPositionCounts(100, 500, 300, (80, 70, 60, 50, 40))
    from tuner.calibration.results import Measurement, Sample

    run = Measurement(candidate=winner, samples=(Sample(prompt_index=0, category=None, repetition=0, gen_tokens_per_s=150.0,
                                                        predicted_n=401, predicted_ms=2000.0),), counts=counts)
    facts_json = live_facts_json(winner, [run], 1.5, 100.0, {group: CURVE})
    assert facts_json is not None and facts_json["verify_cost"] == CURVE.to_json()
    facts = ProfileFacts.from_decision({"live_prediction": facts_json, "speedup": 1.5})
    assert facts is not None and facts.curve == CURVE and facts.step_cost is facts.curve
    advice = live_advice(counts, 400.0, 20, facts)
    assert advice.predicted[3] == pytest.approx(predicted_ratio(counts, 400.0, 3, CURVE))
    # a profile whose curve is not one still predicts, with the fitted cost
    broken = {**facts_json, "verify_cost": {"points": [[1, 1.0]]}}
    fallback = ProfileFacts.from_decision({"live_prediction": broken, "speedup": 1.5})
    assert fallback is not None and fallback.curve is None and fallback.step_cost is fallback.cost
