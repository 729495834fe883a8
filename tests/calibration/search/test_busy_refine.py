"""On a busy machine the refine stage measures the lengths next to the one the verify-cost curve predicts fastest,
not only that one (issue 28's busy quality runs 51-53: two 89 s sweeps measured only the predicted length, ``n_max``
8 and 5, and served it at 0.937 and 0.946 of the referee's best, 7; the third measured 5, 6 and 7 and served 7; busy
76 measured the predicted 8 and the fitted model's second opinion 3, and served 8 at 0.932 of the best, 7).
Scripted servers (``tests.fakes.scripted_server``), a 30 tokens/s target, ±10 % per launch, simulated time."""

from __future__ import annotations

import random

from tests.calibration.search.test_second_opinion import IDENTITY, KEY, N_PREDICT, PROBE, TRUE, metrics, true_speedup
from tests.fakes.scripted_server import ScriptedLaunch, SimClock, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings
from tuner.calibration.verifycost import VerifyCurve

CHAIN = Candidate(spec_type="ngram-mod,draft-simple", draft_path=PROBE.draft_path, n_max=4, p_min=0.0)
BASE_TPS = 30.0
SHALLOW = VerifyCurve(tuple((float(k), 1.9 + 0.2 * k) for k in (1, 8, 16)), KEY, 100.0)
"""A three-point curve whose steps rise slower than the CPU's (0.2 target tokens a drafted token, the truth 0.33):
it predicts ``n_max`` 9, the truth's best is 7 (busy 76's curve predicted 8 where the best was 7)."""
SEEDS = range(1, 41)


def _busy_sweep(budget_s: float, seed: int, curve: VerifyCurve = TRUE):
    """A busy side-by-side sweep of the draft (best ``n_max`` 7, 1.35×; the curve is known) and a chain (1.30×)."""
    rng = random.Random(seed)
    clock = SimClock()

    def per_launch(_c: Candidate, _n: int) -> dict:
        level = rng.uniform(0.9, 1.1)  # another program's load moves a launch
        return {"tps_of": lambda x: BASE_TPS * rng.uniform(0.97, 1.03) * (
            1.0 if x.is_baseline else level * (1.3 if x.is_chained else true_speedup(x.n_max or 1)))}

    launch = ScriptedLaunch(lambda c: BASE_TPS, content="same text", clock=clock, load_s=0.3, metrics=metrics,
                            per_launch=per_launch)
    settings = SearchSettings(n_predict=N_PREDICT, p_min_variant=None, verify_identity=IDENTITY, known_curves=(curve,),
                              side_by_side=True)
    search = scripted_search(launch, CandidatePlan(baseline=Candidate(), drafts=(PROBE,), ngram=(CHAIN,)),
                             [(i, Prompt(f"p{i}", "code")) for i in range(3)], settings, budget_s, clock=clock,
                             busy=lambda: True)
    outcome = search.run()
    return decide(outcome), [m.candidate.n_max for m in outcome.measurements if m.stage == "refine"]


def _served(budget_s: float, curve: VerifyCurve) -> list[tuple[float, int, list]]:
    """``(the served length's true speedup over the best's, seed, lengths refined)`` of 40 seeded busy sweeps."""
    best = max(true_speedup(k) for k in range(1, 17))
    out = []
    for seed in SEEDS:
        d, refined = _busy_sweep(budget_s, seed, curve)
        w = d.winner
        ratio = true_speedup(w.n_max or 16) / best if w.draft_path and not w.is_chained else 1.3 / best
        out.append((ratio, seed, refined))
    return out


def test_a_busy_sweep_measures_the_lengths_next_to_the_predicted_one() -> None:
    """Every sweep measures the predicted length and both its neighbours first (the curve predicts 6 to 8 here, read
    at each probe's level; the shallow one 8 to 11). Over the 160 sweeps at most 5 serve a length below 0.95 of the
    best, and they serve 0.98 of it on average (±10 % per launch lets a length 6 % slower screen first now and then;
    measuring the predicted length and the fitted model's second opinion only: 8 of 160, 0.978)."""
    ratios = []
    for curve, predicted in ((TRUE, (6, 7, 8)), (SHALLOW, (8, 9, 10, 11))):
        for budget_s in (80.0, 100.0):
            for ratio, seed, refined in _served(budget_s, curve):
                k = refined[0]
                assert k in predicted and set(refined[:3]) == {k - 1, k, k + 1}, (budget_s, seed, refined)
                ratios.append(ratio)
    assert sum(r < 0.95 for r in ratios) <= 5, sorted(ratios)[:8]
    assert sum(ratios) / len(ratios) >= 0.98, sum(ratios) / len(ratios)
