"""Live advice (tuner.calibration.advice) on /metrics counters recorded from a real llama-server
(tests/calibration/record_live_metrics.py: the synthetic family's good and unrelated drafts at n_max 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.calibration.advice import (
    ALONE,
    KEEP,
    LONGER,
    LONGER_MIGHT_PAY,
    MIN_REQUESTS,
    SHORTER,
    TOO_FEW,
    ProfileFacts,
    live_advice,
)
from tuner.calibration.predict import CostModel, PerPositionCounts, fit_run_cost, parse_spec_metrics

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "live_advice.json"


def _run(name: str) -> tuple[PerPositionCounts, float, int, float]:
    """(window counters, generated tokens after each first, requests, tokens/s) of one recorded run."""
    r = json.loads(DATA.read_text())["runs"][name]
    counts = parse_spec_metrics(r["after"]).minus(parse_spec_metrics(r["before"]))
    gen = float(sum(t["predicted_n"] - 1 for t in r["timings"]))
    tps = gen / (sum(t["predicted_ms"] for t in r["timings"]) / 1000.0)
    return counts, gen, len(r["timings"]), tps


def _facts_of_good(ci_low_share: float = 0.95) -> ProfileFacts:
    """Facts of a profile that served the good draft at n_max 8, with its measured speedup and own cost."""
    counts, gen, _n, tps = _run("good")
    ratio = tps / _run("baseline")[3]
    cost = fit_run_cost(counts, gen, ratio)
    assert cost is not None
    return ProfileFacts(8, cost, ratio, ratio * ci_low_share)


def test_the_tunes_own_traffic_predicts_its_measured_speedup():
    counts, gen, n, _ = _run("good")
    facts = _facts_of_good()
    adv = live_advice(counts, gen, n, facts)
    assert adv.requests == n == 12
    assert adv.served_speedup == pytest.approx(facts.speedup)
    assert sorted(adv.predicted) == list(range(1, 9))
    # the recorded tiny target barely gains from drafting: drafting one token is predicted best
    assert adv.best_n_max == 1 and adv.predicted[1] > adv.served_speedup * (1 + facts.margin)
    assert adv.verdict == SHORTER


def test_a_wide_measured_interval_keeps_a_small_difference_from_being_advice():
    counts, gen, n, _ = _run("good")
    adv = live_advice(counts, gen, n, _facts_of_good(ci_low_share=0.8))  # interval wider than the 11 % gap
    assert adv.verdict == LONGER  # 69 of 104 steps accepted all 8 drafted tokens
    assert adv.last_position_acceptance == pytest.approx(69 / 104)
    assert adv.last_position_acceptance >= LONGER_MIGHT_PAY


def test_traffic_the_draft_cannot_predict_advises_no_speculation():
    counts, gen, n, tps = _run("unrelated")
    adv = live_advice(counts, gen, n, _facts_of_good())
    assert adv.verdict == ALONE
    assert adv.served_speedup is not None and adv.served_speedup < 0.5
    assert adv.alone_ratio is not None and adv.alone_ratio > 2
    # measured on the same requests: the unrelated draft ran several times slower than the model alone
    assert tps / _run("baseline")[3] < 0.5


def test_too_few_requests_is_no_verdict():
    counts, gen, n, _ = _run("unrelated")
    assert live_advice(counts, gen, MIN_REQUESTS - 1, _facts_of_good()).verdict == TOO_FEW
    none = PerPositionCounts(0, 0, 0, ())
    assert live_advice(none, 500, 50, _facts_of_good()).verdict == TOO_FEW


def test_keep_when_nothing_beats_the_served_length():
    # 100 steps at n_max 4, acceptance falling from 0.9 to 0.3 per position; cheap drafting
    counts = PerPositionCounts(100, 400, 90 + 70 + 50 + 30, (90, 70, 50, 30))
    gen = 100 + counts.accepted_tokens_total
    facts = ProfileFacts(4, CostModel(0.05, 0.0, 1.0), 2.0, 1.8)
    adv = live_advice(counts, gen, 20, facts)
    assert adv.best_n_max == 4 and adv.verdict == KEEP


def test_facts_round_trip_through_a_profile_decision():
    facts = ProfileFacts.from_decision({"speedup": 1.45, "speedup_ci_low": 1.3, "live_prediction": {
        "n_max": 6, "per_draft_token": 0.1, "per_step": 0.02, "baseline_gen_tokens_per_s": 30.0}})
    assert facts is not None and facts.n_max == 6 and facts.margin == pytest.approx(1.45 / 1.3 - 1)
    assert ProfileFacts.from_decision({"speedup": 1.45}) is None  # a profile saved before live predictions
