"""Record paired requests the way the sweep's side-by-side paired rounds make them, and say what the sequential
test does at their spread (issue 25, item 1).

    python bench/paired_requests.py --kind ab|aa [--busy] [--launch-pairs 6] [--reps 2] [--prompts 8]
                                    [--n-predict 64] [--threads 1] [--out tests/data/paired_requests/ab_idle.json]

One launch pair: the "candidate" server and the baseline's server start side by side (``-np 1``, ``-c 1024``,
``--threads``), both are warmed up, then every request of ``--reps`` repetitions × ``--prompts`` prompts goes to
both, one right after the other, the side that goes first alternating per request (the order of
``tuner.calibration.search.side_by_side``), with the sweep's own request (``measure_request``); then both stop.
``--kind ab``: the candidate is ``draft-simple`` with the family's good draft (``--n-max``, ``p_min`` 0); ``aa``:
the target alone on both sides (no true difference). ``--busy``: tests/burner.py keeps one core busy in 2–10 s
bursts throughout. The family: tests/synth.py ``make_family`` (768 wide, 12 blocks, F16, a 2-block draft,
eps 0.05), in a temp folder deleted afterwards.

The recording (the format of tests/data/paired_requests/, one row per paired request: launch pair, repetition,
prompt, candidate tokens and seconds, baseline tokens and seconds) says the machine's load while it ran: the
1-minute load average before and after, and other programs' CPU share (the sweep's own load watcher,
``tuner.hardware.host.LoadWatcher``); ``"quiet": true`` when other programs used under 5 % of the CPU and no
burner ran. Then it prints the request-level spread and, simulated at that spread (tests/sequential_sim.py,
10,000 sweeps each), the false "faster" rate of two finalists at the 1.03× bar and the share of true 1.3×
effects concluded within two launch pairs — the figures tests/calibration/test_sequential_error.py asserts
(its ``POWER_RECORDING`` is ``ab_idle.json``: a quiet recording there makes it hold the 80 % goal).

CPU-heavy: about 3 minutes for 6 launch pairs of 16 requests on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.burner import Burner  # noqa: E402
from tests.synth import make_family  # noqa: E402
from tuner.calibration import select_prompts  # noqa: E402
from tuner.calibration.candidates import Candidate  # noqa: E402
from tuner.calibration.measure import WARMUP_PROMPT, measure_request  # noqa: E402
from tuner.calibration.pairing import sample_tokens_and_s  # noqa: E402
from tuner.calibration.pipeline.launchers import supervisor_launch_fn  # noqa: E402
from tuner.calibration.prompts import Prompt, default_prompts  # noqa: E402
from tuner.hardware.host import LoadWatcher  # noqa: E402
from tuner.server.dialect import probe_dialect  # noqa: E402
from tuner.server.discovery import find_server  # noqa: E402
from tuner.server.supervisor import Supervisor  # noqa: E402

QUIET_OTHER_CPU = 0.05
"""Other programs' mean CPU share under which a recording counts as quiet."""


def _row(launch_pair: int, rep: int, idx: int, c, b) -> list:
    (ct, cs), (bt, bs) = sample_tokens_and_s(c), sample_tokens_and_s(b)
    return [launch_pair, rep, idx, ct, round(cs, 6), bt, round(bs, 6)]


def _launch_pair(lp: int, first_rep: int, a: argparse.Namespace, fam, chosen, binary, dialect) -> list[list]:
    """One launch pair's paired requests (both servers started, warmed up, measured, stopped)."""
    target = fam.target.resolve()
    base = Candidate()
    cand = base if a.kind == "aa" else Candidate(spec_type="draft-simple", draft_path=str(fam.good_draft.resolve()),
                                                  n_max=a.n_max, p_min=0.0)
    prompt_of = dict(chosen)
    sup_c, sup_b = Supervisor(binary, dialect), Supervisor(binary, dialect)
    cancel = threading.Event()
    rows = []
    try:
        launch_b = supervisor_launch_fn(sup_b, target, 1024, a.threads, lambda *x, **k: None, None)(base, cancel)
        launch_c = supervisor_launch_fn(sup_c, target, 1024, a.threads, lambda *x, **k: None, None)(cand, cancel)
        for ln in (launch_c, launch_b):
            measure_request(ln.client, 0, Prompt(WARMUP_PROMPT), -1, 16, 120.0, greedy=True)
        n = 0
        for rep in range(first_rep, first_rep + a.reps):
            for idx, _p in chosen:
                sides = [launch_c, launch_b] if n % 2 == 0 else [launch_b, launch_c]
                got = [measure_request(ln.client, idx, prompt_of[idx], rep, a.n_predict, 120.0) for ln in sides]
                c, b = got if n % 2 == 0 else got[::-1]
                rows.append(_row(lp, rep, idx, c, b))
                n += 1
    finally:
        sup_c.stop(grace_s=5.0)
        sup_b.stop(grace_s=5.0)
    return rows


