"""The sweep's pure rules: n-gram types that never drafted, chains that would add nothing, clear losers, and
the verdict on a baseline measured again."""

from __future__ import annotations

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.results import Measurement, Sample, synthetic_samples
from tuner.calibration.search.record import Record
from tuner.calibration.search.rules import (
    BASELINE_DISAGREES,
    NGRAM_MOD_N_MIN,
    Pruned,
    RecheckVerdict,
    chain_member_never_drafted,
    clear_loser,
    finalists,
    never_drafted_type,
    pruned_against,
    recheck_verdict,
)

DRAFT = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)


def _never(c: Candidate) -> Measurement:
    return Measurement(c, samples=synthetic_samples([10.0]), no_drafts_at="greedy", error="never drafted")


@pytest.mark.parametrize("ran,candidate,skipped", [
    (Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-simple", ngram_n_max=16), True),
    # ngram-mod drops a draft shorter than its n_min: a smaller n_min can draft where the default did not
    (Candidate(spec_type="ngram-mod"), Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12), False),
    (Candidate(spec_type="ngram-mod", ngram_n_min=12), Candidate(spec_type="ngram-mod", ngram_n_max=16), True),
    (Candidate(spec_type="ngram-mod"), Candidate(spec_type="ngram-mod", ngram_n_min=NGRAM_MOD_N_MIN + 8), True),
    (Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-map-k"), False),  # another type
    (Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-simple", placement="rpc-split"), False),
    (Candidate(spec_type="ngram-mod"), DRAFT, False),  # a draft model never matches
])
def test_another_length_of_a_type_that_never_drafted(ran: Candidate, candidate: Candidate, skipped: bool) -> None:
    record = Record(measurements=[_never(ran)])
    found = never_drafted_type(record, candidate)
    assert (found is not None) is skipped
    if skipped:
        assert found is not None and found.candidate == ran


def test_a_chain_whose_ngram_member_never_drafted_alone() -> None:
    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
    assert never_drafted_type(Record(measurements=[_never(Candidate(spec_type="ngram-mod"))]), chain) is None
    assert chain_member_never_drafted(Record(measurements=[_never(Candidate(spec_type="ngram-mod"))]), chain)
    assert chain_member_never_drafted(Record(measurements=[_never(Candidate(spec_type="ngram-simple"))]), chain) is None
    drafted = Measurement(Candidate(spec_type="ngram-mod"), samples=synthetic_samples([10.0]))
    assert chain_member_never_drafted(Record(measurements=[drafted]), chain) is None
    assert chain_member_never_drafted(Record(measurements=[_never(Candidate(spec_type="ngram-mod"))]), DRAFT) is None


def _sample(prompt: int, tps: float) -> Sample:
    return Sample(prompt, "code", 0, tps, None, 128, 127 / tps * 1000)


def test_a_clear_loser_is_below_the_ratio_on_the_same_requests() -> None:
    base = Measurement(Candidate(), samples=(_sample(0, 100.0), _sample(1, 40.0)), stage="baseline")
    record = Record(measurements=[base], base_tps=70.0)
    assert clear_loser(record, [_sample(0, 45.0)], 0.5)  # 45 < 0.5 × 100 (the same request's baseline)
    assert not clear_loser(record, [_sample(1, 25.0)], 0.5)  # 25 ≥ 0.5 × 40
    assert clear_loser(record, [_sample(7, 30.0)], 0.5)  # a request the baseline never ran: its 70 tokens/s
    assert not clear_loser(Record(), [_sample(0, 1.0)], 0.5)  # no baseline yet
    assert not clear_loser(record, [], 0.5)


@pytest.mark.parametrize("first,idle,again,verdict", [
    (22.8, 741.7, 700.0, RecheckVerdict.SUPERSEDED),   # the stop-11 trial: the first launch was disturbed
    (700.0, 22.8, 690.0, RecheckVerdict.FIRST_STANDS),  # the run that drafted nothing was
    (100.0, 300.0, 180.0, RecheckVerdict.UNSTEADY),     # 1.8× the first, 0.6× the idle run: neither
])
def test_the_verdict_on_a_baseline_measured_again(first: float, idle: float, again: float,
                                                  verdict: RecheckVerdict) -> None:
    assert BASELINE_DISAGREES == 1.5  # the table's factor
    assert recheck_verdict(first, idle, again) is verdict


def _ngram_run(c: Candidate, tps: float, per_pos: tuple[int, ...], drafts: int, drafted: int) -> Measurement:
    from tuner.calibration.predict import PerPositionCounts

    samples = tuple(Sample(p, "code", 0, tps, None, 101, 100 / tps * 1000, drafted // 2, sum(per_pos) // 2)
                    for p in range(2))
    counts = PerPositionCounts(drafts, drafted, sum(per_pos), per_pos)
    return Measurement(c, samples=samples, counts=counts, speculative_active=True, stage="probe")


def _base(tps: float = 100.0) -> Measurement:
    return Measurement(Candidate(), samples=tuple(Sample(p, "code", 0, tps, None, 101, 100 / tps * 1000)
                                                  for p in range(2)), stage="baseline")


def test_an_ngram_variant_that_cannot_beat_the_leader_is_pruned_by_its_types_run() -> None:
    from tuner.calibration.search.rules import Pruned, cannot_beat_leader, leader, ngram_basis

    short = Candidate(spec_type="ngram-simple", ngram_n_max=16)
    default = Candidate(spec_type="ngram-simple")  # 48 tokens: the server's default
    # 200 tokens generated, 10 draft steps, 14 accepted: 1.04x measured; nothing accepted at the 16th position
    run = _ngram_run(short, 104.0, (6, 4, 2, 1, 1) + (0,) * 11, drafts=10, drafted=80)
    draft = Measurement(DRAFT, samples=_base(140.0).samples, stage="probe", speculative_active=True)
    record = Record(measurements=[_base(), run, draft], base_tps=100.0)
    assert leader(record) == (DRAFT.label, pytest.approx(1.4))
    # a draft length is never ruled out against its own draft's run: the leader is then the best other one
    assert leader(record, other_than=DRAFT.with_n_max(6)) == (short.label, pytest.approx(1.04))
    found = ngram_basis(record, default)
    assert found is not None and found[0] is run
    pruned = cannot_beat_leader(default, found[0], found[1], (DRAFT.label, 1.4))
    assert isinstance(pruned, Pruned) and pruned.basis == short.label and pruned.at_most == pytest.approx(1.04)
    assert pruned.to_json()["leader"] == DRAFT.label
    # a leader within reach (1.04 × 1.1 ≥ 1.14): launched
    assert cannot_beat_leader(default, found[0], found[1], (DRAFT.label, 1.14)) is None
    # steps that accepted all 16 can accept more at 48: the bound grows with them, and it is launched
    full = _ngram_run(short, 104.0, (10,) * 16, drafts=10, drafted=160)
    rec2 = Record(measurements=[_base(), full, draft], base_tps=100.0)
    basis, cost = ngram_basis(rec2, default)  # type: ignore[misc]
    assert cannot_beat_leader(default, basis, cost, (DRAFT.label, 1.4)) is None


def test_a_draft_length_is_not_ruled_out_against_a_chain_that_would_fall_back_to_it() -> None:
    """Issue 28's idle 24: the chain ngram-mod + draft screened 1.56x, every shorter length of the draft was ruled
    out against it, the chain's lead over the draft was within noise, and the draft's untuned probe was served."""
    from tuner.calibration.search.rules import falls_back_to, leader

    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path=DRAFT.draft_path, n_max=4, p_min=0.0)
    ngram = Candidate(spec_type="ngram-simple", ngram_n_max=16)
    other = Candidate(spec_type="draft-simple", draft_path="/m/other.gguf", n_max=16, p_min=0.0)
    runs = [Measurement(c, samples=_base(tps).samples, stage="probe", speculative_active=True)
            for c, tps in ((chain, 156.0), (ngram, 123.0), (other, 130.0))]
    record = Record(measurements=[_base(), *runs], base_tps=100.0)
    assert falls_back_to(chain, DRAFT.with_n_max(5)) and falls_back_to(chain, Candidate(spec_type="ngram-mod"))
    assert not falls_back_to(chain, other) and not falls_back_to(chain, chain) and not falls_back_to(DRAFT, DRAFT)
    assert leader(record) == (chain.label, pytest.approx(1.56))
    # the draft's lengths are weighed against the best run it is not a member of
    assert leader(record, other_than=DRAFT.with_n_max(5)) == (other.label, pytest.approx(1.30))
    # another draft's lengths still are against the chain
    assert leader(record, other_than=other.with_n_max(5)) == (chain.label, pytest.approx(1.56))


def test_a_slow_screening_baseline_does_not_prune_a_draft_length_priced_by_the_curve() -> None:
    """Issue 28's idle 16: the baseline launch ran slow, every screening speedup read ~35 % high, and a draft's
    lengths predicted in true units (counters and the measured verify-cost curve) were pruned against a chain's
    inflated figure. The basis run's own measured ÷ predicted speedup puts the prediction in the same units."""
    from tuner.calibration.predict import predicted_ratio
    from tuner.calibration.search.rules import Pruned, cannot_beat_leader, screening_scale
    from tuner.calibration.verifycost import VerifyCurve

    curve = VerifyCurve(((1.0, 1.2), (4.0, 1.8), (16.0, 4.4)))
    probe = DRAFT.with_n_max(16)
    # 200 tokens, 40 draft steps of 16 drafted, acceptance falling with the position
    per_pos = (34, 30, 26, 22, 18, 14, 10, 8, 6, 4, 3, 2, 1, 1, 0, 0)
    run = _ngram_run(probe, 160.0, per_pos, drafts=40, drafted=640)
    own = predicted_ratio(run.counts, 200.0, 16, curve)  # type: ignore[arg-type]
    at_8 = predicted_ratio(run.counts, 200.0, 8, curve)  # type: ignore[arg-type]
    assert own is not None and at_8 is not None and at_8 > own
    chain = ("ngram-mod+draft n_max 4", at_8 * 1.35 * 1.05)  # the leader, read 35 % high like every ratio
    shorter = DRAFT.with_n_max(8)
    # without the probe's own screening figure the true-unit prediction is compared with the inflated leader
    assert isinstance(cannot_beat_leader(shorter, run, curve, chain), Pruned)
    # the probe measured 35 % above its own prediction against the same baseline: the prediction follows
    assert screening_scale(run, curve, own * 1.35) == pytest.approx(1.35)
    assert cannot_beat_leader(shorter, run, curve, chain, basis_ratio=own * 1.35) is None
    # a fast baseline never makes a prediction smaller (a wrongly pruned length costs the winner)
    assert screening_scale(run, curve, own * 0.7) == 1.0
    pruned = cannot_beat_leader(shorter, run, curve, chain, basis_ratio=own * 0.7)
    assert isinstance(pruned, Pruned) and pruned.at_most == pytest.approx(at_8)


def test_a_variant_with_looser_lookups_has_no_basis() -> None:
    from tuner.calibration.search.rules import ngram_basis

    mod = Candidate(spec_type="ngram-mod")  # n_min 48
    short = Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12)
    run = _ngram_run(mod, 104.0, (6, 4, 2, 1), drafts=10, drafted=80)
    record = Record(measurements=[_base(), run], base_tps=100.0)
    assert ngram_basis(record, short) is None  # it can draft where the default dropped short drafts
    run16 = _ngram_run(short, 104.0, (6, 4, 2, 1), drafts=10, drafted=80)
    assert ngram_basis(Record(measurements=[_base(), run16], base_tps=100.0), mod) is not None
    assert ngram_basis(record, DRAFT) is None and ngram_basis(record, Candidate(spec_type="ngram-simple")) is None


def _len(n: int, p_min: float = 0.0) -> Candidate:
    return Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=n, p_min=p_min)


