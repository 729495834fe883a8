"""The request-level sequential test on its own (tuner.calibration.sequential): paired requests as units,
pairs as blocks that carry the drift, looks at 2, 4, 6 pairs. Its error rate and power over whole sweeps are
test_sequential_error.py's."""

from __future__ import annotations

import math
import random

import pytest

from tuner.calibration.pairing import Pair, generated_tokens_and_s, paired_requests
from tuner.calibration.results import Sample
from tuner.calibration.sequential import (
    ALTERNATING,
    FINALISTS,
    MAX_PAIRS,
    PairedRequest,
    alpha_per_look,
    contrast,
    look_points,
    paired_request,
    request_looks,
    request_test,
)


def reqs(means: list[float], sigma: float = 0.05, prompts: int = 6, seed: int = 0) -> list[PairedRequest]:
    """Paired requests: per pair ``b`` a mean log ratio ``means[b]``, each prompt's request ± ``sigma``."""
    rng = random.Random(seed)
    return [PairedRequest(p, b, b // 2, m + rng.gauss(0, sigma)) for b, m in enumerate(means) for p in range(prompts)]


def test_looks_and_their_share_of_the_error():
    assert look_points(6) == [2, 4, 6] and look_points(5) == [2, 4, 5] and look_points(2) == [2]
    assert look_points(1) == [2]
    # at most three looks, the last at max_pairs (a busy side-by-side sweep's 8; --repetitions 5's 10)
    assert look_points(8) == [2, 4, 8] and look_points(10) == [2, 4, 10] and look_points(3) == [2, 3]
    assert alpha_per_look(0.05, 8, 2) == pytest.approx(0.05 / 6)
    assert alpha_per_look(0.05, 6, 2) == pytest.approx(0.05 / 6)
    assert alpha_per_look() == pytest.approx(0.05 / (len(look_points(MAX_PAIRS)) * FINALISTS))


def test_two_consistent_pairs_of_six_requests_conclude_and_one_pair_does_not():
    """The issue's case: 1.34× and 1.36× over two pairs of 6 paired requests each, on a quiet machine."""
    two = reqs([math.log(1.34), math.log(1.36)])
    look = request_test(two, 0.03)
    assert look.verdict == "faster" and look.n == 2 and look.requests == 12
    assert look.low is not None and 1.03 < look.low < look.mean_ratio < look.high
    one = request_test(two[:6], 0.03)
    assert one.verdict == "inconclusive" and one.low is None and one.mean_ratio is not None


def test_no_verdict_between_look_points_but_an_earlier_faster_stands():
    rs = reqs([math.log(1.35)] * 2 + [math.log(0.9)])
    assert request_test(rs, 0.03).verdict == "inconclusive"  # 3 pairs: not a look
    lk = request_looks(rs, 0.03)
    assert lk.verdict == "faster" and lk.decided_at == 2 and lk.n == 3
    assert lk.low is not None and lk.low > 1.03  # the deciding look's interval
    assert lk.mean_ratio == pytest.approx(request_test(rs, 0.03).mean_ratio)  # the figures: all pairs


def test_the_decisions_final_look_is_at_the_pairs_there_are():
    """The budget ended the rounds after 3 pairs: the search saw no verdict there (not a look point), the
    decision's final look has one (it stands for the look at 4 that never came); never past max_pairs."""
    rs = reqs([math.log(1.35)] * 3, sigma=0.1)
    assert request_test(rs, 0.03).verdict == "inconclusive"
    assert request_test(rs, 0.03, final=True).verdict == "faster"
    assert request_looks(rs, 0.03, final=True).verdict == "faster"
    seven = reqs([math.log(1.35)] * 7, sigma=0.1)
    assert request_test(seven, 0.03, final=True).verdict == "inconclusive"  # beyond the last look


def test_disagreeing_pairs_widen_the_interval():
    calm = request_test(reqs([0.30, 0.30, 0.30, 0.30]), 0.03)
    drift = request_test(reqs([0.05, 0.55, 0.05, 0.55]), 0.03)
    assert calm.se is not None and drift.se is not None
    assert drift.se > 2 * calm.se and drift.verdict != "faster" and calm.verdict == "faster"


def test_noisy_requests_need_more_pairs_and_say_how_many():
    noisy = request_test(reqs([math.log(1.3)] * 2, sigma=0.31, prompts=8, seed=3), 0.03)
    assert noisy.verdict == "inconclusive"
    assert noisy.pairs_needed is not None and noisy.pairs_needed in look_points(60) and noisy.pairs_needed > 2


def test_a_clear_loser_is_not_faster_and_alternating_launches_are_wider():
    assert request_test(reqs([math.log(0.8)] * 4, sigma=0.1), 0.03).verdict == "not faster"
    rs = reqs([0.2, 0.3, 0.25, 0.35], sigma=0.1)
    alt, side = request_test(rs, 0.03, layout=ALTERNATING), request_test(rs, 0.03)
    assert alt.se is not None and side.se is not None and alt.se > side.se


def test_an_incomplete_pair_is_left_out_and_weights_follow_the_mix():
    rs = reqs([0.3, 0.3, 0.3])[:-1]  # the third pair misses its last prompt
    assert request_test(rs, 0.03).n == 2
    heavy = [PairedRequest(p, b, 0, 0.5 if p == 0 else 0.0, weight=5.0 if p == 0 else 1.0) for b in range(2)
             for p in range(4)]
    assert request_test(heavy, 0.03).mean_ratio == pytest.approx(math.exp(0.5 * 5 / 8))


def test_one_prompt_per_pair_is_tested_on_the_pairs_spread():
    steady = [PairedRequest(0, b, b, math.log(1.5)) for b in range(4)]
    assert request_test(steady, 0.03).verdict == "faster"
    scatter = [PairedRequest(0, b, b, math.log(r)) for b, r in enumerate([1.25, 0.94, 0.97, 1.02])]
    assert request_test(scatter, 0.03).verdict != "faster"


def test_paired_requests_of_pairs_carry_time_and_mix():
    def s(p: int, tps: float, n: int = 65) -> Sample:
        return Sample(p, None, 4, tps, predicted_n=n, predicted_ms=(n - 1) / tps * 1000.0)

    pair = Pair(4, 7, 6, (s(0, 200.0), s(1, 150.0)), (s(0, 100.0), s(1, 100.0)))
    got = paired_requests([pair])
    assert [(r.prompt, r.pair, r.launch) for r in got] == [(0, 4, 7), (1, 4, 7)]
    assert got[0].log_ratio == pytest.approx(math.log(2.0)) and got[1].log_ratio == pytest.approx(math.log(1.5))
    assert got[0].seconds == pytest.approx(math.sqrt(0.32 * 0.64))


def test_contrast_of_two_candidates():
    chain = request_test(reqs([math.log(1.8)] * 4, sigma=0.05), 0.03)
    single = request_test(reqs([math.log(1.4)] * 4, sigma=0.05, seed=1), 0.03)
    assert contrast(chain, single, 0.03).verdict == "faster"
    same = request_test(reqs([math.log(1.4)] * 4, sigma=0.05, seed=2), 0.03)
    c = contrast(same, single, 0.03)
    assert c.verdict != "faster" and c.mean_ratio == pytest.approx(1.0, abs=0.05)
    assert contrast(request_test([], 0.03), single, 0.03).verdict == "inconclusive"


def test_bad_input():
    with pytest.raises(ValueError, match="layout"):
        request_test([], 0.03, layout="gpu")
    with pytest.raises(ValueError, match="prompt 2, repetition 1"):
        paired_request(10, 1.0, 10, 0.0, prompt=1, pair=0, launch=0)
    with pytest.raises(ValueError, match="finite"):
        request_test([PairedRequest(0, 0, 0, math.inf)], 0.03)
    assert request_test([], 0.03).verdict == "inconclusive"


def test_a_requests_tokens_and_seconds_leave_out_the_first_token():
    """The pairs' unit (and the benches' pooled tokens/s): ``predicted_n − 1`` tokens over ``predicted_ms``, the
    rule of llama-server's own ``predicted_per_second``; an answer without timings has none."""
    assert generated_tokens_and_s(65, 500.0) == (64.0, 0.5)
    assert generated_tokens_and_s(1, 20.0) == (1.0, 0.02)  # the first token alone still counts as one
    assert generated_tokens_and_s(None, 500.0) is None and generated_tokens_and_s(65, 0) is None
    assert generated_tokens_and_s("x", 5.0) is None  # type: ignore[arg-type]  # a malformed answer
