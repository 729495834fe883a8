"""The hand-offs between the search, the decision and the report: sentences as data, one outcome object."""

from __future__ import annotations

import json
import threading

import pytest

from tests.fakes.scripted_server import ScriptedLaunch
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.prompts import Prompt
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.calibration.search import SearchSettings, run_search
from tuner.calibration.sentences import TEXT, Sentence, Slot, in_reading_order
from tuner.calibration.workload import Workload

GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)


def test_sentences_read_in_slot_order_and_survive_json() -> None:
    sweep = Sentence(Slot.SWEEP, "sweep.time_limit", {"limit_s": 65.0, "cut": ["ngram-simple"]})
    head = Sentence(Slot.HEADLINE, "headline.serve", {"label": GOOD.label, "speedup": 1.4})
    load = Sentence.text(Slot.MACHINE_LOAD, "Other programs used 40 % of the CPU.")
    later_sweep = Sentence.text(Slot.SWEEP, "Measured with raw completions.")
    ordered = in_reading_order([sweep, load, later_sweep, head])
    assert ordered == (head, load, sweep, later_sweep)  # by slot; within one, as added
    for s in ordered:
        assert Sentence.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert load.kind == TEXT and load.words() == "Other programs used 40 % of the CPU."
    with pytest.raises(ValueError, match="headline.serve"):
        head.words()
    with pytest.raises(KeyError):
        Sentence.from_json({"slot": "NO_SUCH_SLOT", "kind": "x"})


def test_decide_reads_the_sweeps_own_settings_from_the_outcome() -> None:
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(GOOD, [(240.0, 300.0), (241.0, 298.0), (239.0, 302.0)], acceptance=0.6,
                            first_repetition=1)]
    outcome = SearchOutcome.of(ms, max_pairs=3, finalists=1, unmeasured=[Candidate(spec_type="ngram-mod")])
    assert isinstance(outcome.unmeasured, tuple) and isinstance(outcome.measurements, tuple)
    d = decide(outcome)
    assert d.winner == GOOD and d.kind == "speculate" and d.named == (GOOD.label,)
    # a stricter bar is the outcome's, not a default
    strict = decide(SearchOutcome.of(ms, max_pairs=3, finalists=1, min_gain=0.5))
    assert strict.no_speculation and strict.kind == "alone_within_noise"


def test_a_cancelled_search_hands_back_what_ran() -> None:
    cancel = threading.Event()

    def tps_of(c: Candidate) -> float:
        cancel.set()  # the user cancels during the baseline's first request
        return 10.0

    launch = ScriptedLaunch(tps_of)
    plan = CandidatePlan(baseline=Candidate(), drafts=(GOOD,), ngram=(), mtp=None, dropped=())
    outcome = run_search(plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=8), Workload(), 60.0,
                         launch, cancel, lambda *a, **k: None)
    assert outcome.cancelled and not outcome.notes and outcome.long_context is None
    assert all(m.candidate.is_baseline for m in outcome.measurements)


def test_the_report_appends_its_sentences_after_the_decisions_words() -> None:
    """The CPU workaround in its own slot after the evidence, then the machine's load (also kept as
    ``busy_note``), then the sweep's notes, what was measured and the types that never drafted, in that
    order (issue 24 item 3)."""
    from tuner.calibration.report import MachineLoad, NoRepack, ReportFacts, finish_decision
    from tuner.hardware.host import LoadSummary
    from tuner.hardware.repack import no_repack_sentence

    never = Measurement(Candidate(spec_type="ngram-mod"), samples=synthetic_samples([10.0]), no_drafts_at="greedy",
                        error="ngram-mod never drafted at the served sampling (greedy); no speedup is possible")
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(GOOD, [(240.0, 300.0), (241.0, 298.0), (239.0, 302.0)], acceptance=0.6,
                            first_repetition=1), never]
    outcome = SearchOutcome.of(ms, notes=[Sentence.text(Slot.SWEEP, "A note on the sweep.")])
    plain = decide(outcome)
    d = finish_decision(plain, outcome, ReportFacts(
        workload=Workload(), machine=MachineLoad(LoadSummary(10, 0.4, 0.45, 0.0, 0.5), (7, 8)),
        cpu_workaround=NoRepack("sigsegv")))
    load = ("Other programs used 40 % of the CPU during the sweep; figures are less certain. 2 other llama-server "
            "processes ran on this machine during the sweep and competed with it.")
    assert d.reason == (f"{plain.reason} {no_repack_sentence('sigsegv')} {load} A note on the sweep. Measured with "
                        "raw completions (/completion) at greedy (temperature 0). ngram-mod drafted nothing at these "
                        "sampling settings.")
    assert d.busy_note == load and plain.busy_note is None
    assert [s.slot for s in d.sentences] == sorted(s.slot for s in d.sentences)
