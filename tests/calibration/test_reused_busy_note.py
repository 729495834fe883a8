"""A reused profile does not repeat an old "the machine was busy" note as if it were about now: the note
says when that sweep ran, or is dropped when the profile has no time (issue 10)."""

from __future__ import annotations

import calendar

from tuner.calibration.candidates import Candidate
from tuner.calibration.engine import _decision_from_profile, dated_busy_note
from tuner.profiles.profile import Profile

NOTE = "Other programs used 83 % of the CPU during the sweep (up to 100 %); figures are less certain."
REASON = "draft-simple d.gguf n_max 4 is faster than no speculation: 1.52× over 4 pairs. " + NOTE + \
    " Measured with raw completions."
T = calendar.timegm((2026, 12, 1, 11, 50, 0, 0, 0, 0))


def test_the_note_is_dated():
    reason, note = dated_busy_note(REASON, NOTE, T)
    assert "This profile was measured on 2026-12-01 at 11:50 UTC; other programs used 83 % of the CPU during " \
           "that sweep" in reason
    assert NOTE not in reason and reason.startswith("draft-simple d.gguf n_max 4 is faster")
    assert reason.endswith("Measured with raw completions.") and note is not None and note in reason


def test_without_a_time_the_note_is_dropped_and_nothing_else():
    reason, note = dated_busy_note(REASON, NOTE, None)
    assert note is None and "Other programs" not in reason and "CPU" not in reason
    assert reason == "draft-simple d.gguf n_max 4 is faster than no speculation: 1.52× over 4 pairs. " \
                     "Measured with raw completions."
    assert dated_busy_note("quiet sweep.", None, T) == ("quiet sweep.", None)


def test_a_reused_profile_carries_the_dated_note():
    from tuner.profiles.profile import StalenessKeys

    keys = StalenessKeys.__new__(StalenessKeys)  # not read here
    prof = Profile(target_path="/m/t.gguf", keys=keys, winner=Candidate().to_json(), server_config={}, argv=(),
                   decision={"reason": REASON, "busy_note": NOTE, "speedup": 1.52}, created_unix_s=T)
    d = _decision_from_profile(prof)
    assert "measured on 2026-12-01 at 11:50 UTC" in d.reason and NOTE not in d.reason
    assert d.busy_note is not None and "that sweep" in d.busy_note
