"""Memory-plan accuracy: our estimate next to the buffer sizes llama-server itself reports at load.

Loads (CPU build, ``-lv 4``, ``--fit off``, ``-np 1``) and compares with
``tuner.hardware.memory.plan_memory``:

- synthetic: stories260K alone and a generated ~170 MB target (``tests.synth.make_family``: 768 wide,
  12 blocks, F16) with its 2-block draft (``--spec-type draft-simple``) at n_ctx 512 / 4096 / 16384;
- real (issue 12): Gemma 3 270M Q4_K_M (262,144-token vocabulary, sliding-window attention) alone and
  with a draft made of its first 6 blocks (``tests.synth.write_first_blocks_gguf``) at n_ctx 4096 /
  8192 / 32768 (``--gemma PATH``; default the test-model cache; skipped when absent).

It parses the ``model buffer size``, ``KV buffer size``, ``compute buffer size`` and ``output buffer
size`` lines (src/llama-model.cpp, llama-kv-cache.cpp, llama-context.cpp). Goals: weights, KV and
compute each within 10 % (compute: or 8 MiB), totals within 10 % for the real model; totals within 1 %
(parts within 10 %) for the synthetic ones. Exit status 1 when a goal is missed.

    python -m bench.memory_accuracy [--server PATH] [--threads 2] [--keep DIR] [--gemma PATH] [--only synth|gemma]
                                    [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.common import (
    add_server_arg,
    add_threads_arg,
    family,
    gemma_model,
    note_machine,
    server_binary,
    stories_model,
)
from tests.synth import server_load_log
from tuner.crosscheck.cpu_buffers import probe_cpu_buffers
from tuner.hardware.buffers import parse_load_buffers
from tuner.hardware.devices import Devices
from tuner.hardware.host import cpu_features
from tuner.hardware.memory import MIB, MemoryRequest, load_model_spec, plan_memory

# which weights the build copies into an extra CPU buffer (AMX / CPU_REPACK) here: main() reads it from the
# build (tuner.crosscheck.cpu_buffers); until then the guess from this host's CPU flags
CPU_ONLY = Devices((), None, None, None, cpu_features=cpu_features())


def server_buffers(server: Path, target: Path, draft: Path | None, n_ctx: int, threads: int = 2,
                   timeout_s: float = 300) -> dict:
    """Start llama-server, read its load-time buffer lines, stop it. Returns MiB per (model, kind)."""
    argv = [str(server), "-m", str(target), "-c", str(n_ctx), "-np", "1", "-lv", "4", "--fit", "off",
            "--host", "127.0.0.1", "--port", "0", "-t", str(threads), "--no-warmup"]
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
    """Our plan (CPU-only) in MiB per (model, kind); the draft's compute/output = the full plan's minus
    the target-alone plan's."""
    from dataclasses import replace

    t = load_model_spec(target)
    d = load_model_spec(draft) if draft else None
    req = MemoryRequest(target=t, draft=d, spec_type="draft-simple" if d else "none", n_ctx=n_ctx, n_parallel=1)
    plan = plan_memory(req, CPU_ONLY)
    alone = plan_memory(replace(req, draft=None), CPU_ONLY).host.need
    h = plan.host.need
    res = {"target": {"model": h.target_weights_bytes / MIB, "KV": h.target_kv_bytes / MIB,
                      "compute": alone.compute_bytes / MIB}}
    res["draft"] = {"model": h.draft_weights_bytes / MIB, "KV": h.draft_kv_bytes / MIB,
                    "compute": (h.compute_bytes - alone.compute_bytes) / MIB} if d else {}
    res["compute"] = h.compute_bytes / MIB
    res["output"] = h.output_bytes / MIB
    res["total"] = plan.total_bytes / MIB
    return res


