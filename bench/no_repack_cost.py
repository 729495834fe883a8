"""What the ``--no-repack`` workaround costs: Gemma 3 270M Q4_K_M's generation tokens/s with ggml's repacked
CPU kernels (the build's default: its AMX / CPU_REPACK buffers) and without them (``--no-repack``), side by
side in one run.

Two llama-servers on the same GGUF (one with ``--no-repack``), ``-t 1`` each by default, one slot; every
round sends the same prompts (greedy, a seed per (round, prompt), no prompt cache) to both, one request at a
time, the order rotated each round (A B, then B A). Per round it prints each side's pooled tokens/s (Σ
tokens ÷ Σ generation time) and their ratio; at the end the ratio pooled over every round, the CPU model and
thread count, and the machine's load average before and after (other programs' load biases both sides the
same way only roughly: read the per-round ratios). The figure is the N of the sentence a user reads while
the workaround is in force (``tuner.hardware.repack.REPACK_SPEEDUP_PCT``).

    python -m bench.no_repack_cost [--server PATH] [--rounds 8] [--n-predict 96] [--threads 1] [--model GGUF]

How much the repacked kernels give depends on how much of the model they take: on an AVX2/AVX-512 build only
Q4_0/Q4_K/IQ4_NL/MXFP4 matrices go to CPU_REPACK (Gemma 3 270M Q4_K_M: 12.7 of 235 MiB; its Q5_0/Q8_0/Q6_K
tensors stay), while an AMX build also takes Q8_0/Q4_K/Q5_K/Q6_K (213.9 MiB of it). ``--model`` measures
another GGUF the same way.

Run on the 2-core build box (AMD EPYC, AVX2/AVX-512, CPU_REPACK; defaults; load average 1.4-1.8, one test
run beside it): repacked 54.9, --no-repack 54.8 tokens/s, +0.3 % (per round 0.93-1.13): no measurable gain on
that CPU, so ``REPACK_SPEEDUP_PCT`` stays 0 and the sentence claims no figure.

On a machine whose CPU crashes in the repacked kernels it does not measure and says why: the workaround is
already recorded for this build, or the probe launch of the self-test model crashed (the supervisor's
retry then records it). The run uses a private DRAFTWISE_HOME (nothing is written to the user's).
Exit status: 0 measured, 2 cannot measure here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, gemma_model, note_machine, private_home, server_binary
from tuner.crosscheck.cpu_buffers import current_cpu_workaround, probe_cpu_buffers
from tuner.hardware.host import foreign_processes
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor
from tuner.server.workarounds import cpu_identity

PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "The three most important things to know about photosynthesis are",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
)
SIDES = ("repacked", "no-repack")


def _cannot(reason: str) -> int:
    print(f"cannot measure the cost of --no-repack here: {reason}")
    return 2


def _request(client, prompt: str, n_predict: int, seed: int) -> tuple[int, float, float]:
    """One greedy completion: (generated tokens, generation ms, prompt tokens/s)."""
    t = client.completion(prompt, n_predict, temperature=0.0, seed=seed, cache_prompt=False).get("timings", {})
    return int(t.get("predicted_n", 0)), float(t.get("predicted_ms", 0.0)), float(t.get("prompt_per_second", 0.0))


def _start(binary, model: Path, threads: int, no_repack: bool) -> Supervisor:
    sup = Supervisor(binary, liveness_timeout_s=None)
    sup.start(ServerConfig(model_path=model, n_ctx=2048, n_parallel=1, threads=threads, no_repack=no_repack))
    return sup


def _rounds(clients: dict, rounds: int, n_predict: int) -> tuple[list[dict], dict]:
    """The measured rounds: per round and side Σ tokens and Σ ms, and every prompt tokens/s figure."""
    per_round: list[dict] = []
    prompt_tps: dict[str, list[float]] = {s: [] for s in SIDES}
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        acc = {s: [0, 0.0] for s in SIDES}
        for i, prompt in enumerate(PROMPTS):
            for side in order:
                n, ms, pps = _request(clients[side], prompt, n_predict, seed=1000 * r + i)
                acc[side][0] += n
                acc[side][1] += ms
                prompt_tps[side].append(pps)
        tps = {s: acc[s][0] / (acc[s][1] / 1000) for s in SIDES}
        per_round.append({"tokens": {s: acc[s][0] for s in SIDES}, "ms": {s: acc[s][1] for s in SIDES},
                          "tps": tps, "ratio": tps["repacked"] / tps["no-repack"]})
        print(f"round {r + 1}: repacked {tps['repacked']:.1f} tokens/s, --no-repack {tps['no-repack']:.1f} "
              f"tokens/s, ratio {per_round[-1]['ratio']:.3f} ({' then '.join(order)})", flush=True)
    return per_round, prompt_tps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--n-predict", type=int, default=96)
    add_threads_arg(ap)
    ap.add_argument("--model", type=Path, default=None, help="GGUF to measure (default: Gemma 3 270M Q4_K_M)")
    args = ap.parse_args(argv)
    binary = server_binary(args)
    w = current_cpu_workaround(binary.path)  # the user's store, before the private home
    if w is not None:
        return _cannot(f"the --no-repack workaround is recorded for {binary.path} on this machine (this CPU "
                       f"crashed in the repacked kernels: {w.cause})")
    private_home(Path(tempfile.mkdtemp(prefix="dw-no-repack-")))
    fact = probe_cpu_buffers(binary)
    if fact is None:
        return _cannot("the probe launch of the self-test model failed (see the log above)")
    if fact.no_repack:
        return _cannot(f"the probe launch crashed in the repacked kernels ({fact.cause or 'a crash'}) and only "
                       "ran with --no-repack")
    if not fact.types:
        return _cannot("this build copies no weights into a repacked CPU buffer here (nothing to compare)")
    model = args.model or gemma_model()
    note_machine("before")
    cpu = cpu_identity().model
    others = foreign_processes("llama-server")
    load0 = os.getloadavg()
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; llama-server {binary.build} ({binary.path}); {model.name}; "
          f"repacked buffer types here: {', '.join(fact.types)}; {args.threads} thread(s) per server; "
          f"{len(PROMPTS)} prompts x "
          f"{args.n_predict} tokens x {args.rounds} rounds; other llama-servers running: {len(others)}; load "
          f"average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    sups = {side: _start(binary, model, args.threads, side == "no-repack") for side in SIDES}
    try:
        for side, sup in sups.items():
            sup.wait_ready(timeout_s=300)
            if ("--no-repack" in (sup.argv or [])) != (side == "no-repack"):
                return _cannot("the repacked server crashed and was restarted with --no-repack")
        clients = {side: sup.client(timeout_s=600) for side, sup in sups.items()}
        for side in SIDES:  # warm-up, discarded
            _request(clients[side], PROMPTS[0], 8, seed=0)
        t0 = time.monotonic()
        per_round, prompt_tps = _rounds(clients, args.rounds, args.n_predict)
        wall = time.monotonic() - t0
    finally:
        for sup in sups.values():
            sup.stop()
    load1 = os.getloadavg()
    pooled = {s: sum(r["tokens"][s] for r in per_round) / (sum(r["ms"][s] for r in per_round) / 1000) for s in SIDES}
    ratio = pooled["repacked"] / pooled["no-repack"]
    ratios = [r["ratio"] for r in per_round]
    pp = {s: statistics.median(v) for s, v in prompt_tps.items()}
    print(f"\npooled over {len(per_round)} rounds: repacked {pooled['repacked']:.1f} tokens/s, --no-repack "
          f"{pooled['no-repack']:.1f} tokens/s: the repacked kernels generate {100 * (ratio - 1):+.0f} % "
          f"(ratio {ratio:.3f}; per round {min(ratios):.3f}-{max(ratios):.3f}, median {statistics.median(ratios):.3f})")
    print(f"prompt processing (median): repacked {pp['repacked']:.0f}, --no-repack {pp['no-repack']:.0f} tokens/s")
    print(f"CPU {cpu}; load average before {load0[0]:.2f}, after {load1[0]:.2f}; wall {wall:.0f} s")
    print(json.dumps({"cpu": cpu, "model": model.name, "threads": args.threads, "buffer_types": list(fact.types),
                      "rounds": len(per_round),
                      "n_predict": args.n_predict, "pooled_tokens_per_s": {k: round(v, 2) for k, v in pooled.items()},
                      "ratio": round(ratio, 4), "faster_pct": round(100 * (ratio - 1), 1),
                      "round_ratios": [round(x, 4) for x in ratios],
                      "prompt_tokens_per_s_median": {k: round(v, 1) for k, v in pp.items()},
                      "load_average_before_after": [round(load0[0], 2), round(load1[0], 2)],
                      "other_llama_servers": len(others), "wall_s": round(wall, 1)}))
    note_machine("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
