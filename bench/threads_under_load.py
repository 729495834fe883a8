"""Threads under load: the tuned configuration vs each thread setting, side by side, with one core kept busy.

    python -m bench.threads_under_load [--server PATH] [--budget 180] [--rounds 3] [--n-predict 64]
                                       [--n-layers 12] [--eps 0.05]

1. Generates the DESIGN.md acceptance-dial family (768 wide, ``--n-layers`` blocks F16 target, its 2-block draft,
   an unrelated draft) in a temp folder, with a private DRAFTWISE_HOME.
2. Starts the bounded burner of tests/burner.py in one continuous burst (one core busy, detached from this
   process, so the tune's load watcher counts it as another program), for the whole tune and everything after.
3. ``tune`` on the folder with ``--budget`` seconds and no ``--threads`` (the thread stage runs: each thread
   setting of the served configuration, idle and under its own short burner, on top of this one).
4. Side by side under the same load: the served configuration from the saved profile (its argv and
   environment) and the same configuration at each thread setting the stage tries
   (``tuner.calibration.threads.settings_for``), all servers up at once, every round the same prompts and
   seeds (greedy, no prompt cache) to each, one request at a time, the order rotated each round.
5. Prints per round each configuration's pooled tokens/s (Σ tokens ÷ Σ generation time), at the end the
   pooled figures, ``served / best`` and the decision's thread sentence.

Goal (issue 25): served / best ≥ 0.80 under the load, and the decision states the trade. Exit status 0 when
both hold, 1 when not, 2 when it cannot measure.

Other programs' load biases the figures: the machine's load is printed before and after (``bench.common``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.common import add_server_arg, family, note_machine, private_home, server_binary
from tests.burner import Burner
from tuner.calibration.sampling import GREEDY
from tuner.calibration.sentences import Slot
from tuner.calibration.serving import profile_server_config
from tuner.calibration.threads import settings_for
from tuner.calibration.tune import tune
from tuner.calibration.wording import of_slot, words
from tuner.profiles import ProfileStore
from tuner.server.argv import command_line, server_env
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor

PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "The three most important things to know about photosynthesis are",
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
)
LOAD_S = 3600.0  # the burner's bound: far past the run; it is stopped at the end


def _request(client, prompt: str, n_predict: int, seed: int) -> tuple[int, float]:
    """One greedy completion: (generated tokens, generation ms)."""
    t = client.completion(prompt, n_predict, temperature=0.0, seed=seed, cache_prompt=False).get("timings", {})
    return int(t.get("predicted_n", 0)), float(t.get("predicted_ms", 0.0))


def _configs(served: ServerConfig, cores: int, openmp: bool | None) -> dict[str, ServerConfig]:
    """The served configuration and the same one at each thread setting (a setting equal to the served one is
    listed once, as served)."""
    out = {"served": served}
    for st in settings_for(cores, openmp):
        cfg = replace(served, threads=st.threads, omp_passive=st.omp_passive, poll=st.poll)
        if cfg != served:
            out[st.words(cores)] = cfg
    return out


def _rounds(clients: dict, rounds: int, n_predict: int) -> dict[str, list[tuple[int, float]]]:
    """Per configuration, per round: (Σ tokens, Σ ms); the order rotates each round."""
    names = list(clients)
    acc: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        tot = {n: [0, 0.0] for n in names}
        for i, prompt in enumerate(PROMPTS):
            for name in order:
                n, ms = _request(clients[name], prompt, n_predict, seed=1000 * r + i)
                tot[name][0] += n
                tot[name][1] += ms
        for name in names:
            acc[name].append((int(tot[name][0]), float(tot[name][1])))
        print(f"round {r + 1}: " + ", ".join(f"{n} {1000 * tot[n][0] / max(tot[n][1], 1e-9):.1f}" for n in names)
              + " tokens/s", flush=True)
    return acc


def _side_by_side(binary, cfgs: dict[str, ServerConfig], rounds: int, n_predict: int) -> dict[str, float]:
    sups = {name: Supervisor(binary, liveness_timeout_s=None) for name in cfgs}
    try:
        for name, sup in sups.items():
            sup.start(replace(cfgs[name], port=None))
        for name, sup in sups.items():
            sup.wait_ready(timeout_s=300)
            print(f"  {name}: {command_line(sup.argv or [], server_env(sup.config))}", flush=True)
        clients = {name: sup.client(timeout_s=900) for name, sup in sups.items()}
        for c in clients.values():  # warm-up, discarded
            _request(c, PROMPTS[0], 8, seed=0)
        acc = _rounds(clients, rounds, n_predict)
    finally:
        for sup in sups.values():
            sup.stop()
    return {n: 1000 * sum(t for t, _ in v) / max(sum(ms for _, ms in v), 1e-9) for n, v in acc.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    ap.add_argument("--budget", type=float, default=180.0, help="the tune's budget, seconds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--n-layers", type=int, default=12, help="target blocks of the generated family")
    ap.add_argument("--eps", type=float, default=0.05)
    args = ap.parse_args(argv)
    binary = server_binary(args)
    work = Path(tempfile.mkdtemp(prefix="dw-threads-load-"))
    private_home(work)
    fam = family(work / "models", n_layers=args.n_layers, eps=args.eps)
    import psutil

    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    note_machine("before")
    burner = Burner(total_s=LOAD_S, min_burst_s=LOAD_S, max_burst_s=LOAD_S).start()
    print(f"burner pid {burner.pid}: one core busy for the whole run; {cores} physical cores", flush=True)
    try:
        t0 = time.monotonic()
        res = tune(work / "models", target=str(fam.target), budget_s=args.budget, force=True, server=binary.path,
                   store=ProfileStore(work / "profiles"), sampling=GREEDY, long_context=False,
                   on_event=lambda ev: print(f"  tune {ev.elapsed_s:6.1f}s {ev.kind}: {ev.message}", file=sys.stderr)
                   if ev.kind != "progress" else None)
        tune_s = time.monotonic() - t0
        if res.profile is None or res.decision is None:
            print("cannot measure: the tune saved no profile")
            return 2
        served = profile_server_config(res.profile)
        from tuner.crosscheck.cpu_buffers import build_uses_openmp

        cfgs = _configs(served, cores, build_uses_openmp(binary))
        print(f"tune: {tune_s:.0f} s; served: {res.decision.winner.label} with threads={served.threads} "
              f"omp_passive={served.omp_passive} poll={served.poll}", flush=True)
        pooled = _side_by_side(binary, cfgs, args.rounds, args.n_predict)
    finally:
        burner.stop()
    note_machine("after")
    best = max(pooled.values())
    ratio = pooled["served"] / best if best > 0 else 0.0
    sentence = next((words(s) for s in of_slot(res.decision.sentences, Slot.THREADS)), None)
    print("\npooled under load: " + ", ".join(f"{n} {v:.1f}" for n, v in pooled.items()) + " tokens/s")
    print(f"served / best: {ratio:.3f} (goal >= 0.80); thread sentence: {sentence or '(none)'}")
    print(json.dumps({"cores": cores, "budget_s": args.budget, "tune_s": round(tune_s, 1),
                      "served": {"threads": served.threads, "omp_passive": served.omp_passive, "poll": served.poll},
                      "pooled_tokens_per_s": {k: round(v, 2) for k, v in pooled.items()},
                      "served_over_best": round(ratio, 4), "sentence": sentence}))
    return 0 if ratio >= 0.80 and sentence else 1


if __name__ == "__main__":
    sys.exit(main())