def test_the_finalists_are_one_length_per_draft_before_a_second() -> None:
    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
    mod = Candidate(spec_type="ngram-mod")
    # screened fastest first: three lengths of one draft ahead of the chain (issue 28's idle quality runs)
    ranked = [(2.0, _len(11)), (1.9, _len(8)), (1.7, _len(10)), (1.33, chain), (1.02, mod)]
    assert finalists(ranked, 2) == [_len(11), chain]
    assert finalists(ranked, 3) == [_len(11), chain, mod]
    assert finalists(ranked, 4) == [_len(11), chain, mod, _len(8)]  # places left: the next fastest length
    assert finalists([(2.0, _len(11)), (1.9, _len(8))], 2) == [_len(11), _len(8)]  # one draft only
    # a p_min variant is a length of the same draft; another draft is another group
    other = Candidate(spec_type="draft-simple", draft_path="/m/other.gguf", n_max=6, p_min=0.0)
    assert finalists([(2.0, _len(8, p_min=0.75)), (1.9, _len(8)), (1.2, other)], 2) == [_len(8, p_min=0.75), other]
    # a draft whose own acceptance said it cannot beat the leader (1.4x) waits with the rest
    assert finalists([(1.4, _len(16)), (1.3, _len(8)), (1.05, other)], 2, {other.label: 1.4}) == [_len(16), _len(8)]
    assert finalists([(1.4, _len(16)), (1.05, other)], 2, {other.label: 1.4}) == [_len(16), other]


def test_a_draft_whose_run_beat_the_leader_keeps_its_place_when_some_of_its_lengths_are_pruned() -> None:
    """A clean-clone suite run (issue 28): the draft's n_max 5 pruned on n_max 16's acceptance against ngram-mod at
    1.18x, n_max 16 itself screened at 1.49x; the draft lost its place and a chain at 1.19x was served."""
    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
    mod = Candidate(spec_type="ngram-mod")
    ranked = [(1.49, _len(16)), (1.42, _len(15)), (1.29, chain), (1.18, mod)]
    pruned = [Pruned(_len(5).label, 0.84, _len(16).label, mod.label, 1.18).to_json()]
    assert pruned_against(pruned) == {_len(16).label: 1.18}
    assert finalists(ranked, 2, pruned_against(pruned)) == [_len(16), chain]
    # pruned against a leader it never beat: it waits with the rest
    assert finalists(ranked, 2, {_len(16).label: 1.6}) == [chain, mod]
    # pruned against two leaders: the higher one counts
    two = [*pruned, Pruned(_len(6).label, 0.9, _len(16).label, "x", 1.55).to_json()]
    assert pruned_against(two) == {_len(16).label: 1.55} and finalists(ranked, 2, pruned_against(two)) == [chain, mod]
