"""The sweep's record: what it books, what it reads back, and the sentences it says about the sweep."""

from __future__ import annotations

from tuner.calibration.candidates import Candidate
from tuner.calibration.results import Measurement, Sample, synthetic_samples
from tuner.calibration.search.record import Record
from tuner.calibration.sentences import Sentence, Slot
from tuner.calibration.wording import words

BASE = Candidate()
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=16, p_min=0.0)
NGRAM = Candidate(spec_type="ngram-mod")


def _m(c: Candidate, tps: list[float], stage: str = "probe", **kw: object) -> Measurement:
    return Measurement(c, samples=synthetic_samples([tps]), stage=stage, speculative_active=True, **kw)  # type: ignore[arg-type]


def test_a_cut_launch_is_unmeasured_only_when_it_kept_nothing_and_never_ran_before() -> None:
    r = Record()
    r.book_cut(BASE, measured=False)  # the baseline is never "unmeasured"
    r.book_cut(GOOD, measured=True)   # cut short with some requests: measured
    r.book_cut(NGRAM, measured=False)
    r.book_cut(NGRAM, measured=False)
    assert r.cut_by_budget == [BASE.label, GOOD.label, NGRAM.label, NGRAM.label] and r.unmeasured == [NGRAM]
    ran = Record(measurements=[_m(GOOD, [10.0])])
    ran.book_cut(GOOD, measured=False)  # a second launch of a measured candidate
    assert ran.unmeasured == []


def test_a_drafts_runs_and_lengths_are_its_group() -> None:
    r = Record(measurements=[_m(GOOD, [10.0]), _m(GOOD.with_n_max(4), [12.0]), _m(NGRAM, [9.0]),
                             Measurement(GOOD.with_n_max(8), error="request failed")])
    assert [m.candidate.n_max for m in r.runs_of(GOOD)] == [16, 4]  # successful runs only
    assert r.measured_n_max(GOOD) == {16, 4, 8}  # a failed length is measured too (not tried again)
    assert Record.group(GOOD) == Record.group(GOOD.with_n_max(2)) != Record.group(NGRAM)


def test_the_screening_baseline_skips_a_superseded_launch() -> None:
    r = Record(measurements=[_m(BASE, [22.8], stage="baseline"), _m(NGRAM, [700.0]), _m(BASE, [701.0], stage="baseline")])
    assert r.screening_baseline() == (0, r.measurements[0])
    r.supersede(0, "disturbed")
    assert r.measurements[0].superseded == "disturbed"
    assert r.screening_baseline() == (2, r.measurements[2])


def test_the_baselines_speed_on_the_same_requests() -> None:
    r = Record(measurements=[_m(BASE, [100.0, 50.0], stage="baseline")])
    same = [Sample(0, "code", 0, 120.0, None, 128, 127 / 120.0 * 1000)]
    assert r.baseline_tps_on(same) == 100.0
    assert r.baseline_tps_on([Sample(9, "code", 0, 120.0)]) is None  # a request the baseline never ran


def test_a_contender_is_a_run_faster_than_the_baseline() -> None:
    r = Record(measurements=[_m(BASE, [100.0], stage="baseline"), _m(GOOD, [90.0])], base_tps=100.0)
    assert not r.contender_seen()
    r.add(_m(GOOD.with_n_max(4), [110.0]))
    assert r.contender_seen()


def test_the_sweep_notes_end_with_the_time_limit_naming_each_cut_launch_once() -> None:
    superseded = Sentence(Slot.SWEEP, "sweep.baseline_superseded",
                          {"first_tps": 12.1, "idle_tps": 20.3, "idle_label": "ngram-mod", "again_tps": 20.1})
    r = Record(notes=[superseded])
    assert r.sweep_notes(64.8, 60.0) == [superseded]  # nothing cut: no time-limit sentence
    for c in (NGRAM, GOOD, NGRAM):
        r.book_cut(c, measured=True)
    notes = r.sweep_notes(64.8, 60.0)
    assert notes[0] == superseded and notes[1].kind == "sweep.time_limit" and notes[1].slot == Slot.SWEEP
    assert words(notes[1]) == ("The sweep stopped at its time limit (65 s for a 60 s budget: the estimates from the "
                               "warm-up ran short); cut short or kept from starting by it: ngram-mod, draft-simple "
                               "good.gguf n_max 16.")
    assert "(6.5 s for a 6 s budget" in words(r.sweep_notes(6.48, 6.0)[1])  # a short limit keeps its decimal
