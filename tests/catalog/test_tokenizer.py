"""Effective tokenizer identity: llama.cpp's defaults (src/llama-vocab.cpp ``load``) applied to GGUF keys."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import bpe_tokenizer, stories_tokenizer, write_vocab_gguf
from tuner.catalog.scan import scan_file


def info(tmp_path: Path, tok, name: str = "t.gguf"):
    return scan_file(write_vocab_gguf(tmp_path / name, tok)).tokenizer


@pytest.mark.parametrize(
    "model, pre, expect",
    [
        # model, pre → (vocab_type, bos, eos, add_bos, add_eos) with no id / add keys in the file
        ("llama", None, ("SPM", 1, 2, True, False)),
        ("t5", None, ("UGM", None, 1, False, True)),
        ("bert", None, ("WPM", 101, None, True, False)),
        ("gpt2", "qwen2", ("BPE", 11, 11, False, False)),
        ("gpt2", "llama-bpe", ("BPE", 11, 11, True, False)),
        ("gpt2", "tekken", ("BPE", 11, 11, True, False)),
        ("gpt2", "chatglm-bpe", ("BPE", None, 11, False, False)),
        ("gemma4", None, ("BPE", None, None, True, False)),
        ("rwkv", None, ("RWKV", None, None, False, False)),
    ],
)
def test_defaults_per_vocab_type(tmp_path: Path, model: str, pre, expect) -> None:
    s = stories_tokenizer()
    tok = replace(s, model=model, pre=pre, bos_id=None, eos_id=None, add_bos=None, add_eos=None,
                  merges=("a b",) if model in ("gpt2", "gemma4") else ())
    t = info(tmp_path, tok)
    assert (t.vocab_type, t.bos_id, t.eos_id, t.add_bos, t.add_eos) == expect


def test_keys_override_defaults_and_bad_ids_are_ignored(tmp_path: Path) -> None:
    s = stories_tokenizer()
    t = info(tmp_path, replace(s, bos_id=7, eos_id=9, add_bos=False, add_eos=True))
    assert (t.bos_id, t.eos_id, t.add_bos, t.add_eos) == (7, 9, False, True)
    # an id beyond the vocabulary (e.g. 0xFFFFFFFF for "none") keeps llama.cpp's default
    t = info(tmp_path, replace(s, bos_id=4294967295, eos_id=600), "bad.gguf")
    assert (t.bos_id, t.eos_id) == (1, 2)
    # Gemma 4's pre-tokenizer forces add_bos even against the key
    g = info(tmp_path, replace(bpe_tokenizer(s, pre="gemma4"), add_bos=False), "g.gguf")
    assert g.add_bos is True


def test_fingerprint_covers_texts_ids_flags_and_pre(tmp_path: Path) -> None:
    s = stories_tokenizer()
    base = info(tmp_path, s, "base.gguf").fingerprint
    assert info(tmp_path, s, "same.gguf").fingerprint == base
    variants = [
        s.with_token(300, "<other>"),
        replace(s, eos_id=5),
        replace(s, add_eos=True),
        replace(s, pre="x"),
        s.truncated(511),
    ]
    prints = {info(tmp_path, v, f"v{i}.gguf").fingerprint for i, v in enumerate(variants)}
    assert base not in prints and len(prints) == len(variants)
    # scores and token types are not part of the identity (llama.cpp does not compare them)
    assert info(tmp_path, replace(s, scores=(0.0,) * 512), "sc.gguf").fingerprint == base