def _figures(path: Path) -> None:
    """Print the recording's spread and the simulated error rate and power at it."""
    import numpy as np

    from tests import sequential_sim as sim

    name = path.stem
    if path.resolve().parent != sim.RECORDINGS.resolve():
        print(f"(figures only for recordings in {sim.RECORDINGS}: copy it there to see them)")
        return
    _meta, y, _s = sim.load_recording(name)
    sp = sim.spread(y)
    yy, ss = sim.residual_bootstrap(np.random.default_rng(25), 20_000, name, sim.BAR)
    _stop, verdict = sim.sequential(yy, ss)
    false = float(((verdict[:10_000] == 1) | (verdict[10_000:] == 1)).mean())
    yy, ss = sim.residual_bootstrap(np.random.default_rng(28), 10_000, name, math.log(1.3))
    stop, verdict = sim.sequential(yy, ss)
    power = float(((verdict == 1) & (stop <= 4)).mean())
    print(f"request spread: sigma {sp['sigma']:.3f}, prompt SD {sp['prompt_sd']:.3f}, pair SD {sp['pair_sd']:.3f}, "
          f"pooled ratio {sp['mean_ratio']:.3f}")
    print(f"simulated: false 'faster' of two finalists at 1.03x {100 * false:.2f} %; true 1.3x concluded within two "
          f"launch pairs {100 * power:.1f} % (goal 80 %)")


def _load_1m() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("ab", "aa"), required=True)
    ap.add_argument("--busy", action="store_true", help="tests/burner.py keeps one core busy throughout")
    ap.add_argument("--launch-pairs", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2, help="repetitions per launch pair")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--n-max", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    load_before = _load_1m()
    work = Path(tempfile.mkdtemp(prefix="dw-paired-"))
    os.environ["DRAFTWISE_HOME"] = str(work / "home")
    burner = None
    t0 = time.monotonic()
    try:
        fam = make_family(work / "models", n_embd=768, n_layers=12, draft_layers=2, eps=0.05, dtype="f16")
        binary = find_server(None)
        dialect = probe_dialect(binary.path)
        chosen = select_prompts(default_prompts(), a.prompts)
        if a.busy:
            burner = Burner(total_s=1200.0, seed=11).start()
        with LoadWatcher() as watcher:
            rows: list[list] = []
            for lp in range(a.launch_pairs):
                rows += _launch_pair(lp, lp * a.reps, a, fam, chosen, binary, dialect)
                print(f"launch pair {lp + 1}/{a.launch_pairs}: {len(rows)} paired requests so far", file=sys.stderr)
            load = watcher.summary()
        cand = "no speculation" if a.kind == "aa" else f"draft-simple draft-good.gguf n_max {a.n_max}"
        meta = {
            "source": "bench/paired_requests.py", "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kind": a.kind, "busy": a.busy,
            "quiet": not a.busy and load.other_cpu_mean < QUIET_OTHER_CPU,
            "load_1m": [round(load_before, 2), round(_load_1m(), 2)],
            "other_cpu_mean": round(load.other_cpu_mean, 3),
            "machine": f"{os.cpu_count()} logical CPUs" + ("; tests/burner.py one core in 2-10 s bursts" if a.busy else ""),
            "candidate": cand, "baseline": "no speculation",
            "family": "tests/synth.py make_family(n_embd=768, n_layers=12, draft_layers=2, eps=0.05, dtype=f16)",
            "server_threads": a.threads, "n_ctx": 1024, "n_predict": a.n_predict, "sampling": "greedy",
            "endpoint": "/completion", "order": "alternating", "reps_per_launch": a.reps,
            "columns": ["launch", "repetition", "prompt", "c_tokens", "c_s", "b_tokens", "b_s"],
        }
        head = json.dumps(meta, indent=1)[:-2]
        body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in rows)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(head + ',\n "requests": [\n' + body + "\n ]\n}\n", encoding="utf-8")
        print(f"wrote {a.out} ({time.monotonic() - t0:.0f} s; load {meta['load_1m']}, other programs "
              f"{100 * load.other_cpu_mean:.0f} % of the CPU, quiet: {meta['quiet']})")
    finally:
        if burner is not None:
            burner.stop()
        shutil.rmtree(work, ignore_errors=True)
    _figures(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
