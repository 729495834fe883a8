"""Supervisor against the fake llama-server: faults a real server will not produce on demand."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.server.conftest import wait_gone
from tuner import process
from tuner.server.config import ServerConfig
from tuner.server.supervisor import (
    ServerStartError,
    ServerState,
    StateChange,
    Supervisor,
)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "fake-target.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 60)
    return p


def _sup(fake_server_bin: Path, **kw) -> tuple[Supervisor, list[StateChange]]:
    changes: list[StateChange] = []
    sup = Supervisor(fake_server_bin, on_state=changes.append, **kw)
    return sup, changes


def test_slow_load_then_ready(fake_server_bin: Path, model: Path) -> None:
    sup, changes = _sup(fake_server_bin)
    t0 = time.monotonic()
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-load-s", "2")))
    assert sup.state == ServerState.STARTING
    url = sup.wait_ready(timeout_s=30)
    waited = time.monotonic() - t0
    try:
        assert waited >= 1.9, "ready before the fake finished loading (503 must not count as ready)"
        assert url == sup.base_url and url.startswith("http://127.0.0.1:")
        assert [c.state for c in changes] == [ServerState.STARTING, ServerState.READY]
        assert changes[-1].base_url == url
        with sup.client() as c:
            assert c.health().ok
        assert sup.log_path is not None and "listening on" in sup.log_path.read_text()
        assert any("listening on" in line for line in sup.log_tail(10))
        pid = sup.pid
    finally:
        sup.stop()
    assert sup.state == ServerState.STOPPED and wait_gone(pid)
    assert [c.state for c in changes][-2:] == [ServerState.STOPPING, ServerState.STOPPED]


def test_503_forever_is_a_load_hang(fake_server_bin: Path, model: Path) -> None:
    sup, changes = _sup(fake_server_bin)
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-mode", "loading-forever")))
    time.sleep(0.5)
    pid = sup.pid
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=2.5)
    assert time.monotonic() - t0 < 10
    assert e.value.diagnosis.code == "load_hang" and "load hang" in e.value.diagnosis.message
    assert sup.state == ServerState.FAILED
    assert pid is not None and wait_gone(pid)
    assert ServerState.READY not in [c.state for c in changes]


def test_load_hang_without_wait_timeout_uses_startup_limit(fake_server_bin: Path, model: Path) -> None:
    sup, _ = _sup(fake_server_bin)
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-mode", "loading-forever")), startup_timeout_s=2.0)
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready()  # no timeout here: the supervisor's own limit must end the wait
    assert e.value.diagnosis.code == "load_hang"


def test_oom_on_first_completion(fake_server_bin: Path, model: Path) -> None:
    sup, changes = _sup(fake_server_bin)
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-mode", "oom-on-completion")))
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=30)
    d = e.value.diagnosis
    assert d.code == "oom", d
    assert any("cudaMalloc failed: out of memory" in line for line in d.evidence)
    assert d.returncode is not None and d.returncode < 0  # aborted
    assert sup.state == ServerState.FAILED
    assert ServerState.READY not in [c.state for c in changes]


def test_foreign_identity_is_never_ready(fake_server_bin: Path, model: Path) -> None:
    sup, changes = _sup(fake_server_bin)
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-model-path", "/elsewhere/other.gguf")),
              startup_timeout_s=2.0)
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready()
    assert e.value.diagnosis.code == "not_ours" and "/elsewhere/other.gguf" in e.value.diagnosis.message
    assert ServerState.READY not in [c.state for c in changes]


def test_busy_fixed_port_is_port_busy(fake_server_bin: Path, model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    holder, _ = _sup(fake_server_bin)
    holder.start(ServerConfig(model_path=other))
    holder.wait_ready(timeout_s=30)
    try:
        port = holder.config.port
        sup, changes = _sup(fake_server_bin)
        sup.start(ServerConfig(model_path=model, port=port))
        with pytest.raises(ServerStartError) as e:
            sup.wait_ready(timeout_s=30)
        assert e.value.diagnosis.code == "port_busy"
        assert ServerState.READY not in [c.state for c in changes]
        # with no fixed port the supervisor picks a free one instead
        sup.start(ServerConfig(model_path=model))
        assert sup.wait_ready(timeout_s=30) != holder.base_url
        sup.stop()
    finally:
        holder.stop()


def test_cancel_stops_the_child(fake_server_bin: Path, model: Path) -> None:
    sup, changes = _sup(fake_server_bin)
    cancel = threading.Event()
    sup.start(ServerConfig(model_path=model, extra_args=("--fake-mode", "loading-forever")))
    time.sleep(0.3)
    pid = sup.pid
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=60, cancel=cancel)
    assert e.value.diagnosis.code == "cancelled"
    assert sup.state == ServerState.STOPPED and pid is not None and wait_gone(pid)


def test_started_from_short_lived_thread_survives(fake_server_bin: Path, model: Path) -> None:
    """PDEATHSIG fires when the forking *thread* exits: children are forked by the launcher."""
    sup, _ = _sup(fake_server_bin)
    box: dict = {}

    def worker() -> None:
        sup.start(ServerConfig(model_path=model))
        box["url"] = sup.wait_ready(timeout_s=30)

    t = threading.Thread(target=worker)
    t.start()
    t.join(40)
    assert not t.is_alive() and "url" in box
    time.sleep(1.0)
    try:
        assert sup.pid is not None and process.process_exists(sup.pid)
        with sup.client() as c:
            assert c.health().ok
        lt = process.launcher_thread()
        assert lt is not None and lt.is_alive() and lt is not t
    finally:
        sup.stop()


def test_repeated_crashes_fall_back_to_last_good(fake_server_bin: Path, model: Path, tmp_path: Path) -> None:
    """Three quick crashes in a row (ready for less than 60 s) of one configuration: the third falls
    back to the configuration that reached ready before (tuner/server/restart_policy.py)."""
    sup, changes = _sup(fake_server_bin, auto_restart=True, backoff_s=(0.1,))
    good = ServerConfig(model_path=model)
    sup.start(good)
    sup.wait_ready(timeout_s=30)
    bad = ServerConfig(model_path=model, extra_args=("--fake-mode", "crash-after-ready", "--fake-crash-s", "1.5"))
    sup.start(bad)
    sup.wait_ready(timeout_s=30)
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end:
            if sup.state == ServerState.READY and sup.config is not None and sup.config.extra_args == ():
                break
            time.sleep(0.1)
        assert sup.state == ServerState.READY and sup.config.extra_args == (), [c.message for c in changes]
        assert sup.restart_count == 3
        falling = [c.message for c in changes if "falling back" in c.message]
        assert len(falling) == 1 and "(restart 3)" in falling[0], falling
        # the fake aborts: SIGABRT, named in the restart lines
        crash_msgs = [c for c in changes if c.diagnosis is not None and c.diagnosis.code == "aborted"]
        assert len(crash_msgs) == 3 and all("aborted" in c.message for c in crash_msgs)
    finally:
        sup.stop()


def test_binary_that_cannot_execute(tmp_path: Path, model: Path, fake_server_bin: Path) -> None:
    from tuner.server.dialect import probe_dialect

    gone = tmp_path / "vanished-server"
    sup = Supervisor(gone, dialect=probe_dialect(fake_server_bin))
    sup.start(ServerConfig(model_path=model))
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=10)
    assert e.value.diagnosis.code == "not_executable" and str(gone) in e.value.diagnosis.message
