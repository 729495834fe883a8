"""End-to-end tuning with the real llama-server on a generated family (issue 5 "Done when").

The wide family is generated once per session (tests/calibration/conftest.py). Budgets, prompts and
n_predict are kept small; speedups are ratios measured side by side in the same sweep.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import psutil
import pytest

from tuner.calibration.prompts import Prompt, make_prompt_set
from tuner.calibration.sampling import GREEDY
from tuner.calibration.tune import TuneEvent, tune
from tuner.profiles import ProfileStore

from .conftest import TUNE_THREADS, link_models

pytestmark = [pytest.mark.server, pytest.mark.slow]

# The acceptance dial of the generated family is a greedy construct (its random weights give flat
# distributions, so at temperature 0.8 the good draft accepts ~7 %); these tests check the search and the
# decision, so they measure greedy and leave the long-context requests (tested in test_workload_real) out.
WORKLOAD = dict(sampling=GREEDY, long_context=False)

PROMPTS = make_prompt_set(
    [
        Prompt("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", "code"),
        Prompt("Once upon a time, in a small village by the sea, there lived", "creative"),
        Prompt("Question: what is 17 times 23? Answer step by step.", "math"),
    ],
    source="test",
)


def _llama_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "llama-server" in p.name() or any("llama-server" in a for a in p.cmdline()[:1]):
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_picks_the_good_draft_and_never_the_unrelated_one(tmp_path: Path, wide_family, llama_server_bin):
    models = link_models(tmp_path / "models", wide_family.target, wide_family.good_draft,
                         wide_family.unrelated_draft)
    events: list[TuneEvent] = []
    store = ProfileStore(tmp_path / "profiles")
    res = tune(models, prompts=PROMPTS, budget_s=60, server=llama_server_bin, store=store, n_predict=96,
               repetitions=3, n_ctx=1024, threads=TUNE_THREADS, on_event=events.append, **WORKLOAD)
    if res.decision is not None and res.decision.no_speculation and "a longer tune can settle it" in res.decision.reason:
        # what the app tells a user whose machine is noisy: a longer tune settles it. On the EPYC of issue 28's stop
        # 45 the 60 s tune ended both finalists inconclusive in 5 of 15 runs (old code and new alike: the draft at
        # 1.31-1.36x over 4 pairs, intervals 0.99-2.00x), at 75 s still 2 of 4
        events.clear()
        res = tune(models, prompts=PROMPTS, budget_s=150, server=llama_server_bin, store=store, n_predict=96,
                   repetitions=3, n_ctx=1024, threads=TUNE_THREADS, on_event=events.append, force=True, **WORKLOAD)
    d = res.decision
    assert d is not None, "no decision"
    table = "\n".join(f"{m.candidate.label}: {m.gen_tokens_per_s} tok/s acc {m.acceptance} err {m.error}"
                      for m in res.measurements)
    assert d.winner.draft_path == str(wide_family.good_draft.resolve()), f"{d.reason}\n{table}"
    assert d.speedup >= 1.2, f"{d.reason}\n{table}"
    assert d.speedup_ci_low is not None and d.speedup_ci_low > 1.0
    # The unrelated draft was measured (its probe), failed to pay, and never won.
    unrelated = [m for m in res.measurements if m.candidate.draft_path == str(wide_family.unrelated_draft.resolve())]
    assert unrelated and all(m.acceptance is not None and m.acceptance < 0.3 for m in unrelated if m.ok)
    # Every speculative run was checked: /slots speculative true and drafts made.
    for m in res.measurements:
        if m.ok and not m.candidate.is_baseline:
            assert m.speculative_active is True and m.draft_n > 0
            assert m.lossless is not None  # compared with the baseline and reported
    # The long probe predicted the curve before refinement measured shorter drafts.
    predicted = [e for e in events if e.kind == "predicted"]
    assert predicted and predicted[0].detail["curve"]
    refine = [m for m in res.measurements if m.stage == "refine"]
    assert all(m.predicted_gen_tokens_per_s for m in refine)
    # Progress events carry an ETA and the profile was saved with its evidence.
    assert any(e.eta_s for e in events if e.kind == "launch")
    assert res.profile_path is not None and res.profile_path.is_file()
    assert res.profile is not None and res.profile.argv and "--spec-type" in res.profile.argv
    assert len(res.profile.evidence) == len(res.measurements)
    # ... and what the Monitor's live prediction needs: the served length and the winner's fitted step cost; a
    # chain (ngram-mod + the good draft, which can win here since each draft group gets a finalist place) has no
    # single draft length, so its profile keeps none and the Monitor predicts nothing
    from tuner.calibration.advice import ProfileFacts

    facts = ProfileFacts.from_decision(res.profile.decision)
    if d.winner.is_chained:
        assert facts is None and "live_prediction" not in res.profile.decision
    else:
        assert facts is not None, f"no live facts for {d.winner.label}: {res.profile.decision.get('live_prediction')}"
        assert facts.n_max == d.winner.n_max and facts.cost.per_draft_token > 0
    _verify_cost_measured_and_never_served(res, events, llama_server_bin)
    assert not _llama_children()


def _verify_cost_measured_and_never_served(res, events: list[TuneEvent], llama_server_bin,
                                           must_measure: bool = False) -> None:
    """The verify-cost stage (issue 28 item 3) launched the good draft with synthetic acceptance at several
    lengths; the profile keeps the curve for the live prediction; the profile's argv and the served server's
    have no synthetic flag. ``must_measure``: a sweep sized for the stage (short requests), where only another
    program's load may skip it."""
    from tuner.calibration.advice import ProfileFacts
    from tuner.calibration.serving import profile_server_config
    from tuner.server.dialect import probe_dialect
    from tuner.server.discovery import find_named_server
    from tuner.server.supervisor import Supervisor

    synth = [e for e in events if e.kind == "ready" and "--spec-synth-rates" in (e.detail or {}).get("argv", [])]
    busy = [e for e in events if e.kind == "skipped" and "other programs are using the CPU" in e.message]
    short = [e for e in events if e.kind == "skipped" and "too short for even two lengths" in e.message]
    assert res.profile is not None and not any("synth" in a for a in res.profile.argv)
    if busy or (short and not must_measure):
        # the load watcher saw another program (a curve measured then would be kept for later tunes), or two
        # lengths priced at the probe's step cost do not fit in the stage's share: no launch, no curve
        assert not synth and not res.profile.decision.get("verify_costs")
    else:
        assert len(synth) >= 2, [e.message for e in events if e.kind in ("verify_cost", "skipped")]
        assert res.profile.decision.get("verify_costs")
        facts = ProfileFacts.from_decision(res.profile.decision)
        if not res.decision.winner.is_chained:  # a chain keeps no live facts (the test above)
            assert facts is not None and facts.curve is not None and facts.step_cost is facts.curve
            assert all(cost >= 1.0 for _, cost in facts.curve.points)
    binary = find_named_server(llama_server_bin)
    sup = Supervisor(binary, probe_dialect(binary.path))
    try:
        sup.start(profile_server_config(res.profile))
        sup.wait_ready()
        assert "--spec-draft-model" in sup.argv and not any("synth" in a for a in sup.argv), sup.argv
    finally:
        sup.stop()


