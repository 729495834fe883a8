"""Draftwise's served configuration against the configurations a person would write by hand, side by side in one
run (issue 25 "Done when").

    python bench/vs_hand_configs.py [--server PATH] [--budget 300] [--rounds 3] [--n-ctx 2048] [--threads N]
                                    [--n-predict 128] [--prompts 5] [--reps 2] [--greedy] [--busy] [--json]

1. Generates the issue-25 family (tests/synth.py ``make_family``: a 768-wide, 12-block F16 target, its 2-block draft
   with the same first blocks, an unrelated 2-block draft of the same tokenizer) in a temp folder.
2. Tunes it (``tune``, the built-in prompts, ``--budget`` seconds) at llama-server's default sampling (``--greedy``:
   temperature 0) and takes the profile's served configuration (``serving.profile_server_config``).
3. Measures side by side, in ``--rounds`` rotated rounds (round r starts at configuration r), each launch with
   the same ``-c``, ``-np 1`` and ``-t``, the same prompts and seeds (each round its own repetition ids, the same
   for every configuration in it):

   * the model alone;
   * Draftwise's served configuration;
   * llama.cpp's own draft defaults: ``-md DRAFT --spec-type draft-simple`` (n_max 3, p_min 0);
   * the seed guide's command: ``-md DRAFT --spec-type draft-simple --spec-draft-n-max 5 --spec-draft-p-min 0.75``;
   * ``--spec-default`` (ngram-mod, n_match 24, n_min 48, n_max 64: common/arg.cpp ``--spec-default``; the
     argv also carries ``--spec-type none``, which only resets the type list before it: common/arg.cpp
     ``--spec-type``, speculative.cpp ``common_speculative_types_from_names``).

   Each figure is a ratio to the model alone **in the same round**, over the same requests (Σ tokens ÷ Σ time on
   each side); the summary is each configuration's median over the rounds.

Goal (issue 25): Draftwise's served configuration ≥ 0.95 × the best of the three hand configurations (three runs
on a quiet machine). Exit status 0 when it holds. ``--busy``: the tune and the rounds under tests/burner.py.
CPU-heavy: the tune's budget plus about 5 launches × rounds × (prompts × reps) requests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.burner import Burner  # noqa: E402
from tests.synth import make_family  # noqa: E402
from tuner.calibration import select_prompts  # noqa: E402
from tuner.calibration.measure import WARMUP_PROMPT, measure_request  # noqa: E402
from tuner.calibration.pairing import pooled_tokens_per_s  # noqa: E402
from tuner.calibration.prompts import Prompt, default_prompts  # noqa: E402
from tuner.calibration.sampling import GREEDY, Sampling  # noqa: E402
from tuner.calibration.serving import profile_server_config  # noqa: E402
from tuner.calibration.tune import tune  # noqa: E402
from tuner.calibration.workload import Workload  # noqa: E402
from tuner.profiles import ProfileStore  # noqa: E402
from tuner.server.argv import build_argv  # noqa: E402
from tuner.server.config import ServerConfig  # noqa: E402
from tuner.server.dialect import probe_dialect  # noqa: E402
from tuner.server.discovery import find_server  # noqa: E402
from tuner.server.supervisor import Supervisor  # noqa: E402

ALONE = "model alone"
HAND = ("llama.cpp draft defaults", "seed guide", "--spec-default")


def configs(served: ServerConfig, target: Path, draft: Path, n_ctx: int, threads: int | None) -> dict[str, ServerConfig]:
    """The five configurations, each with the same ``-c``, ``-np 1`` and thread setting: ``threads`` when given,
    else the one the tune served (its ``-t`` and ``OMP_WAIT_POLICY``; the speculation is what is compared here)."""
    mine = threads is None
    t, passive, poll = (served.threads, served.omp_passive, served.poll) if mine else (threads, False, None)
    base = ServerConfig(target, n_ctx=n_ctx, n_parallel=1, threads=t, omp_passive=passive, poll=poll)
    return {
        ALONE: base,
        "Draftwise": replace(served, n_ctx=n_ctx, n_parallel=1, port=None, threads=t, omp_passive=passive, poll=poll),
        HAND[0]: replace(base, draft_path=draft, spec_type="draft-simple"),
        HAND[1]: replace(base, draft_path=draft, spec_type="draft-simple", n_max=5, p_min=0.75),
        HAND[2]: replace(base, extra_args=("--spec-default",)),
    }


def measure(sup: Supervisor, cfg: ServerConfig, prompts: list[tuple[int, Prompt]], reps: list[int], n_predict: int,
            workload: Workload) -> list:
    """One launch of ``cfg``: started, warmed up, every prompt of every repetition measured, stopped."""
    sup.start(cfg)
    try:
        sup.wait_ready()
        client = sup.client(timeout_s=300.0)
        measure_request(client, 0, Prompt(WARMUP_PROMPT), -1, 16, 300.0, greedy=True)
        return [measure_request(client, idx, p, rep, n_predict, 300.0, workload=workload)
                for rep in reps for idx, p in prompts]
    finally:
        sup.stop()


def rounds(cfgs: dict[str, ServerConfig], sup: Supervisor, prompts, n_predict: int, workload: Workload,
           n_rounds: int, reps_per_round: int) -> list[dict[str, float]]:
    """Rotated rounds: per round each configuration's tokens/s ÷ the model alone's on the same requests."""
    names = list(cfgs)
    out = []
    for r in range(n_rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        reps = [100 + r * reps_per_round + i for i in range(reps_per_round)]
        samples = {}
        for name in order:
            samples[name] = measure(sup, cfgs[name], prompts, reps, n_predict, workload)
            tps = pooled_tokens_per_s(samples[name]) or 0.0
            print(f"[round {r + 1}] {name:<26} {tps:8.1f} tok/s", file=sys.stderr, flush=True)
        alone = pooled_tokens_per_s(samples[ALONE]) or float("nan")
        out.append({name: (pooled_tokens_per_s(s) or 0.0) / alone for name, s in samples.items()})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="llama-server binary (default: discovered)")
    ap.add_argument("--budget", type=float, default=300.0, help="the tune's budget (s)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=None, help="server threads of every launch (default: llama's)")
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=5, help="prompts of the built-in set")
    ap.add_argument("--reps", type=int, default=2, help="repetitions per configuration and round")
    ap.add_argument("--greedy", action="store_true", help="temperature 0 instead of llama-server's defaults")
    ap.add_argument("--busy", action="store_true", help="tune and rounds under the bounded CPU burner")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    load0 = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dw-vs-hand-"))
    os.environ["DRAFTWISE_HOME"] = str(work / "home")
    burner = Burner(total_s=3600.0, seed=7).start() if args.busy else None
    try:
        fam = make_family(work / "models")
        binary = find_server(args.server)
        dialect = probe_dialect(binary.path)
        sampling = GREEDY if args.greedy else Sampling()
        prompts = select_prompts(default_prompts(), args.prompts)
        t0 = time.monotonic()
        res = tune(work / "models", target=str(fam.target), budget_s=args.budget, force=True, server=binary.path,
                   store=ProfileStore(work / "profiles"), n_ctx=args.n_ctx, threads=args.threads, sampling=sampling,
                   long_context=False, max_prompts=args.prompts,
                   on_event=lambda ev: print(f"  tune {ev.elapsed_s:6.1f}s {ev.kind}: {ev.message}", file=sys.stderr)
                   if ev.kind != "progress" else None)
        tune_s = time.monotonic() - t0
        if res.profile is None or res.decision is None:
            print("the tune saved no profile", file=sys.stderr)
            return 1
        cfgs = configs(profile_server_config(res.profile), fam.target.resolve(), fam.good_draft.resolve(), args.n_ctx,
                       args.threads)
        for name, cfg in cfgs.items():
            shown = build_argv(binary.path, replace(cfg, port=0), dialect)[1:]
            print(f"{name}: {' '.join(shown)}", file=sys.stderr)
        sup = Supervisor(binary, dialect)
        per_round = rounds(cfgs, sup, prompts, args.n_predict, Workload(sampling=sampling, n_ctx=args.n_ctx),
                           args.rounds, args.reps)
    finally:
        if burner is not None:
            burner.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary = {name: statistics.median(r[name] for r in per_round) for name in per_round[0]}
    best_hand = max(HAND, key=lambda n: summary[n])
    share = summary["Draftwise"] / summary[best_hand] if summary[best_hand] else float("nan")
    load1 = os.getloadavg()
    print(f"\nDraftwise served: {res.decision.winner.label} (tune {tune_s:.0f} s on a {args.budget:.0f} s budget, "
          f"{'greedy' if args.greedy else 'llama-server default sampling'})")
    for r, ratios in enumerate(per_round):
        print(f"round {r + 1}: " + ", ".join(f"{n} {x:.2f}x" for n, x in ratios.items() if n != ALONE))
    print("median over the rounds (each a ratio to the model alone in the same round): "
          + ", ".join(f"{n} {x:.2f}x" for n, x in summary.items() if n != ALONE))
    print(f"Draftwise / best hand configuration ({best_hand}): {share:.3f} (goal >= 0.95)")
    print(f"load average at the start {load0[0]:.1f}, at the end {load1[0]:.1f} ({os.cpu_count()} CPUs)"
          + (", under the burner" if args.busy else ""))
    ok = share >= 0.95
    if args.json:
        print(json.dumps({"served": res.decision.winner.label, "tune_s": tune_s, "budget_s": args.budget,
                          "rounds": per_round, "median": summary, "best_hand": best_hand, "share": share,
                          "greedy": args.greedy, "busy": args.busy, "load_average_start": load0,
                          "load_average_end": load1, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
