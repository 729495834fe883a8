"""Integration tests against the real llama-server on the CPU with stories260K."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.server.conftest import wait_gone
from tuner import process
from tuner.server.config import ServerConfig
from tuner.server.dialect import probe_dialect
from tuner.server.discovery import find_server
from tuner.server.supervisor import (
    ServerStartError,
    ServerState,
    StateChange,
    Supervisor,
)

pytestmark = pytest.mark.server
REPO = Path(__file__).resolve().parents[2]


def _cfg(model: Path, **kw) -> ServerConfig:
    kw.setdefault("n_ctx", 256)
    kw.setdefault("threads", 1)
    return ServerConfig(model_path=model, **kw)


def test_discovery_and_dialect_of_real_binary(llama_server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    b = find_server()
    assert b.path == llama_server_bin.absolute() and b.source == "env"
    assert b.build is not None and b.build > 0
    assert find_server(setting=str(llama_server_bin)).source == "setting"
    d = probe_dialect(b.path)
    assert d.spec_style == "current" and "draft-simple" in d.spec_types
    assert d.removed_hint("--draft-max") is not None and not d.has("--draft-max")


def test_start_ready_complete_stop(llama_server_bin: Path, stories260k_session: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # inherited LLAMA_ARG_* would add a speculation type and 4 slots if they reached the child
    monkeypatch.setenv("LLAMA_ARG_SPEC_TYPE", "ngram-simple")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "4")
    changes: list[StateChange] = []
    sup = Supervisor(llama_server_bin, on_state=changes.append)
    sup.start(_cfg(stories260k_session))
    url = sup.wait_ready(timeout_s=120)
    pid = sup.pid
    try:
        argv = sup.argv or []
        assert argv[argv.index("--spec-type") + 1] == "none" and "--metrics" in argv and "--slots" in argv
        with sup.client() as c:
            assert c.props()["model_path"] == str(stories260k_session)
            res = c.completion("Once upon a time", 16, temperature=0.0, cache_prompt=False)
            assert isinstance(res["content"], str) and res["content"].strip()
            assert res["timings"]["predicted_n"] > 0 and "draft_n" not in res["timings"]
            assert "llamacpp:" in c.metrics_text()
            slots = c.slots()
            assert len(slots) == 1 and slots[0]["speculative"] is False
        assert [c.state for c in changes] == [ServerState.STARTING, ServerState.READY]
        assert changes[-1].base_url == url
    finally:
        rc = sup.stop()
    assert rc == 0  # graceful SIGTERM exit
    assert pid is not None and wait_gone(pid)
    assert sup.state == ServerState.STOPPED
    assert sup.log_path is not None and "listening on" in sup.log_path.read_text()


def test_speculative_ready_and_drafting(llama_server_bin: Path, stories260k_session: Path) -> None:
    sup = Supervisor(llama_server_bin)
    sup.start(_cfg(stories260k_session, draft_path=stories260k_session, spec_type="draft-simple", n_max=4))
    sup.wait_ready(timeout_s=120)
    try:
        with sup.client() as c:
            assert all(s["speculative"] for s in c.slots())
            t = c.completion("Once upon a time", 32, temperature=0.0, cache_prompt=False)["timings"]
        assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0
    finally:
        sup.stop()


def test_incompatible_draft_is_speculation_inactive(llama_server_bin: Path, stories260k_session: Path,
                                                     incompatible_draft: Path) -> None:
    changes: list[StateChange] = []
    sup = Supervisor(llama_server_bin, on_state=changes.append)
    sup.start(_cfg(stories260k_session, draft_path=incompatible_draft, spec_type="draft-simple", n_max=4))
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=120)
    d = e.value.diagnosis
    assert d.code == "speculation_inactive", d
    assert "speculation inactive" in d.message and "bos tokens must match" in d.message
    assert any("speculative decoding context" in line or "must match" in line for line in d.evidence)
    assert ServerState.READY not in [c.state for c in changes]
    assert sup.state == ServerState.FAILED and sup.pid is None


def test_removed_flag_on_current_build(llama_server_bin: Path, stories260k_session: Path) -> None:
    sup = Supervisor(llama_server_bin)
    sup.start(_cfg(stories260k_session, draft_path=stories260k_session, spec_type="draft-simple",
                   extra_args=("--draft-max", "4")))
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=60)
    d = e.value.diagnosis
    assert d.code == "flag_removed" and d.flag == "--draft-max" and d.replacement == "--spec-draft-n-max"
    assert "flag removed" in d.message and "use --spec-draft-n-max" in d.message
    assert d.returncode == 1


def test_port_held_by_another_server_is_never_ours(llama_server_bin: Path, stories260k_session: Path) -> None:
    """Another llama-server serving the *same* model file holds the port: identity by model path
    alone would pass, so the supervisor must also see that the socket is not its child's."""
    holder = Supervisor(llama_server_bin)
    holder.start(_cfg(stories260k_session))
    holder.wait_ready(timeout_s=120)
    try:
        port = holder.config.port
        changes: list[StateChange] = []
        sup = Supervisor(llama_server_bin, on_state=changes.append)
        sup.start(_cfg(stories260k_session, port=port))
        with pytest.raises(ServerStartError) as e:
            sup.wait_ready(timeout_s=60)
        assert e.value.diagnosis.code == "port_busy", e.value.diagnosis
        assert ServerState.READY not in [c.state for c in changes]
        assert holder.state == ServerState.READY and holder.pid is not None
    finally:
        holder.stop()


