"""Bench: the generated demo pair shows speculation: a draft clearly faster than the model alone at the
default sampling, measured side by side and found by ``draftwise tune``.

    PYTHONPATH=. python bench/demo_family.py [--runs 3] [--budget 300] [--pairs 12] [--n-predict 128]
                                             [--n-max 8] [--skip-tune] [--skip-side-by-side]
                                             [--eps E --output-scale S --embd-std D --draft-layers K --n-layers L]
                                             [--json]

1. Writes the demo folder (tuner/catalog/demo.py: the bundled stories260K and the generated target + draft,
   ``--eps`` etc. override the recipe while its numbers are being chosen) into a temporary folder.
2. Side by side: two llama-servers at once on the same target, the model alone and the target with the
   generated draft (``draft-simple``, ``--n-max``), take the same requests in turn (the built-in prompt set,
   ``--pairs`` requests, each with its own seed, no sampling field sent: llama-server's defaults, temperature
   0.8, top_k 40, top_p 0.95, min_p 0.05). Both share the page cache of the weights; only one computes at a
   time. Prints each pair's ratio of generation speeds (the servers' own ``timings``), their median, and the
   draft's acceptance.
3. ``draftwise tune --models DIR --force --json`` at the default sampling and ``--budget`` (300 s, the
   default), ``--runs`` times, each in a fresh DRAFTWISE_HOME: the decision, its speedup and the wall time.

Goal (issue 26 item 4): every tune run picks the generated draft with a speedup of at least 1.3x, and the
side-by-side median is at least 1.3x. Exit status 0 when both hold. The load average is printed before and
after each step: on a shared machine the figures are noisy (ratios more than absolute speeds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.synth import raw_llama_server  # noqa: E402
from tuner.calibration.prompts import default_prompts  # noqa: E402
from tuner.catalog import demo  # noqa: E402
from tuner.process import pids_listening_on, tree_usage  # noqa: E402
from tuner.server.discovery import find_server  # noqa: E402

GOAL = 1.3


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.1f} {b:.1f} {c:.1f} ({os.cpu_count()} CPUs)"


def _recipe(args: argparse.Namespace) -> demo.DemoRecipe:
    r = demo.DEMO_RECIPE
    changes = {k: v for k, v in (("eps", args.eps), ("output_scale", args.output_scale), ("embd_std", args.embd_std),
                                 ("draft_layers", args.draft_layers), ("n_layers", args.n_layers)) if v is not None}
    return replace(r, **changes) if changes else r


def _cpu_s(pid: int | None) -> float:
    usage = tree_usage(pid) if pid else None
    return usage[1] if usage else float("nan")


def _pid(client) -> int | None:
    pids = pids_listening_on(client.base_url.port)
    return pids[0] if pids else None


def side_by_side(binary: Path, folder: Path, pairs: int, n_predict: int, n_max: int) -> dict:
    """The model alone and the target + draft, two servers at once, the same requests in turn.

    Returns ``{"ratios": [...], "median": x, "cpu_ratios": [...], "cpu_median": y, "acceptance": a,
    "alone_tps": [...], "draft_tps": [...]}``: ``ratios`` from the servers' generation speeds (wall clock),
    ``cpu_ratios`` from the CPU seconds each server used per generated token (steadier on a busy machine:
    another program's load stretches the wall clock more than the work).
    """
    target, draft = folder / demo.TARGET_FILE, folder / demo.DRAFT_FILE
    common = ["-m", target, "-c", "2048", "-np", "1"]
    spec = ["-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max)]
    prompts = [p.text for p in default_prompts().prompts]
    ratios, cpu_ratios, alone_tps, draft_tps, drafted, accepted = [], [], [], [], 0, 0
    with raw_llama_server(binary, common, ready_timeout_s=600, client_timeout_s=600) as alone, \
            raw_llama_server(binary, common + spec, ready_timeout_s=600, client_timeout_s=600) as spec_client:
        for c in (alone, spec_client):  # warm-up (first-request costs stay out of the pairs)
            c.post("/completion", json={"prompt": "Hello", "n_predict": 8}).raise_for_status()
        pid = {alone: _pid(alone), spec_client: _pid(spec_client)}
        for i in range(pairs):
            body = {"prompt": f"Request {i}. {prompts[i % len(prompts)]}", "n_predict": n_predict, "seed": 1000 + i,
                    "cache_prompt": False}
            order = (alone, spec_client) if i % 2 == 0 else (spec_client, alone)  # alternate who goes first
            timings, cpu_per_token = {}, {}
            for c in order:
                cpu0 = _cpu_s(pid[c])
                r = c.post("/completion", json=body)
                r.raise_for_status()
                timings[c] = r.json()["timings"]
                cpu_per_token[c] = (_cpu_s(pid[c]) - cpu0) / max(timings[c]["predicted_n"], 1)
            a, s = timings[alone], timings[spec_client]
            cpu_ratios.append(cpu_per_token[alone] / cpu_per_token[spec_client])
            alone_tps.append(a["predicted_per_second"])
            draft_tps.append(s["predicted_per_second"])
            ratios.append(s["predicted_per_second"] / a["predicted_per_second"])
            drafted += s.get("draft_n", 0)
            accepted += s.get("draft_n_accepted", 0)
            print(f"  pair {i + 1:2d}: alone {alone_tps[-1]:6.1f} tok/s, with the draft {draft_tps[-1]:6.1f} tok/s, "
                  f"{ratios[-1]:.2f}x (CPU time per token {cpu_ratios[-1]:.2f}x), "
                  f"accepted {s.get('draft_n_accepted', 0)}/{s.get('draft_n', 0)}",
                  file=sys.stderr, flush=True)
    return {"ratios": ratios, "median": statistics.median(ratios), "cpu_ratios": cpu_ratios,
            "cpu_median": statistics.median(cpu_ratios), "acceptance": accepted / drafted if drafted else None,
            "alone_tps": alone_tps, "draft_tps": draft_tps}


def tune_once(folder: Path, home: Path, budget: float, server: Path) -> dict:
    """``draftwise tune --models folder --force --json`` in a subprocess with ``DRAFTWISE_HOME=home``;
    returns ``{"decision": ..., "wall_s": s, "rc": status}``."""
    env = dict(os.environ, DRAFTWISE_HOME=str(home), PYTHONPATH=str(REPO))
    t0 = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(folder), "--force", "--json",
                         "--budget", f"{budget:g}", "--server", str(server)],
                        env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    try:
        decision = json.loads(cp.stdout)["decision"]
    except (json.JSONDecodeError, KeyError):
        decision = None
    if cp.returncode or decision is None:
        print(cp.stderr[-3000:], file=sys.stderr)
    return {"decision": decision, "wall_s": wall, "rc": cp.returncode}


def _picked_draft(decision: dict | None) -> bool:
    return bool(decision and decision.get("draft") and Path(decision["draft"]).name == demo.DRAFT_FILE
                and (decision.get("speedup") or 0) >= GOAL)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="tune runs (the goal: every one picks the draft)")
    ap.add_argument("--budget", type=float, default=300.0, help="each tune's budget in seconds")
    ap.add_argument("--pairs", type=int, default=12, help="side-by-side request pairs")
    ap.add_argument("--n-predict", type=int, default=128, help="tokens per side-by-side request")
    ap.add_argument("--n-max", type=int, default=8, help="draft length of the side-by-side draft server")
    ap.add_argument("--skip-tune", action="store_true")
    ap.add_argument("--skip-side-by-side", action="store_true")
    for flag in ("--eps", "--output-scale", "--embd-std"):
        ap.add_argument(flag, type=float, default=None, help="override the demo recipe's value")
    for flag in ("--draft-layers", "--n-layers"):
        ap.add_argument(flag, type=int, default=None, help="override the demo recipe's value")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object too")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    binary = find_server(None).path
    work = Path(tempfile.mkdtemp(prefix="dw-demo-family-"))
    recipe = _recipe(args)
    print(f"recipe: {recipe.tag}; llama-server {binary}; {_load()}", flush=True)
    t0 = time.monotonic()
    folder = demo.write_demo_folder(work / "demo", recipe).folder
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.gguf")}
    print(f"demo folder written in {time.monotonic() - t0:.1f} s: "
          + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(sizes.items())), flush=True)
    out: dict = {"recipe": recipe.tag, "sizes": sizes, "load_start": os.getloadavg()}
    ok = True
    if not args.skip_side_by_side:
        sbs = side_by_side(binary, folder, args.pairs, args.n_predict, args.n_max)
        acc = f"{100 * sbs['acceptance']:.0f} %" if sbs["acceptance"] is not None else "no drafts"
        print(f"side by side (n_max {args.n_max}, default sampling, {args.pairs} pairs of {args.n_predict} tokens): "
              f"median {sbs['median']:.2f}x (pairs {min(sbs['ratios']):.2f}-{max(sbs['ratios']):.2f}x; CPU time per "
              f"token {sbs['cpu_median']:.2f}x), "
              f"alone {statistics.median(sbs['alone_tps']):.1f} tok/s, acceptance {acc}; {_load()}", flush=True)
        out["side_by_side"] = sbs
        ok = ok and sbs["median"] >= GOAL
    runs = []
    for i in range(0 if args.skip_tune else args.runs):
        r = tune_once(folder, work / f"home-{i}", args.budget, binary)
        d = r["decision"] or {}
        print(f"tune run {i + 1}/{args.runs}: {d.get('spec_type')} draft {Path(d['draft']).name if d.get('draft') else '-'} "
              f"n_max {d.get('n_max')}, speedup {d.get('speedup') or 0:.2f}x "
              f"(interval {d.get('speedup_ci_low') or 0:.2f}-{d.get('speedup_ci_high') or 0:.2f}), "
              f"wall {r['wall_s']:.0f} s of a {args.budget:g} s budget; {_load()}\n  reason: {d.get('reason')}",
              flush=True)
        runs.append(r)
        ok = ok and _picked_draft(r["decision"])
    out.update(tune_runs=runs, load_end=os.getloadavg(), ok=ok)
    print(f"goal (every tune picks the draft at >= {GOAL}x, side-by-side median >= {GOAL}x): "
          f"{'met' if ok else 'NOT met'}")
    if args.json:
        print(json.dumps(out, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
