"""The measurement protocol against the real llama-server on stories260K (fast)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.synth import bpe_tokenizer, write_llama_gguf
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import Launch, measure_candidate, measure_repetitions
from tuner.calibration.pipeline.launchers import supervisor_launch_fn
from tuner.calibration.prompts import Prompt
from tuner.server.supervisor import Supervisor

pytestmark = pytest.mark.server

PROMPTS = [(0, Prompt("Once upon a time", "creative")), (1, Prompt("Lily and Tom went to the park.", "chat"))]


@pytest.fixture
def launch(llama_server_bin: Path, stories260k: Path):
    """A counting launch function over one real Supervisor; yields (launch_fn, launches list, target)."""
    sup = Supervisor(llama_server_bin)
    inner = supervisor_launch_fn(sup, stories260k, 512, 1, lambda *a, **k: None, 60.0)
    launches: list[Candidate] = []

    def counted(c: Candidate, cancel: threading.Event) -> Launch:
        launches.append(c)
        return inner(c, cancel)

    yield counted, launches, stories260k
    sup.stop()


def test_baseline_and_self_draft_protocol(launch):
    fn, launches, target = launch
    cancel = threading.Event()
    base = measure_candidate(fn, Candidate(), PROMPTS, [0, 1], 32, cancel)
    assert base.ok, base.error
    assert len(base.samples) == 4 and {s.repetition for s in base.samples} == {0, 1}
    assert all(s.predicted_n == 32 for s in base.samples)  # fixed n_predict (ignore_eos)
    assert all(s.draft_n is None for s in base.samples) and base.acceptance is None
    # Different prefixes per repetition, same output for the same (prompt, repetition) every time.
    outputs = {(s.prompt_index, s.repetition): s.content for s in base.samples}
    again = measure_candidate(fn, Candidate(), PROMPTS, [1], 32, cancel)
    assert {(s.prompt_index, s.repetition): s.content for s in again.samples} == {
        k: v for k, v in outputs.items() if k[1] == 1}

    # The target drafting for itself: speculation on, everything accepted, outputs identical.
    me = Candidate(spec_type="draft-simple", draft_path=str(target), n_max=4, p_min=0.0)
    m = measure_candidate(fn, me, PROMPTS, [0, 1], 32, cancel, baseline_outputs=outputs)
    assert m.ok, m.error
    assert m.speculative_active is True and m.draft_n > 0
    assert m.acceptance is not None and m.acceptance > 0.9
    assert m.lossless is True and m.divergences == ()
    # Per-position counters from /metrics, taken as a difference around the measured requests.
    assert m.counts is not None and m.counts.drafts_total > 0
    assert len(m.counts.accepted_per_pos) == 4
    assert m.counts.accepted_tokens_total == m.draft_n_accepted
    assert len(launches) == 3


def test_ngram_types_get_a_fresh_launch_per_repetition(llama_server_bin: Path, wide_family):
    # ngram-mod keeps its n-gram pool across requests, so a repeated prompt would draft from the last
    # repetition's output: each repetition gets its own launch. (The random wide target loops, so
    # ngram-mod does draft on it; stories260K's prose gives it nothing to draft.)
    sup = Supervisor(llama_server_bin)
    inner = supervisor_launch_fn(sup, wide_family.target, 512, 1, lambda *a, **k: None, 60.0)
    launches: list[Candidate] = []

    def counted(c: Candidate, cancel: threading.Event) -> Launch:
        launches.append(c)
        return inner(c, cancel)

    try:
        m = measure_repetitions(counted, Candidate(spec_type="ngram-mod"), PROMPTS[:1], [0, 1], 64,
                                threading.Event())
        assert m.ok, m.error
        assert len(launches) == 2 and {s.repetition for s in m.samples} == {0, 1}
        assert m.draft_n > 0
        base = measure_repetitions(counted, Candidate(), PROMPTS[:1], [0, 1], 16, threading.Event())
        assert base.ok and len(launches) == 3  # other candidates: one launch for all repetitions
    finally:
        sup.stop()


def test_incompatible_draft_fails_however_fast(launch, tmp_path: Path):
    fn, _, _ = launch
    other = write_llama_gguf(tmp_path / "bpe-draft.gguf", n_embd=64, n_layers=1, tokenizer=bpe_tokenizer())
    c = Candidate(spec_type="draft-simple", draft_path=str(other), n_max=4, p_min=0.0)
    m = measure_candidate(fn, c, PROMPTS, [0], 16, threading.Event())
    assert not m.ok
    assert "speculation" in m.error and ("vocab" in m.error or "inactive" in m.error or "false" in m.error)


def test_cancel_before_launch_raises_and_launches_nothing(launch):
    from tuner.calibration.measure import Cancelled

    fn, launches, _ = launch
    ev = threading.Event()
    ev.set()
    with pytest.raises(Cancelled):
        measure_candidate(fn, Candidate(), PROMPTS, [0], 16, ev)
    assert launches == []
