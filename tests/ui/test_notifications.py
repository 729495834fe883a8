"""Desktop notifications: tuning finished, server crashed and restarted, acceptance below break-even."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuner.server.supervisor import ServerState, StateChange
from tuner.telemetry.collector import Collector
from tuner.telemetry.samplers import MetricsRates
from tuner.telemetry.watch import AcceptanceWatch
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.state import AppState


def change(state, previous, restart_count=0, message=""):
    return StateChange(state, previous, "http://127.0.0.1:1", None, None, restart_count, message, time.time())


@pytest.fixture
def serving_controller(qapp):
    c = AppController()
    c.serving = flow.ServingInfo("m.gguf", Path("m.gguf"), "http://127.0.0.1:1/v1", "http://127.0.0.1:1", (), None,
                                 "draft-simple d.gguf n_max 8", break_even_rate=0.6)
    c.set_state(AppState.SERVING)
    yield c
    c.shutdown()


def test_crash_and_restart_notify(serving_controller, qtbot):
    c = serving_controller
    got = []
    c.notify.connect(lambda t, m: got.append(t))
    c._on_supervisor_state(change(ServerState.STARTING, ServerState.READY, 0))
    c._on_supervisor_state(change(ServerState.READY, ServerState.STARTING, 1, "restart 1"))
    assert got == ["Draftwise: llama-server crashed", "Draftwise: llama-server restarted"]
    assert c.state is AppState.SERVING
    c._on_supervisor_state(change(ServerState.FAILED, ServerState.STARTING, 3))
    assert c.state is AppState.ERROR and got[-1] == "Draftwise: llama-server stopped"


def test_stop_by_user_does_not_notify(serving_controller):
    c = serving_controller
    got = []
    c.notify.connect(lambda t, m: got.append(t))
    c.stopping = True
    c._on_supervisor_state(change(ServerState.STOPPING, ServerState.READY))
    c._on_supervisor_state(change(ServerState.STOPPED, ServerState.STOPPING))
    assert got == []


def test_low_acceptance_notifies_once(serving_controller):
    c = serving_controller

    class FakeMetrics:
        def __init__(self):
            self.t = 0

        def sample(self, t):
            return MetricsRates(t_s=t, draft_tokens=100, accepted_tokens=30, acceptance_rate=0.3)

    clock = [0.0]
    c.collector = Collector(clock=lambda: clock[0])
    c.collector.attach(FakeMetrics(), None, AcceptanceWatch(0.6, hold_s=30, min_draft_tokens=50))
    got = []
    c.notify.connect(lambda t, m: got.append((t, m)))
    for i in range(40):
        clock[0] = float(i)
        c._on_tick(c.collector.poll())
    assert len(got) == 1
    assert "slowing you down" in got[0][0] and "30%" in got[0][1] and "60%" in got[0][1]


@pytest.mark.server
def test_failure_goes_to_error_state_with_evidence(make_app, qtbot, tmp_path):
    from tuner.settings import Settings

    a = make_app()
    c = a.controller
    folder = tmp_path / "nowhere"
    folder.mkdir()
    (folder / "half-downloaded.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # broken: no LLM to tune
    c.settings = Settings(models_dir=folder, tune_budget_s=30)
    got = []
    c.notify.connect(lambda t, m: got.append(t))
    c.tune_and_serve()
    qtbot.waitUntil(lambda: c.state is AppState.ERROR, timeout=60_000)
    assert "nowhere" in (c.last_error or "")
    assert "nowhere" in a.tray.icon.toolTip()
    assert "nowhere" in a.window.serve_tab.error_label.text()
    assert got and "failed" in got[-1]
    a.tray.menu.aboutToShow.emit()
    assert a.tray.actions()["Tune & serve"].isEnabled()  # the user can try again


def test_hung_server_restart_is_shown_as_hung(serving_controller):
    """Issue 16 item 6: the liveness check's kill-and-restart reaches the tray as 'hung', with why;
    a 'working but silent' note while ready (same state) notifies nothing."""
    from tuner.server.diagnosis import Diagnosis

    c = serving_controller
    got = []
    c.notify.connect(lambda t, m: got.append((t, m)))
    c._on_supervisor_state(change(ServerState.READY, ServerState.READY, 0, "has not answered /health ... working"))
    assert got == []
    diag = Diagnosis("hung", "llama-server did not answer /health for 30 s and it is stopped (SIGSTOP?): killed as hung")
    c._on_supervisor_state(StateChange(ServerState.STARTING, ServerState.READY, "http://127.0.0.1:1", diag, None, 1,
                                       diag.message, time.time()))
    assert got[-1][0] == "Draftwise: llama-server hung" and "did not answer /health" in got[-1][1]


def test_each_restart_is_said_with_why(serving_controller):
    """Issue 23 item 6: the tray says each restart and why, in the supervisor's plain words; a restart that
    did not come up (tried again) is said too."""
    from tuner.server.diagnosis import Diagnosis

    c = serving_controller
    got, status = [], []
    c.notify.connect(lambda t, m: got.append((t, m)))
    c.status.connect(status.append)
    killed = Diagnosis("killed", "llama-server was killed by the system, probably for lack of memory (...)",
                       summary="killed by the system, probably for lack of memory")
    line = "llama-server crashed (killed by the system, probably for lack of memory); restarting in 1 s (restart 1)"
    c._on_supervisor_state(StateChange(ServerState.STARTING, ServerState.READY, "http://127.0.0.1:1", killed, None, 1,
                                       line, time.time()))
    assert got[-1] == ("Draftwise: llama-server crashed", line + ".") and status[-1] == line
    hang = Diagnosis("load_hang", "load hang: llama-server was not ready after 30 s")
    again = "llama-server did not start (load hang: llama-server was not ready after 30 s); restarting in 2 s (restart 2)"
    c._on_supervisor_state(StateChange(ServerState.STARTING, ServerState.STARTING, None, hang, None, 2, again,
                                       time.time()))
    assert got[-1] == ("Draftwise: llama-server did not start", again + ".") and status[-1] == again


def test_a_collapse_under_other_programs_notifies_once_with_what_to_do(serving_controller):
    """Issue 25: the live speed below 0.3× the profile's for 10 s while other programs use more than half a
    core; the notice says what happened, then what to do."""
    from tuner.telemetry.watch import CollapseWatch

    c = serving_controller

    class SlowMetrics:
        def sample(self, t):
            return MetricsRates(t_s=t, gen_tokens_per_s=1.5, generated_tokens=1.5)

    clock = [0.0]
    c.collector = Collector(clock=lambda: clock[0])
    c.collector.attach(SlowMetrics(), None)
    busy = [0.2]
    c.collector.watch_collapse(CollapseWatch(99.0), lambda: busy[0])
    got = []
    c.notify.connect(lambda t, m: got.append((t, m)))
    for i in range(15):  # slow, but the others use 0.2 core: not a collapse
        clock[0] = float(i)
        c._on_tick(c.collector.poll())
    busy[0] = 1.0
    for i in range(15, 40):
        clock[0] = float(i)
        c._on_tick(c.collector.poll())
    assert len(got) == 1
    title, body = got[0]
    assert "slowing the model down" in title and "1.5 tokens/s instead of the 99" in body and "--threads" in body


def test_serving_starts_the_collapse_watch_from_the_profile_speed(qapp):
    info = flow.ServingInfo("m.gguf", Path("m.gguf"), "http://127.0.0.1:1/v1", "http://127.0.0.1:1", (), None,
                            "no speculation", profile_tps=59.0)
    watch, meter = flow.collapse_watch(info)
    try:
        assert watch is not None and watch.profile_tps == 59.0 and meter is not None
    finally:
        if meter is not None:
            meter.stop()
    assert flow.collapse_watch(info.__class__(*[getattr(info, f) for f in ("model_name", "target_path",
                               "endpoint_url", "base_url", "argv", "pid", "spec_label")])) == (None, None)
