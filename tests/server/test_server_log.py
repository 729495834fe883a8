"""Draftwise's log records a real llama-server's life (start with its command line, states, stop) and a
state listener's bug with its traceback (the supervisor keeps going); the API key never appears."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tuner.logs import log_path, setup_logging
from tuner.server.config import ServerConfig
from tuner.server.supervisor import ServerState, StateChange, Supervisor

pytestmark = pytest.mark.server


def test_server_lifecycle_and_a_listeners_bug_are_logged(llama_server_bin: Path, stories260k_session: Path) -> None:
    setup_logging()
    seen: list[ServerState] = []

    def listener(change: StateChange) -> None:
        seen.append(change.state)
        if change.state is ServerState.STARTING:
            raise KeyError("listener bug 0815")

    sup = Supervisor(llama_server_bin, on_state=listener)
    key = "sk-draftwise-test-key-42"
    sup.start(ServerConfig(model_path=stories260k_session, n_ctx=256, threads=1, api_key=key))
    try:
        sup.wait_ready(timeout_s=120)
        pid = sup.pid
    finally:
        sup.stop()
    assert seen[:2] == [ServerState.STARTING, ServerState.READY]  # the bug did not stop the supervisor
    for h in logging.getLogger("tuner").handlers:
        h.flush()
    text = log_path().read_text(encoding="utf-8")
    assert f"llama-server pid {pid} started: {llama_server_bin}" in text and "stories260K.gguf" in text
    assert "llama-server stopped -> starting" in text and "starting -> ready" in text
    assert "stopping -> stopped" in text
    assert "a state callback failed on starting" in text and "KeyError: 'listener bug 0815'" in text
    assert "Traceback (most recent call last)" in text
    assert key not in text
