"""Run inside a network namespace (tests/rpcnet.run_in_netns): issue 17's real-server check.

Two real ggml-rpc-servers on the namespace's loopback (plus a closed port in the list); ``tune`` with
``rpc_hosts`` on a generated family measures the baseline and a local-draft candidate with the target over
RPC; the winner is served from the saved profile exactly as ``serve --models`` does (the profile's config,
its local fallback); one RPC server is killed while serving and the supervisor falls back to this machine
only. Prints one JSON object with what happened; tests/hardware/test_rpc_tune.py asserts on it.

Argument: a scratch folder (the family, DRAFTWISE_HOME).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from tests.synth import make_family


def main(argv: list[str]) -> int:
    scratch = Path(argv[0])
    os.environ["DRAFTWISE_HOME"] = str(scratch / "home")
    from tuner.calibration.candidates import Candidate
    from tuner.calibration.prompts import Prompt, make_prompt_set
    from tuner.calibration.sampling import GREEDY
    from tuner.calibration.serving import (
        candidate_config,
        profile_server_config,
        rpc_fallback_config,
    )
    from tuner.calibration.tune import tune
    from tuner.crosscheck.build import find_server_binary
    from tuner.hardware.rpc import rpc_server_binary
    from tuner.hardware.rpchost import RpcHost, RpcHostConfig
    from tuner.process import free_port
    from tuner.profiles import ProfileStore
    from tuner.server.supervisor import ServerState, StateChange, Supervisor

    fam = make_family(scratch / "family", n_embd=256, n_layers=8, draft_layers=2, eps=0.02, dtype="f16")
    models = scratch / "models"
    models.mkdir()
    for p in (fam.target, fam.good_draft):
        (models / p.name).symlink_to(p)
    binary = find_server_binary()
    rpc_bin = rpc_server_binary(binary)
    assert binary is not None and rpc_bin is not None
    hosts = [RpcHost(RpcHostConfig(rpc_bin, port=free_port(), threads=1)) for _ in range(2)]
    for h in hosts:
        h.start()
    closed = f"127.0.0.1:{free_port()}"
    from tests.rpcnet import SilentHost

    silent = SilentHost()
    endpoints = [str(h.cfg.endpoint) for h in hosts]
    out: dict = {"hosts": endpoints, "closed": closed, "silent": f"127.0.0.1:{silent.port}"}
    events: list = []
    store = ProfileStore(scratch / "profiles")
    prompts = make_prompt_set([
        Prompt("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "code"),
        Prompt("Once upon a time, in a small village by the sea, there lived", "creative"),
    ], source="test")
    sup = None
    try:
        t0 = time.monotonic()
        res = tune(models, prompts=prompts, budget_s=float(argv[1]) if len(argv) > 1 else 30.0, server=binary,
                   store=store, n_predict=48, repetitions=2, n_ctx=512, threads=1, sampling=GREEDY,
                   long_context=False, on_event=events.append, rpc_hosts=(*endpoints, closed, out["silent"]))
        out["tune_s"] = time.monotonic() - t0
        out["plan_at_s"] = next(e.elapsed_s for e in events if e.kind == "plan")
        out["started_at_s"] = next(e.elapsed_s for e in events if e.kind == "started")
        out["notes"] = [e.message for e in events if e.kind == "error"]
        out["measurements"] = [{"label": m.candidate.label, "rpc": list(m.candidate.rpc), "ngl": m.candidate.ngl,
                                "draft_ngl": m.candidate.draft_ngl, "placement": m.candidate.placement,
                                "baseline": m.candidate.is_baseline, "ok": m.ok, "tps": m.gen_tokens_per_s,
                                "draft_n": m.draft_n, "error": m.error} for m in res.measurements]
        d = res.decision
        assert d is not None
        out["decision"] = d.reason
        out["winner"] = d.winner.to_json()
        prof = store.load(fam.target.resolve())
        assert prof is not None
        out["hardware_key"] = prof.keys.hardware_fingerprint
        # serve the winner as `serve --models` does
        cfg = replace(profile_server_config(prof), port=free_port())
        states: list[StateChange] = []
        fallback = rpc_fallback_config(cfg, prof)
        if not cfg.rpc:  # the local-only winner needs no host; check the fallback on the fastest RPC config
            out["winner_served"] = "local"
            sup = Supervisor(binary, auto_restart=True)
            sup.start_and_wait(cfg, timeout_s=60)
            out["winner_answer"] = bool(sup.client().completion("Once upon a time", 8).get("content") is not None)
            sup.stop()
            rpc_ms = [m for m in res.measurements if m.ok and m.candidate.rpc]
            best = max(rpc_ms, key=lambda m: m.gen_tokens_per_s or 0).candidate
            cfg = replace(candidate_config(best, fam.target.resolve(), n_ctx=512, threads=1), port=free_port())
            fallback = rpc_fallback_config(cfg, prof)
        else:
            out["winner_served"] = "rpc"
        out["served_rpc"] = list(cfg.rpc)
        out["fallback"] = {"rpc": list(fallback.rpc), "ngl": fallback.ngl, "spec_type": fallback.spec_type,
                           "draft": fallback.draft_path.name if fallback.draft_path else None} if fallback else None
        sup = Supervisor(binary, auto_restart=True, rpc_fallback=fallback, on_state=states.append,
                         liveness_timeout_s=10.0)
        sup.start_and_wait(cfg, timeout_s=60)
        out["argv_has_rpc"] = "--rpc" in (sup.argv or [])
        out["answer_before"] = sup.client().completion("Once upon a time", 8).get("content") is not None
        victim = hosts[1]
        assert victim.pid is not None
        os.kill(victim.pid, 9)
        t_kill = time.monotonic()
        try:  # the request in flight (or the next one) fails: llama-server aborts
            sup.client().completion("Once upon a time", 16)
        except Exception as exc:  # noqa: BLE001
            out["request_error"] = type(exc).__name__
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sup.state == ServerState.READY and sup.config is not None and not sup.config.rpc:
                break
            time.sleep(0.2)
        out["fallback_s"] = time.monotonic() - t_kill
        out["state"] = sup.state.value
        out["served_after"] = {"rpc": list(sup.config.rpc) if sup.config else None}
        out["rpc_lost"] = sup.rpc_lost
        out["state_messages"] = [f"{c.state.value}: {c.message}" for c in states]
        out["codes"] = [c.diagnosis.code for c in states if c.diagnosis is not None]
        out["answer_after"] = sup.client().completion("Once upon a time", 8).get("content") is not None
        _ = Candidate  # noqa
    finally:
        if sup is not None:
            sup.stop()
        for h in hosts:
            h.stop()
        silent.close()
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
