"""The sequential test's error rate and power over whole sweeps, by simulation on recorded paired requests
(issue 25, item 1).

Each replication is one sweep's paired rounds, stopped at the first conclusive look (looks at 2, 4, 6 pairs).
Error rate: **two finalists** each exactly at the bar (true pooled ratio 1.03×), built from the recordings in
tests/data/paired_requests/ (A/A: both sides the model alone; A/B: the generated family's good draft, its
ratios shifted to 1.03×; "idle" without, "busy" with tests/burner.py); a replication is a false "faster" when
either finalist is declared faster, and that must stay at or below 5 % (its upper 95 % bound over 10,000
replications). The A B B A path of a GPU is covered by this simulation only (no GPU here): a model of
alternating launches, each with its own speed offset.

Power: one finalist at a true 1.3× (α still split over two finalists), concluded "faster" within two launch
pairs (4 pairs). The goal is 80 %; it is met where the request-level spread is small (σ ≤ 0.25 in ln ratio), and
the recording the test reads (``POWER_RECORDING``) decides: made on a quiet machine (``"quiet": true``, written
by bench/paired_requests.py) it must give 80 %. The one here is quiet (other programs 1 % of the CPU, request
σ 0.18 in ln ratio): 97 % of true 1.3× effects concluded within two launch pairs. The recording it replaced was
made while other jobs loaded the 2-core machine (load 2–3, σ 0.31): about 59 % there — a loaded recording is
still only held to that floor, with a warning.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tests import sequential_sim as sim
from tuner.calibration.sequential import ALTERNATING, SIDE_BY_SIDE

REPS = 10_000
POWER_RECORDING = "ab_idle"
"""The recording whose spread the power is measured at (replace it with a quiet one: bench/paired_requests.py)."""
POWER_GOAL = 0.80
LOADED_FLOOR = 0.55
"""The power a recording made under other programs' load must still give (59 % at σ 0.31 when written)."""


def test_the_vectorised_test_is_the_modules():
    assert sim.check_batch(np.random.default_rng(1)) < 1e-9


def _false_faster(y: np.ndarray, s: np.ndarray, layout: str, ends: np.ndarray | None = None) -> tuple[int, int]:
    """``(sweeps with a false "faster", sweeps)``: the first half of the replications is finalist 1, the rest 2."""
    _stop, verdict = sim.sequential(y, s, layout, ends=ends)
    n = y.shape[0] // 2
    return int(((verdict[:n] == 1) | (verdict[n:] == 1)).sum()), n


@pytest.mark.parametrize("name", ["aa_idle", "aa_busy", "ab_idle", "ab_busy"])
def test_false_faster_at_most_5_percent_on_recorded_requests_at_the_bar(name):
    y, s = sim.residual_bootstrap(np.random.default_rng(25), 2 * REPS, name, sim.BAR)
    k, n = _false_faster(y, s, SIDE_BY_SIDE)
    assert sim.upper_95(k, n) <= 0.05, (name, k / n)
    # the rule is not vacuous: at a true 1.3x the same spread often concludes "faster" within 6 pairs
    y, s = sim.residual_bootstrap(np.random.default_rng(26), REPS, name, math.log(1.3))
    _stop, verdict = sim.sequential(y, s)
    assert (verdict == 1).mean() > 0.3, name


@pytest.mark.parametrize("name", ["aa_busy", "ab_idle"])
def test_false_faster_at_most_5_percent_when_the_budget_ends_the_rounds_between_looks(name):
    """The budget ends each finalist's rounds after 2 to 6 pairs (uniformly): the decision's final look is at
    the pairs there are (3 or 5 included), in place of the looks that never came."""
    rng = np.random.default_rng(31)
    y, s = sim.residual_bootstrap(rng, 2 * REPS, name, sim.BAR)
    ends = rng.integers(2, 7, size=2 * REPS)
    k, n = _false_faster(y, s, SIDE_BY_SIDE, ends)
    assert sim.upper_95(k, n) <= 0.05, (name, k / n)


