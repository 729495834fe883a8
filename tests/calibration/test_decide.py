"""Decision unit tests on recorded measurements (issue 5 "Done when", last bullet)."""

from __future__ import annotations

import json

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import break_even_acceptance, decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.results import (
    Measurement,
    NoDrafts,
    Sample,
    synthetic_rounds,
    synthetic_samples,
)
from tuner.calibration.wording import break_even_words, never_entry, never_text, no_drafts_error

BASE = Candidate()
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
BAD = Candidate(spec_type="draft-simple", draft_path="/m/unrelated.gguf", n_max=8, p_min=0.0)
NGRAM = Candidate(spec_type="ngram-mod")


def m(c: Candidate, reps, acceptance=None, **kw) -> Measurement:
    return Measurement(c, samples=synthetic_samples(reps, acceptance=acceptance, **kw), speculative_active=True)


def rounds(c: Candidate, pairs, acceptance=None, **kw) -> list[Measurement]:
    """Paired rounds A B B A … (confirm stage) after a screening baseline at repetition 0 and a
    screening run of ``c`` there; pair ids start at 1."""
    b0, c0 = pairs[0]
    screening = [m(BASE, [b0]), m(c, [c0], acceptance=acceptance, **kw)]
    return screening + synthetic_rounds(c, pairs, acceptance=acceptance, first_repetition=1, **kw)


def test_41_percent_acceptance_slower_than_baseline_is_no_speculation():
    base = m(BASE, [240.0, 238.0, 243.0])
    spec = m(GOOD, [205.0, 210.0, 199.0], acceptance=0.41)
    d = decide(SearchOutcome.of([base, spec]))
    assert d.no_speculation
    assert d.winner == BASE
    assert d.speedup == 1.0
    assert d.best_speculative == GOOD
    assert d.best_speculative_speedup < 1.0
    assert "41 %" in d.reason and "slower" in d.reason
    be = d.break_even[0]
    assert be.acceptance == pytest.approx(0.41, abs=0.01)
    # Slower at 41 % means break-even must be above 41 %.
    assert be.break_even_acceptance is not None and be.break_even_acceptance > 0.41
    assert f"{100 * be.break_even_acceptance:.0f} %" in d.reason


def test_one_draft_slow_at_7_percent_and_one_flat_at_90_percent_is_no_speculation():
    flat = rounds(GOOD, [(240.0, 247.0), (252.0, 229.0), (231.0, 251.0), (246.0, 240.0)], acceptance=0.90)
    slow = m(BAD, [80.0], acceptance=0.07)
    d = decide(SearchOutcome.of([*flat, slow]))
    assert d.no_speculation
    assert d.best_speculative == GOOD
    assert 0.95 < d.best_speculative_speedup < 1.05
    assert "noise" in d.reason
    by_draft = {b.candidate.draft_path: b for b in d.break_even}
    slow_be = by_draft["/m/unrelated.gguf"]
    assert slow_be.never_pays or slow_be.break_even_acceptance > slow_be.acceptance


def test_break_even_above_100_percent_reads_as_never_pays():
    # 3x slower at 7 % acceptance with ~0.5 drafted tokens per generated token: even if every drafted
    # token were accepted, a step would yield at most ~1.5 tokens at 3x the baseline's step cost.
    base = m(BASE, [240.0, 238.0, 243.0])
    slow = m(BAD, [80.0, 78.0, 81.0], acceptance=0.07, drafted_per_token=0.5)
    d = decide(SearchOutcome.of([base, slow]))
    (be,) = d.break_even
    assert break_even_acceptance(slow, 240.0) > 1.0  # the raw solution of the break-even equation
    assert be.never_pays and be.break_even_acceptance is None
    assert "would not pay even at 100 % acceptance" in break_even_words(be.acceptance, be.break_even_acceptance,
                                                                        be.never_pays)
    assert "even 100 % acceptance would not pay" in d.reason
    assert be.to_json()["never_pays"] is True
    # A draft that is slower but could pay at a reachable acceptance keeps its number (0..1).
    near = m(GOOD, [220.0, 225.0, 222.0], acceptance=0.41)
    be2 = decide(SearchOutcome.of([base, near])).break_even[0]
    assert not be2.never_pays and 0.41 < be2.break_even_acceptance <= 1.0
    assert f"break-even {100 * be2.break_even_acceptance:.0f} %" in break_even_words(
        be2.acceptance, be2.break_even_acceptance, be2.never_pays)


