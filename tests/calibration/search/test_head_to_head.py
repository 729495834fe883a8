"""Head-to-head pairs of a chain and the best single type (issue 28's quality row, ``bench/tune_quality.py --busy``):
when both sides reached ``max_pairs`` against the model alone and the decision's chain rule is still undecided, the
chain and the single type run the same requests one apart, and the decision pools those pairs with the contrast.
Measured before: the chain 1.38×, ngram-mod 1.23×, contrast 1.11× with interval 0.99–1.26× after 6 pairs each, 17 s
of the budget unspent, ngram-mod served at 0.936 of the best configuration. Scripted servers
(``tests.fakes.scripted_server``), seeded noise, simulated time; the error of the pooled rule by simulation."""

from __future__ import annotations

import math
import random

from tests.fakes.scripted_server import ScriptedLaunch, SimClock, side_by_side_sweep
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.pairing import HEAD_TO_HEAD, compare, head_to_head
from tuner.calibration.sequential import PairedRequest, contrast, request_test

NGRAM = Candidate(spec_type="ngram-mod", n_max=16)
SIMPLE = Candidate(spec_type="ngram-simple", n_max=16)
CHAIN = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)


def _tune(chain_tps: float, seed: int, budget_s: float = 600, base_noise: float = 0.45):
    """One side-by-side sweep on a machine whose every request's speed varies by ``base_noise`` (uniform) on the
    model alone's side and by 3 % on the speculative ones': the model alone ~100 tokens/s, ngram-mod 123, ngram-simple
    110, the chain ``chain_tps``. Returns the decision, the events and the sweep's measurements."""
    rng = random.Random(seed)

    def tps(c: Candidate) -> float:
        if c.is_baseline:
            return 100.0 * rng.uniform(1 - base_noise, 1 + base_noise)
        speed = chain_tps if c.is_chained else 110.0 if c.spec_type == "ngram-simple" else 123.0
        return speed * rng.uniform(0.97, 1.03)

    clock = SimClock()
    outcome, events = side_by_side_sweep(ScriptedLaunch(tps, content="same text", clock=clock, load_s=1.0),
                                         CandidatePlan(baseline=Candidate(), ngram=(NGRAM, SIMPLE, CHAIN)), budget_s, clock)
    return decide(outcome), events, outcome.measurements


def _ran_head_to_head(events: list[tuple[str, str]]) -> int:
    return sum(1 for kind, msg in events if kind == "launch" and msg.startswith("head to head: starting"))


def test_a_chain_the_contrast_left_undecided_runs_head_to_head_and_is_served_when_faster() -> None:
    d, events, ms = _tune(138.0, seed=3)  # one of the seeds whose contrast stays undecided (11 of 20)
    assert _ran_head_to_head(events) >= 1, [m for k, m in events if k in ("confirmed", "skipped")]
    assert d.winner == CHAIN, d.reason
    assert "run by the two head to head" in d.reason, d.reason
    direct = head_to_head(ms, CHAIN, NGRAM)
    assert direct is not None and 1.08 < direct.mean_ratio < 1.16  # 138 ÷ 123 = 1.12 on the same requests
    # the head-to-head launches are not pairs against the model alone: each side keeps its own max_pairs pairs
    for c in (CHAIN, NGRAM):
        cmp_ = compare(ms, c, 0.03, final=True)
        assert cmp_ is not None and len(cmp_.pairs) <= 6
    assert {m.candidate for m in ms if m.stage == HEAD_TO_HEAD} == {CHAIN, NGRAM}


def test_a_chain_no_faster_than_the_single_type_head_to_head_is_not_served() -> None:
    d, events, _ = _tune(124.0, seed=4)
    if _ran_head_to_head(events):
        assert "run by the two head to head" in d.reason, d.reason
    assert d.winner == NGRAM, d.reason


def test_no_head_to_head_when_the_budget_does_not_fit_it() -> None:
    d, events, ms = _tune(138.0, seed=4, budget_s=45)
    assert not _ran_head_to_head(events) and not any(m.stage == HEAD_TO_HEAD for m in ms)


def _reqs(ratio: float, pairs: int, rng: random.Random, sigma: float, prompts: int = 5,
          first: int = 0) -> list[PairedRequest]:
    return [PairedRequest(p, first + b, (first + b) // 2, math.log(ratio) + rng.gauss(0.0, sigma))
            for b in range(pairs) for p in range(prompts)]


def _chain_rule(rng: random.Random, true_ratio: float, sigma_base: float, sigma_direct: float) -> bool:
    """One sweep's chain rule as the search runs it: the contrast of 6 pairs each against the model alone; when
    inconclusive, head to head in launches of 2 pairs up to 4, looking after each; True when it says "faster"."""
    chain = request_test(_reqs(1.3 * true_ratio, 6, rng, sigma_base), 0.03, final=True)
    single = request_test(_reqs(1.3, 6, rng, sigma_base), 0.03, final=True)
    direct: list[PairedRequest] = []
    while True:
        look = contrast(chain, single, 0.0, direct=request_test(direct, 0.0, final=True) if direct else None)
        if look.verdict != "inconclusive" or len(direct) >= 4 * 5:
            return look.verdict == "faster"
        direct += _reqs(true_ratio, 2, rng, sigma_direct, first=100 + len(direct) // 5)


def test_the_pooled_chain_rule_keeps_its_error_and_gains_power() -> None:
    # request noise of a busy machine (30 % against the model alone, 15 % head to head, per request): the chain
    # exactly as fast as the single type is served in at most about alpha of the sweeps, over every look ...
    rng = random.Random(11)
    trials = 3000
    false = sum(_chain_rule(rng, 1.0, 0.30, 0.15) for _ in range(trials)) / trials
    assert false <= 0.065, false
    # ... and a chain 12 % faster is served far more often than by the contrast alone
    pooled = sum(_chain_rule(rng, 1.12, 0.30, 0.15) for _ in range(400)) / 400
    alone = sum(contrast(request_test(_reqs(1.3 * 1.12, 6, rng, 0.30), 0.03, final=True),
                         request_test(_reqs(1.3, 6, rng, 0.30), 0.03, final=True), 0.0).verdict == "faster"
                for _ in range(400)) / 400
    assert pooled >= alone + 0.2, (pooled, alone)
