"""A llama-server that crashes is retried with --no-repack, the cure is remembered, and every later launch
uses it; a crash --no-repack does not cure gives the rebuild command. A SIGKILL is told apart by the
kernel's OOM counters.

The crashing server is tests/fakes/amx_trap_server.py: a wrapper that prints a real AMX trap's log and dies
by SIGILL (or SIGSEGV) unless --no-repack is on its command line, when it execs the real llama-server
(stories260K). The first-decode crash and the OOM counters use the fake llama-server.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.fakes.amx_trap_server import launches, make_trap_server
from tuner.server.config import ServerConfig
from tuner.server.supervisor import ServerStartError, ServerState, StateChange, Supervisor
from tuner.server.workarounds import current_workaround


def _cfg(model: Path) -> ServerConfig:
    return ServerConfig(model_path=model, n_ctx=256)


def _watch(sup: Supervisor) -> list[StateChange]:
    changes: list[StateChange] = []
    sup.on_state(changes.append)
    return changes


@pytest.mark.server
def test_sigill_is_cured_by_no_repack_recorded_and_reused(tmp_path: Path, llama_server_bin: Path,
                                                          stories260k_session: Path) -> None:
    wrapper = make_trap_server(tmp_path / "trap", llama_server_bin, "sigill")
    sup = Supervisor(wrapper)  # auto_restart off: the sweep's and the doctor's way
    changes = _watch(sup)
    try:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=120)
        assert "--no-repack" in (sup.argv or []) and sup.config is not None and sup.config.no_repack
        with sup.client() as c:
            assert c.completion("Once", 4, temperature=0.0)["content"] is not None
    finally:
        sup.stop()
    crash = [c for c in changes if c.diagnosis is not None]
    assert crash[0].diagnosis.code == "cpu_instructions" and crash[0].state is ServerState.STARTING
    assert "this llama-server build uses CPU instructions this machine rejects" in crash[0].diagnosis.message
    assert "during its warm-up run" in crash[0].diagnosis.message  # the recorded log ends in the warm-up
    assert "retrying with --no-repack" in crash[0].message
    assert any("runs with --no-repack" in c.message for c in changes if c.state is ServerState.READY)
    assert sup.restart_count == 0  # a healing retry is not a crash restart
    assert sup.diagnosis is not None and sup.diagnosis.code == "cpu_kernels"  # what the doctor / the app read
    fact = current_workaround(wrapper)
    assert fact is not None and fact.no_repack and fact.cause == "sigill"
    assert any("warming up the model" in line for line in fact.evidence)
    # a second launch (another tune, the served server) uses the fact from the start: no crash
    n = len(launches(tmp_path / "trap"))
    second = Supervisor(wrapper)
    later = _watch(second)
    try:
        second.start_and_wait(_cfg(stories260k_session), timeout_s=120)
        assert "--no-repack" in (second.argv or [])
    finally:
        second.stop()
    assert [c.diagnosis for c in later if c.diagnosis is not None] == []
    assert len(launches(tmp_path / "trap")) == n + 1 and "--no-repack" in launches(tmp_path / "trap")[-1]


@pytest.mark.server
def test_segfault_is_retried_unchanged_then_with_no_repack(tmp_path: Path, llama_server_bin: Path,
                                                           stories260k_session: Path) -> None:
    wrapper = make_trap_server(tmp_path / "trap", llama_server_bin, "sigsegv")
    sup = Supervisor(wrapper)
    changes = _watch(sup)
    try:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=120)
    finally:
        sup.stop()
    runs = launches(tmp_path / "trap")
    assert len(runs) == 3 and ["--no-repack" in r for r in runs] == [False, False, True]
    msgs = [c.message for c in changes if c.diagnosis is not None]
    assert "retrying once unchanged" in msgs[0] and "retrying with --no-repack" in msgs[1], msgs
    note = [c.message for c in changes if c.state is ServerState.READY][-1]
    assert "repacked CPU kernels" in note and "segmentation fault" in note
    fact = current_workaround(wrapper)
    assert fact is not None and fact.cause == "sigsegv"


@pytest.mark.server
def test_a_segfault_that_does_not_repeat_records_nothing(tmp_path: Path, llama_server_bin: Path,
                                                         stories260k_session: Path) -> None:
    wrapper = make_trap_server(tmp_path / "trap", llama_server_bin, "sigsegv-once")
    sup = Supervisor(wrapper)
    changes = _watch(sup)
    try:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=120)
        assert "--no-repack" not in (sup.argv or [])
    finally:
        sup.stop()
    assert any("started normally when retried unchanged" in c.message for c in changes)
    assert current_workaround(wrapper) is None


@pytest.mark.server
def test_sigill_that_no_repack_does_not_cure_names_the_rebuild(tmp_path: Path, llama_server_bin: Path,
                                                               stories260k_session: Path) -> None:
    wrapper = make_trap_server(tmp_path / "trap", llama_server_bin, "sigill-always")
    sup = Supervisor(wrapper)
    with pytest.raises(ServerStartError) as e:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=60)
    d = e.value.diagnosis
    assert d.code == "cpu_instructions" and "also with --no-repack" in d.message, d
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in d.message and "pip install --force-reinstall" in d.message
    assert any(line.startswith("start 2 (with --no-repack)") for line in d.evidence)
    assert len(launches(tmp_path / "trap")) == 2
    assert current_workaround(wrapper) is None


@pytest.mark.server
def test_segfault_every_time_is_the_file_or_a_bug(tmp_path: Path, llama_server_bin: Path,
                                                  stories260k_session: Path) -> None:
    wrapper = make_trap_server(tmp_path / "trap", llama_server_bin, "sigsegv-always")
    sup = Supervisor(wrapper, auto_restart=True)
    with pytest.raises(ServerStartError) as e:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=60)
    d = e.value.diagnosis
    assert d.code == "crash_persistent" and "3 times" in d.message
    assert "model file may be damaged" in d.message and "llama.cpp bug" in d.message
    assert len(launches(tmp_path / "trap")) == 3 and sup.state is ServerState.FAILED


@pytest.mark.server
def test_a_build_that_does_not_trap_never_gets_no_repack(llama_server_bin: Path, stories260k_session: Path) -> None:
    """This machine's real llama-server runs the repacked kernels: no launch gets --no-repack."""
    sup = Supervisor(llama_server_bin)
    changes = _watch(sup)
    try:
        sup.start_and_wait(_cfg(stories260k_session), timeout_s=120)
        assert sup.argv is not None and "--no-repack" not in sup.argv and "-nr" not in sup.argv
        assert sup.config is not None and not sup.config.no_repack
    finally:
        sup.stop()
    assert [c.diagnosis for c in changes if c.diagnosis is not None] == []
    assert current_workaround(llama_server_bin) is None


