"""Cross-check of the compatibility rules against the real llama-server.

For each small-vocabulary pass/fail pair we build a loadable target and draft (tests.synth),
start ``llama-server -m T -md D --spec-type draft-simple`` and read ``GET /slots`` →
``speculative``: llama.cpp keeps running without speculation when it refuses the draft
(server-context.cpp), so ``speculative`` is its verdict. Ours must be the same. For the pairs it
accepts we also check that a completion really drafted (``timings.draft_n > 0``).

Found on the way: when the vocabularies differ in size (allowed up to 128), llama-server b11434
aborts (``common_batch::get_sub_batch: failed to add token``) as soon as either model produces
an id the other lacks, so the extra tokens here are of type "unused" (zero output rows).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import (
    bpe_tokenizer,
    complete_greedy,
    raw_llama_server,
    stories_tokenizer,
    write_llama_gguf,
)
from tuner.catalog.compat import check_compatible
from tuner.catalog.scan import scan_file

pytestmark = pytest.mark.server


def _pairs():
    s = stories_tokenizer()
    b = bpe_tokenizer(s)
    return [
        # (id, target tokenizer, draft tokenizer, expected rule)
        ("identical", s, s, None),
        ("text-id3", s, s.with_token(3, "<changed-3>"), None),
        ("text-id7", s, s.with_token(7, "<changed-7>"), "token-text"),
        ("plus128", s, s.with_extra_tokens(128, token_type=5), None),
        ("plus129", s, s.with_extra_tokens(129, token_type=5), "vocab-size"),
        ("target-plus128", s.with_extra_tokens(128, token_type=5), s, None),
        ("spm-vs-bpe", s, bpe_tokenizer(s), "vocab-type"),
        ("pre-only", replace(s, pre="llama-spm"), replace(s, pre="something-else"), None),
        ("eos-added-different-id", replace(s, add_eos=True), replace(s, add_eos=True, eos_id=5), "eos"),
        ("add-bos-differs", s, replace(s, add_bos=False), "bos"),
        ("bos-id-differs", s, replace(s, bos_id=5), "bos"),
        ("eos-id-differs-not-added", s, replace(s, eos_id=5), None),
        # llama.cpp's defaults when the add_bos key is absent: true for pre 'llama-bpe', false for 'qwen2'
        ("bpe-default-add-bos", replace(b, pre="llama-bpe", add_bos=None), replace(b, pre="qwen2", add_bos=None), "bos"),
        ("bpe-default-vs-explicit", replace(b, pre="llama-bpe", add_bos=None), replace(b, pre="qwen2", add_bos=True), None),
    ]


PAIRS = _pairs()


def _serve_and_ask(server: Path, target: Path, draft: Path, log: Path) -> tuple[bool, int | None]:
    """Start llama-server with the pair; return (/slots[0].speculative, completion draft_n or None)."""
    args = ["-m", str(target), "-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
            "-c", "256", "-np", "1", "-t", "1"]
    with raw_llama_server(server, args, log=log, client_timeout_s=60) as client:
        speculative = bool(client.get("/slots").json()[0]["speculative"])
        if not speculative:
            return False, None
        _, draft_n, _ = complete_greedy(client, ["Once upon a time"], 24)
        return True, draft_n


@pytest.mark.parametrize("name, target_tok, draft_tok, rule", PAIRS, ids=[p[0] for p in PAIRS])
def test_rules_match_llama_server(
    llama_server_bin: Path, tmp_path: Path, name: str, target_tok, draft_tok, rule: str | None
) -> None:
    target = write_llama_gguf(tmp_path / "target.gguf", n_embd=64, n_layers=2, tokenizer=target_tok)
    draft = write_llama_gguf(tmp_path / "draft.gguf", n_embd=32, n_layers=1, n_head=4, tokenizer=draft_tok, seed=1)
    ours = check_compatible(scan_file(target), scan_file(draft))
    assert ours.rule == rule, ours.message
    speculative, draft_n = _serve_and_ask(llama_server_bin, target, draft, tmp_path / "server.log")
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert speculative is ours.compatible, f"llama-server speculative={speculative}, ours={ours}\n{log[-2000:]}"
    if ours.compatible:
        assert draft_n and draft_n > 0, f"no drafted tokens (draft_n={draft_n})"
    else:
        assert "vocab" in log and "not compatible" in log
