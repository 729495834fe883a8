"""A reused profile does not repeat an old "the machine was busy" sentence as if it were about now: the
sentence says when that sweep ran, or is left out when the profile has no time (issue 10). A profile saved
before the decision's sentences were kept shows its saved reason verbatim, then a separate dated sentence
built from its fields (issue 24: no string rewriting)."""

from __future__ import annotations

import calendar
from typing import Any

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pipeline.reuse import decision_from_profile
from tuner.calibration.report import MachineLoad, machine_sentence
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.hardware.host import LoadSummary
from tuner.profiles.profile import Profile, StalenessKeys

NOTE = "Other programs used 83 % of the CPU during the sweep (up to 100 %); figures are less certain."
T = calendar.timegm((2026, 12, 1, 11, 50, 0, 0, 0, 0))
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=4, p_min=0.0)


def _busy_decision() -> Any:
    ms = [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
          *synthetic_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                            acceptance=0.64, first_repetition=1)]
    d = decide(SearchOutcome.of(ms))
    busy = machine_sentence(MachineLoad(LoadSummary(10, 0.83, 1.0, 0.0, 0.9), (4242,)))
    assert busy is not None
    return d.with_sentences([*d.sentences, busy])


def _profile(decision: dict[str, Any], created: float | None) -> Profile:
    keys = StalenessKeys.__new__(StalenessKeys)  # not read here
    return Profile(target_path="/m/t.gguf", keys=keys, winner=GOOD.to_json(), server_config={}, argv=(),
                   decision=decision, created_unix_s=created)


def test_the_sentence_about_other_programs_is_dated() -> None:
    fresh = _busy_decision()
    assert NOTE in fresh.reason and fresh.busy_note is not None and fresh.busy_note.startswith(NOTE)
    again = decision_from_profile(_profile(fresh.to_json(), T))
    assert again.busy_note == ("This profile was measured on 2026-12-01 at 11:50 UTC; other programs used 83 % of "
                               "the CPU during that sweep (up to 100 %); figures are less certain. 1 other "
                               "llama-server process ran on this machine during that sweep and competed with it.")
    assert again.reason == fresh.reason.replace(fresh.busy_note, again.busy_note)
    assert NOTE not in again.reason and again.kind == "speculate" and again.sentences == fresh.sentences


def test_without_a_time_the_sentence_is_left_out_and_nothing_else() -> None:
    fresh = _busy_decision()
    again = decision_from_profile(_profile(fresh.to_json(), None))
    assert again.busy_note is None and "Other programs" not in again.reason and "llama-server" not in again.reason
    quiet = decide(SearchOutcome.of(_busy_decision_measurements()))
    assert again.reason == quiet.reason


def _busy_decision_measurements() -> list[Measurement]:
    return [Measurement(Candidate(), samples=synthetic_samples([240.0]), speculative_active=True),
            *synthetic_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                              acceptance=0.64, first_repetition=1)]


def test_an_older_profile_shows_its_reason_verbatim_then_when_it_was_measured() -> None:
    reason = "draft-simple d.gguf n_max 4 is faster than no speculation: 1.52× over 4 pairs. " + NOTE + \
        " Measured with raw completions."
    old = {"reason": reason, "busy_note": NOTE, "speedup": 1.52}  # no "sentences": saved before they were kept
    d = decision_from_profile(_profile(old, T))
    then = ("This profile was measured on 2026-12-01 at 11:50 UTC; what it says about other programs on the machine "
            "was true then, not necessarily now.")
    assert d.reason == reason + " " + then and d.busy_note == then
    quiet = decision_from_profile(_profile({**old, "busy_note": None}, T))
    assert quiet.reason == reason + " This profile was measured on 2026-12-01 at 11:50 UTC." and quiet.busy_note is None
    undated = decision_from_profile(_profile(old, None))
    assert undated.reason == reason and undated.busy_note is None and undated.kind == ""


def test_a_sentence_kind_this_version_cannot_render_falls_back_to_the_saved_reason() -> None:
    fresh = _busy_decision()
    saved = fresh.to_json()
    saved["sentences"] = [*saved["sentences"], {"slot": "THREADS", "kind": "threads.from_the_future", "params": {}}]
    d = decision_from_profile(_profile(saved, T))
    assert d.reason.startswith(fresh.reason + " This profile was measured on 2026-12-01 at 11:50 UTC")
    broken = decision_from_profile(_profile({**saved, "sentences": "not a list"}, None))
    assert broken.reason == fresh.reason