def test_sigill_on_the_first_decode_is_healed(fake_server_bin: Path, tmp_path: Path) -> None:
    """The readiness completion is the first decode: a SIGILL there is retried with --no-repack too."""
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    sup = Supervisor(fake_server_bin)
    changes = _watch(sup)
    try:
        sup.start_and_wait(ServerConfig(model_path=model, extra_args=("--fake-mode", "sigill-on-completion")),
                           timeout_s=30)
        assert "--no-repack" in (sup.argv or [])
    finally:
        sup.stop()
    crash = [c.diagnosis for c in changes if c.diagnosis is not None][0]
    assert crash.code == "cpu_instructions" and "on its first decode" in crash.message
    fact = current_workaround(fake_server_bin)
    assert fact is not None and fact.cause == "sigill"


class _Counters:
    """An injected OOM-counter reader: the kernel's OOM kill cannot be produced on demand."""

    def __init__(self) -> None:
        self.value = (10, 4)

    def __call__(self) -> tuple[int | None, int | None]:
        return self.value


@pytest.mark.parametrize("moved, code, words", [
    (True, "oom_killed", "killed by the kernel's out-of-memory killer"),
    (False, "killed", "killed by the system, probably for lack of memory"),
])
def test_sigkill_while_serving_is_told_by_the_oom_counters(fake_server_bin: Path, tmp_path: Path, moved: bool,
                                                            code: str, words: str) -> None:
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    counters = _Counters()
    sup = Supervisor(fake_server_bin, auto_restart=True, backoff_s=(0.1,), oom_counters=counters)
    changes = _watch(sup)
    try:
        sup.start_and_wait(ServerConfig(model_path=model), timeout_s=30)
        pid = sup.pid
        assert pid is not None
        if moved:
            counters.value = (11, 5)
        os.kill(pid, signal.SIGKILL)  # not sent by Draftwise
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end and not (sup.state is ServerState.READY and sup.pid not in (None, pid)):
            time.sleep(0.05)
        assert sup.state is ServerState.READY and sup.restart_count == 1
    finally:
        sup.stop()
    crash = [c for c in changes if c.diagnosis is not None][0]
    assert crash.diagnosis.code == code and words in crash.diagnosis.message
    assert crash.message == f"llama-server crashed ({words}); restarting in 0.1 s (restart 1)"
