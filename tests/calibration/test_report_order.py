"""The decision's sentences read in the order issue 24 item 3 fixes, whatever step added them: the plain
first sentence, the machine's speed varying (issue 25), the evidence, then one sentence each for the thread
trade (issue 25), a CPU workaround (issue 23), the captured requests (issue 28) and the mix, then the
machine's load and the sweep's own sentences."""

from __future__ import annotations

import random

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pairing import Mix
from tuner.calibration.prompts import Prompt
from tuner.calibration.report import MachineLoad, NoRepack, ReportFacts, finish_decision
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.calibration.sentences import Sentence, Slot
from tuner.calibration.wording import render, words
from tuner.calibration.workload import Workload
from tuner.hardware.host import LoadSummary
from tuner.hardware.repack import no_repack_sentence

ISSUE_24_ORDER = [Slot.HEADLINE, Slot.SPEED_VARIED, Slot.EVIDENCE, Slot.THREADS, Slot.CPU_WORKAROUND,
                  Slot.CAPTURED, Slot.MIX, Slot.MACHINE_LOAD, Slot.SWEEP]


def test_the_slots_are_issue_24s_order() -> None:
    assert sorted(Slot) == ISSUE_24_ORDER


@pytest.mark.parametrize("seed", range(6))
def test_a_sentence_of_each_slot_in_any_order_reads_in_slot_order(seed: int) -> None:
    # two sentences in the sweep's slot keep the order they were added in
    sentences = [Sentence.text(slot, f"{slot.name}.") for slot in ISSUE_24_ORDER]
    sentences.append(Sentence.text(Slot.SWEEP, "SWEEP again."))
    shuffled = sentences[:-1]
    random.Random(seed).shuffle(shuffled)
    sweep_at = shuffled.index(sentences[-2])
    shuffled.insert(sweep_at + 1 + random.Random(seed).randrange(len(shuffled) - sweep_at), sentences[-1])
    out = render(shuffled)
    assert out.text == " ".join([f"{slot.name}." for slot in ISSUE_24_ORDER] + ["SWEEP again."])
    assert out.first == "HEADLINE."


def test_the_new_sentences_of_issues_25_23_and_28_take_their_places_in_a_tuned_decision() -> None:
    good = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
    long_prompts = [(0, Prompt("a", "code")), (1, Prompt("long", "long code", fill=0.5))]
    ms = [Measurement(Candidate(), samples=synthetic_samples([[100.0, 50.0]]), speculative_active=True),
          *synthetic_rounds(good, [([100.0, 50.0], [140.0, 52.0])] * 4, acceptance=0.7, first_repetition=1)]
    outcome = SearchOutcome.of(ms, mix=Mix.of(long_prompts, 0.5),
                               notes=[Sentence.text(Slot.SWEEP, "The sweep stopped at its time limit.")])
    d = finish_decision(decide(outcome), outcome, ReportFacts(
        workload=Workload(), machine=MachineLoad(LoadSummary(10, 0.4, 0.45, 0.0, 0.5)),
        cpu_workaround=NoRepack("sigill", ("AMX",)), captured={0: 1.7e9, 1: 1.7e9 + 60, 7: 1.7e9 + 120},
        served_model_id="m"))
    # what issue 25 will add, in whatever step adds it
    later = [Sentence.text(Slot.THREADS, "THREADS."), Sentence.text(Slot.SPEED_VARIED, "SPEED_VARIED.")]
    full = d.with_sentences([*later, *d.sentences])
    kinds = [s.kind for s in full.sentences]
    assert [s.slot for s in full.sentences] == sorted(s.slot for s in full.sentences)
    assert kinds == ["headline.serving", "text", "evidence.paired", "text", "cpu.no_repack", "captured.replayed",
                     "mix.share", "machine.load", "text", "sweep.measured_with"]
    parts = [words(s) for s in full.sentences]
    # the captured requests the launches measured (prompts 0 and 1; request 7 was never sent)
    assert parts[1] == "SPEED_VARIED." and parts[3] == "THREADS." and parts[5].startswith("Tuned on 2 requests served ")
    assert parts[4] == no_repack_sentence("sigill", ("AMX",))
    assert full.reason == " ".join(parts) and full.busy_note == parts[7]
    # saved (in reading order) and shown again: the same words
    again = full.with_sentences(tuple(Sentence.from_json(s.to_json()) for s in full.sentences))
    assert again.reason == full.reason
