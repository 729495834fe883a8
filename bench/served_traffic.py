"""Re-tune on what was served (issue 28's "Done when" row on the real Gemma 3 270M Q4_K_M).

    python -m bench.served_traffic [--server PATH] [--budget 300] [--threads 1] [--n-predict 96]

1. Tune on the built-in prompts (greedy, no long-context requests): profile A (on this model usually "no
   speculation": the built-in prompts do not repeat themselves).
2. Serve profile A with capture on (``--log-prompts-dir``, the private folder of ``tuner.server.capture``) and
   send 30 requests of the kind a code-editing assistant sends: "rewrite this code with X renamed to Y", whose
   answers repeat their prompt (two short functions or classes each, about 150 tokens, longer than
   ``--n-predict``; Gemma 3 270M is a base model: raw completions that start the rewrite).
3. Re-tune on the captured requests (``prompts_from_served``, as ``tune --prompts-from-served``): profile B.
   It must speculate with an n-gram type.
4. Serve A and B side by side (both started, requests sent one at a time, the order alternating per pair) on 10
   further requests of the same kind: B must be ≥ 1.25× as fast as A in generation tokens/s pooled over the
   ten pairs (Σ tokens ÷ Σ generation seconds, ``timings`` of each answer: the tune's own measure). The
   wall time of the requests (prompt processing included) is printed beside it.

Exit status 0 when both hold. The machine's load and busiest other processes are printed before and after.
The captured prompts never reach the output: counts and figures only.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import (
    add_server_arg,
    add_threads_arg,
    code_copy_prompt,
    gemma_model,
    note_machine,
    private_home,
    server_binary,
)

NAMES = ["total", "count", "index", "value", "result", "buffer", "offset", "weight", "price", "score", "limit",
         "cursor", "length", "factor", "amount", "record", "target", "status", "window", "signal"]
"""Identifiers the generated snippets rename (each request renames one to another)."""

SERVED_REQUESTS = 30
MEASURED_PAIRS = 10
MIN_SPEEDUP = 1.25
N_CTX = 2048

_TEMPLATES = [
    "def {f}(items, {a}):\n    {b} = 0\n    for item in items:\n        {b} += item.{c} * {a}\n"
    "        if {b} > 1000:\n            break\n    return {b}\n",
    "def {f}(rows):\n    {a} = []\n    for row in rows:\n        {b} = row.get(\"{c}\", 0)\n"
    "        if {b}:\n            {a}.append({b})\n    return sum({a}) / max(1, len({a}))\n",
    "class {F}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n        self.{b} = 0\n\n"
    "    def step(self, {c}):\n        self.{b} += {c} * self.{a}\n        return self.{b}\n",
]


def rename_request(i: int) -> tuple[str, str]:
    """The ``i``-th request: ``(prompt, expected answer)``. The prompt asks to rewrite a snippet with one
    identifier renamed and starts the answer, as a base model needs; the answer repeats the snippet."""
    names = NAMES[i % len(NAMES):] + NAMES[:i % len(NAMES)]
    a, b, c, new = names[0], names[1], names[2], names[7]
    code = ""
    for k in range(2):  # two snippets: the answer that copies them is longer than --n-predict
        f = f"{names[3 + k]}_{names[5 + k]}_{i}"
        code += _TEMPLATES[(i + k) % len(_TEMPLATES)].format(f=f, F=f.title().replace("_", ""), a=a, b=b, c=c)
        code += "\n"
    renamed = code.replace(a, new)
    first = renamed.split("\n", 1)[0]
    prompt = code_copy_prompt(code, label="Code", answer_label="Rewritten code", answer_start=f"{first}\n",
                              task=f"Rewrite this code with `{a}` renamed to `{new}`. Keep everything else the same.\n\n")
    return prompt, renamed


def _tune(models: Path, binary: Any, store: Any, args: argparse.Namespace, **fields: Any):
    from tuner.calibration.sampling import GREEDY
    from tuner.calibration.tune import tune

    def on_event(ev) -> None:
        if ev.kind != "progress":
            print(f"  {ev.elapsed_s:6.1f}s {ev.kind}: {ev.message}", file=sys.stderr, flush=True)

    return tune(models, sampling=GREEDY, long_context=False, budget_s=args.budget, force=True, server=binary.path,
                store=store, n_predict=args.n_predict, n_ctx=N_CTX, threads=args.threads, on_event=on_event, **fields)


def _serve_with_capture(config: Any, binary: Any, model_id: str, n_predict: int) -> int:
    """Serve ``config`` with capture on and send the first :data:`SERVED_REQUESTS` requests; returns how many
    captured requests the reader then finds."""
    from tuner.server import capture
    from tuner.server.supervisor import Supervisor

    folder = capture.log_prompts_dir(model_id)
    sup = Supervisor(binary.path)
    try:
        sup.start_and_wait(replace(config, alias=model_id, log_prompts_dir=folder), timeout_s=120)
        with sup.client() as client:
            for i in range(SERVED_REQUESTS):
                prompt, _ = rename_request(i)
                client.completion(prompt, n_predict, timeout_s=300, temperature=0.0)
    finally:
        sup.stop()
    time.sleep(capture.MIN_AGE_S + 0.2)
    return len(capture.captured_requests(model_id))


def _side_by_side(configs: dict[str, Any], binary: Any, n_predict: int) -> dict[str, dict[str, float]]:
    """Both configurations served at once; :data:`MEASURED_PAIRS` further requests, each sent to both (the order
    alternating); per side: generated tokens, generation seconds, wall seconds."""
    from tuner.calibration.pairing import generated_tokens_and_s
    from tuner.server.supervisor import Supervisor

    sups = {name: Supervisor(binary.path) for name in configs}
    totals = {name: {"tokens": 0.0, "gen_s": 0.0, "wall_s": 0.0} for name in configs}
    try:
        for name, sup in sups.items():
            sup.start_and_wait(replace(configs[name], log_prompts_dir=None), timeout_s=120)
        order = list(configs)
        for k in range(MEASURED_PAIRS):
            prompt, _ = rename_request(SERVED_REQUESTS + k)
            for name in (order if k % 2 == 0 else order[::-1]):
                with sups[name].client() as client:
                    t0 = time.monotonic()
                    answer = client.completion(prompt, n_predict, timeout_s=300, temperature=0.0,
                                               cache_prompt=False)
                    wall = time.monotonic() - t0
                t = answer.get("timings") or {}
                tokens, secs = generated_tokens_and_s(t.get("predicted_n"), t.get("predicted_ms")) or (0.0, 0.0)
                totals[name]["tokens"] += tokens
                totals[name]["gen_s"] += secs
                totals[name]["wall_s"] += wall
    finally:
        for sup in sups.values():
            sup.stop()
    return totals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    from tuner.calibration.request import DEFAULT_BUDGET_S

    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help=f"each tune's time budget, seconds (default: the app's and tune's, {DEFAULT_BUDGET_S:.0f})")
    add_threads_arg(ap)
    ap.add_argument("--n-predict", type=int, default=96, help="tokens per request (tunes and served requests)")
    args = ap.parse_args(argv)

    from tuner.calibration.serving import profile_server_config
    from tuner.profiles import ProfileStore
    from tuner.server.config import default_alias

    model = gemma_model()
    assert model is not None
    work = Path(tempfile.mkdtemp(prefix="dw-served-traffic-"))
    private_home(work)
    models = work / "models"
    models.mkdir()
    (models / model.name).symlink_to(model)
    binary = server_binary(args)
    store = ProfileStore(work / "profiles")
    model_id = default_alias(model)
    note_machine("before")
    t0 = time.monotonic()

    print("1. tune on the built-in prompts", file=sys.stderr)
    a = _tune(models, binary, store, args)
    assert a.profile is not None and a.decision is not None
    print("2. serve it with capture on, 30 rename requests", file=sys.stderr)
    captured = _serve_with_capture(profile_server_config(a.profile), binary, model_id, args.n_predict)
    print("3. re-tune on the captured requests", file=sys.stderr)
    b = _tune(models, binary, store, args, prompts_from_served=True, served_model_id=model_id)
    assert b.profile is not None and b.decision is not None
    print("4. side by side on 10 further requests", file=sys.stderr)
    totals = _side_by_side({"built-in": profile_server_config(a.profile), "served": profile_server_config(b.profile)},
                           binary, args.n_predict)
    took = time.monotonic() - t0
    note_machine("after")

    tps = {k: v["tokens"] / max(v["gen_s"], 1e-9) for k, v in totals.items()}
    speedup = tps["served"] / tps["built-in"]
    wall = totals["built-in"]["wall_s"] / max(totals["served"]["wall_s"], 1e-9)
    ngram = b.decision.winner.spec_type.startswith("ngram")
    print(f"\nwhole run: {took:.0f} s; captured requests read back: {captured}")
    print(f"built-in prompts: {a.decision.reason}")
    print(f"served requests:  {b.decision.reason}")
    print(f"side by side, {MEASURED_PAIRS} pairs: built-in profile ({a.decision.winner.label}) {tps['built-in']:.1f} "
          f"tokens/s, served profile ({b.decision.winner.label}) {tps['served']:.1f} tokens/s: {speedup:.2f}x "
          f"(wall time of the requests {wall:.2f}x)")
    ok = ngram and speedup >= MIN_SPEEDUP
    print("OK" if ok else f"NOT OK (n-gram winner: {ngram}; speedup {speedup:.2f} vs {MIN_SPEEDUP})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