def test_clear_winner_beats_baseline_with_interval_above_one():
    ms = rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)], acceptance=0.64)
    ms.append(m(BAD, [78.0], acceptance=0.05))
    d = decide(SearchOutcome.of(ms))
    assert not d.no_speculation
    assert d.winner == GOOD
    assert d.speedup == pytest.approx(331.0 / 240.0, rel=0.03)
    assert d.speedup_ci_low > 1.03 and d.speedup_ci_high >= d.speedup
    assert "64 %" in d.reason and "4 adjacent pairs" in d.reason


def test_noisy_gain_is_not_enough():
    # Paired ratios that scatter around 1 (1.25, 0.94, 0.97, 1.02): no speculation.
    d = decide(SearchOutcome.of(rounds(GOOD, [(240.0, 300.0), (180.0, 170.0), (300.0, 290.0), (250.0, 255.0)],
                                       acceptance=0.8)))
    assert d.no_speculation
    look = d.comparisons[0].look
    assert look is not None and look.low < 1.03 <= look.high
    # A steady but tiny gain (1 %) is not enough either.
    tiny = rounds(GOOD, [(240.0, 242.4), (180.0, 181.8), (300.0, 303.0), (250.0, 252.5)], acceptance=0.8)
    assert decide(SearchOutcome.of(tiny)).no_speculation


def test_paired_repetitions_see_through_drift_of_the_machine():
    # The machine slows down by a quarter between pairs 1-2 and 3-4; each candidate repetition ran next
    # to the baseline repetition with the same id, so the 1.17x gain is steady per pair.
    d = decide(SearchOutcome.of(rounds(GOOD, [(240.0, 280.0), (240.0, 282.0), (180.0, 210.0), (180.0, 209.0)],
                                       acceptance=0.75)))
    assert d.winner == GOOD
    # the interval keeps the drift the test assumes between pairs (at least 0.03 in ln ratio side by side:
    # tuner.calibration.sequential.TAU0) however steady the pairs look
    assert 1.10 < d.speedup_ci_low <= d.speedup <= d.speedup_ci_high < 1.25


def test_failed_speculative_candidate_never_wins_however_fast():
    base = m(BASE, [240.0, 241.0])
    fast_but_inactive = Measurement(
        GOOD, samples=synthetic_samples([900.0, 910.0]), speculative_active=False,
        error="the server started without speculation (/slots speculative: false)",
    )
    d = decide(SearchOutcome.of([base, fast_but_inactive]))
    assert d.no_speculation
    assert "speculative: false" in d.reason


def test_ngram_wins_only_beyond_noise():
    d = decide(SearchOutcome.of(rounds(NGRAM, [(240.0, 244.0), (242.0, 243.0), (238.0, 241.0), (239.0, 240.0)],
                                       acceptance=0.3)))
    assert d.no_speculation  # ~1.01x: within noise
    d2 = decide(SearchOutcome.of(rounds(NGRAM, [(240.0, 300.0), (242.0, 305.0), (238.0, 298.0), (239.0, 301.0)],
                                        acceptance=0.6)))
    assert d2.winner == NGRAM


