"""A chained candidate on the real llama-server, compared in adjacent pairs with the best single one
(issue 14: "a chained candidate runs and is compared; the decision picks it only when it measured
faster beyond noise").

    python -m bench.chain_decision [--server PATH] [--pairs 4] [--n-predict 64] [--threads 1]
                                   [--n-embd 768] [--n-layers 12]

Generates the acceptance-dial family (default 768 wide, 12 blocks, ε 0.02: the good draft shares the first 2
blocks) and runs, per pair j, three launches through the sweep's own launch path:
``draft-simple`` (rep j), the baseline (rep j), ``ngram-mod,draft-simple`` (rep j), all ``confirm``
stage, so each candidate repetition is adjacent to the baseline repetition with the same requests
(tuner/calibration/pairing.py). The prompts mix copying (where the n-gram part drafts) with free text
(where the draft model does). Prints every pair ratio, both comparisons, the chain ÷ single contrast
(sequential.contrast, the decision's rule) and the decision sentence. Exit status 0 when the chain ran, was compared over
the adjacent pairs, and the decision served it only if the contrast said "faster".
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, family, launch_fn, note_machine, private_home, server_binary
from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import MIN_GAIN, decide
from tuner.calibration.measure import measure_candidate
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.prompts import Prompt
from tuner.calibration.sequential import contrast
from tuner.calibration.workload import Workload
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

_LIST = "apples, bananas, cherries, dates, elderberries, figs, grapes, honeydew melons, kiwis, lemons"
PROMPTS = [
    (0, Prompt(f"Shopping list: {_LIST}.\nThe same list, copied: {_LIST[:30]}", "copy")),
    (1, Prompt("Once upon a time, in a small village by the sea, there lived", "creative")),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=64)
    add_threads_arg(ap)
    ap.add_argument("--n-embd", type=int, default=768, help="width of the generated target (smoke runs: 64)")
    ap.add_argument("--n-layers", type=int, default=12, help="blocks of the generated target")
    args = ap.parse_args(argv)

    note_machine("before")
    work = Path(tempfile.mkdtemp(prefix="dw-chain-"))
    private_home(work)
    fam = family(work / "models", n_embd=args.n_embd, n_layers=args.n_layers, draft_layers=2, eps=0.02, dtype="f16")
    binary = server_binary(args)
    dialect = probe_dialect(binary.path)
    draft = str(fam.good_draft.resolve())
    single = Candidate(spec_type="draft-simple", draft_path=draft, n_max=4, p_min=0.0)
    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path=draft, n_max=4, p_min=0.0)
    if not dialect.supports_spec_type(chain.spec_type):
        print(f"{binary.path} cannot run {chain.spec_type}", file=sys.stderr)
        return 2
    wl = Workload(raw_endpoint=dialect.draft_counts_endpoint)
    sup = Supervisor(binary, dialect)
    fn = launch_fn(sup, fam.target.resolve(), n_ctx=1024, threads=args.threads, startup_timeout_s=120.0)
    cancel = threading.Event()
    ms = []
    t0 = time.monotonic()
    try:
        for j in range(args.pairs):
            for c in (single, Candidate(), chain):
                m = measure_candidate(fn, c, PROMPTS, [j], args.n_predict, cancel, stage="confirm", workload=wl)
                ms.append(m)
                acc = f", acceptance {m.acceptance:.2f}" if m.acceptance is not None else ""
                print(f"  pair {j + 1} {c.label}: {m.gen_tokens_per_s or 0:.1f} tokens/s{acc}"
                      + (f" ERROR {m.error}" if m.error else ""), file=sys.stderr, flush=True)
    finally:
        sup.stop()
    took = time.monotonic() - t0
    d = decide(SearchOutcome.of(ms))
    by = {c.candidate.key: c for c in d.comparisons}
    cs, cc = by.get(single.key), by.get(chain.key)
    print(f"\n{binary.path} ({dialect.spec_style}), {args.pairs} pairs each, {took:.0f} s")
    for name, c in (("single", cs), ("chain", cc)):
        if c is None:
            print(f"{name}: not compared")
            continue
        ratios = ", ".join(f"{p.ratio:.2f}" for p in c.pairs)
        verdict = c.look.verdict if c.look else "-"
        print(f"{name} {c.candidate.label}: {c.speedup or 0:.2f}x over {len(c.pairs)} pairs [{ratios}], "
              f"acceptance {c.acceptance or 0:.2f}, vs baseline: {verdict}")
    look = None
    if cs is not None and cc is not None and cs.look is not None and cc.look is not None:
        look = contrast(cc.look, cs.look, MIN_GAIN)
        print(f"chain / single: {look.mean_ratio or 0:.2f}x, interval {look.low or 0:.2f}-{look.high or 0:.2f}x, "
              f"{look.verdict}")
    print(f"decision: {d.reason}")
    ok = cc is not None and cc.paired and len(cc.pairs) >= min(3, args.pairs)
    if d.winner.key == chain.key and cs is not None and cs.look is not None and cs.look.verdict == "faster":
        ok = ok and look is not None and look.verdict == "faster"
    note_machine("after")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