def test_sigkill_child_is_restarted(llama_server_bin: Path, stories260k_session: Path) -> None:
    changes: list[StateChange] = []
    sup = Supervisor(llama_server_bin, auto_restart=True, backoff_s=(0.2,), on_state=changes.append)
    sup.start(_cfg(stories260k_session))
    sup.wait_ready(timeout_s=120)
    try:
        pid1 = sup.pid
        assert pid1 is not None
        os.kill(pid1, signal.SIGKILL)
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end:
            if sup.state == ServerState.READY and sup.pid not in (None, pid1):
                break
            time.sleep(0.1)
        assert sup.state == ServerState.READY and sup.pid not in (None, pid1)
        assert sup.restart_count == 1
        crash = [c for c in changes if c.diagnosis is not None]
        # a SIGKILL Draftwise did not send: "killed by the system" (or, if another program of this shared
        # machine met the kernel's OOM killer in that second, the OOM killer: the counter is system-wide)
        assert crash and crash[0].diagnosis.returncode == -signal.SIGKILL
        assert crash[0].diagnosis.code in ("killed", "oom_killed"), crash[0].diagnosis
        assert "killed by the" in crash[0].message
        with sup.client() as c:
            assert c.completion("Once", 4, temperature=0.0)["content"] is not None
    finally:
        sup.stop()


