"""Tuner quality: exhaustive grid vs the tuner on a generated family, side by side in one run.

    python -m bench.tune_quality [--server PATH] [--n-predict 96] [--prompts 3] [--reps 2]
                                 [--budget-share 0.20 | --budget S] [--threads N] [--eps 0.05] [--busy]

1. Generates the DESIGN.md acceptance-dial family (768 wide, 12 blocks F16 target, a good 2-block draft,
   an unrelated 2-block draft; ε = ``--eps``, default 0.05) in a temp folder.
2. Exhaustive grid: the baseline, every n-gram type, and each draft with ``draft-simple`` at every
   draft length 1–16, each measured with the tuner's own protocol (one launch, warm-up, greedy,
   fixed n_predict, ``--reps`` repetitions).
3. The tuner: ``tune(...)`` on the same folder, prompts and n_predict, with a budget of ``--budget-share``
   (0.20) × the grid's wall time (``--budget S``: a fixed budget instead). On a busy machine the grid itself
   runs longer, so the budget follows the machine. (0.30 until issue 25: the pair-level test needed three
   pairs before any verdict; the request-level one decides on two consistent pairs.)
4. Referee: one grid pass on a shared CPU is noisy (a single lucky launch can top it), so the grid's
   top 3 and the tuner's pick are measured again, interleaved, ``--referee-rounds`` times (not counted
   in either wall time).
5. Prints the grid table, the tuner's pick, ``pick/best`` (the pick's throughput ÷ the best throughput,
   both from the single grid pass and from the referee) and ``wall-time ratio`` (tuner ÷ grid).

``--busy`` (issue 10): the grid and the tuner both run under the bounded CPU burner of tests/burner.py
(one core busy in random 2–10 s bursts, stopping by itself); the referee runs without it.

``--with-curve`` (issue 28: "with the verify-cost curve"): before the grid, with no burner, one tune of
``--curve-budget`` seconds (150; when it measured none, once more at twice that) on the same folder, prompts and
profile store measures the draft's verify-cost curve, as a first tune on this machine would; the timed tune then reuses it from the saved profile (the curve is
measured once per binary, target, draft, placement and threads) and its budget pays no launch for it. The lines
``curve:`` and ``curve reused by the timed tune:`` say whether that happened (a different thread setting in the timed
tune is another key: then it is not reused, and the run says so). Without ``--threads`` it fixes the thread count for
the grid and both tunes — the CPU count idle, 1 with ``--busy`` — because the thread stage's choice differs between a
150 s and a 30 s tune (at 30 s it measures no setting), so the curve measured at one would never be reused by the
other; and beside the burner a server on every core collapses (OpenMP's spin-wait: 187 and 38 tokens/s for the same
model alone minutes apart, issue 25), while one thread leaves the burner a core.

Goal (issues 5, 10 and 25): pick/best ≥ 0.95 (referee; issue 25 asks ``--referee-rounds 4``) at the default
``--budget-share 0.20``, idle and ``--busy``; the wall-time ratio stays ≤ 0.35.
Exit status 0 when both hold.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import (
    add_server_arg,
    add_threads_arg,
    family,
    launch_fn,
    note_machine,
    private_home,
    select_prompts,
    server_binary,
)
from tests.burner import Burner
from tuner.calibration.candidates import SWEEP_NGRAM_TYPES, Candidate
from tuner.calibration.measure import measure_repetitions
from tuner.calibration.prompts import Prompt, PromptSet, make_prompt_set
from tuner.calibration.request import TuneEvent
from tuner.calibration.sampling import GREEDY
from tuner.calibration.tune import tune
from tuner.calibration.verifycost import curves_in
from tuner.profiles import ProfileStore
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

PROMPTS = [
    Prompt("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "code"),
    Prompt("Once upon a time, in a small village by the sea, there lived", "creative"),
    Prompt("Question: what is 17 times 23? Answer step by step.", "math"),
    Prompt("Translate to French: The weather is nice today and we are going to the park.", "translation"),
]



def round_ratios_words(by_round: list[dict[tuple, float]], pick: tuple, best: tuple) -> str:
    """How far the referee's pick/best ratio can be trusted: the ratio within each round (the pick's launch and
    the referee's best one's, minutes apart at most), their geometric mean and a 90 % t interval on it (rounds as
    independent draws; at 4 rounds t = 2.353). One line; "-" parts where fewer than two rounds have both."""
    ratios = [r[pick] / r[best] for r in by_round if r.get(pick) and r.get(best)]
    if len(ratios) < 2:
        return "referee per round: fewer than two rounds with both the pick and the best"
    logs = [math.log(x) for x in ratios]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    t90 = {2: 6.314, 3: 2.920, 4: 2.353, 5: 2.132, 6: 2.015, 7: 1.943, 8: 1.895}.get(len(logs), 1.833)
    half = t90 * sd / math.sqrt(len(logs))
    return (f"referee per round (pick/best in the same round): {' '.join(f'{x:.3f}' for x in ratios)}; geometric "
            f"mean {math.exp(mean):.3f}, 90 % interval {math.exp(mean - half):.3f}-{math.exp(mean + half):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    ap.add_argument("--n-predict", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=3, help="prompts used (of 4)")
    ap.add_argument("--reps", type=int, default=2, help="grid repetitions per candidate")
    ap.add_argument("--budget", type=float, default=None, help="tuner budget (s); default: --budget-share × grid time")
    ap.add_argument("--budget-share", type=float, default=0.20, help="tuner budget as a share of the grid's time")
    ap.add_argument("--n-ctx", type=int, default=1024)
    add_threads_arg(ap, None)
    ap.add_argument("--eps", type=float, default=0.05, help="acceptance dial of the generated family")
    ap.add_argument("--n-embd", type=int, default=768, help="width of the generated target (smoke runs: 128)")
    ap.add_argument("--n-layers", type=int, default=12, help="blocks of the generated target")
    ap.add_argument("--referee-rounds", type=int, default=2, help="interleaved re-measurement rounds")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object too")
    ap.add_argument("--busy", action="store_true", help="grid and tuner under the bounded CPU burner")
    ap.add_argument("--busy-max-s", type=float, default=3600.0, help="the burner's hard time limit")
    ap.add_argument("--with-curve", action="store_true", help="measure the verify-cost curve in an untimed tune first")
    ap.add_argument("--curve-budget", type=float, default=150.0, help="that tune's budget (s)")
    args = ap.parse_args(argv)

    binary = server_binary(args)
    if args.with_curve and args.threads is None:
        args.threads = 1 if args.busy else os.cpu_count() or 1
        print(f"threads: {args.threads} for the grid and both tunes (--with-curve: the curve is kept per thread "
              "setting" + ("; one thread leaves the burner a core" if args.busy else "") + ")", flush=True)
    note_machine("before")
    load0 = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="dw-tune-quality-"))
    private_home(work)
    fam = family(work / "models", n_embd=args.n_embd, n_layers=args.n_layers, draft_layers=2, eps=args.eps,
                 dtype="f16")
    ps = make_prompt_set(PROMPTS[: args.prompts], source="bench")
    chosen = select_prompts(ps, None)
    dialect = probe_dialect(binary.path)
    target = fam.target.resolve()

    # Exhaustive grid.
    grid = [Candidate()] + [Candidate(spec_type=t) for t in SWEEP_NGRAM_TYPES if t in dialect.spec_types]
    for d in (fam.good_draft, fam.unrelated_draft):
        grid += [Candidate(spec_type="draft-simple", draft_path=str(d.resolve()), n_max=k, p_min=0.0)
                 for k in range(1, 17)]
    cancel = threading.Event()
    store = ProfileStore(work / "profiles")
    if args.with_curve:
        measure_curve_first(args, work / "models", ps, binary.path, store, fam.target)
    burner = Burner(total_s=args.busy_max_s, seed=5).start() if args.busy else None
    if burner is not None:
        import atexit

        atexit.register(burner.stop)  # also on an error: never outlives this run (nor busy_max_s)
    sup = Supervisor(binary, dialect)
    launch = launch_fn(sup, target, n_ctx=args.n_ctx, threads=args.threads)
    results: dict[tuple, float | None] = {}
    base_out: dict = {}
    t0 = time.monotonic()
    try:
        for i, c in enumerate(grid):
            m = measure_repetitions(launch, c, chosen, list(range(args.reps)), args.n_predict, cancel,
                                  baseline_outputs=base_out if not c.is_baseline else None, stage="grid")
            if c.is_baseline:
                base_out.update({(s.prompt_index, s.repetition): s.content for s in m.samples if s.content})
            results[c.key] = m.gen_tokens_per_s if m.ok else None
            acc = f"{100 * m.acceptance:.0f} %" if m.acceptance is not None else "-"
            print(f"[grid {i + 1:2d}/{len(grid)}] {c.label:<44} {m.gen_tokens_per_s or 0:8.1f} tok/s  acc {acc}"
                  + (f"  FAILED: {m.error}" if not m.ok else ""), file=sys.stderr, flush=True)
    finally:
        sup.stop()
    grid_s = time.monotonic() - t0
    best_key = max((k for k in results if results[k]), key=lambda k: results[k])  # type: ignore[arg-type,return-value]
    best_tps = results[best_key]
    base_tps = results[Candidate().key]

    # The tuner.
    budget = args.budget if args.budget is not None else round(args.budget_share * grid_s)
    print(f"tuner budget: {budget:.0f} s" + ("" if args.budget is not None else
          f" ({args.budget_share:.2f} x the grid's {grid_s:.0f} s)"), file=sys.stderr, flush=True)
    t1 = time.monotonic()
    reused: list[bool] = []

    def on_event(ev: TuneEvent) -> None:
        if ev.kind == "verify_cost" and "reused" in ev.detail:
            reused.append(bool(ev.detail["reused"]))
        if ev.kind != "progress":
            print(f"  tune {ev.elapsed_s:6.1f}s {ev.kind}: {ev.message}", file=sys.stderr)

    res = tune(work / "models", prompts=ps, budget_s=budget, force=True, server=binary.path, store=store,
               n_predict=args.n_predict, n_ctx=args.n_ctx, threads=args.threads,
               sampling=GREEDY, long_context=False,  # the same workload as the grid's (greedy, short prompts)
               on_event=on_event)
    tune_s = time.monotonic() - t1
    if args.with_curve:
        print(f"curve reused by the timed tune: {'yes' if any(reused) else 'no'}"
              + ("" if reused else " (no verify-cost event: the stage did not run)"))
    if burner is not None:
        burner.stop()  # the referee measures without it
    pick = res.decision.winner if res.decision else Candidate()
    pick_grid = pick
    if pick.spec_type == "draft-simple":
        pick_grid = Candidate(spec_type="draft-simple", draft_path=pick.draft_path, n_max=pick.n_max, p_min=0.0)
    pick_tps = results.get(pick_grid.key)
    ratio = (pick_tps / best_tps) if (pick_tps and best_tps) else None
    time_ratio = tune_s / grid_s
    best_label = next(c.label for c in grid if c.key == best_key)

    # Referee: on a shared machine one grid pass is noisy (a single lucky launch can top the grid), so
    # the grid's top 3 and the pick are measured again, interleaved, in --referee-rounds rounds; the
    # pooled medians give a second, steadier pick/best ratio. Not counted in either wall time.
    ranked = sorted((c for c in grid if results.get(c.key)), key=lambda c: -results[c.key])  # type: ignore[operator]
    finalists = ranked[:3] + ([pick_grid] if pick_grid.key not in {c.key for c in ranked[:3]} else [])
    pooled: dict[tuple, object] = {}
    by_round: list[dict[tuple, float]] = []
    sup = Supervisor(binary, dialect)
    launch = launch_fn(sup, target, n_ctx=args.n_ctx, threads=args.threads)
    try:
        for r in range(args.referee_rounds):
            by_round.append({})
            for c in finalists:
                reps = [10 + 2 * r, 11 + 2 * r]
                m = measure_repetitions(launch, c, chosen, reps, args.n_predict, cancel, stage="referee")
                pooled[c.key] = pooled[c.key].merged(m) if c.key in pooled else m  # type: ignore[attr-defined]
                if m.ok and m.gen_tokens_per_s:
                    by_round[-1][c.key] = m.gen_tokens_per_s
    finally:
        sup.stop()
    ref = {k: m.gen_tokens_per_s for k, m in pooled.items() if m.ok}  # type: ignore[attr-defined]
    for c in finalists:
        print(f"[referee] {c.label:<44} {ref.get(c.key) or 0:8.1f} tok/s", file=sys.stderr)
    ref_best_key = max(ref, key=lambda k: ref[k]) if ref else None
    ref_ratio = (ref[pick_grid.key] / ref[ref_best_key]) if (ref_best_key and ref.get(pick_grid.key)) else None
    print(f"\ngrid: {len(grid)} candidates in {grid_s:.0f} s; best {best_label} at {best_tps:.1f} tok/s "
          f"(baseline {base_tps:.1f} tok/s, {best_tps / base_tps:.2f}x)")
    print(f"tuner: {len(res.measurements)} launches in {tune_s:.0f} s (budget {budget:.0f} s); pick {pick.label} "
          f"(tuner measured {res.decision.gen_tokens_per_s:.1f} tok/s, grid measured "
          f"{pick_tps if pick_tps is not None else float('nan'):.1f} tok/s)")
    print(f"pick/best throughput ratio (single grid pass): {ratio if ratio is not None else float('nan'):.3f}")
    ref_best_label = next((c.label for c in finalists if c.key == ref_best_key), "-")
    print(f"pick/best throughput ratio (referee, {args.referee_rounds} interleaved rounds of the grid's top 3 "
          f"and the pick; best {ref_best_label}): {ref_ratio if ref_ratio is not None else float('nan'):.3f}")
    if ref_best_key is not None:
        print(round_ratios_words(by_round, pick_grid.key, ref_best_key))
    print(f"wall-time ratio (tuner/grid): {time_ratio:.3f}" + (" (grid and tuner under the burner)" if args.busy else ""))
    print(f"decision: {res.decision.reason if res.decision else '-'}")
    load1 = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the start {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}, at the end "
          f"{load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} ({os.cpu_count()} CPUs)")
    ok = ref_ratio is not None and ref_ratio >= 0.95 and time_ratio <= 0.35
    note_machine("after")
    if args.json:
        print(json.dumps({"grid_s": grid_s, "tune_s": tune_s, "budget_s": budget, "best": best_label, "best_tps": best_tps,
                          "baseline_tps": base_tps, "pick": pick.label, "pick_grid_tps": pick_tps,
                          "pick_best_ratio": ratio, "referee_pick_best_ratio": ref_ratio,
                          "referee_best": ref_best_label, "wall_time_ratio": time_ratio, "busy": args.busy,
                          "referee_rounds_pick_best": [r[pick_grid.key] / r[ref_best_key] for r in by_round
                                                       if ref_best_key and r.get(pick_grid.key) and r.get(ref_best_key)],
                          "load_average_start": load0, "load_average_end": load1,
                          "ok": ok}))
    return 0 if ok else 1


def measure_curve_first(args: argparse.Namespace, models: Path, ps: PromptSet, server: Path, store: ProfileStore,
                        target: Path) -> None:
    """``--with-curve``: one untimed tune of ``args.curve_budget`` seconds that measures the verify-cost curve and
    saves it with the target's profile in ``store``; when it measured none (the verify-cost stage gets at most
    ``tuner.calibration.search.verify.SHARE`` of a tune's budget: on a slow target that can be too short for two
    lengths), once more at twice the budget. Prints one ``curve:`` line per tune (its points, or that none was
    measured).

    Why the second try: on a 1-thread target at 55 tokens/s (an AMX CPU, repacked kernels off) a 150 s tune left
    the stage 18 s where two lengths take about 26 s, and every ``--busy`` run went without the curve the quality
    row asks for."""
    for budget in (args.curve_budget, 2 * args.curve_budget):
        t = time.monotonic()
        tune(models, prompts=ps, budget_s=budget, force=True, server=server, store=store,
             n_predict=args.n_predict, n_ctx=args.n_ctx, threads=args.threads, sampling=GREEDY, long_context=False,
             on_event=lambda ev: print(f"  curve tune {ev.elapsed_s:6.1f}s {ev.kind}: {ev.message}", file=sys.stderr)
             if ev.kind in ("verify_cost", "skipped") else None)
        saved = store.load(target)
        curves, _problems = curves_in(saved.decision) if saved is not None else ((), [])
        words = "; ".join(", ".join(f"{c:.2f} (k {x:.1f})" for x, c in cv.points) for cv in curves)
        print(f"curve: {words or 'none measured'} (untimed tune of {budget:.0f} s, {time.monotonic() - t:.0f} s)",
              flush=True)
        if words:
            return

if __name__ == "__main__":
    sys.exit(main())
