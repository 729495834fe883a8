"""Sound comparisons on recorded measurements (issue 10 "Done when", first bullet): a candidate
stopped after 1 of 5 requests never wins; a baseline whose first launch ran 3x slower does not make
a speedup the adjacent pairs do not show; the chart rows, the decision and the per-category lines
agree on the same records."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.results import (
    Measurement,
    Sample,
    synthetic_rounds,
    synthetic_samples,
)
from tuner.calibration.tune import TuneResult

BASE = Candidate()
NGRAM = Candidate(spec_type="ngram-simple")
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
CATS = ["code", "creative", "math", "chat", "summary"]


def _screen(c: Candidate, rows, acceptance=None, stage="probe", **kw) -> Measurement:
    return Measurement(c, samples=synthetic_samples(rows, acceptance=acceptance, categories=CATS), stage=stage,
                       speculative_active=True, **kw)


def _quoted(reason: str) -> tuple[float, float]:
    """The first tokens/s figures the reason quotes (a winner's "Serving …" sentence gives them, rounded by
    ``plain_tps``; its evidence part then gives the ratio, not the figures again)."""
    found = re.search(r"([\d.]+) against ([\d.]+) tokens/s", reason)
    assert found, reason
    return float(found.group(1)), float(found.group(2))


def test_a_candidate_stopped_after_1_of_5_requests_never_wins() -> None:
    # The field report: the baseline's 5 prompts x 2 repetitions, two of them while another program had
    # the CPU; ngram-simple stopped after its first request (code) as a clear loser, at 233 tokens/s
    # against 757 for the baseline on that same prompt.
    base = _screen(BASE, [[757.0, 65.1, 70.0, 900.0, 880.0], [760.0, 70.0, 880.0, 60.0, 890.0]], stage="baseline")
    ngram = Measurement(NGRAM, samples=(Sample(0, "code", 0, 233.0, None, 128, 127 / 233.0 * 1000, 100, 30),),
                        speculative_active=True, stopped_early=True)
    d = decide(SearchOutcome.of([base, ngram]))
    assert d.no_speculation, d.reason
    assert d.best_speculative_speedup == pytest.approx(233.0 / 757.0, rel=1e-3)  # like with like, one request
    assert "1 request run by both sides" in d.reason and "slower" in d.reason
    assert "adjacent pair" not in d.reason  # not paired, and not said to be
    # Even a stopped-early run that was fast on its one request is never served.
    lucky = replace(ngram, samples=(Sample(0, "code", 0, 2300.0, None, 128, 127 / 2300.0 * 1000, 100, 90),))
    d2 = decide(SearchOutcome.of([base, lucky]))
    assert d2.no_speculation and d2.comparisons[0].stopped_early and not d2.comparisons[0].paired
    # ... and its stopped-early run never enters a pair, even next to a baseline confirm launch.
    confirm_base = _screen(BASE, [[700.0] * 5], stage="confirm")
    early_confirm = replace(lucky, stage="confirm")
    assert decide(SearchOutcome.of([confirm_base, early_confirm, base])).no_speculation


def test_a_baseline_that_ran_3x_slower_at_first_is_not_a_speedup() -> None:
    # Screening: the baseline's first launch at 2.9 tokens/s (the machine busy), the draft probe minutes
    # later at 12.0 (quiet): 4.1x on paper. The adjacent pairs show what the draft really does: 1.0x.
    base = _screen(BASE, [[2.9] * 5], stage="baseline")
    probe = _screen(GOOD, [[12.0] * 5], acceptance=0.8)
    flat = synthetic_rounds(GOOD, [([8.5] * 5, [8.6] * 5), ([12.0] * 5, [11.9] * 5), ([9.0] * 5, [9.1] * 5),
                                   ([12.5] * 5, [12.4] * 5)], acceptance=0.8, categories=CATS, first_repetition=1)
    d = decide(SearchOutcome.of([base, probe, *flat]))
    assert d.no_speculation, d.reason
    assert 0.95 < d.best_speculative_speedup < 1.05 and d.pairs == 4
    # With a real 1.49x in the pairs (8.5 vs 12.7 in the report), that is the figure, not 4.1x or 2.49x.
    real = synthetic_rounds(GOOD, [([8.5] * 5, [12.7] * 5), ([12.0] * 5, [17.9] * 5), ([9.0] * 5, [13.4] * 5),
                                   ([6.0] * 5, [8.9] * 5)], acceptance=0.8, categories=CATS, first_repetition=1)
    d2 = decide(SearchOutcome.of([base, probe, *real]))
    assert d2.winner == GOOD and d2.speedup == pytest.approx(1.49, abs=0.01), d2.reason
    c_tps, b_tps = _quoted(d2.reason)
    assert c_tps / b_tps == pytest.approx(d2.speedup, rel=0.02)  # 12.4 vs 8.4: one decimal each
    assert f"{d2.speedup:.2f}× over" in d2.reason.split("The evidence:", 1)[1]


def _sweep() -> list[Measurement]:
    # Screening: baseline, the good draft (probe), ngram-simple stopped early, ngram-mod fast on paper.
    base = _screen(BASE, [[700.0, 720.0, 690.0, 710.0, 705.0]], stage="baseline")
    probe = _screen(GOOD, [[1000.0, 900.0, 1100.0, 760.0, 800.0]], acceptance=0.7)
    early = Measurement(NGRAM, samples=(Sample(0, "code", 0, 233.0, None, 128, 127 / 233.0 * 1000, 100, 30),),
                        speculative_active=True, stopped_early=True)
    mod = _screen(Candidate(spec_type="ngram-mod"), [[716.0, 716.0, 716.0, 716.0, 716.0]], acceptance=0.2)
    pairs = [([700.0, 720.0, 690.0, 710.0, 705.0], [1000.0, 900.0, 1100.0, 760.0, 800.0]),
             ([400.0, 410.0, 390.0, 405.0, 400.0], [570.0, 520.0, 610.0, 430.0, 460.0]),
             ([690.0, 700.0, 680.0, 700.0, 700.0], [985.0, 890.0, 1080.0, 750.0, 790.0]),
             ([650.0, 660.0, 640.0, 655.0, 650.0], [930.0, 840.0, 1020.0, 700.0, 745.0])]
    return [base, probe, early, mod, *synthetic_rounds(GOOD, pairs, acceptance=0.7, categories=CATS,
                                                       first_repetition=1)]


def test_chart_decision_and_per_category_lines_agree() -> None:
    from tuner.calibration.wording import plain_tps
    from tuner.ui.flow import result_rows

    ms = _sweep()
    d = decide(SearchOutcome.of(ms))
    assert d.winner == GOOD, d.reason
    result = TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=tuple(ms))
    rows = {r[0]: r for r in result_rows(result)}
    # the chart's bars are the decision's figures
    assert rows["the model alone"][1] == pytest.approx(d.baseline_gen_tokens_per_s)
    assert rows[GOOD.label][1] == pytest.approx(d.gen_tokens_per_s)
    c_tps, b_tps = _quoted(d.reason)
    assert (plain_tps(c_tps), plain_tps(b_tps)) == (plain_tps(d.gen_tokens_per_s), plain_tps(d.baseline_gen_tokens_per_s))
    # the "Serving …" sentence quotes the same figures, rounded; the evidence does not repeat them
    plain, evidence = d.reason.split("The evidence:", 1)
    assert "tokens/s" not in evidence and f"{d.speedup:.2f}× over" in evidence
    assert f"{plain_tps(d.gen_tokens_per_s)} against {plain_tps(d.baseline_gen_tokens_per_s)} tokens/s" in plain
    assert plain_tps(738.4) == "738" and plain_tps(7.44) == "7.4"
    assert plain.startswith(f"Fastest here: the draft model good.gguf, about {d.speedup:.1f}× faster than the model "
                            "alone on your prompts.")
    # no bar of another candidate stands above the winner's speedup, whatever its raw tokens/s
    for c in d.comparisons:
        assert c.speedup <= d.speedup + 1e-9
        if c.candidate.label in rows:
            assert rows[c.candidate.label][1] == pytest.approx(c.gen_tokens_per_s)
    # per-category lines are the same paired requests, grouped: they pool back to the overall figure
    lines = d.per_category
    assert sum(x.paired_requests for x in lines) == d.comparisons[0].requests == 4 * 5
    tok = 127.0
    c_time = sum(x.paired_requests * tok / x.gen_tokens_per_s for x in lines)  # equal requests per category
    assert sum(x.paired_requests for x in lines) * tok / c_time == pytest.approx(d.gen_tokens_per_s, rel=0.02)
    assert all(x.candidate_label == GOOD.label for x in lines)
    # the CLI's comparison table quotes the same figures, with what they rest on
    import io

    from tuner.cli.tune_report import print_table

    out = io.StringIO()
    print_table(result, out)
    text = out.getvalue()
    row = next(x for x in text.splitlines() if x.startswith(GOOD.label) and "adjacent pair" in x)
    assert f"{d.speedup:.2f}x" in row and f"{d.gen_tokens_per_s:.1f}" in row and f"{d.baseline_gen_tokens_per_s:.1f}" in row
    assert f"{len(d.comparisons[0].pairs)} adjacent pairs, {d.comparisons[0].requests} requests" in row


def test_a_reused_profile_prints_the_comparisons_it_saved() -> None:
    """A reused profile's report (stop-12 trial: the "not a comparison" header stood above a decision that
    quoted one, and the comparison table and per-category lines were gone) shows the saved figures."""
    import io

    from tuner.calibration.pipeline.reuse import decision_from_profile
    from tuner.cli.tune_report import print_table
    from tuner.profiles.profile import Profile, StalenessKeys

    ms = _sweep()
    d = decide(SearchOutcome.of(ms))
    keys = StalenessKeys(hardware_fingerprint="h", server_binary="s", server_build="b", dialect_fingerprint="d",
                         model_files=(), prompt_set_sha256="p")
    prof = Profile(target_path="/m/t.gguf", keys=keys, winner=d.winner.to_json(), server_config={}, argv=(),
                   decision=d.to_json(), evidence=tuple(m.to_json() for m in ms), created_unix_s=1.7e9)
    reused = decision_from_profile(prof)
    assert reused.per_category == d.per_category and reused.break_even == d.break_even
    again = TuneResult(target_path=Path("/m/t.gguf"), decision=reused, profile=prof, reused=True)
    out = io.StringIO()
    print_table(again, out, details=True)
    text = out.getvalue()
    # the app's chart of a reused profile: the bars it showed after the sweep (it showed none)
    from tuner.ui.flow import result_rows

    fresh = TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=tuple(ms))
    assert result_rows(again) == result_rows(fresh) and len(result_rows(again)) >= 2
    assert text.startswith("The saved profile's launches, measured ") and "not a comparison" not in text
    row = next(x for x in text.splitlines() if x.startswith(GOOD.label) and "adjacent pair" in x)
    c = d.comparisons[0]
    assert f"{c.speedup:.2f}x" in row and f"{len(c.pairs)} adjacent pairs, {c.requests} requests" in row
    assert f"per category, {GOOD.label} vs no speculation" in text
    assert all(f"  {x.category}: {x.speedup:.2f}x" in text for x in d.per_category)


def test_a_type_that_never_drafted_is_a_finding_not_a_failed_run() -> None:
    """An n-gram type that ran but proposed no token (issue 11's finding) is reported as such; only a run
    that really broke is called one that did not run correctly."""
    base = _screen(BASE, [[100.0] * 5], stage="baseline")
    never = Measurement(Candidate(spec_type="ngram-mod"), samples=(), speculative_active=True,
                        error="ngram-mod never drafted at greedy settings: these prompts repeat no n-gram",
                        no_drafts_at="greedy settings")
    d = decide(SearchOutcome.of([base, never]))
    assert d.no_speculation
    assert "No speculative configuration drafted any token: ngram-mod drafted nothing at these sampling settings" \
        in d.reason, d.reason
    assert "speculation never got going" in d.reason and "ran correctly" not in d.reason
    assert "repeat no n-gram" not in d.reason  # the error's general claim is not the decision's
    broken = Measurement(Candidate(spec_type="ngram-simple"), samples=(), speculative_active=True,
                         error="request failed (prompt 1, repetition 1): HTTP 500")
    d2 = decide(SearchOutcome.of([base, never, broken]))
    assert "No speculative configuration ran correctly: ngram-simple: request failed" in d2.reason, d2.reason


def test_table_without_comparisons_does_not_point_to_a_missing_table() -> None:
    """A sweep where nothing was compared (one n-gram type that drafted nothing) prints no "table below"
    and no "lossless yes" for a run that drafted nothing."""
    import io
    from pathlib import Path

    from tuner.calibration.candidates import Candidate
    from tuner.calibration.decide import decide
    from tuner.calibration.results import Measurement, Sample
    from tuner.calibration.tune import TuneResult
    from tuner.cli.tune_report import print_table

    base = Measurement(Candidate(), samples=(Sample(0, "code", 0, 60.0),), stage="baseline")
    mod = Measurement(Candidate(spec_type="ngram-mod"), samples=(Sample(0, "code", 0, 150.0),), stage="probe",
                      error="ngram-mod never drafted at the served sampling (greedy); no speedup is possible",
                      no_drafts_at="greedy", lossless=True, speculative_active=True)
    d = decide(SearchOutcome.of([base, mod]))
    assert not d.comparisons
    out = io.StringIO()
    print_table(TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=(base, mod)), out)
    text = out.getvalue()
    assert "table below" not in text and "not a comparison" in text
    row = next(line for line in text.splitlines() if line.startswith("ngram-mod"))
    assert " yes " not in row, row
    assert row.endswith("drafted nothing") and "no speedup is possible" not in row, row  # what was measured
