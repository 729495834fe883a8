"""A budget that holds on a slow target (issue 10): a generated target at ≤ 10 tokens/s on this CPU
and its good 2-block draft, ``tune --budget 240``.

    python -m bench.slow_target [--server PATH] [--budget 240] [--n-embd 2048] [--n-layers 16]
                                [--eps 0.02] [--threads N] [--busy]

1. Generates the acceptance-dial family (default 2048 wide, 16 blocks, F16: a ~1.6 GB target; its
   first 2 blocks are the good draft) in a temp folder (deleted afterwards unless ``--keep``).
2. Runs ``tune(..., sampling=GREEDY)`` on it with ``--budget`` seconds (3 prompts, ``n_predict`` 128 asked: the tuner
   plans fewer and shorter requests from the first warm-up) and prints every event.
3. Prints the warm-up speed, the planned protocol, the wall time from the first launch to the decision
   against the budget, and the decision (which must pick the draft and state the pairs it rests on).
   ``--busy``: the same under the bounded CPU burner of tests/burner.py; ``--burn-after S``: the burner
   starts S seconds into the sweep instead, so the launches from then on run slower than the warm-up planned
   (with ``--threads 2`` on 2 cores, many times slower: the recording of tests/data/overrun_sweep_events.json).

Goal: the sweep ends within 115 % of the budget (276 s for 240) with a paired decision for the draft.
Exit status 0 when that holds. CPU-heavy: one run takes about the budget plus the generation (~1 min).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, family, note_machine, private_home, server_binary
from tests.burner import Burner
from tuner.calibration.pairing import MIN_PAIRS
from tuner.calibration.prompts import Prompt, make_prompt_set
from tuner.calibration.sampling import GREEDY
from tuner.calibration.tune import tune
from tuner.profiles import ProfileStore

PROMPTS = [
    Prompt("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "code"),
    Prompt("Once upon a time, in a small village by the sea, there lived", "creative"),
    Prompt("Question: what is 17 times 23? Answer step by step.", "math"),
]


def _pct(ev) -> str:
    return "" if ev.progress is None else f"{100 * ev.progress:3.0f}%"


_DETAIL = ("load_s", "n_predict", "prompts", "pairs", "busy", "warmup_gen_tokens_per_s", "planned_s", "verdict")
"""The event details a recording keeps (plain figures: no candidates, no curves)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    ap.add_argument("--budget", type=float, default=240.0)
    ap.add_argument("--n-embd", type=int, default=2048)
    ap.add_argument("--n-layers", type=int, default=16)
    ap.add_argument("--eps", type=float, default=0.02)
    add_threads_arg(ap)
    ap.add_argument("--busy", action="store_true", help="run the sweep under the bounded CPU burner")
    ap.add_argument("--burn-after", type=float, default=None, metavar="S",
                    help="start the bounded CPU burner S seconds into the sweep (launches overrun their estimates)")
    ap.add_argument("--keep", action="store_true", help="keep the generated models")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--record", type=Path, help="write the sweep's event stream (kind, message, progress, "
                    "elapsed_s, eta_s per event) to this JSON file: the recording tests/ui replays")
    args = ap.parse_args(argv)

    binary = server_binary(args)
    note_machine("before")
    work = Path(tempfile.mkdtemp(prefix="dw-slow-target-"))
    private_home(work)
    try:
        t_gen = time.monotonic()
        fam = family(work / "models", n_embd=args.n_embd, n_layers=args.n_layers, draft_layers=2, eps=args.eps,
                     dtype="f16")
        (work / "models" / fam.unrelated_draft.name).unlink()  # the target and its good draft only
        size_gb = fam.target.stat().st_size / 1e9
        print(f"generated a {args.n_embd}-wide, {args.n_layers}-block F16 target ({size_gb:.2f} GB) in "
              f"{time.monotonic() - t_gen:.0f} s", file=sys.stderr)
        events = []

        def on_event(ev) -> None:
            events.append(ev)
            if ev.kind != "progress":
                eta = f" (ETA {ev.eta_s:.0f} s)" if ev.eta_s else ""
                print(f"  {ev.elapsed_s:6.1f}s {_pct(ev):>4} {ev.kind}: {ev.message}{eta}",
                      file=sys.stderr, flush=True)

        burner = Burner(total_s=args.budget * 1.5 + 60, seed=3).start() if args.busy else None
        late: list[Burner] = []
        timer = None
        if args.burn_after is not None:
            timer = threading.Timer(args.burn_after, lambda: late.append(Burner(total_s=args.budget * 1.5 + 60,
                                                                                  seed=3).start()))
            timer.start()
        try:
            res = tune(work / "models", sampling=GREEDY, long_context=False, prompts=make_prompt_set(PROMPTS, source="bench"), budget_s=args.budget,
                       force=True, server=binary.path, store=ProfileStore(work / "profiles"), n_predict=128,
                       n_ctx=1024, threads=args.threads, on_event=on_event)
        finally:
            if timer is not None:
                timer.cancel()
            for b in ([burner] if burner is not None else []) + late:
                b.stop()
        first_launch = next((e.elapsed_s for e in events if e.kind == "launch"), 0.0)
        decision_at = next((e.elapsed_s for e in events if e.kind == "decision"), res.elapsed_s)
        sweep_s = decision_at - first_launch
        plan = next((e.detail for e in events if e.kind == "budget"), {})
        d = res.decision
        picks_draft = d is not None and d.winner.draft_path == str(fam.good_draft.resolve())
        ok = picks_draft and d.pairs >= MIN_PAIRS and sweep_s <= 1.15 * args.budget and "adjacent pair" in d.reason
        print(f"\nwarm-up speed {plan.get('warmup_gen_tokens_per_s', float('nan')):.1f} tokens/s, load "
              f"{plan.get('load_s', float('nan')):.1f} s; planned {plan.get('prompts')} prompts x "
              f"{plan.get('n_predict')} tokens per repetition")
        print(f"sweep (first launch to decision): {sweep_s:.0f} s on a {args.budget:.0f} s budget "
              f"({sweep_s / args.budget:.2f}x; goal <= 1.15x){' under the burner' if args.busy else ''}")
        print(f"decision: {d.reason if d else 'none'}")
        print("OK" if ok else "NOT OK")
        note_machine("after")
        if args.record is not None:
            from tuner.storage import atomic_write_json

            atomic_write_json(args.record, {
                "source": "bench/slow_target.py " + " ".join(sys.argv[1:] if argv is None else argv),
                "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load_average_1m": os.getloadavg()[0], "sweep_s": sweep_s, "budget_s": args.budget,
                "warmup_gen_tokens_per_s": plan.get("warmup_gen_tokens_per_s"),
                "decision": d.reason if d else None,
                "events": [{"kind": e.kind, "message": e.message, "progress": e.progress, "elapsed_s": e.elapsed_s,
                            "eta_s": e.eta_s, "candidate": e.candidate.label if e.candidate is not None else None,
                            "detail": {k: v for k, v in (e.detail or {}).items() if k in _DETAIL}}
                           for e in events],
            })
            print(f"recorded {len(events)} events to {args.record}", file=sys.stderr)
        if args.json:
            print(json.dumps({"sweep_s": sweep_s, "budget_s": args.budget, "warmup_tps": plan.get(
                "warmup_gen_tokens_per_s"), "plan": plan, "picks_draft": picks_draft,
                "pairs": d.pairs if d else 0, "speedup": d.speedup if d else None, "ok": ok}))
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
