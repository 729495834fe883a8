"""A sweep on ik_llama.cpp's llama-server (DRAFTWISE_IK_LLAMA_SERVER; skipped without it).

ik_llama.cpp reports ``draft_n`` only in its OpenAI-shaped answers (``/v1/completions``: its
``/completion`` takes ``timings`` from examples/server/server-context.cpp
``server_slot::get_formated_timings``, which has no draft fields) and has no ``/slots[].speculative``
(its start-up log says "speculative decoding context initialized" per slot instead). These tests run
the real binary on a small generated family: the sweep measures through ``/v1/completions``, compares
a draft candidate and the ``--spec-autotune`` candidate like any other, and the result is served.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import make_family
from tuner.calibration.candidates import Candidate
from tuner.calibration.prompts import Prompt, make_prompt_set
from tuner.calibration.sampling import GREEDY
from tuner.calibration.serving import candidate_config, config_from_profile
from tuner.calibration.tune import TuneEvent, tune
from tuner.profiles import ProfileStore
from tuner.server.supervisor import ServerStartError, Supervisor

from .conftest import TUNE_THREADS

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPTS = make_prompt_set(
    [
        Prompt("Repeat the list: apple, pear, plum, apple, pear, plum, apple, pear, plum,", "list"),
        Prompt("Once upon a time, in a small village by the sea, there lived", "creative"),
    ],
    source="test",
)


@pytest.fixture(scope="module")
def small_family(tmp_path_factory: pytest.TempPathFactory):
    """A 256-wide, 6-block F16 family (the good draft shares the first 2 blocks): fast enough that a
    whole sweep of the ik plan fits in a few seconds of requests."""
    folder = tmp_path_factory.mktemp("ik-family")
    fam = make_family(folder, n_embd=256, n_layers=6, draft_layers=2, eps=0.02, dtype="f16")
    fam.unrelated_draft.unlink()
    return fam


def test_tune_on_ik_compares_draft_and_autotune_and_serves(tmp_path: Path, small_family, ik_llama_server_bin):
    events: list[TuneEvent] = []
    store = ProfileStore(tmp_path / "profiles")
    res = tune(small_family.target.parent, prompts=PROMPTS, budget_s=40, server=ik_llama_server_bin, store=store,
               n_predict=48, repetitions=2, n_ctx=512, threads=TUNE_THREADS, on_event=events.append,
               sampling=GREEDY, long_context=False)
    d = res.decision
    assert d is not None
    table = "\n".join(f"{m.candidate.label}: {m.gen_tokens_per_s} tok/s acc {m.acceptance} err {m.error}"
                      for m in res.measurements)
    started = next(e for e in events if e.kind == "started")
    assert "/v1/completions" in started.message, started.message
    assert "/v1/completions" in d.reason
    by_label = {m.candidate.label: m for m in res.measurements}
    draft = [m for m in res.measurements if m.candidate.spec_type == "draft-simple" and not m.candidate.autotune]
    autotune = [m for m in res.measurements if m.candidate.autotune]
    assert draft and autotune, table
    # every speculative launch that ran was confirmed from ik's start-up log and counted its drafts
    # from /v1/completions (before this, every one failed as "speculation inactive")
    ran = [m for m in res.measurements if not m.candidate.is_baseline and m.samples]
    assert ran, table
    assert not any("speculation inactive" in (m.error or "") for m in res.measurements), table
    for m in ran:
        assert m.speculative_active is True, m.candidate.label
    # the good draft shares the target's first blocks (an unrelated draft: ~0)
    assert draft[0].draft_n > 0 and draft[0].acceptance is not None and draft[0].acceptance > 0.2, table
    assert any(m.draft_n > 0 for m in autotune), table
    # both are compared with the baseline on the same requests, like any other candidate
    compared = {c.candidate.label for c in d.comparisons}
    assert draft[0].candidate.label in compared and any(m.candidate.label in compared for m in autotune), (
        compared, table)
    # the chain ik can express (one n-gram type in front of the draft model) ran and is compared too
    chain = [m for m in res.measurements if m.candidate.is_chained]
    assert chain and chain[0].draft_n > 0, table
    assert chain[0].candidate.label in compared, (compared, table)
    assert by_label  # the table above names every launch

    # serve the result: the profile's configuration reaches ready on ik (a speculative winner passes
    # the log-based speculation check) and answers
    cfg = config_from_profile(small_family.target.parent, store=store)
    sup = Supervisor(ik_llama_server_bin)
    try:
        sup.start(cfg)
        sup.wait_ready(timeout_s=60)
        with sup.client(timeout_s=60) as c:
            body = c.oai_completion("Once upon a time", 32, temperature=0, cache_prompt=False)
        assert body["timings"]["predicted_n"] == 32
        if cfg.is_speculative and cfg.spec_type.startswith("draft"):
            assert body["timings"].get("draft_n", 0) > 0, body["timings"]
    finally:
        sup.stop(grace_s=3.0)


def test_ik_speculation_check_from_the_log(small_family, ik_llama_server_bin):
    """The supervisor's ready check on ik: a draft model gives the per-slot "initialized" line and
    passes; ``-mtp`` on a model without NextN layers starts without a speculator (ik logs "MTP enabled
    via flag, but model has 0 NextN layers. Disabling speculative.") and is refused as inactive."""
    target, draft = str(small_family.target), str(small_family.good_draft)
    sup = Supervisor(ik_llama_server_bin)
    try:
        sup.start(candidate_config(Candidate(spec_type="draft-simple", draft_path=draft, n_max=4, p_min=0.0),
                                   target, n_ctx=512, threads=1))
        sup.wait_ready(timeout_s=60)
        with sup.client(timeout_s=60) as c:
            t = c.oai_completion("Once upon a time", 24, temperature=0, cache_prompt=False)["timings"]
        assert t.get("draft_n", 0) > 0 and t.get("draft_n_accepted", 0) > 0, t
    finally:
        sup.stop(grace_s=3.0)
    sup = Supervisor(ik_llama_server_bin)
    try:
        sup.start(candidate_config(Candidate(spec_type="draft-mtp", n_max=2, p_min=0.0), target, n_ctx=512,
                                   threads=1))
        with pytest.raises(ServerStartError) as e:
            sup.wait_ready(timeout_s=60)
        assert e.value.diagnosis.code == "speculation_inactive", e.value.diagnosis
    finally:
        sup.stop(grace_s=3.0)
