"""Families: compatible LLMs grouped, drafts ranked per target, with warnings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import (
    bpe_tokenizer,
    stories_tokenizer,
    write_llama_gguf,
    write_vocab_gguf,
)
from tuner.catalog.families import group_families, rank_draft
from tuner.catalog.scan import scan_folder


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("zoo")
    s = stories_tokenizer()
    write_llama_gguf(d / "target.gguf", n_embd=128, n_layers=6)            # ~2.6 MB
    write_llama_gguf(d / "draft-small.gguf", n_embd=32, n_layers=1)        # ~0.14 MB
    write_llama_gguf(d / "draft-mid.gguf", n_embd=64, n_layers=2)          # ~0.4 MB
    write_llama_gguf(d / "draft-big.gguf", n_embd=128, n_layers=3)         # ~60 % of target
    write_llama_gguf(d / "draft-text7.gguf", n_embd=32, n_layers=1, tokenizer=s.with_token(7, "<x7>"))
    write_llama_gguf(d / "bpe-target.gguf", n_embd=64, n_layers=2, tokenizer=bpe_tokenizer(s))
    write_llama_gguf(d / "bpe-draft.gguf", n_embd=32, n_layers=1, tokenizer=bpe_tokenizer(s))
    write_llama_gguf(d / "plus128.gguf", n_embd=32, n_layers=1, tokenizer=s.with_extra_tokens(128), seed=3)
    write_vocab_gguf(d / "ggml-vocab.gguf")  # not an LLM: never in a family
    return d


def test_grouping(zoo: Path) -> None:
    models = scan_folder(zoo)
    fams = group_families(models)
    sets = [sorted(m.path.name for m in f.members) for f in fams]
    assert sorted(sets) == sorted(
        [
            ["draft-big.gguf", "draft-mid.gguf", "draft-small.gguf", "plus128.gguf", "target.gguf"],
            ["bpe-draft.gguf", "bpe-target.gguf"],
            ["draft-text7.gguf"],
        ]
    )
    # members largest first; the family key is the largest member's fingerprint
    for f in fams:
        sizes = [m.size_bytes for m in f.members]
        assert sizes == sorted(sizes, reverse=True)
        assert f.fingerprint == f.members[0].tokenizer.fingerprint


def test_ranked_drafts_and_warnings(zoo: Path) -> None:
    fams = group_families(scan_folder(zoo))
    fam = next(f for f in fams if f.members[0].path.name == "target.gguf")
    entry = next(e for e in fam.targets if e.target.path.name == "target.gguf")
    names = [c.model.path.name for c in entry.drafts]
    assert set(names) == {"draft-small.gguf", "draft-mid.gguf", "draft-big.gguf", "plus128.gguf"}
    assert names[-1] == "draft-big.gguf"  # 60 % of the target: ranked last
    big = entry.drafts[-1]
    assert big.score == 0.0 and 0.5 <= big.size_ratio < 0.7
    assert any("cannot speed it up" in w and f"{round(big.size_ratio * 100)} %" in w for w in big.warnings)
    small = next(c for c in entry.drafts if c.model.path.name == "draft-small.gguf")
    assert small.score > big.score and small.warnings == ()
    plus = next(c for c in entry.drafts if c.model.path.name == "plus128.gguf")
    assert any("vocab sizes differ" in w for w in plus.warnings)
    scores = [c.score for c in entry.drafts]
    assert scores == sorted(scores, reverse=True)
    # the incompatible smaller LLMs are listed with llama.cpp's verdict
    rejected = {m.path.name: v.rule for m, v in entry.incompatible}
    assert rejected == {"draft-text7.gguf": "token-text", "bpe-target.gguf": "vocab-type", "bpe-draft.gguf": "vocab-type"}
    # the smallest model has no smaller draft
    smallest = min(fam.targets, key=lambda e: e.target.size_bytes)
    assert smallest.drafts == ()


def test_rank_draft_quantization_and_context(zoo: Path) -> None:
    models = {m.path.name: m for m in scan_folder(zoo)}
    target = replace(models["target.gguf"], quantization="Q4_K_M", context_length=32768)
    draft = models["draft-small.gguf"]
    plain = rank_draft(models["target.gguf"], draft)
    c = rank_draft(target, draft)
    assert c.score < plain.score
    assert any("quantized draft" in w for w in c.warnings)
    assert any("2048" in w and "32768" in w for w in c.warnings)


def test_empty_and_non_llm_inputs(zoo: Path) -> None:
    assert group_families([]) == []
    vocab_only = [m for m in scan_folder(zoo) if m.kind == "vocab-only"]
    assert vocab_only and group_families(vocab_only) == []