def test_per_category_results():
    cats = ["code", "creative"]
    base = m(BASE, [[240.0, 240.0], [242.0, 238.0]], categories=cats)
    spec = Measurement(GOOD, samples=tuple(
        Sample(p, cats[p], r, tps, None, 128, 127 / tps * 1000, 100, acc)
        for r in range(2) for p, (tps, acc) in enumerate([(400.0, 90), (200.0, 30)])
    ), speculative_active=True)
    d = decide(SearchOutcome.of([base, spec]))
    assert d.no_speculation and "screening" in d.reason  # never confirmed in paired rounds: not served
    by_cat = {c.category: c for c in d.per_category}
    assert by_cat["code"].speedup > 1.5
    assert by_cat["creative"].speedup < 0.9
    assert by_cat["code"].acceptance == pytest.approx(0.9)


def test_break_even_matches_measured_step_cost():
    # 128 tokens, 100 drafted, 50 accepted → 78 steps; at 200 tok/s vs baseline 240 tok/s.
    s = Sample(0, None, 0, 200.0, None, 128, 127 / 200.0 * 1000, 100, 50)
    meas = Measurement(GOOD, samples=(s,))
    r = break_even_acceptance(meas, 240.0)
    t_step = (127 / 200.0) / 78
    d = 100 / 78
    assert r == pytest.approx((240.0 * t_step - 1) / d)
    # Sanity: at exactly r acceptance the throughput equals the baseline.
    assert (1 + r * d) / t_step == pytest.approx(240.0)


def test_decision_requires_baseline():
    with pytest.raises(ValueError, match="baseline"):
        decide(SearchOutcome.of([m(GOOD, [300.0], acceptance=0.8)]))


def test_measurement_json_round_trip():
    meas = m(GOOD, [300.0, 310.0], acceptance=0.7)
    back = Measurement.from_json(json.loads(json.dumps(meas.to_json())))
    assert back.candidate == GOOD
    assert back.gen_tokens_per_s == pytest.approx(meas.gen_tokens_per_s)
    assert back.acceptance == pytest.approx(meas.acceptance)
    ms = rounds(GOOD, [(240.0, 300.0), (241.0, 310.0), (239.0, 305.0), (240.0, 306.0)], acceptance=0.7)
    back_ms = [Measurement.from_json(json.loads(json.dumps(x.to_json()))) for x in ms]
    back = decide(SearchOutcome.of(back_ms))
    assert back.winner == GOOD and back.reason == decide(SearchOutcome.of(ms)).reason


def test_per_category_compares_the_same_prompts_and_repetitions():
    # The baseline ran prompts 0-1 at repetitions 0-2; the machine was twice as slow during repetition 2.
    # The candidate was stopped early after prompt 0 of repetition 0 (code only), then confirmed at rep 2.
    cats = ["code", "creative"]
    base = m(BASE, [[240.0, 240.0], [240.0, 240.0], [120.0, 120.0]], categories=cats)
    spec = Measurement(GOOD, samples=(
        Sample(0, "code", 0, 300.0, None, 128, 127 / 300.0 * 1000, 100, 80),
        Sample(0, "code", 2, 150.0, None, 128, 127 / 150.0 * 1000, 100, 80),
        Sample(1, "creative", 2, 132.0, None, 128, 127 / 132.0 * 1000, 100, 40),
    ), speculative_active=True)
    by_cat = {c.category: c for c in decide(SearchOutcome.of([base, spec])).per_category}
    # Like with like: 300 vs 240 at rep 0 and 150 vs 120 at rep 2 → 1.25x (not 450/600-ish mixes).
    assert by_cat["code"].speedup == pytest.approx(1.25, rel=1e-3)
    assert by_cat["code"].paired_requests == 2
    assert by_cat["creative"].speedup == pytest.approx(1.10, rel=1e-3)
    assert by_cat["creative"].paired_requests == 1
    assert {c.candidate_label for c in by_cat.values()} == {GOOD.label}
    # A category the candidate never reached has no speedup rather than a made-up one.
    early = Measurement(GOOD, samples=spec.samples[:1], speculative_active=True)
    by_cat2 = {c.category: c for c in decide(SearchOutcome.of([base, early])).per_category}
    assert by_cat2["creative"].speedup is None and by_cat2["creative"].paired_requests == 0


