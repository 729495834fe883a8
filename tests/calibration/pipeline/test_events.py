"""The tune's event sink: every event logged at its level, then handed to the caller with the time since
the tune began."""

from __future__ import annotations

import logging

import pytest

from tuner.calibration.pipeline.events import Events
from tuner.calibration.request import TuneEvent


def test_each_event_is_logged_at_its_level_and_sent_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    got: list[TuneEvent] = []
    events = Events(got.append)
    with caplog.at_level(logging.DEBUG, logger="tuner.calibration.pipeline.events"):
        events("started", "tuning t.gguf", detail={"n_ctx": 512})
        events("progress", "1/10")
        events.note("context size 512: below the usual")
        events.note(None)  # nothing to say: no event
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "tune started: tuning t.gguf"), (logging.DEBUG, "tune progress: 1/10"),
        (logging.WARNING, "tune note: context size 512: below the usual")]
    assert [(e.kind, e.message, e.detail) for e in got] == [
        ("started", "tuning t.gguf", {"n_ctx": 512}), ("progress", "1/10", {}),
        ("error", "context size 512: below the usual", {})]
    assert all(0.0 <= e.elapsed_s <= events.elapsed_s() for e in got)
    assert [e.elapsed_s for e in got] == sorted(e.elapsed_s for e in got)


def test_without_a_callback_the_events_are_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tuner.calibration.pipeline.events"):
        Events(None)("saved", "profile saved to p.json", detail={"profile_path": "p.json"})
    assert [r.getMessage() for r in caplog.records] == ["tune saved: profile saved to p.json"]


def test_a_caller_that_only_reads_the_inputs_logs_no_tune(caplog: pytest.LogCaptureFixture) -> None:
    """The freshness check of a saved profile (each folder scan in the app) and ``tune --details`` on a saved
    profile resolve the tune's inputs without tuning: "tune started" in the log would be untrue (a new user's log
    said it at every scan)."""
    got: list[TuneEvent] = []
    with caplog.at_level(logging.DEBUG, logger="tuner.calibration.pipeline.events"):
        Events(got.append, logged=False)("started", "tuning t.gguf")
    assert caplog.records == [] and [e.kind for e in got] == ["started"]
