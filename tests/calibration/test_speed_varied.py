"""When the machine's speed varied more than 2× across a configuration's launches, the decision says so right
after its headline (slot SPEED_VARIED: issue 25 item 4) and says what would help; launches are compared on the
prompts they all ran."""

from __future__ import annotations

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.report import ReportFacts, finish_decision, launch_speeds, speed_varied_sentence
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.calibration.sentences import Slot
from tuner.calibration.wording import render
from tuner.calibration.workload import Workload

BASE = Candidate()
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)


def _sweep(base_speeds: list[float]) -> list[Measurement]:
    """A screening baseline at ``base_speeds[0]``, then paired rounds whose baselines ran at the others (the
    candidate 1.3× its neighbour each time)."""
    first = Measurement(BASE, samples=synthetic_samples([[base_speeds[0]] * 2]), stage="baseline")
    pairs = [([b] * 2, [1.3 * b] * 2) for b in base_speeds[1:]]
    return [first, *synthetic_rounds(GOOD, pairs, acceptance=0.7, first_repetition=1)]


def test_a_baseline_that_ran_at_694_390_and_127_says_the_figures_mean_little():
    ms = _sweep([694.0, 390.0, 127.0, 127.0])
    s = speed_varied_sentence(ms)
    assert s is not None and s.slot == Slot.SPEED_VARIED
    assert s.params["label"] == BASE.label and s.params["low"] == pytest.approx(127.0)
    assert s.params["high"] == pytest.approx(694.0)
    assert s.params["others"] == 0  # the candidate's launches each held a fast and a slow repetition
    outcome = SearchOutcome.of(ms)
    d = finish_decision(decide(outcome), outcome, ReportFacts(workload=Workload()))
    out = render(d.sentences)
    # right after the headline's evidence (details[0]): the figures it gives are the ones that varied
    assert out.details[1].startswith("The machine's speed varied too much for these figures to mean much")
    assert "a re-tune on a quieter machine, or with fewer threads, would help" in out.details[1]


def test_a_steady_machine_says_nothing_of_the_kind():
    assert speed_varied_sentence(_sweep([240.0, 236.0, 180.0, 200.0])) is None  # 1.33x apart: under 2x
    assert speed_varied_sentence(_sweep([240.0])) is None


def test_launches_are_compared_on_the_prompts_they_all_ran():
    # the first launch ran prompt 0 only (fast code), the second both (prompt 1 is 4x slower): not a 2x swing
    one = Measurement(BASE, samples=synthetic_samples([[400.0]]), stage="baseline")
    two = Measurement(BASE, samples=synthetic_samples([[380.0, 95.0]]), stage="confirm")
    assert launch_speeds([one, two])[BASE.label] == pytest.approx([400.0, 380.0])
    assert speed_varied_sentence([one, two]) is None
