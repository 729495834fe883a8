"""The supervisor's table of allowed state transitions (tuner/server/states.py): every (from, to) pair
against the table written out here, the one ``_set_state`` of a real Supervisor refusing a forbidden
change, and a supervisor's own changes through start, stop, crashes and restarts staying inside it."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path

import pytest

from tuner.server import states
from tuner.server.config import ServerConfig
from tuner.server.states import TRANSITIONS, IllegalTransition, ServerState, StateChange, StateMachine
from tuner.server.supervisor import Supervisor

S = ServerState
#: The table as issue 24 gives it (the sleeping, switching and applying rows are for idle sleep, the
#: router's model switch and restarting to apply a setting; a sleeping server may be restarted to apply one too,
#: and the router may load another model while the served one sleeps).
EXPECTED = {
    S.STOPPED: {S.STARTING},
    S.STARTING: {S.STARTING, S.READY, S.FAILED, S.STOPPING},
    S.READY: {S.STARTING, S.FAILED, S.STOPPING, S.SLEEPING, S.SWITCHING, S.APPLYING},
    S.SLEEPING: {S.READY, S.STARTING, S.SWITCHING, S.FAILED, S.STOPPING, S.APPLYING},
    S.SWITCHING: {S.READY, S.STARTING, S.FAILED, S.STOPPING},
    S.APPLYING: {S.STARTING, S.FAILED, S.STOPPING},
    S.STOPPING: {S.STOPPED},
    S.FAILED: {S.STARTING, S.STOPPING},
}
PAIRS = list(itertools.product(ServerState, repeat=2))


def test_the_table_is_the_one_written_here() -> None:
    assert set(TRANSITIONS) == set(ServerState)
    assert {a: set(b) for a, b in TRANSITIONS.items()} == EXPECTED


@pytest.mark.parametrize(("prev", "new"), PAIRS, ids=[f"{a.value}->{b.value}" for a, b in PAIRS])
def test_every_pair_is_allowed_or_refused_by_the_table(prev: ServerState, new: ServerState) -> None:
    machine = StateMachine(threading.RLock(), lambda: (None, None, 0))
    machine.state = prev
    seen: list[StateChange] = []
    machine.listen(seen.append)
    if new in EXPECTED[prev]:
        states.check_transition(prev, new)
        machine.change(new, message="test")
        assert machine.state is new and [(c.previous, c.state) for c in seen] == [(prev, new)]
    else:
        with pytest.raises(IllegalTransition) as info:
            states.check_transition(prev, new)
        assert info.value.previous is prev and info.value.state is new
        assert f"from {prev.value} to {new.value}" in str(info.value)
        with pytest.raises(IllegalTransition):
            machine.change(new, message="test")
        assert machine.state is prev and seen == []  # nothing changed, nobody was told


def test_the_docstring_table_matches_the_table() -> None:
    """The copy in states.py's docstring is the table (a newcomer reads that one)."""
    doc = states.__doc__ or ""
    rows = {}
    for line in doc.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and words[0] in {s.value for s in ServerState} and line.startswith("    "):
            rows[ServerState(words[0])] = {ServerState(w.strip()) for w in words[1].split(",")}
    assert rows == EXPECTED


def test_an_announcement_is_not_a_transition() -> None:
    """A note (a silent but working server, a cure's note) reaches the listeners with state == previous,
    in any state, without the table."""
    machine = StateMachine(threading.RLock(), lambda: ("http://127.0.0.1:1", None, 2))
    seen: list[StateChange] = []
    machine.listen(seen.append)
    machine.announce("still working")
    assert [(c.previous, c.state, c.message, c.restart_count) for c in seen] == [
        (S.STOPPED, S.STOPPED, "still working", 2)]


def test_a_real_supervisor_refuses_ready_from_stopped(fake_server_bin: Path) -> None:
    changes: list[StateChange] = []
    sup = Supervisor(fake_server_bin, on_state=changes.append)
    with pytest.raises(IllegalTransition, match="from stopped to ready"):
        with sup._lock:
            sup._set_state(ServerState.READY, message="not started")
    assert sup.state is ServerState.STOPPED and changes == []


def _illegal(changes: list[StateChange]) -> list[str]:
    """The changes a listener saw that the table does not allow (announcements are not transitions)."""
    return [f"{c.previous.value}->{c.state.value}: {c.message}" for c in changes
            if c.state is not c.previous and c.state not in EXPECTED[c.previous]]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "fake-target.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 60)
    return p


