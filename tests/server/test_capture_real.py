"""Issue 28's first "Done when" row, on the real llama-server and stories260K: serve with capture on, send
requests, find them in the private folder pruned to the bound while serving, with the right modes, none of
their text in any log; gone after *Forget* (capture goes on) and after switching capture off (a restart through
the applying state, then the folder deleted). The bound is lowered to 12 files for speed: the rule at 200 files
and 64 MiB is tests/server/test_capture.py's."""

from __future__ import annotations

import logging
import stat
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.server import capture
from tuner.server.capture import CaptureBounds
from tuner.server.config import ServerConfig
from tuner.server.readiness import READY_PROMPT
from tuner.server.states import ServerState, StateChange
from tuner.server.supervisor import Supervisor

pytestmark = [pytest.mark.server, pytest.mark.timeout(180)]

BOUND = 12


def wait_for(condition, within_s: float = 20.0) -> bool:
    t_end = time.monotonic() + within_s
    while time.monotonic() < t_end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == ".txt") if folder.is_dir() else []


def test_captured_requests_are_private_pruned_and_forgotten(llama_server_bin: Path, stories260k: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(capture, "BOUNDS", CaptureBounds(max_files=BOUND))
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    folder = capture.log_prompts_dir("stories260K")
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, alias="stories260K", log_prompts_dir=folder)
    changes: list[StateChange] = []
    caplog.set_level(logging.DEBUG, logger="tuner")
    sup = Supervisor(llama_server_bin, auto_restart=True, on_state=changes.append)
    try:
        sup.start_and_wait(cfg, timeout_s=60)
        assert sup.argv is not None and sup.argv[sup.argv.index("--log-prompts-dir") + 1] == str(folder)
        with sup.client() as client:
            client.chat([{"role": "user", "content": f"{sentinel} chat"}], max_tokens=2)
            for i in range(20):
                client.completion(f"Request {i} {sentinel}: once upon a time", n_predict=2, temperature=0.0)
                time.sleep(0.002)  # one file per request: names are milliseconds
        # pruned while serving, once the newest files are a second old
        assert wait_for(lambda: len(files(folder)) == BOUND), len(files(folder))
        assert sup.state is ServerState.READY
        texts = [p.read_text(encoding="utf-8") for p in files(folder)]
        assert sorted(texts) == sorted(f"Request {i} {sentinel}: once upon a time" for i in range(20 - BOUND, 20))
        assert READY_PROMPT not in texts  # Draftwise's own readiness completion is not a user's request
        assert stat.S_IMODE(capture.captures_root().stat().st_mode) == 0o700
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert {stat.S_IMODE(p.stat().st_mode) for p in files(folder)} == {0o600}
        # the re-tune's reader sees them, oldest first, once none is younger than a second (it may be half written)
        time.sleep(capture.MIN_AGE_S + 0.1)
        sample = capture.captured_requests("stories260K")
        assert [r.text for r in sample][-1] == f"Request 19 {sentinel}: once upon a time" and len(sample) == BOUND

        # Forget: every request gone, capture goes on into the same folder
        assert capture.forget_captured(keep_folders=True) == BOUND
        assert files(folder) == [] and folder.is_dir()
        with sup.client() as client:
            client.completion(f"after forget {sentinel}", n_predict=2)
        assert [p.read_text(encoding="utf-8") for p in files(folder)] == [f"after forget {sentinel}"]

        # off: restarted through "applying" without the flag, then everything deleted
        sup.restart(replace(cfg, log_prompts_dir=None), applying="not keeping served requests")
        sup.wait_ready(timeout_s=60)
        assert "--log-prompts-dir" not in (sup.argv or [])
        capture.forget_captured()
        assert not capture.captures_root().exists()
        with sup.client() as client:
            client.completion(f"after off {sentinel}", n_predict=2)
        assert not capture.captures_root().exists()
        log_text = Path(sup.log_path or "").read_text(encoding="utf-8")
        tail = sup.log_tail(2000)
    finally:
        sup.stop()
    assert (ServerState.READY, ServerState.APPLYING) in [(c.previous, c.state) for c in changes]
    # no captured text in llama-server's log, its relayed lines, the state messages or Draftwise's own log
    assert sentinel not in log_text and not any(sentinel in line for line in tail)
    assert not any(sentinel in c.message for c in changes)
    assert not any(sentinel in r.getMessage() for r in caplog.records)
    assert any("captured requests" in r.getMessage() for r in caplog.records)  # the pruning was logged, by count
