"""Idle sleep without a server: which binaries have ``--sleep-idle-seconds``, the argv, the pollers' clients
that cannot wake a sleeping server, the log's timestamps and the wake's timing, and the diagnosis of a reload
that failed (a log recorded from b11434)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import DATA, help_text
from tuner.server.argv import build_argv
from tuner.server.client import NON_WAKING_PATHS, ServerClient, ServerClientError
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import CrashContext, diagnose
from tuner.server.dialect import parse_help
from tuner.server.sleep import SleepStatus, SleepWatch, _reload_s, log_time_s


@pytest.mark.parametrize(("name", "has"), [("b11434", True), ("b10434", True), ("ik-0.1.5", False),
                                           ("legacy-4227c9b", False)])
def test_which_builds_can_sleep_and_the_argv(name: str, has: bool):
    dialect = parse_help(help_text(name))
    assert dialect.has_idle_sleep is has
    problem = dialect.idle_sleep_problem()
    assert (problem is None) is has
    if not has:
        assert "--sleep-idle-seconds" in problem and "cannot unload an idle model" in problem
        assert ("ik_llama.cpp" in problem) is (name.startswith("ik"))
    cfg = ServerConfig(model_path=Path("/m/t.gguf"), port=8080, sleep_idle_s=900)
    argv = build_argv("/bin/llama-server", cfg, dialect)
    assert (argv[argv.index("--sleep-idle-seconds") + 1] == "900") if has else "--sleep-idle-seconds" not in argv
    off = build_argv("/bin/llama-server", ServerConfig(model_path=Path("/m/t.gguf"), port=8080), dialect)
    assert "--sleep-idle-seconds" not in off


def test_a_pollers_client_refuses_every_route_that_would_wake_the_server():
    # port 9 (discard): nothing is sent for a refused route, the refusal comes first
    with ServerClient("http://127.0.0.1:9", paths=NON_WAKING_PATHS, timeout_s=0.5) as client:
        for call in (client.slots, lambda: client.completion("x", 1), lambda: client.tokenize("x"),
                     lambda: next(client.chat_stream([{"role": "user", "content": "x"}], 1))):
            with pytest.raises(ServerClientError, match="would wake a sleeping server"):
                call()
        assert client.health().status_code is None  # an allowed route is sent (and finds nobody there)
    assert {"/health", "/metrics", "/props", "/v1/models"} <= NON_WAKING_PATHS and "/slots" not in NON_WAKING_PATHS


def test_log_timestamps_and_the_reload_time():
    assert log_time_s("0.16.169.029 I srv  handle_sleep: server is exiting sleeping state") == pytest.approx(16.169029)
    assert log_time_s("12.03.004.005 I que    start_loop: exiting sleeping state") == pytest.approx(723.004005)
    assert log_time_s("\x1b[34m0.01.500.000\x1b[0m I slot launch_slot_: processing task") == pytest.approx(1.5)
    assert log_time_s("srv  handle_sleep: server is exiting sleeping state") is None
    # the log's own times when both lines have one (its writer thread may hand lines over together)
    assert _reload_s((100.0, 7.4), (100.001, 11.2), 200.0) == pytest.approx(3.8)
    assert _reload_s((100.0, None), (102.5, 11.2), 200.0) == pytest.approx(2.5)  # else when they were read
    assert _reload_s((100.0, 7.4), None, 101.25) == pytest.approx(1.25)  # no task followed: until /props said awake
    assert _reload_s(None, None, 5.0) is None


def test_a_wake_is_announced_once_from_the_log_line():
    t = [10.0]
    watch = SleepWatch("http://127.0.0.1:9", None, 60, clock=lambda: t[0])
    watch.status = SleepStatus(sleeping=True, sleeps=1)
    assert not watch.waking and not watch.wake_began()
    watch.on_line("0.05.000.000 I que    start_loop: exiting sleeping state")
    watch.on_line("0.05.000.040 I srv  handle_sleep: server is exiting sleeping state")  # the same wake
    assert watch.waking
    assert watch.wake_began() and watch.status.waking
    assert not watch.wake_began()  # once per wake
    watch.on_line("0.07.100.000 I slot launch_slot_: id  0 | task 6 | processing task, is_child = 0")
    assert watch._wake_t == (10.0, 5.0) and watch._task_t == (10.0, 7.1)


def _recorded_wake_failure() -> list[str]:
    """b11434 serving stories260K with --sleep-idle-seconds 1; the file was moved away while it slept and a
    request woke it (paths replaced, ggml_print_backtrace's gdb lines cut short)."""
    return (DATA / "wake-failed.txt").read_text(encoding="utf-8").splitlines()


def test_a_failed_reload_is_wake_failed_with_the_loads_own_cause():
    lines = _recorded_wake_failure()
    d = diagnose(-6, lines, CrashContext(phase="waking"))
    assert d.code == "wake_failed" and d.returncode == -6
    assert d.summary == "could not load the model again after idle sleep"
    assert "SIGABRT" in d.message
    assert "model file missing or unreadable: /models/m.gguf" in d.message
    assert any("failed to reload model after sleeping" in e for e in d.evidence)
    # the same load error without the wake is the plain missing-file class
    before_abort = [line for line in lines if "failed to reload model" not in line]
    assert diagnose(-6, before_abort).code == "model_missing"