def test_sigkill_parent_leaves_no_server(llama_server_bin: Path, stories260k_session: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, "-m", "tests.server.spawn_and_wait", str(llama_server_bin),
                               str(stories260k_session)], stdout=subprocess.PIPE, cwd=REPO, env=env, text=True)
    try:
        line = parent.stdout.readline()
        info = json.loads(line)
        pid = info["server_pid"]
        assert pid and process.process_exists(pid), "the server started from a short-lived thread must live"
        time.sleep(0.5)
        assert process.process_exists(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(pid, 10.0), "llama-server outlived its SIGKILLed parent"
        assert pid not in process.find_processes("llama-server")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_serve_and_doctor_commands(llama_server_bin: Path, stories260k_session: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), DRAFTWISE_LLAMA_SERVER=str(llama_server_bin))
    # doctor: binary, build, dialect, and the speculation self-test
    out = subprocess.run([sys.executable, "-m", "tuner.cli", "doctor", "--json"], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert rep["binary"]["build"] and rep["dialect"]["spec_style"] == "current"
    st = rep["self_test"]
    assert st["ok"] and st["speculative"] is True and st["draft_n"] > 0
    # with another program using a core, the self-test's tokens/s come with a note that says so
    from tests.burner import Burner

    with Burner(total_s=60, min_burst_s=60, max_burst_s=60):
        time.sleep(0.5)
        out = subprocess.run([sys.executable, "-m", "tuner.cli", "doctor"], capture_output=True, text=True,
                             env=env, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "self-test:    OK" in out.stdout
    assert "note: other programs used" in out.stdout and "lower than on an idle machine" in out.stdout, out.stdout
    # serve: endpoint on stdout, Ctrl-C stops it and its child
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(stories260k_session),
                          "--ctx-size", "256"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1")
        from tuner.server.client import ServerClient

        with ServerClient(endpoint[: -len("/v1")]) as c:
            assert c.health().ok
        kids = [c.pid for c in __import__("psutil").Process(p.pid).children(recursive=True)]
        assert kids
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        assert all(wait_gone(k, 10.0) for k in kids)
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("case", ["model_missing", "model_corrupt", "mtp_missing", "draft_missing", "flag_unknown"])
def test_fatal_starts_are_diagnosed(case: str, llama_server_bin: Path, stories260k_session: Path,
                                    tmp_path: Path) -> None:
    if case == "model_missing":
        cfg, want = _cfg(tmp_path / "absent.gguf"), "model_missing"
    elif case == "model_corrupt":
        bad = tmp_path / "truncated.gguf"
        bad.write_bytes(stories260k_session.read_bytes()[:300_000])
        cfg, want = _cfg(bad), "model_load_failed"
    elif case == "mtp_missing":
        cfg, want = _cfg(stories260k_session, spec_type="draft-mtp"), "mtp_missing"
    elif case == "draft_missing":
        cfg = _cfg(stories260k_session, draft_path=tmp_path / "no-draft.gguf", spec_type="draft-simple")
        want = "draft_load_failed"
    else:
        cfg, want = _cfg(stories260k_session, extra_args=("--no-such-flag",)), "flag_unknown"
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    with pytest.raises(ServerStartError) as e:
        sup.wait_ready(timeout_s=60)
    d = e.value.diagnosis
    assert d.code == want, d
    assert d.returncode == 1 and d.evidence and sup.state == ServerState.FAILED


def test_api_key_reaches_the_server_in_a_private_file_not_the_command_line(
        llama_server_bin: Path, stories260k_session: Path) -> None:
    """``--api-key KEY`` would show the key to every local user in ps and /proc/PID/cmdline: the
    supervisor passes ``--api-key-file`` (mode 0600, deleted once the server is up) instead."""
    from tuner.server.client import ServerClient, ServerHTTPError

    key = "dw-test-key-" + os.urandom(8).hex()
    sup = Supervisor(llama_server_bin)
    sup.start(_cfg(stories260k_session, api_key=key))
    url = sup.wait_ready(timeout_s=120)
    try:
        argv = sup.argv or []
        assert key not in " ".join(argv) and "--api-key" not in argv
        key_file = Path(argv[argv.index("--api-key-file") + 1])
        # Linux: an inherited memfd, never a file on disk (issue 16: nothing to leave behind)
        assert str(key_file).startswith("/dev/fd/"), key_file
        from tuner import paths

        leftovers = list(Path(tempfile.gettempdir()).glob("draftwise-api-key-*")) + list(
            (paths.data_dir() / "run").glob("draftwise-api-key-*"))
        assert not [f for f in leftovers if f.name.split("-")[3:4] == [str(os.getpid())]], leftovers
        with open(f"/proc/{sup.pid}/cmdline", "rb") as fh:
            assert key.encode() not in fh.read()
        # the server really enforces the key it read from the file
        with ServerClient(url) as anonymous:
            with pytest.raises(ServerHTTPError) as err:
                anonymous.completion("Once upon a time", 4, temperature=0.0)
            assert err.value.status_code == 401
        with sup.client() as c:  # sends the key
            assert c.completion("Once upon a time", 4, temperature=0.0)["content"] is not None
    finally:
        sup.stop()