def test_short_requests_leave_room_for_the_verify_cost_curve(tmp_path: Path, wide_family, llama_server_bin):
    """At 96-token requests and 60 s the stage's two lengths, priced at the probe's real step cost (about 7
    target tokens for 16 drafted), do not fit in its 12 % (the test above then checks that nothing synthetic
    ran). With 16-token requests they do at 45 s where the target runs about 60 tokens/s or faster; on a slower
    CPU the stage says how long its two lengths would take, and the tune runs once more at a budget whose share
    holds them. Then the real synthetic launches run, the curve is kept, and the served server has no
    synthetic flag."""
    from tuner.calibration.search.verify import SHARE

    models = link_models(tmp_path / "models", wide_family.target, wide_family.good_draft)
    budget_s = 45.0
    for attempt in range(2):
        events: list[TuneEvent] = []
        res = tune(models, prompts=PROMPTS, budget_s=budget_s, server=llama_server_bin,
                   store=ProfileStore(tmp_path / f"p{attempt}"), n_predict=16, repetitions=2, n_ctx=1024,
                   threads=TUNE_THREADS, on_event=events.append, **WORKLOAD)
        short = [float(m.group(1)) for e in events if e.kind == "skipped"
                 and (m := re.search(r"too short for even two lengths \(about (\d+) s\)", e.message))]
        if not short or attempt:
            break
        assert short[0] <= 20, f"two synthetic launches of 16-token requests priced at {short[0]} s"
        budget_s = 1.25 * (short[0] + 1) / SHARE  # the estimate is rounded to whole seconds
    assert res.decision is not None and res.profile is not None
    _verify_cost_measured_and_never_served(res, events, llama_server_bin, must_measure=True)
    assert not _llama_children()


def test_only_the_unrelated_draft_gives_no_speculation(tmp_path: Path, wide_family, llama_server_bin):
    models = link_models(tmp_path / "models", wide_family.target, wide_family.unrelated_draft)
    res = tune(models, prompts=PROMPTS, budget_s=60, server=llama_server_bin,
               store=ProfileStore(tmp_path / "profiles"), n_predict=96, repetitions=3, n_ctx=1024,
               threads=TUNE_THREADS, **WORKLOAD)
    d = res.decision
    assert d is not None
    table = "\n".join(f"{m.candidate.label}: {m.gen_tokens_per_s} tok/s acc {m.acceptance} err {m.error}"
                      for m in res.measurements)
    assert d.winner.draft_path is None, f"{d.reason}\n{table}"
    if d.no_speculation:
        assert d.reason.startswith(("Fastest here: the model alone", "Serving the model alone")), d.reason
        assert "acceptance" in d.reason or "slower" in d.reason
    else:
        # Only an n-gram type that measured faster beyond the noise may win.
        assert d.winner.spec_type.startswith("ngram")
        assert d.speedup_ci_low is not None and d.speedup_ci_low > 1.0
    be = {b.candidate.draft_path: b for b in d.break_even}
    unrelated = be[str(wide_family.unrelated_draft.resolve())]
    assert unrelated.acceptance is not None and unrelated.break_even_acceptance is not None
    assert unrelated.acceptance < unrelated.break_even_acceptance
    assert not _llama_children()


def test_cancel_stops_cleanly(tmp_path: Path, wide_family, llama_server_bin):
    models = link_models(tmp_path / "models", wide_family.target, wide_family.good_draft)
    cancel = threading.Event()
    seen: list[str] = []

    def on_event(ev: TuneEvent) -> None:
        seen.append(ev.kind)
        if ev.kind == "progress" and seen.count("progress") == 2:
            cancel.set()

    t0 = time.monotonic()
    res = tune(models, prompts=PROMPTS, budget_s=120, server=llama_server_bin,
               store=ProfileStore(tmp_path / "profiles"), n_predict=64, n_ctx=1024, threads=TUNE_THREADS, on_event=on_event,
               cancel=cancel, **WORKLOAD)
    assert res.cancelled and res.decision is None and res.profile_path is None
    assert "cancelled" in seen
    assert time.monotonic() - t0 < 60
    assert not _llama_children()
    assert ProfileStore(tmp_path / "profiles").load(wide_family.target) is None