def test_decision_line_does_not_repeat_the_words():
    from tuner.cli.tune_report import decision_line

    base = m(BASE, [240.0, 238.0, 243.0])
    slow = m(GOOD, [205.0, 210.0, 199.0], acceptance=0.41)
    line = decision_line(decide(SearchOutcome.of([base, slow])))
    # the line is the plain first sentence only: no label, no figures (those are the details)
    assert line == ("Decision: Fastest here: the model alone — speculation with the draft model good.gguf was "
                    "slower on your prompts."), line
    fast = rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)], acceptance=0.64)
    d = decide(SearchOutcome.of(fast))
    line2 = decision_line(d)
    assert line2 == ("Decision: Fastest here: the draft model good.gguf, about 1.4× faster than the model alone on "
                     "your prompts."), line2
    # the whole reason: the first sentence, then the evidence naming the label once
    assert d.reason.startswith(line2.removeprefix("Decision: ")) and d.reason.count(GOOD.label) == 1, d.reason
    assert "good.gguf, guessing up to 8 tokens ahead: 331 against 240 tokens/s" in d.reason, d.reason


def test_nothing_measured_for_lack_of_time_says_so():
    base = m(BASE, [240.0, 238.0])
    d = decide(SearchOutcome.of([base], unmeasured=[NGRAM]))
    assert d.no_speculation and "time budget" in d.reason and NGRAM.label in d.reason
    assert "no compatible draft" in decide(SearchOutcome.of([base])).reason


def test_a_winner_whose_output_differs_says_where():
    from tuner.calibration.results import Divergence

    ms = rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)], acceptance=0.64)
    ms[1] = Measurement(GOOD, samples=ms[1].samples, speculative_active=True, lossless=False,
                        divergences=(Divergence(8, 2, 238), Divergence(3, 2, 40)))
    d = decide(SearchOutcome.of(ms))
    assert d.winner == GOOD and d.lossless is False
    assert "prompt 9, repetition 3, character 238" in d.reason and "1 more request differed" in d.reason


def test_a_single_fast_repetition_does_not_beat_a_confirmed_winner():
    # ngram-mod ran once (screening, next to a fast baseline repetition) at 1.23x; the good draft was
    # confirmed in adjacent pairs at ~1.3x: only the confirmed one can be served.
    ms = rounds(GOOD, [(1088.0, 1400.0), (840.0, 1100.0), (577.0, 760.0), (963.0, 1250.0)], acceptance=0.6)
    ms.insert(2, m(NGRAM, [1336.7], acceptance=1.0))
    d = decide(SearchOutcome.of(ms))
    assert d.winner == GOOD, d.reason


def test_two_steady_pairs_of_many_requests_decide():
    """The issue's case: two pairs of six paired requests at 1.34× and 1.36× conclude (the old rule on pair
    ratios never gave a verdict before a third pair)."""
    prompts = [[66.8 * f for f in (1.0, 0.9, 1.1, 1.05, 0.95, 1.0)], [66.6 * f for f in (1.0, 0.9, 1.1, 1.05, 0.95, 1.0)]]
    pairs = [(prompts[0], [x * 1.34 for x in prompts[0]]), (prompts[1], [x * 1.36 for x in prompts[1]])]
    d = decide(SearchOutcome.of(rounds(GOOD, pairs, acceptance=0.7)))
    assert d.winner == GOOD and d.pairs == 2 and 1.34 <= d.speedup <= 1.36, d.reason


