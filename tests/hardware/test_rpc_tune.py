"""Issue 17 "Done when", the real-server part: two RPC servers on a private loopback (a network namespace),
``tune`` with RPC hosts measures the baseline and local-draft candidates with the target over RPC, the
winner is served from the profile, and killing one RPC server while serving falls back to this machine,
reported through the supervisor's state. The steps run in tests/rpcnet/tune_scenario.py inside the
namespace; this test checks what it saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rpcnet import netns_problem, run_in_netns

pytestmark = [pytest.mark.server, pytest.mark.slow,
              pytest.mark.skipif(netns_problem() is not None, reason=f"no network namespace: {netns_problem()}")]


def test_tune_over_two_rpc_hosts_serves_the_winner_and_falls_back_when_a_host_dies(tmp_path: Path,
                                                                                    llama_server_bin) -> None:
    r = run_in_netns("tests.rpcnet.tune_scenario", str(tmp_path), "20", timeout_s=240)
    hosts = r["hosts"]
    ms = r["measurements"]
    table = "\n".join(f"{m['label']} rpc={m['rpc']} ok={m['ok']} {m['tps']} {m['error']}" for m in ms)
    # the closed port of the list is a note naming it, and costs seconds, not minutes
    assert any(r["closed"] in n and "refused" in n for n in r["notes"]), r["notes"]
    assert any(r["silent"] in n and "did not answer within 2 s" in n for n in r["notes"]), r["notes"]
    # from start to the plan: scan, --help, device detection (the dead hosts bounded at 2 s, in parallel)
    assert r["plan_at_s"] - r["started_at_s"] < 12.0, (r["started_at_s"], r["plan_at_s"])
    # the baseline ran with the target over both RPC hosts, all of it offloaded there
    base = [m for m in ms if m["baseline"] and m["ok"]]
    assert base and all(m["rpc"] == hosts and m["ngl"] == 9 for m in base), table
    # a draft candidate with the target over RPC and the draft local (on this machine's CPU) ran and drafted
    split = [m for m in ms if m["placement"] == "rpc-split" and m["ok"]]
    assert split and all(m["rpc"] == hosts and m["draft_ngl"] == 0 and m["draft_n"] > 0 for m in split), table
    # the decision names where each part ran; the profile's hardware key holds the hosts and their devices
    where = r["decision"].split("Where it ran:", 1)[-1]
    assert "Where it ran:" in r["decision"] and f"the target over RPC on RPC0 ({hosts[0]}), RPC1 ({hosts[1]})" in where
    if r["winner"]["draft_path"]:
        assert "the draft on this machine's CPU" in where
    assert all(f"RPC{i}@{h}" in r["hardware_key"] for i, h in enumerate(hosts)), r["hardware_key"]
    # served: the winner from the profile (when it was local-only, the fastest RPC configuration is then
    # served with the profile's local fallback, to check the fallback)
    if r["winner_served"] == "local":
        assert r["winner_answer"] is True
    assert r["served_rpc"] == hosts and r["argv_has_rpc"] and r["answer_before"]
    # one host killed: llama-server aborts, the supervisor switches to the local-only fallback and says so
    assert r["fallback"] is not None and r["fallback"]["rpc"] == []
    assert r["state"] == "ready" and r["served_after"]["rpc"] == [] and r["answer_after"], r["state_messages"]
    assert "rpc_host_lost" in r["codes"]
    assert r["rpc_lost"] == hosts[1], r["rpc_lost"]
    assert any(f"RPC host {hosts[1]} lost while serving: falling back to this machine only" in m
               for m in r["state_messages"]), r["state_messages"]
    assert r["fallback_s"] < 30.0
