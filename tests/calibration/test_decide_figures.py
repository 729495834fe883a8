"""The decision's sentence quotes the figures its verdict was computed from (a new user saw
"slower than the target alone (417.8 vs 152.6 tokens/s, 0.91×)" with a noisy baseline)."""

from __future__ import annotations

import re
from dataclasses import replace

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import compared_rates, decide, speedup_interval
from tuner.calibration.results import Measurement, synthetic_samples

BASE = Candidate()
NGRAM = Candidate(spec_type="ngram-simple")
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)


def _meas(c: Candidate, reps: list[float], rep_ids: list[int] | None = None, acceptance=None) -> Measurement:
    samples = synthetic_samples(reps, acceptance=acceptance)
    if rep_ids is not None:
        samples = tuple(replace(s, repetition=rep_ids[s.repetition]) for s in samples)
    return Measurement(c, samples=samples, speculative_active=True)


def _noisy_baseline() -> Measurement:
    # The first four repetitions ran while the machine was busy; the last three next to the candidate.
    return _meas(BASE, [150.0, 152.6, 149.0, 155.0, 460.0, 470.0, 455.0])


def _quoted(reason: str) -> tuple[float, float]:
    found = re.search(r"([\d.]+) vs ([\d.]+) tokens/s", reason)
    assert found, reason
    return float(found.group(1)), float(found.group(2))


def test_a_slower_candidate_is_never_quoted_faster_than_a_noisy_baseline() -> None:
    base = _noisy_baseline()
    cand = _meas(NGRAM, [418.0, 425.0, 417.8], rep_ids=[4, 5, 6], acceptance=0.3)
    d = decide([base, cand])
    assert d.no_speculation and d.best_speculative_speedup < 1.0
    c_tps, b_tps = _quoted(d.reason)
    assert c_tps < b_tps, d.reason  # the old text said 418.0 vs 152.6 next to "slower"
    assert abs(c_tps / b_tps - d.best_speculative_speedup) < 0.05
    assert f"paired speedup {d.best_speculative_speedup:.2f}×" in d.reason and "3 repetitions" in d.reason
    # break-even is computed against the same baseline repetitions: slower at 30 % means above 30 %
    be = d.break_even[0]
    assert be.break_even_acceptance is not None and be.break_even_acceptance > 0.3


def test_a_winner_quotes_the_paired_medians() -> None:
    base = _noisy_baseline()
    cand = _meas(GOOD, [700.0, 720.0, 690.0], rep_ids=[4, 5, 6], acceptance=0.8)
    d = decide([base, cand])
    assert d.winner == GOOD
    sp, _, _ = speedup_interval(cand, base)
    c_tps, b_tps = _quoted(d.reason)
    assert (c_tps, b_tps) == tuple(round(x, 1) for x in compared_rates(cand, base)[:2])
    assert abs(c_tps / b_tps - sp) < 0.05 and d.speedup == sp
    assert abs(d.gen_tokens_per_s / d.baseline_gen_tokens_per_s - sp) < 0.05
