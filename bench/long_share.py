"""Bench: the pick over the served mix of short and long-context requests (``--long-share``), on real
measurements taken side by side in one run.

On a generated acceptance-dial family (tests/synth.py ``make_family``) and the real llama-server, greedy
requests, it measures interleaved paired launches — the target alone, then a candidate, on the same
requests (two short prompts and the two built-in long-context requests sized to half the context) — for
the good draft at ``n_max`` 4 and for ``ngram-mod`` (which feeds on the repeated text of a long
context). Then it decides over those recorded pairs at several long-context shares
(:class:`tuner.calibration.pairing.Mix`) and prints, per share, each candidate's short, long-context and
mix speedups and the pick. Figures are noisy on a shared CPU: several rounds, read the spread.

    python -m bench.long_share [--n-embd 256 --layers 8 --rounds 3 --n-predict 48 --ctx 1024] [--server PATH]
                               [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, family, launch_fn, note_machine, server_binary
from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.measure import measure_candidate
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pairing import Mix, compare
from tuner.calibration.prompts import Prompt
from tuner.calibration.results import Measurement
from tuner.calibration.sampling import GREEDY
from tuner.calibration.workload import Workload, long_context_prompts
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

SHORT = [Prompt("Once upon a time, there was a little girl named Lily. She", "creative"),
         Prompt("Write a short poem about the sea and the wind.", "chat")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=48)
    ap.add_argument("--ctx", type=int, default=1024)
    add_server_arg(ap)
    add_threads_arg(ap)
    args = ap.parse_args(argv)

    note_machine("before")
    binary = server_binary(args)
    dialect = probe_dialect(binary.path)
    with tempfile.TemporaryDirectory() as tmp:
        fam = family(Path(tmp), n_embd=args.n_embd, n_layers=args.layers, draft_layers=2, eps=0.02, dtype="f16")
        prompts = list(enumerate([*SHORT, *long_context_prompts()]))
        wl = Workload(chat=False, sampling=GREEDY, n_ctx=args.ctx)
        sup = Supervisor(binary, dialect)
        fn = launch_fn(sup, fam.target, n_ctx=args.ctx, threads=args.threads, startup_timeout_s=120.0)
        draft = Candidate(spec_type="draft-simple", draft_path=str(fam.good_draft), n_max=4, p_min=0.0)
        ngram = Candidate(spec_type="ngram-mod")
        cancel = threading.Event()
        ms: list[Measurement] = []
        try:
            for r in range(args.rounds):
                for k, c in enumerate((draft, ngram)):
                    rep = 10 * r + k  # each candidate repetition next to the baseline launch with the same id
                    for cand in (Candidate(), c):
                        m = measure_candidate(fn, cand, prompts, [rep], args.n_predict, cancel, stage="confirm",
                                              workload=wl)
                        if not m.ok:
                            print(f"{cand.label} failed: {m.error}")
                            return 1
                        ms.append(m)
                        print(f"round {r + 1}: {cand.label}: {m.gen_tokens_per_s:.1f} tokens/s"
                              + (f", acceptance {100 * m.acceptance:.0f} %" if m.acceptance is not None else ""),
                              flush=True)
        finally:
            sup.stop(grace_s=5.0)
        longs = [s.prompt_n for m in ms[:1] for s in m.samples if s.prompt_index >= len(SHORT)]
        print(f"\nlong-context prompt tokens: {longs} (context {args.ctx})")
        print("share | " + " | ".join(f"{c.label}: short / long / mix" for c in (draft, ngram))
              + " | fastest over the mix | pick (sequential test at 5 %)")
        for share in (None, 0.0, 0.25, 0.5, 0.75, 1.0):
            mix = Mix.of(prompts, share)
            row = []
            best = (0.0, "")
            for c in (draft, ngram):
                cmp_ = compare(ms, c, 0.03, mix=mix)
                assert cmp_ is not None
                best = max(best, (cmp_.speedup or 0.0, c.label))
                row.append(f"{cmp_.short_speedup or 0:.2f}× / {cmp_.long_speedup or 0:.2f}× / {cmp_.speedup or 0:.2f}×"
                           f" ({len(cmp_.pairs)} pairs)")
            d = decide(SearchOutcome.of(ms, mix=mix))
            label = "the set's own" if share is None else f"{100 * share:.0f} %"
            print(f"{label} | " + " | ".join(row) + f" | {best[1]} | {d.winner.label}")
    note_machine("after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
