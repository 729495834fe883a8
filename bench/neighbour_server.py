"""Does a second llama-server, up next to the model alone's, slow the model alone's requests? (The side-by-side
paired rounds keep the baseline's server up next to the finalist's: ``tuner.calibration.search.side_by_side``.)

    python -m bench.neighbour_server [--server PATH] [--rounds 4] [--threads 2 (default: the CPU count)]

Generates the family of ``bench/tune_quality.py`` and, in ``--rounds`` rounds, starts the model alone (A) and sends it
three blocks of 6 greedy 64-token requests (tune_quality's 3 prompts twice), the blocks' order rotated each round:

* ``neighbour stopped``: nothing else runs;
* ``neighbour idle``: a second server (the good draft at ``n_max`` 8, as a finalist's) was started and warmed up
  right before the block and takes no request during it;
* ``neighbour alternating``: the same second server takes a request between every two of A's, which goes first
  alternating, as a side-by-side pair sends them.

Prints A's pooled tokens/s per block and round, and each mode's pooled over the rounds with its ratio to
``neighbour stopped``. An idle llama-server uses about 1 % of a core (psutil, 0.5-5 s after its last request), so a
gap here is not the neighbour's CPU time. Exit status 0 when every request generated tokens (a failed request
raises).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.common import (
    add_server_arg,
    add_threads_arg,
    family,
    note_machine,
    private_home,
    select_prompts,
    server_binary,
)
from bench.tune_quality import PROMPTS
from tuner.calibration.measure import WARMUP_PROMPT, measure_request
from tuner.calibration.pairing import pooled_tokens_per_s
from tuner.calibration.prompts import Prompt, make_prompt_set
from tuner.calibration.results import Sample
from tuner.calibration.sampling import GREEDY
from tuner.calibration.workload import Workload
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

MODES = ("neighbour stopped", "neighbour idle", "neighbour alternating")
N_PREDICT = 64


def _warm(client: ServerClient) -> None:
    measure_request(client, 0, Prompt(WARMUP_PROMPT), -1, 16, 300.0, greedy=True)


def _block(a: ServerClient, b: ServerClient | None, prompts: list[tuple[int, Prompt]], rep: int,
           workload: Workload) -> list[Sample]:
    """A's 6 requests; with ``b``, one of ``b``'s between every two of A's (``b`` first on even requests)."""
    out = []
    for i, (idx, p) in enumerate(prompts * 2):
        if b is not None and i % 2 == 0:
            measure_request(b, idx, p, rep, N_PREDICT, 300.0, workload=workload)
        out.append(measure_request(a, idx, p, rep, N_PREDICT, 300.0, workload=workload))
        if b is not None and i % 2 == 1:
            measure_request(b, idx, p, rep, N_PREDICT, 300.0, workload=workload)
    return out


def _round(r: int, a: ServerClient, neighbour: Supervisor, spec: ServerConfig, prompts: list[tuple[int, Prompt]],
           workload: Workload, got: dict[str, list[Sample]]) -> None:
    for mode in MODES[r % 3:] + MODES[:r % 3]:
        b = None
        if mode != "neighbour stopped":
            neighbour.start(spec)
            neighbour.wait_ready()
            b = neighbour.client(timeout_s=300.0)
            _warm(b)
        try:
            samples = _block(a, b if mode == "neighbour alternating" else None, prompts, 100 + r, workload)
        finally:
            if b is not None:
                neighbour.stop()
        got[mode] += samples
        print(f"round {r + 1} {mode:<22} model alone {pooled_tokens_per_s(samples) or 0:6.1f} tokens/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    add_threads_arg(ap, os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    binary = server_binary(args)
    note_machine("before")
    work = Path(tempfile.mkdtemp(prefix="dw-neighbour-"))
    private_home(work)
    fam = family(work / "models")
    prompts = select_prompts(make_prompt_set(PROMPTS[:3], source="bench"), None)
    workload = Workload(sampling=GREEDY, n_ctx=1024)
    base = ServerConfig(fam.target.resolve(), n_ctx=1024, n_parallel=1, threads=args.threads)
    spec = replace(base, draft_path=fam.good_draft.resolve(), spec_type="draft-simple", p_min=0.0, n_max=8)
    alone, neighbour = Supervisor(binary, probe_dialect(binary.path)), Supervisor(binary, probe_dialect(binary.path))
    got: dict[str, list[Sample]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        alone.start(base)
        try:
            alone.wait_ready()
            a = alone.client(timeout_s=300.0)
            _warm(a)
            _round(r, a, neighbour, spec, prompts, workload, got)
        finally:
            alone.stop()
    ref = pooled_tokens_per_s(got[MODES[0]]) or 0.0
    for mode in MODES:
        tps = pooled_tokens_per_s(got[mode]) or 0.0
        print(f"pooled {mode:<22} model alone {tps:6.1f} tokens/s over {len(got[mode])} requests"
              f"  ({tps / ref if ref else 0:.2f}x of '{MODES[0]}')")
    note_machine("after")
    return 0 if all((s.predicted_n or 0) > 0 for v in got.values() for s in v) else 1


if __name__ == "__main__":
    sys.exit(main())
