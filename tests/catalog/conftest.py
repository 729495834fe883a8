"""Fixtures for the catalog tests: generated GGUFs of every kind (session-scoped, small)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import big_tokenizer, stories_tokenizer, write_vocab_gguf


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own DRAFTWISE_HOME, so scan caches never leak between tests."""
    home = tmp_path / "dw-home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def big_vocab_pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Vocab-only GGUFs with Qwen-sized vocabularies (152064 / 151936 / 151935 tokens, same texts)."""
    folder = tmp_path_factory.mktemp("bigvocab")
    tok = big_tokenizer(152064, model="gpt2", pre="qwen2")
    return {
        "152064": write_vocab_gguf(folder / "v152064.gguf", tok),
        "151936": write_vocab_gguf(folder / "v151936.gguf", tok.truncated(151936)),
        "151935": write_vocab_gguf(folder / "v151935.gguf", tok.truncated(151935)),
        "152064-text7": write_vocab_gguf(folder / "v152064-t7.gguf", tok.with_token(7, "changed-7")),
        "152064-textlast": write_vocab_gguf(folder / "v152064-tl.gguf", tok.with_token(152063, "changed-last")),
    }


@pytest.fixture(scope="session")
def stories_tok():
    """The real stories260K tokenizer spec."""
    return stories_tokenizer()
