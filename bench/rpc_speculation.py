"""Speculation over the network (issue 17): baseline vs the best speculative configuration with the
target on a llama.cpp RPC host, at emulated LAN delays, side by side in one run.

    python -m bench.rpc_speculation [--delays 0,1,5] [--n-max 4,8] [--n-embd 768] [--n-layers 12]
                                    [--draft-layers 2] [--eps 0.05] [--requests 3] [--n-predict 64]
                                    [--server PATH] [--threads 1] [--no-netns] [--keep]

1. Generates the acceptance-dial family (default: the issue's 768-wide, 12-block F16 target and its
   2-block draft) in a temp folder.
2. Starts one ``ggml-rpc-server`` (tuner.hardware.rpchost) and, per delay D, a userspace TCP delay proxy in
   front of it (tests/rpcnet/delayproxy.py: every chunk delayed D ms in each direction, round trip 2 D;
   it stands in for ``tc qdisc ... netem delay``, which this kernel lacks). Everything runs on loopback,
   inside a private network namespace (``unshare -n``) when the machine allows it.
3. Per delay, launches in the order A B1 B2 A: the baseline A (the whole target on the RPC device,
   ``-ngl`` all, ``--rpc`` via the proxy) and each speculative B (the same target placement, the draft on
   this machine's CPU with ``--spec-draft-ngl 0``, ``draft-simple`` at each ``--n-max``), each with one
   warm-up and the same greedy requests (fixed seed). Median generation tokens/s per launch; the ratio is
   the best speculative median over the mean of the two baseline medians of the same delay.
4. Prints one table (delay, baseline, best speculative, ratio, acceptance) and how the ratio grows with
   delay. A local row (the target alone, no RPC) is printed first for reference.

Timing on a shared CPU is noisy: the two baselines of each delay show the drift. CPU-heavy: about 3–6
minutes on 2 cores with the defaults. Exit status 0 when every launch ran.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.common import REPO, add_server_arg, add_threads_arg, family, note_machine, server_binary
from tests.rpcnet import netns_problem
from tests.rpcnet.delayproxy import DelayProxy
from tuner.hardware.rpc import rpc_server_binary
from tuner.hardware.rpchost import RpcHost, RpcHostConfig
from tuner.process import free_port
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
    "Question: what is 17 times 23? Answer step by step.",
]


def _measure(sup: Supervisor, cfg: ServerConfig, n_requests: int, n_predict: int) -> dict:
    t0 = time.monotonic()
    sup.start_and_wait(replace(cfg, port=free_port()), timeout_s=180)
    load_s = time.monotonic() - t0
    client = sup.client(timeout_s=300)
    try:
        client.completion(PROMPTS[0], 16, temperature=0.0, top_k=1, seed=1)  # warm-up, discarded
        tps, drafted, accepted = [], 0, 0
        for i in range(n_requests):
            ans = client.completion(PROMPTS[i % len(PROMPTS)], n_predict, temperature=0.0, top_k=1, seed=1 + i,
                                    cache_prompt=False)
            t = ans.get("timings") or {}
            tps.append(float(t.get("predicted_per_second") or 0.0))
            drafted += int(t.get("draft_n") or 0)
            accepted += int(t.get("draft_n_accepted") or 0)
    finally:
        sup.stop()
    return {"tps": statistics.median(tps), "drafted": drafted, "accepted": accepted, "load_s": load_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="0,1,5", help="one-way delays in ms, comma-separated")
    ap.add_argument("--n-max", default="4,8", help="draft lengths tried for the speculative side")
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-layers", type=int, default=12)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=64)
    add_server_arg(ap)
    add_threads_arg(ap)  # also the RPC server's
    ap.add_argument("--no-netns", action="store_true", help="run on the host's loopback, not in a namespace")
    ap.add_argument("--keep", action="store_true", help="keep the generated models")
    args = ap.parse_args(argv)

    if not args.no_netns and os.environ.get("DW_BENCH_IN_NETNS") != "1":
        problem = netns_problem()
        if problem is None:
            env = {**os.environ, "DW_BENCH_IN_NETNS": "1"}
            return subprocess.call(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
                                    sys.executable, "-m", "bench.rpc_speculation", *sys.argv[1:]], env=env, cwd=REPO)
        print(f"note: {problem}; running on the host's loopback", file=sys.stderr)
    where = "a private network namespace" if os.environ.get("DW_BENCH_IN_NETNS") == "1" else "the host loopback"
    delays = [float(x) for x in args.delays.split(",") if x.strip()]
    n_maxes = [int(x) for x in args.n_max.split(",") if x.strip()]
    binary = server_binary(args)
    note_machine("before")
    rpc_bin = rpc_server_binary(binary.path)
    if rpc_bin is None:
        print(f"no ggml-rpc-server next to {binary.path}: rebuild with -DGGML_RPC=ON (see README)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="dw-rpc-bench-"))
    host = None
    try:
        t0 = time.monotonic()
        fam = family(tmp, n_embd=args.n_embd, n_layers=args.n_layers, draft_layers=args.draft_layers, eps=args.eps,
                     dtype="f16")
        print(f"family: {args.n_embd} wide, {args.n_layers} blocks F16 target "
              f"({fam.target.stat().st_size / 2**20:.0f} MiB), {args.draft_layers}-block draft, eps {args.eps} "
              f"({time.monotonic() - t0:.0f} s to generate); network: {where}", flush=True)
        host = RpcHost(RpcHostConfig(rpc_bin, port=free_port(), threads=args.threads))
        host.start()
        sup = Supervisor(binary, auto_restart=False, liveness_timeout_s=None)
        full = args.n_layers + 1
        base_cfg = ServerConfig(model_path=fam.target, spec_type="none", ngl=full, n_ctx=1024, n_parallel=1,
                                threads=args.threads, cache_ram_mib=0)
        local = _measure(sup, base_cfg, args.requests, args.n_predict)
        print(f"local (no RPC, target on this CPU): {local['tps']:.1f} tok/s", flush=True)
        rows = []
        for d in delays:
            with DelayProxy(("127.0.0.1", host.cfg.port), delay_ms=d) as proxy:
                ep = (f"127.0.0.1:{proxy.port}",)
                base = replace(base_cfg, rpc=ep)
                a1 = _measure(sup, base, args.requests, args.n_predict)
                specs = []
                for n in n_maxes:
                    cfg = replace(base, draft_path=fam.good_draft, spec_type="draft-simple", n_max=n, draft_ngl=0)
                    specs.append((n, _measure(sup, cfg, args.requests, args.n_predict)))
                a2 = _measure(sup, base, args.requests, args.n_predict)
            b = (a1["tps"] + a2["tps"]) / 2
            n_best, best = max(specs, key=lambda s: s[1]["tps"])
            acc = best["accepted"] / best["drafted"] if best["drafted"] else 0.0
            rows.append((d, a1["tps"], a2["tps"], b, n_best, best, acc, specs))
            print(f"  delay {d:g} ms: baseline {a1['tps']:.1f} / {a2['tps']:.1f} tok/s, "
                  + ", ".join(f"n_max {n}: {m['tps']:.1f}" for n, m in specs), flush=True)
        print()
        print(f"{'delay (one way)':>16} {'baseline tok/s':>15} {'best spec tok/s':>16} {'n_max':>6} {'ratio':>7}"
              f" {'acceptance':>11}")
        for d, x1, x2, b, n_best, best, acc, _ in rows:
            print(f"{d:>13g} ms {b:>9.1f} ({x1:.0f}/{x2:.0f}) {best['tps']:>16.1f} {n_best:>6} "
                  f"{best['tps'] / b:>6.2f}x {100 * acc:>10.0f}%")
        if rows and rows[0][3] > 0:
            r0 = rows[0][5]["tps"] / rows[0][3]
            growth = ", ".join(f"{d:g} ms: {best['tps'] / b / r0:.2f}" for d, _, _, b, _, best, _, _ in rows)
            print(f"ratio relative to {rows[0][0]:g} ms delay: {growth}")
        print(f"(local reference, no RPC: {local['tps']:.1f} tok/s; the target's layers all on the RPC device, "
              f"the draft on this machine's CPU; greedy, {args.requests} requests x {args.n_predict} tokens "
              "per launch)")
        note_machine("after")
        return 0
    finally:
        if host is not None:
            host.stop()
        if args.keep:
            print(f"models kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