@pytest.mark.parametrize("name", ["aa_busy", "ab_busy"])
def test_a_busy_sweeps_last_look_at_8_pairs_keeps_the_error_and_gains_power(name):
    """A busy side-by-side sweep's looks at 2, 4 and 8 pairs (``BUSY_EXTRA_PAIRS``), the budget ending the rounds
    after 2 to 8 pairs: at most 5 % false "faster" at the bar (measured 3.3 % aa_busy, 0.4 % ab_busy); where the
    budget pays all 8, more true 1.18× effects conclude than with the last look at 6 (ab_busy 22 % against 13 %,
    aa_busy 19 % against 15 %)."""
    rng = np.random.default_rng(32)
    y, s = sim.residual_bootstrap(rng, 2 * REPS, name, sim.BAR, pairs=8)
    _stop, verdict = sim.sequential(y, s, SIDE_BY_SIDE, max_pairs=8, ends=rng.integers(2, 9, size=2 * REPS))
    n = REPS
    k = int(((verdict[:n] == 1) | (verdict[n:] == 1)).sum())
    assert sim.upper_95(k, n) <= 0.05, (name, k / n)
    y, s = sim.residual_bootstrap(np.random.default_rng(33), REPS, name, math.log(1.18), pairs=8)
    at_8 = (sim.sequential(y, s, SIDE_BY_SIDE, max_pairs=8)[1] == 1).mean()
    at_6 = (sim.sequential(y[:, :6], s[:, :6], SIDE_BY_SIDE, max_pairs=6)[1] == 1).mean()
    assert at_8 > at_6 + 0.03, (name, at_6, at_8)


@pytest.mark.parametrize("sigma,launch_sd", [(0.31, 0.05), (0.05, 0.03), (0.05, 0.05)])
def test_false_faster_at_most_5_percent_with_alternating_launches_simulated(sigma, launch_sd):
    """The GPU's A B B A path, by simulation only (the drift prior assumes a launch-to-launch SD ≤ 0.05)."""
    y, s = sim.abba(np.random.default_rng(27), 2 * REPS, sim.BAR, sigma, launch_sd)
    k, n = _false_faster(y, s, ALTERNATING)
    assert sim.upper_95(k, n) <= 0.05, (sigma, launch_sd, k / n)


def _power(y: np.ndarray, s: np.ndarray, layout: str = SIDE_BY_SIDE) -> float:
    stop, verdict = sim.sequential(y, s, layout)
    return float(((verdict == 1) & (stop <= 4)).mean())


def test_power_within_two_launch_pairs_at_the_recorded_spread():
    meta, y_rec, _s = sim.load_recording(POWER_RECORDING)
    sigma = sim.spread(y_rec)["sigma"]
    y, s = sim.residual_bootstrap(np.random.default_rng(28), REPS, POWER_RECORDING, math.log(1.3))
    power = _power(y, s)
    if meta.get("quiet"):
        assert power >= POWER_GOAL, (POWER_RECORDING, sigma, power)
        return
    warnings.warn(f"{POWER_RECORDING}.json was recorded under load {meta['load_1m']} (request σ {sigma:.2f}): "
                  f"{power:.0%} of true 1.3x effects concluded within two launch pairs; the goal of "
                  f"{POWER_GOAL:.0%} needs a quiet recording (bench/paired_requests.py)", stacklevel=1)
    assert power >= LOADED_FLOOR, (POWER_RECORDING, sigma, power)


@pytest.mark.parametrize("sigma", [0.15, 0.25])
def test_power_goal_is_met_at_a_quieter_spread(sigma):
    """The same rule at request spreads a quieter machine gives: 80 % within two launch pairs."""
    rng = np.random.default_rng(29)
    prompts = rng.normal(0, 0.19, size=(REPS, 1, 8))  # each prompt's own speedup, around the true 1.3x
    y = math.log(1.3) + prompts - prompts.mean(axis=2, keepdims=True) + rng.normal(0, sigma, size=(REPS, 6, 8))
    assert _power(y, np.ones_like(y)) >= POWER_GOAL, sigma


def test_alternating_launches_power_simulated():
    y, s = sim.abba(np.random.default_rng(30), REPS, math.log(1.3), 0.15, 0.05)
    assert _power(y, s, ALTERNATING) >= POWER_GOAL
