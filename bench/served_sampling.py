"""Bench: what speculation gives at the sampling the server is really served with, side by side in one run.

On a generated acceptance-dial family (tests/synth.py ``make_family``), for greedy requests and for
sampled ones (default: llama-server's own defaults, temperature 0.8, top_k 40, top_p 0.95, min_p 0.05), it
measures in interleaved rounds (baseline, then each configuration, one launch each, the same requests
with a seed fixed per (prompt, repetition)):

* the target alone (baseline);
* the good draft with greedy drafts (llama-server's default ``--spec-draft-sampling greedy``);
* the good draft with ``--spec-draft-sampling probabilistic`` (rejection sampling at temperature > 0);
* ``ngram-mod``.

It prints acceptance and the speedup over the baseline launch of the same round (paired: the same
requests, launches seconds apart). Figures are noisy on a shared CPU: read the per-round ratios.

    python -m bench.served_sampling [--n-embd 768 --layers 12 --rounds 2 --n-predict 64] [--server PATH]
                                    [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, family, launch_fn, note_machine, server_binary
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import measure_candidate
from tuner.calibration.prompts import Prompt
from tuner.calibration.sampling import GREEDY, Sampling
from tuner.calibration.workload import SweepMemory, Workload
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

PROMPTS = [
    (0, Prompt("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "code")),
    (1, Prompt("Once upon a time, in a small village by the sea, there lived", "creative")),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--eps", type=float, default=0.02)
    ap.add_argument("--n-max", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=64)
    add_server_arg(ap)
    add_threads_arg(ap)
    ap.add_argument("--temperature", type=float, default=None, help="default: none sent (server's 0.8)")
    args = ap.parse_args(argv)

    binary = server_binary(args)
    note_machine("before")
    dialect = probe_dialect(binary.path)
    work = Path(tempfile.mkdtemp(prefix="dw-sampling-"))
    fam = family(work, n_embd=args.n_embd, n_layers=args.layers, draft_layers=2, eps=args.eps,
                 dtype="f16" if args.n_embd >= 256 else "f32")
    draft = str(fam.good_draft)
    configs = [
        ("draft, greedy drafts", Candidate(spec_type="draft-simple", draft_path=draft, n_max=args.n_max, p_min=0.0)),
        ("ngram-mod", Candidate(spec_type="ngram-mod")),
    ]
    if dialect.has("--spec-draft-sampling"):
        configs.insert(1, ("draft, probabilistic drafts",
                           Candidate(spec_type="draft-simple", draft_path=draft, n_max=args.n_max, p_min=0.0,
                                     draft_sampling="probabilistic")))
    sup = Supervisor(binary, dialect)
    print(f"llama-server {binary.build}; family {args.n_embd} wide, {args.layers} blocks, eps {args.eps}; "
          f"{len(PROMPTS)} prompts x {args.n_predict} tokens; n_max {args.n_max}; {args.rounds} rounds")
    try:
        for name, sampling in (("greedy", GREEDY), ("sampled", Sampling(temperature=args.temperature))):
            wl = Workload(sampling=sampling, n_ctx=1024, greedy_check_prompts=0)
            memory = SweepMemory()  # the server's own sampling defaults, read by the first launch
            launch = launch_fn(sup, fam.target, n_ctx=1024, threads=args.threads, startup_timeout_s=120.0)
            ratios: dict[str, list[float]] = {label: [] for label, _ in configs}
            accept: dict[str, list[float]] = {label: [] for label, _ in configs}
            base_tps: list[float] = []
            for r in range(args.rounds):
                base = measure_candidate(launch, Candidate(), PROMPTS, [r], args.n_predict, threading.Event(),
                                         workload=wl, memory=memory)
                if not base.ok:
                    print(f"baseline failed: {base.error}")
                    return 1
                base_tps.append(base.gen_tokens_per_s)
                for label, c in configs:
                    m = measure_candidate(launch, c, PROMPTS, [r], args.n_predict, threading.Event(), workload=wl,
                                          memory=memory)
                    if m.ok and m.gen_tokens_per_s:
                        ratios[label].append(m.gen_tokens_per_s / base.gen_tokens_per_s)
                    if m.acceptance is not None:
                        accept[label].append(m.acceptance)
                    if not m.ok:
                        print(f"  round {r + 1} {label}: {m.error}")
            print(f"\n{name}: {wl.sampling.describe(memory.server_sampling or None)}; baseline "
                  f"{statistics.median(base_tps):.1f} tokens/s (median of {len(base_tps)})")
            for label, _ in configs:
                rs = ratios[label]
                acc = f"{100 * statistics.fmean(accept[label]):.0f} %" if accept[label] else "no drafts"
                per = ", ".join(f"{x:.2f}x" for x in rs) or "-"
                med = f"{statistics.median(rs):.2f}x" if rs else "- (never drafted)"
                print(f"  {label:<30} acceptance {acc:>9}   speedup {med} (rounds: {per})")
    finally:
        sup.stop()
    note_machine("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
