"""End-to-end under a bounded CPU burner (issue 10 "Done when", second bullet): one core busy in random
2–10 s bursts while the real llama-server is tuned on the generated wide family. The tuner must pick
the good draft with a speedup close to the same configuration measured side by side right after,
without the burner — never a candidate slower than the baseline in its own rounds, never "no
speculation" for a ~1.5x effect — and say that the machine was busy.

The reference is the same configuration side by side on the requests the estimate rests on: the same
(prompt, repetition) texts — every repetition has its own ``"Request N."`` prefix, and the speedup differs
from one text to the next — and the same length (a busy plan shortens requests to 32–48 tokens).

Until stop 13 the reference ran repetitions 100–102 instead, other texts: side by side, idle, the winner
measured 1.33/1.45/1.44× there and 1.85–2.07× on repetitions 1–3, and the busy sweep's estimate read
+15 … +33 % "high" against it. On the estimate's own requests, under the burner, three runs (seeds 10–12)
gave 1.95/2.06×, 1.99/2.02×, 1.71/1.77× (−5, −2, −3 %). Load itself does not change the speedup either
(side by side on the same requests, idle then under the burner: 1.48/1.46×, 1.53/1.37×, 1.54/1.49×).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.burner import Burner
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import measure_request
from tuner.calibration.pairing import MIN_PAIRS, adjacent_pairs, pooled_tokens_per_s
from tuner.calibration.pipeline.launchers import supervisor_launch_fn
from tuner.calibration.sampling import GREEDY
from tuner.calibration.tune import tune
from tuner.profiles import ProfileStore
from tuner.server.dialect import probe_dialect
from tuner.server.discovery import find_named_server
from tuner.server.supervisor import Supervisor

from .conftest import TUNE_THREADS, link_models
from .test_tune_e2e import PROMPTS, _llama_children

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(300)]

BUSY_TOLERANCE = 0.25
"""Largest relative gap between the busy sweep's speedup and the idle side-by-side one on the same requests
(issue 10: ±25 %)."""


def side_by_side_ratio(binary_path: str, target: Path, winner: Candidate, n_predict: int,
                       keys: list[tuple[int, int]], passes: int = 2) -> float:
    """The winner against the baseline, both servers up, each request sent to one then the other, on the
    requests ``keys`` ((prompt index in ``PROMPTS``, repetition) — a repetition's prompt text carries its own
    ``"Request N."`` prefix, and the speedup differs from one text to the next), ``passes`` times over."""
    binary = find_named_server(binary_path, flag="--server")
    dialect = probe_dialect(binary.path)
    sups = [Supervisor(binary, dialect), Supervisor(binary, dialect)]
    emit = lambda *a, **k: None  # noqa: E731
    cancel = threading.Event()
    try:
        base = supervisor_launch_fn(sups[0], target, 1024, TUNE_THREADS, emit, None)(Candidate(), cancel)
        cand = supervisor_launch_fn(sups[1], target, 1024, TUNE_THREADS, emit, None)(winner, cancel)
        prompts = dict(enumerate(PROMPTS.prompts))
        for launch in (base, cand):  # warm-up
            measure_request(launch.client, 0, prompts[0], -1, 16)
        a, b = [], []
        for _ in range(passes):
            for idx, rep in keys:
                b.append(measure_request(cand.client, idx, prompts[idx], rep, n_predict))
                a.append(measure_request(base.client, idx, prompts[idx], rep, n_predict))
        return (pooled_tokens_per_s(b) or 0.0) / (pooled_tokens_per_s(a) or 1.0)
    finally:
        for s in sups:
            s.stop(grace_s=5.0)


def test_busy_machine_still_picks_the_good_draft(tmp_path: Path, wide_family, llama_server_bin):
    models = link_models(tmp_path / "models", wide_family.target, wide_family.good_draft)
    # 55 s: at 45 s one run in four on the EPYC (issue 28, stop 45) left the draft at its first look (1.42× over 2
    # pairs, interval 0.90–2.25×) after the chain's first look took the rest, and served the model alone
    planned: list[dict] = []
    with Burner(total_s=90.0, seed=10) as burner:
        time.sleep(0.5)  # burning before the sweep starts, as a busy desktop is
        res = tune(models, sampling=GREEDY, long_context=False, prompts=PROMPTS, budget_s=55, server=llama_server_bin,
                   store=ProfileStore(tmp_path / "profiles"), n_predict=64, repetitions=3, n_ctx=1024,
                   threads=TUNE_THREADS,
                   on_event=lambda e: planned.append(dict(e.detail or {})) if e.kind == "budget" else None)
        assert burner.alive()  # it was busy for the whole sweep
    d = res.decision
    table = "\n".join(f"{m.stage} {m.candidate.label}: {m.gen_tokens_per_s} tok/s err {m.error}"
                      for m in res.measurements)
    assert d is not None and not d.no_speculation, f"{d.reason}\n{table}"
    assert d.winner.draft_path == str(wide_family.good_draft.resolve()), f"{d.reason}\n{table}"
    # its own rounds: every pair it rests on, pooled, is faster than the baseline; at least the first look's two
    # pairs (more while the budget lasts, unless another finalist's first look took the rest: a clean-clone run
    # concluded n_max 15 after 2 pairs and then spent the budget on the chain's look)
    pairs = adjacent_pairs(list(res.measurements), d.winner)
    assert d.pairs == len(pairs) >= MIN_PAIRS and d.speedup > 1.0
    assert "Other programs used" in d.reason, d.reason  # the load watcher saw the burner
    # and saw it when the protocol was planned, before its first whole interval (the first warm-up of this
    # small target ends under a second in): the busy plan, more and shorter pairs
    assert planned and planned[0].get("busy") is True, planned
    # the reference runs the requests the estimate rests on: the same (prompt, repetition) texts — each
    # repetition has its own prefix — and the same length (a busy plan shortens requests)
    keys = sorted({(s.prompt_index, s.repetition) for p in pairs for s in p.candidate_samples})
    used = {k[0] for k in keys}
    n_predict = max(s.predicted_n or 0 for p in pairs for s in p.baseline_samples) or 64
    ref = side_by_side_ratio(str(llama_server_bin), wide_family.target.resolve(), d.winner, n_predict=n_predict,
                             keys=keys)
    print(f"busy sweep {res.elapsed_s:.0f} s: {d.reason}\nside by side without the burner, prompts "
          f"{sorted(used)}, {n_predict} tokens: {ref:.2f}x")
    assert abs(d.speedup / ref - 1.0) <= BUSY_TOLERANCE, (d.speedup, ref, d.reason)
    assert not _llama_children()
