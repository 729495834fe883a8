"""Does the fastest draft length depend on how long the answers are? The quality family measured at the request
lengths a small tune budget plans (36–48 tokens: the protocol shortens requests to fit) and at the full length.

    python -m bench.request_length [--server PATH] [--rounds 4] [--lengths 48 96] [--n-max 4 5 6 7 8 10]
                                   [--threads N (default: the CPU count)]

Generates the family of ``bench/tune_quality.py`` (768 wide, 12 blocks, ε 0.05, F16; the good draft shares its first
2 blocks) and measures, in ``--rounds`` interleaved rounds of two repetitions each, the model alone, the good draft at
each ``--n-max`` (``p_min`` 0) and the chain ngram-mod + good draft ``n_max`` 4, at every ``--lengths`` value in each
round, through the sweep's own launch path, greedy, on the same 3 prompts as ``bench/tune_quality.py``. Prints, per
length, each configuration's pooled tokens/s, its speedup over the model alone and its share of that length's best.

Why (issue 28's quality row at ``--budget-share 0.12``): the tuner there plans 3 prompts × 36–48 tokens while the grid
and the referee measure 96, and it served a draft length that was fastest on its own requests but not on the
referee's. Exit status 0 when every launch measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
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
from bench.tune_quality import PROMPTS
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import measure_repetitions
from tuner.calibration.prompts import make_prompt_set
from tuner.calibration.results import Measurement
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor


def _candidates(good: str, lengths: list[int]) -> list[Candidate]:
    """The model alone, the good draft at each length, and the chain ngram-mod + good draft n_max 4."""
    return [Candidate(), *(Candidate(spec_type="draft-simple", draft_path=good, n_max=k, p_min=0.0) for k in lengths),
            Candidate(spec_type="ngram-mod,draft-simple", draft_path=good, n_max=4, p_min=0.0)]


def _table(n: int, cands: list[Candidate], pooled: dict[tuple[int, str], Measurement]) -> None:
    rows = [(c.label, pooled[(n, c.label)]) for c in cands]
    base = rows[0][1].gen_tokens_per_s or 0.0
    best = max(m.gen_tokens_per_s or 0.0 for _, m in rows)
    print(f"n_predict {n}: model alone {base:.1f} tokens/s")
    for label, m in rows:
        tps = m.gen_tokens_per_s or 0.0
        acc = f"{100 * m.acceptance:.0f} %" if m.acceptance is not None else "-"
        ratio = f"{tps / base:5.2f}x" if base else "    -"
        print(f"  {label:<48} {tps:7.1f} tok/s  {ratio}  {tps / best if best else 0:5.3f} of best  acc {acc}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    add_threads_arg(ap, os.cpu_count() or 1)  # what the quality bench's idle runs use
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (two repetitions each)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[48, 96], help="n_predict values")
    ap.add_argument("--n-max", type=int, nargs="+", default=[4, 5, 6, 7, 8, 10], help="draft lengths")
    args = ap.parse_args(argv)
    binary = server_binary(args)
    note_machine("before")
    work = Path(tempfile.mkdtemp(prefix="dw-request-length-"))
    private_home(work)
    fam = family(work / "models", n_embd=768, n_layers=12, draft_layers=2, eps=0.05, dtype="f16")
    chosen = select_prompts(make_prompt_set(PROMPTS[:3], source="bench"), None)
    cands = _candidates(str(fam.good_draft.resolve()), args.n_max)
    sup = Supervisor(binary, probe_dialect(binary.path))
    launch = launch_fn(sup, fam.target.resolve(), n_ctx=1024, threads=args.threads)
    pooled: dict[tuple[int, str], Measurement] = {}
    cancel = threading.Event()
    try:
        for r in range(args.rounds):
            for n in args.lengths:
                for c in cands:
                    m = measure_repetitions(launch, c, chosen, [10 + 2 * r, 11 + 2 * r], n, cancel, stage="referee")
                    key = (n, c.label)
                    pooled[key] = pooled[key].merged(m) if key in pooled else m
            print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    finally:
        sup.stop()
    for n in args.lengths:
        _table(n, cands, pooled)
    note_machine("after")
    return 0 if all(m.ok for m in pooled.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
