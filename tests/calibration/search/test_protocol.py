"""The protocol planner, a pure function: what it cuts first, when it says the budget is too small."""

from __future__ import annotations

import math

import pytest

from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings
from tuner.calibration.search.protocol import PLAN_SHARE, plan_protocol, rep_s

PROMPTS = [(i, Prompt(f"prompt {i}", c)) for i, c in enumerate(["code", "creative", "math", "chat", "summary"])]
DRAFT = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=16, p_min=0.0)
DRAFTS = CandidatePlan(baseline=Candidate(), drafts=(DRAFT,), ngram=(), mtp=None, dropped=())
NGRAMS = CandidatePlan(baseline=Candidate(), drafts=(), ngram=(Candidate(spec_type="ngram-simple"),), mtp=None,
                       dropped=())
SIDE = SearchSettings(n_predict=128, side_by_side=True)


def test_a_protocol_that_fits_is_kept() -> None:
    p = plan_protocol(DRAFTS, SIDE, 3600.0, PROMPTS, 128, 1.0, 500.0, busy=False)
    assert (p.prompts, p.n_predict) == (5, 128) and not p.budget_too_small and p.suggested_budget_s is None
    assert p.planned_s <= PLAN_SHARE * 3600.0
    assert p.message.startswith("protocol planned from the warm-up (500.0 tokens/s, load 1.0 s): 5 prompts × 128 "
                                "tokens per repetition, room for 4 pairs")


def test_the_tokens_per_request_go_first_then_the_prompts() -> None:
    shorter = plan_protocol(DRAFTS, SIDE, 300.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert shorter.prompts == 5 and SIDE.min_n_predict < shorter.n_predict < 128  # prompts kept while it can
    assert shorter.planned_s <= PLAN_SHARE * 300.0
    fewer = plan_protocol(DRAFTS, SIDE, 120.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert fewer.n_predict == SIDE.min_n_predict and fewer.prompts < 5  # at the floor before a prompt goes
    assert fewer.planned_s <= PLAN_SHARE * 120.0


def test_n_gram_requests_stay_long_enough_to_draft_while_prompts_can_go() -> None:
    ng = plan_protocol(NGRAMS, SIDE, 120.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert ng.n_predict >= SIDE.min_n_predict_ngram and ng.prompts < 5
    tiny = plan_protocol(NGRAMS, SIDE, 40.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert tiny.n_predict < SIDE.min_n_predict_ngram and tiny.prompts == SIDE.min_prompts


def test_with_a_draft_model_every_prompt_stays_until_the_requests_are_at_the_floor() -> None:
    both = CandidatePlan(baseline=Candidate(), drafts=(DRAFT,), ngram=(Candidate(spec_type="ngram-simple"),),
                         mtp=None, dropped=())
    # the budget where n-gram types alone keep 64 tokens and drop prompts: a draft in the plan keeps the prompts
    ng = plan_protocol(NGRAMS, SIDE, 120.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert ng.prompts < 5
    p = plan_protocol(both, SIDE, 120.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert (p.prompts, p.n_predict) == (3, SIDE.min_n_predict)  # n-gram types alone: 2 prompts × 64 tokens
    assert p.planned_s <= PLAN_SHARE * 120.0
    roomier = plan_protocol(both, SIDE, 160.0, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert (roomier.prompts, roomier.n_predict) == (5, SIDE.min_n_predict)


def test_a_chain_keeps_requests_long_enough_for_its_n_gram_part_while_the_whole_budget_allows() -> None:
    """Draft + n-gram types: 64 tokens and every prompt stay when they fit the whole budget, even past the planned
    share (the screening stages then measure fewer draft lengths); past the whole budget the requests shorten."""
    both = CandidatePlan(baseline=Candidate(), drafts=(DRAFT,), ngram=(Candidate(spec_type="ngram-mod"),),
                         mtp=None, dropped=())
    at_floor = plan_protocol(both, SIDE, 1e6, PROMPTS, SIDE.min_n_predict_ngram, 2.0, 20.0, busy=False).planned_s
    kept = plan_protocol(both, SIDE, at_floor / 0.95, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert (kept.prompts, kept.n_predict) == (5, SIDE.min_n_predict_ngram)
    assert kept.planned_s > PLAN_SHARE * at_floor / 0.95 and not kept.budget_too_small
    cut = plan_protocol(both, SIDE, at_floor / 1.05, PROMPTS, 128, 2.0, 20.0, busy=False)
    assert cut.n_predict < SIDE.min_n_predict_ngram and cut.planned_s <= PLAN_SHARE * at_floor / 1.05


@pytest.mark.parametrize("side_by_side,busy,pairs", [(True, False, 4), (True, True, 6), (False, True, 4)])
def test_the_pairs_planned_for(side_by_side: bool, busy: bool, pairs: int) -> None:
    """Side by side on a busy machine: the most pairs (shorter requests); alternating: MIN_PAIRS + 1."""
    p = plan_protocol(DRAFTS, SearchSettings(side_by_side=side_by_side), 3600.0, PROMPTS, 128, 1.0, 500.0, busy)
    assert p.pairs == pairs and p.busy is busy
    assert ("(the machine is busy: more, shorter pairs)" in p.message) is busy


def test_a_budget_too_small_says_so_and_names_one_that_would_do() -> None:
    small = plan_protocol(DRAFTS, SIDE, 60.0, PROMPTS, 128, 8.0, 3.0, busy=False)
    assert small.budget_too_small and small.smallest_s > 60.0
    need = small.suggested_budget_s
    assert need is not None and need % 30 == 0 and need == math.ceil(small.smallest_s / PLAN_SHARE / 30) * 30
    assert (f"the budget of 60 s is too small for one meaningful comparison at this speed (the smallest takes about "
            f"{small.smallest_s:.0f} s): a budget of about {need} s would do") in small.message
    enough = plan_protocol(DRAFTS, SIDE, float(need), PROMPTS, 128, 8.0, 3.0, busy=False)
    assert not enough.budget_too_small


def test_the_detail_the_tune_reads_and_the_prompts_left_alone() -> None:
    prompts = list(PROMPTS)
    small = plan_protocol(DRAFTS, SIDE, 60.0, prompts, 128, 8.0, 3.0, busy=False)
    assert prompts == PROMPTS  # pure: the caller applies the plan
    assert list(small.detail()) == ["n_predict", "prompts", "load_s", "pairs", "busy", "warmup_gen_tokens_per_s",
                                    "planned_s", "smallest_s", "budget_too_small", "suggested_budget_s"]
    fits = plan_protocol(DRAFTS, SIDE, 3600.0, prompts, 128, 1.0, 500.0, busy=False).detail()
    assert "budget_too_small" not in fits and fits["warmup_gen_tokens_per_s"] == 500.0


def test_a_repetition_is_every_prompt_once() -> None:
    assert rep_s(20.0, 5, 128) == pytest.approx(5 * (128 / 20.0 + 0.05))
    assert rep_s(0.0, 1, 10) == pytest.approx(10 / 1e-3 + 0.05)  # no speed: never a division by zero