def test_no_speculation_names_the_configurations_the_budget_left_unmeasured() -> None:
    """One n-gram type ran and drafted nothing, the others were skipped for lack of time: the decision says
    both (a new user's run read "no speculative configuration drafted any token" when three never ran)."""
    from tuner.calibration.candidates import Candidate
    from tuner.calibration.results import Measurement, Sample

    base = Measurement(Candidate(), samples=(Sample(0, "code", 0, 60.0),), stage="baseline")
    mod = Measurement(Candidate(spec_type="ngram-mod"), samples=(Sample(0, "code", 0, 59.0),), stage="probe",
                      error="ngram-mod never drafted at the served sampling (greedy); no speedup is possible",
                      no_drafts_at="greedy")
    skipped = [Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-simple", ngram_n_max=16)]
    d = decide(SearchOutcome.of([base, mod], unmeasured=skipped))
    assert d.no_speculation
    assert "No measured speculative configuration drafted any token" in d.reason, d.reason
    assert "the time budget was spent before ngram-simple, ngram-simple ngram n_max 16 were measured" in d.reason
    assert "a larger time budget measures them" in d.reason and "--force" not in d.reason
    # nothing unmeasured: the plain finding, as before
    assert "speculation never got going on your prompts. No speculative configuration drafted any token" in \
        decide(SearchOutcome.of([base, mod])).reason


def test_an_earlier_faster_look_stands_in_the_decision():
    """A busy sweep pairs on after a conclusive look (to narrow the estimate): a later noisy pair cannot take
    the verdict back; the figures are over all pairs, the interval is the deciding look's."""
    steady = [([240.0, 250.0], [360.0, 372.0]), ([241.0, 249.0], [362.0, 376.0])]
    late = steady + [([240.0, 250.0], [200.0, 210.0]), ([240.0, 250.0], [210.0, 200.0])]
    d = decide(SearchOutcome.of(rounds(GOOD, late, acceptance=0.7)))
    look = d.comparisons[0].look
    assert d.winner == GOOD and look is not None and look.decided_at == 2 and look.n == 4
    assert d.speedup_ci_low is not None and d.speedup_ci_low > 1.03
    assert "faster beyond noise at the sequential test's look after 2 pairs" in d.reason


def test_an_unsteady_baseline_makes_screening_figures_no_evidence_either_way():
    """The model alone measured 20.2, 7.8 and 0.9 tokens/s in three launches (a new user's busy box), and the
    only candidate ran minutes later in screening: the decision says that is no evidence, not "slower" with
    a break-even verdict."""
    base = m(BASE, [20.2, 20.0, 20.4], categories=["code"])
    slow = m(GOOD, [1.8, 1.9, 1.7], acceptance=1.0, categories=["code"])
    plain = decide(SearchOutcome.of([base, slow]))
    assert "slower than the target alone" in plain.reason
    d = decide(SearchOutcome.of([base, slow], baseline_unsteady=True))
    assert d.no_speculation
    assert "not evidence either way" in d.reason and "slower" not in d.reason and "would not pay" not in d.reason
    # and no per-category line quotes those figures as speedups ("code: 0.09×" under "not evidence")
    assert plain.per_category and not d.per_category


def test_a_run_that_drafted_nothing_gets_no_per_category_speedups():
    """A cut-short n-gram run that proposed no token is the model alone: its per-category "10.71×" in a
    no-speculation report (stop-12 trial) compared the model with itself at two moments."""
    base = m(BASE, [20.2, 20.0, 20.4], categories=["code"])
    alone = m(Candidate(spec_type="ngram-mod"), [30.1, 29.8, 30.3], categories=["code"])
    drafting = m(Candidate(spec_type="ngram-mod"), [30.1, 29.8, 30.3], acceptance=0.5, categories=["code"])
    assert decide(SearchOutcome.of([base, drafting])).per_category  # the same figures with drafts do get their lines
    d = decide(SearchOutcome.of([base, alone]))
    assert d.no_speculation and not d.per_category


def test_never_drafted_types_with_different_reasons_are_not_merged():
    def never(t: str, greedy_draft_n: int | None) -> dict:
        nd = NoDrafts("temperature 0.8", sampled=True, greedy_draft_n=greedy_draft_n, requests=14)
        return never_entry(t, t, no_drafts_error(t, nd), "temperature 0.8", nd)

    same = never_text([never("ngram-mod", None), never("ngram-simple", None)])
    assert same == "ngram-mod, ngram-simple drafted nothing in 14 requests at these sampling settings"
    differ = never_text([never("ngram-mod", 3), never("ngram-simple", 30)])
    assert "ngram-mod drafted nothing in 14 requests at these sampling settings, although it drafted 3 tokens" in differ
    assert "ngram-simple drafted nothing in 14 requests at these sampling settings, although it drafted 30 tokens" \
        in differ


def test_never_drafted_words_from_the_structured_field_and_from_the_measurement_agree():
    """The decision names the types that never drafted from ``Measurement.no_drafts``; a measurement recorded
    without that field (the search does not fill it yet) reads the same from its own fields (``no_drafts_at``,
    ``greedy_draft_n``, its samples), never from its ``error`` words: they claim more than was measured."""
    at = "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama-server's defaults)"

    def measured(t: str, nd: NoDrafts | None) -> Measurement:
        return Measurement(Candidate(spec_type=t), samples=synthetic_samples([10.0]), no_drafts_at=at,
                           speculative_active=True, greedy_draft_n=12, no_drafts=nd,
                           error=f"{t} never drafted …: these prompts repeat no n-gram; no speedup is possible")

    base = m(BASE, [10.0, 10.1])
    typed = decide(SearchOutcome.of([base, measured("ngram-mod", NoDrafts(at, True, 12)),
                                     measured("ngram-simple", NoDrafts(at, True, 12))]))
    from_fields = decide(SearchOutcome.of([base, measured("ngram-mod", None), measured("ngram-simple", None)]))
    assert typed.reason == from_fields.reason == (
        "Fastest here: the model alone — speculation never got going on your prompts. No speculative configuration "
        "drafted any token: ngram-mod, ngram-simple drafted nothing in 1 request at these sampling settings, although "
        "it drafted 12 tokens in the short greedy check (temperature 0).")
    assert "repeat no" not in typed.reason and "no speedup is possible" not in typed.reason
    assert typed.kind == "alone_never_drafted" and typed.named == ("ngram-mod", "ngram-simple")
    assert Measurement.from_json(measured("ngram-mod", NoDrafts(at, True, 12)).to_json()).no_drafts == \
        NoDrafts(at, True, 12)
    assert "no_drafts" not in measured("ngram-mod", None).to_json()  # a profile's evidence as before


KIND_OF_GOLDEN_CASE = {
    "winner": "speculate", "ngram winner": "speculate", "chain faster beyond noise": "speculate",
    "chain within noise of the single": "speculate",
    "chain within noise of the baseline": "alone_not_enough_evidence",
    "not enough evidence, pairs needed": "alone_not_enough_evidence",
    "unsteady baseline": "alone_unsteady",
    "slower, break-even": "alone_slower", "slower, never pays": "alone_slower", "slower, stopped early": "alone_slower",
    "screening only": "alone_screening_only", "within noise, drafted nothing": "alone_screening_only",
    "within noise": "alone_within_noise",
    "never drafted, one shared reason": "alone_never_drafted", "never drafted and unmeasured": "alone_never_drafted",
    "all failed": "alone_failed",
    "unmeasured only": "alone_unmeasured", "unmeasured, many": "alone_unmeasured",
    "nothing available": "alone_nothing",
}


@pytest.mark.parametrize("case", sorted(KIND_OF_GOLDEN_CASE))
def test_each_reason_has_its_kind(case: str) -> None:
    """``Decision.kind`` says why, for every branch the goldens pin; the first sentence is the headline of
    that kind and the labels it names are in ``named``."""
    from tests.calibration.test_goldens import DECISIONS

    d = DECISIONS[case]()
    assert d.kind == KIND_OF_GOLDEN_CASE[case]
    head = d.sentences[0]
    assert head.kind == ("headline.serving" if d.kind == "speculate" else "alone." + d.kind.removeprefix("alone_"))
    assert d.no_speculation == (d.kind != "speculate")
    for label in d.named:
        assert label in d.reason