def compare(name: str, server: Path, target: Path, draft: Path | None, n_ctx: int, total_goal: float,
            threads: int = 2) -> dict:
    """One row set: measured vs estimated, with the relative errors and the goals."""
    meas = server_buffers(server, target, draft, n_ctx, threads)
    est = estimate(target, draft, n_ctx)
    rows = []

    def row(what: str, m: float, e: float, goal: float | None, slack_mib: float = 0.0) -> None:
        err = (e - m) / m if m >= 0.01 else None
        ok = goal is None or (err is not None and abs(err) <= goal) or abs(e - m) <= slack_mib
        rows.append({"what": what, "measured_mib": round(m, 3), "estimate_mib": round(e, 3),
                     "error": err, "goal": goal, "slack_mib": slack_mib, "ok": ok})

    row("target weights", meas["target"].get("model", 0.0), est["target"]["model"], 0.10)
    row("target KV", meas["target"].get("kv", 0.0), est["target"]["KV"], 0.10)
    row("target compute", meas["target"].get("compute", 0.0), est["target"]["compute"], 0.10, 8.0)
    if draft is not None:
        row("draft weights", meas["draft"].get("model", 0.0), est["draft"]["model"], 0.10)
        row("draft KV", meas["draft"].get("kv", 0.0), est["draft"]["KV"], 0.10)
        row("draft compute", meas["draft"].get("compute", 0.0), est["draft"]["compute"], 0.10, 8.0)
    m_output = meas["target"].get("output", 0.0) + meas["draft"].get("output", 0.0)
    row("output (all)", m_output, est["output"], None)
    m_total = sum(sum(v.values()) for v in meas.values())
    row("total", m_total, est["total"], total_goal)
    return {"config": name, "n_ctx": n_ctx, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arg(ap)
    add_threads_arg(ap, 2)
    ap.add_argument("--keep", help="folder for the generated models (reused when present)")
    ap.add_argument("--ctx", default="512,4096,16384", help="comma-separated n_ctx values (synthetic cases)")
    ap.add_argument("--gemma-ctx", default="4096,8192,32768", help="comma-separated n_ctx values (Gemma cases)")
    ap.add_argument("--gemma", help="Gemma 3 270M Q4_K_M GGUF (default: the test cache's, tests/realmodels.py)")
    ap.add_argument("--only", choices=("synth", "gemma"), help="run one group only")
    ap.add_argument("--json", action="store_true", help="print JSON results on stdout")
    args = ap.parse_args(argv)
    server = server_binary(args).path
    note_machine("before")
    global CPU_ONLY
    CPU_ONLY = Devices((), None, None, None, cpu_features=cpu_features(), cpu_buffers=probe_cpu_buffers(server))
    from tests.synth import write_first_blocks_gguf

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="draftwise-memacc-"))
    results = []
    if args.only != "gemma":
        target, draft = folder / "target.gguf", folder / "draft-good.gguf"
        if not (target.is_file() and draft.is_file()):
            print(f"generating the synthetic family in {folder} ...", file=sys.stderr)
            fam = family(folder)
            target, draft = fam.target, fam.good_draft
        stories = stories_model()
        for n_ctx in (int(x) for x in args.ctx.split(",")):
            for name, t, d in (("stories260K", stories, None), ("synth-170MB + draft", target, draft)):
                print(f"loading {name} at n_ctx {n_ctx} ...", file=sys.stderr)
                results.append(compare(name, server, t, d, n_ctx, 0.01, args.threads))
    gemma = Path(args.gemma) if args.gemma else gemma_model(fetch=False)
    if args.only != "synth":
        if gemma is None or not gemma.is_file():
            print(f"{gemma or 'the Gemma 3 270M test model'} not found: Gemma cases skipped (tests/realmodels.py "
                  "fetches it)", file=sys.stderr)
        else:
            gdraft = folder / "gemma-first6.gguf"
            if not gdraft.is_file():
                write_first_blocks_gguf(gemma, gdraft, 6, general_name="gemma-3-270m-first6")
            for n_ctx in (int(x) for x in args.gemma_ctx.split(",")):
                for name, d in (("gemma-3-270m", None), ("gemma-3-270m + first-6 draft", gdraft)):
                    print(f"loading {name} at n_ctx {n_ctx} ...", file=sys.stderr)
                    results.append(compare(name, server, gemma, d, n_ctx, 0.10, args.threads))
    ok = all(r["ok"] for res in results for r in res["rows"])
    if args.json:
        json.dump({"ok": ok, "results": results}, sys.stdout, indent=2)
        print()
    else:
        print(f"{'config':<30}{'n_ctx':>7}  {'part':<16}{'llama-server':>14}{'estimate':>12}{'error':>9}  goal")
        for res in results:
            for r in res["rows"]:
                slack = f" or {r['slack_mib']:g} MiB" if r.get("slack_mib") else ""
                goal = "" if r["goal"] is None else f"±{r['goal']:.0%}{slack} {'ok' if r['ok'] else 'MISSED'}"
                err = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
                print(f"{res['config']:<30}{res['n_ctx']:>7}  {r['what']:<16}{r['measured_mib']:>11.2f} MiB"
                      f"{r['estimate_mib']:>8.2f} MiB{err:>9}  {goal}")
        print("all goals met" if ok else "some goals MISSED")
    note_machine("after")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
