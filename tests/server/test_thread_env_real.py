"""The thread setting reaches the real llama-server: ``OMP_WAIT_POLICY=PASSIVE`` in the child's environment
(read back from /proc/PID/environ), ``-t`` and ``-td`` on its argv, both in the exact command line shown."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tuner.server.argv import command_line, server_env
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor

pytestmark = [pytest.mark.server,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/environ")]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)


def test_passive_threads_reach_the_child(llama_server_bin: Path, stories260k_session: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    sup = Supervisor(llama_server_bin)
    cfg = ServerConfig(model_path=stories260k_session, n_ctx=256, threads=2, omp_passive=True,
                       draft_path=stories260k_session, spec_type="draft-simple", n_max=4)
    sup.start(cfg)
    sup.wait_ready(timeout_s=120)
    try:
        assert sup.pid is not None and _environ(sup.pid).get("OMP_WAIT_POLICY") == "PASSIVE"
        argv = sup.argv or []
        assert argv[argv.index("-t") + 1] == "2" and argv[argv.index("-td") + 1] == "2"
        assert server_env(sup.config) == {"OMP_WAIT_POLICY": "PASSIVE"}
        assert command_line(argv, server_env(sup.config)).startswith(f"OMP_WAIT_POLICY=PASSIVE {argv[0]}")
        with sup.client() as c:
            assert c.completion("Once upon a time", 8, temperature=0.0)["timings"]["predicted_n"] > 0
    finally:
        sup.stop()


def test_the_default_adds_nothing(llama_server_bin: Path, stories260k_session: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    sup = Supervisor(llama_server_bin)
    sup.start(ServerConfig(model_path=stories260k_session, n_ctx=256, threads=1))
    sup.wait_ready(timeout_s=120)
    try:
        assert sup.pid is not None and "OMP_WAIT_POLICY" not in _environ(sup.pid)
        assert server_env(sup.config) == {} and "-td" not in (sup.argv or [])  # no draft model: no draft threads
    finally:
        sup.stop()