def test_concurrent_stops_and_a_start_while_stopping_stay_in_the_table(fake_server_bin: Path, model: Path) -> None:
    """Two threads stop a loading server at once while a third starts it again: every change is one
    the table allows (a second stop waits with the first instead of stopping → stopping)."""
    changes: list[StateChange] = []
    sup = Supervisor(fake_server_bin, on_state=changes.append)
    cfg = ServerConfig(model_path=model, extra_args=("--fake-load-s", "30"))
    errors: list[BaseException] = []

    def run(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    try:
        for _ in range(2):
            sup.start(cfg)
            threads = [threading.Thread(target=run, args=(sup.stop,)) for _ in range(2)]
            threads.append(threading.Thread(target=run, args=(lambda: sup.start(cfg),)))
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        sup.stop()
        assert errors == [] and sup.state is ServerState.STOPPED and sup.pid is None
        assert _illegal(changes) == []
    finally:
        sup.stop()


def test_crash_restarts_stay_in_the_table(fake_server_bin: Path, model: Path) -> None:
    """A served server that crashes soon after each start is restarted (ready → starting → ready ...),
    then stopped: every change the listener saw is in the table."""
    changes: list[StateChange] = []
    sup = Supervisor(fake_server_bin, on_state=changes.append, auto_restart=True, backoff_s=(0.1,))
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-mode", "crash-after-ready", "--fake-crash-s", "0.5")))
    try:
        sup.wait_ready(timeout_s=30)
        t_end = time.monotonic() + 30
        while sup.restart_count < 2 and time.monotonic() < t_end:
            time.sleep(0.05)
        assert sup.restart_count >= 2, [c.message for c in changes]
    finally:
        sup.stop()
    assert sup.state is ServerState.STOPPED
    assert _illegal(changes) == []
    assert (S.READY, S.STARTING) in {(c.previous, c.state) for c in changes}


def test_an_illegal_change_in_a_monitor_thread_is_logged(fake_server_bin: Path, model: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A supervisor bug that tries a forbidden change on its monitor thread is logged with the table's
    words (the thread has no caller to raise to) and the state stays what it was."""
    sup = Supervisor(fake_server_bin)

    def buggy_ready(gen: int, cfg: ServerConfig, requested: ServerConfig) -> bool:
        with sup._lock:
            sup._set_state(ServerState.STOPPED, message="a bug")  # starting -> stopped skips stopping
        return True

    sup._became_ready = buggy_ready  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="tuner.server.supervisor"):
        sup.start(ServerConfig(model_path=model))
        t_end = time.monotonic() + 20
        while not caplog.records and time.monotonic() < t_end:
            time.sleep(0.05)
        try:
            assert sup.state is ServerState.STARTING
        finally:
            sup.stop()
    [record] = [r for r in caplog.records if "forbids" in r.getMessage()]
    assert record.exc_info is not None and "from starting to stopped" in str(record.exc_info[1])


def test_applying_a_setting_restarts_on_the_same_port_inside_the_table(fake_server_bin: Path, model: Path,
                                                                       tmp_path: Path) -> None:
    """``restart(config, applying=…)`` of a ready server: ready → applying → starting → ready, the words say
    which setting, the endpoint keeps its port, a new process runs the new argv and the old one is gone."""
    from tests.server.conftest import wait_gone

    changes: list[StateChange] = []
    sup = Supervisor(fake_server_bin, on_state=changes.append, auto_restart=True)
    try:
        url = sup.start_and_wait(ServerConfig(model_path=model), timeout_s=30)
        first = sup.pid
        assert first is not None and "--log-prompts-dir" not in (sup.argv or [])
        sup.restart(ServerConfig(model_path=model, log_prompts_dir=tmp_path / "c"), applying="keeping served requests")
        assert sup.wait_ready(timeout_s=30) == url
        assert sup.pid not in (None, first) and "--log-prompts-dir" in (sup.argv or [])
        assert wait_gone(first)
    finally:
        sup.stop()
    seq = [(c.previous, c.state) for c in changes if c.state is not c.previous]
    i = seq.index((S.READY, S.APPLYING))
    assert seq[i:i + 4] == [(S.READY, S.APPLYING), (S.APPLYING, S.STARTING), (S.STARTING, S.READY),
                            (S.READY, S.STOPPING)]
    applying = next(c for c in changes if c.state is S.APPLYING)
    assert applying.message == "restarting llama-server to apply: keeping served requests"
    assert _illegal(changes) == [] and sup.restart_count == 0
