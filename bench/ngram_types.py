"""Do the n-gram types left out of the default plan ever beat ``ngram-mod`` / ``ngram-simple``? (issue 14)

Measures, side by side in one run and on one real model (Gemma 3 270M Q4_K_M by default), the
generation speed and acceptance of every n-gram speculation type of llama-server b11434 —
``ngram-simple``, ``ngram-mod`` (the default plan's two), ``ngram-map-k``, ``ngram-map-k4v`` and
``ngram-cache`` — against no speculation, on prompts where n-gram lookups should shine:

- ``code-edit``: a ~60-line Python file, then "the same file with one name changed", started, so the
  model copies the file back (the edit-a-long-file workload);
- ``repeated-list``: a numbered list written twice, then started a third time.

Each type gets its own fresh server (n-gram pools live in the server across requests), the same
prompts, greedy decoding and a fixed ``n_predict``. Prints one table and a JSON line with
tokens/s, the ratio to the baseline measured in the same run, and the acceptance
(``draft_n_accepted / draft_n`` from the answers' ``timings``).

Usage::

    python -m bench.ngram_types                      # gemma 3 270M, 2 repetitions, n_predict 160
    python -m bench.ngram_types --model X.gguf --repetitions 3 --threads 2 [--server PATH]

Timing on a shared CPU is noisy: compare ratios within one run, repeat the run, and treat
differences under ~10 % as noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, gemma_model, note_machine, server_binary
from tuner.calibration.candidates import Candidate
from tuner.calibration.serving import candidate_config
from tuner.server.client import ServerClient
from tuner.server.supervisor import Supervisor

TYPES = ("none", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache")

_CODE = "\n".join(
    [
        "import json",
        "from dataclasses import dataclass",
        "",
        "",
        "@dataclass",
        "class Order:",
        "    order_id: int",
        "    customer: str",
        "    items: list[str]",
        "    total_cents: int",
        "",
        "",
    ]
    + [
        line
        for i in range(8)
        for line in (
            f"def handle_step_{i}(order: Order, ledger: dict) -> dict:",
            f"    \"\"\"Step {i} of the order pipeline: record the order and return the ledger.\"\"\"",
            f"    key = f\"{{order.customer}}-{{order.order_id}}-{i}\"",
            "    ledger[key] = {\"items\": list(order.items), \"total\": order.total_cents}",
            f"    if order.total_cents > {1000 * (i + 1)}:",
            "        ledger[key][\"review\"] = True",
            "    return ledger",
            "",
        )
    ]
)
_LIST = "\n".join(f"{i}. Check the {w} before the release and write down what you found."
                  for i, w in enumerate(["logs", "tests", "metrics", "alerts", "backups", "docs", "configs",
                                         "certificates", "dashboards", "budgets"], 1))

PROMPTS = {
    "code-edit": f"{_CODE}\n\n# The same file again, with `ledger` renamed to `book`:\n\n" + "\n".join(
        _CODE.splitlines()[:14]).replace("ledger", "book") + "\n",
    "repeated-list": f"Release checklist:\n{_LIST}\n\nRelease checklist (copy):\n{_LIST}\n\n"
                     "Release checklist (second copy):\n1. Check the",
}


def run_type(sup: Supervisor, model: Path, spec: str, n_predict: int, reps: int, threads: int) -> dict:
    """One fresh server per repetition for ``spec``; returns tokens/s per repetition and the counts."""
    rates, drafted, accepted = [], 0, 0
    speculative = None
    for _ in range(reps):
        cfg = candidate_config(Candidate(spec_type=spec), model, n_ctx=4096, threads=threads)
        url = sup.start_and_wait(cfg)
        try:
            client = ServerClient(url, timeout_s=600)
            speculative = bool(client.slots()[0].get("speculative")) if spec != "none" else False
            n_tok, ms = 0, 0.0
            for text in PROMPTS.values():
                body = client.completion(text, n_predict, timeout_s=600, temperature=0, cache_prompt=False,
                                         ignore_eos=True)
                t = body["timings"]
                n_tok += t["predicted_n"]
                ms += t["predicted_ms"]
                drafted += t.get("draft_n", 0)
                accepted += t.get("draft_n_accepted", 0)
            rates.append(n_tok / (ms / 1000.0))
        finally:
            sup.stop()
    return {"type": spec, "tok_s": rates, "draft_n": drafted, "accepted": accepted, "speculative": speculative}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF to measure (default: Gemma 3 270M Q4_K_M)")
    add_server_arg(ap)
    ap.add_argument("--repetitions", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=160)
    add_threads_arg(ap, 2)
    args = ap.parse_args(argv)
    model = args.model or gemma_model()
    sup = Supervisor(server_binary(args))
    note_machine("before")
    t0 = time.monotonic()
    rows = []
    for t in TYPES:
        rows.append(run_type(sup, model, t, args.n_predict, args.repetitions, args.threads))
        r = rows[-1]
        print(f"  measured {t}: tok/s {', '.join(f'{x:.1f}' for x in r['tok_s'])}, draft_n {r['draft_n']}, "
              f"accepted {r['accepted']}, /slots speculative {r['speculative']}", flush=True)
    base = statistics.median(rows[0]["tok_s"])
    print(f"model {model.name}, n_predict {args.n_predict} x {len(PROMPTS)} prompts, "
          f"{args.repetitions} launches per type, {time.monotonic() - t0:.0f} s")
    print(f"{'type':14s} {'tok/s (median)':>15s} {'x baseline':>10s} {'acceptance':>10s}  per launch")
    for r in rows:
        med = statistics.median(r["tok_s"])
        r["ratio"] = med / base if base else None
        r["acceptance"] = r["accepted"] / r["draft_n"] if r["draft_n"] else None
        acc = f"{r['acceptance']:.2f}" if r["acceptance"] is not None else "-"
        print(f"{r['type']:14s} {med:15.1f} {r['ratio']:10.2f} {acc:>10s}  "
              + ", ".join(f"{x:.1f}" for x in r["tok_s"]))
    best_default = max(statistics.median(r["tok_s"]) for r in rows if r["type"] in ("ngram-mod", "ngram-simple"))
    others = {r["type"]: statistics.median(r["tok_s"]) / best_default for r in rows
              if r["type"] in ("ngram-map-k", "ngram-map-k4v", "ngram-cache")}
    print("left-out types vs the better of ngram-mod/ngram-simple: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in others.items()))
    print(json.dumps({"model": model.name, "rows": rows, "left_out_vs_default_best": others}))
    note_machine("after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
