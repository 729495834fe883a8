"""Draft compatibility: each llama.cpp rule's pass and fail side (common_speculative_are_compatible)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import bpe_tokenizer, stories_tokenizer, write_vocab_gguf
from tuner.catalog.compat import check_compatible
from tuner.catalog.scan import scan_file


def verdict(tmp_path: Path, target_tok, draft_tok):
    t = write_vocab_gguf(tmp_path / "target.gguf", target_tok)
    d = write_vocab_gguf(tmp_path / "draft.gguf", draft_tok)
    return check_compatible(scan_file(t), scan_file(d))


# (name, draft tokenizer from the stories tokenizer, expected rule or None)
def _cases():
    s = stories_tokenizer()
    return [
        ("identical", s, None),
        ("text differs at id 3 (ids 0-4 are not compared)", s.with_token(3, "<changed-3>"), None),
        ("text differs at id 4", s.with_token(4, "<changed-4>"), None),
        ("text differs at id 7", s.with_token(7, "<changed-7>"), "token-text"),
        ("text differs at the last id", s.with_token(511, "<changed-511>"), "token-text"),
        ("128 more tokens", s.with_extra_tokens(128), None),
        ("129 more tokens", s.with_extra_tokens(129), "vocab-size"),
        ("BPE instead of SPM", bpe_tokenizer(s), "vocab-type"),
        ("different pre only", replace(s, pre="some-other-pre"), None),
        ("add_eos true in both, different EOS id", None, "eos"),
        ("add_eos differs", replace(s, add_eos=True), "eos"),
        ("EOS id differs but EOS is not added", replace(s, eos_id=5), None),
        ("add_bos differs", replace(s, add_bos=False), "bos"),
        ("BOS id differs and BOS is added", replace(s, bos_id=5), "bos"),
        ("explicit add_bos=true equals the SPM default", replace(s, add_bos=True), None),
    ]


@pytest.mark.parametrize("name, draft_tok, rule", _cases(), ids=[c[0] for c in _cases()])
def test_rules_small_vocab(tmp_path: Path, name: str, draft_tok, rule: str | None) -> None:
    s = stories_tokenizer()
    target_tok = s
    if draft_tok is None:  # the add_eos / EOS-id case
        target_tok = replace(s, add_eos=True)
        draft_tok = replace(s, add_eos=True, eos_id=5)
    v = verdict(tmp_path, target_tok, draft_tok)
    assert v.rule == rule, v.message
    assert v.compatible is (rule is None)
    assert v.message


def test_messages_carry_the_values(tmp_path: Path) -> None:
    s = stories_tokenizer()
    v = verdict(tmp_path, s, s.with_token(7, "<changed-7>"))
    assert "id 7" in v.message and "<changed-7>" in v.message and "<0x04>" in v.message
    v = verdict(tmp_path, s, s.with_extra_tokens(129))
    assert "129" in v.message and "512" in v.message and "641" in v.message
    v = verdict(tmp_path, replace(s, add_eos=True), replace(s, add_eos=True, eos_id=5))
    assert "2" in v.message and "5" in v.message
    v = verdict(tmp_path, s, bpe_tokenizer(s))
    assert "SPM" in v.message and "BPE" in v.message


def test_rule_order_vocab_type_first(tmp_path: Path) -> None:
    s = stories_tokenizer()
    v = verdict(tmp_path, s, replace(bpe_tokenizer(s.with_extra_tokens(200)), add_bos=False))
    assert v.rule == "vocab-type"


def test_bpe_pre_defaults_feed_add_bos(tmp_path: Path) -> None:
    # llama.cpp sets add_bos=true for the llama3 pre-tokenizer when the key is absent
    s = stories_tokenizer()
    llama3 = replace(bpe_tokenizer(s, pre="llama-bpe"), add_bos=None)
    qwen2 = replace(bpe_tokenizer(s, pre="qwen2"), add_bos=None)
    assert scan_file(write_vocab_gguf(tmp_path / "a.gguf", llama3)).tokenizer.add_bos is True
    assert scan_file(write_vocab_gguf(tmp_path / "b.gguf", qwen2)).tokenizer.add_bos is False
    assert verdict(tmp_path, llama3, qwen2).rule == "bos"
    assert verdict(tmp_path, llama3, replace(qwen2, add_bos=True)).compatible


def test_whitespace_and_gpt2_models_are_both_bpe(tmp_path: Path) -> None:
    s = bpe_tokenizer(stories_tokenizer())
    assert verdict(tmp_path, s, replace(s, model="whitespace")).compatible


def test_big_vocab_rules(big_vocab_pair: dict[str, Path]) -> None:
    m = {k: scan_file(p) for k, p in big_vocab_pair.items()}
    assert m["152064"].tokenizer.n_tokens == 152064 and m["152064"].kind == "vocab-only"
    v = check_compatible(m["152064"], m["151936"])
    assert v.compatible and v.rule is None, v.message
    v = check_compatible(m["152064"], m["151935"])
    assert v.rule == "vocab-size" and "129" in v.message
    v = check_compatible(m["152064"], m["152064-text7"])
    assert v.rule == "token-text" and "id 7" in v.message
    v = check_compatible(m["152064"], m["152064-textlast"])
    assert v.rule == "token-text" and "id 152063" in v.message
    # the changed last id lies beyond the smaller vocabulary: not compared
    v = check_compatible(m["152064-textlast"], m["151936"])
    assert v.compatible, v.message


def test_no_tokenizer_is_not_compatible(tmp_path: Path) -> None:
    import numpy as np

    from tests.synth import write_gguf

    p = write_gguf(tmp_path / "proj.gguf", architecture="clip", tensors={"x.weight": np.zeros((4, 4), np.float32)})
    t = write_vocab_gguf(tmp_path / "t.gguf")
    v = check_compatible(scan_file(t), scan_file(p))
    assert not v.compatible and "no tokenizer" in v.message
