"""Draft heads linked to their targets by header keys and tensor shapes (tuner.catalog.heads), the
families listing every speculation route, and ``draftwise scan`` showing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.synth import (
    stories_tokenizer,
    write_eagle3_head,
    write_gguf,
    write_llama_gguf,
)
from tuner.catalog.families import group_families
from tuner.catalog.heads import check_head, head_facts
from tuner.catalog.scan import scan_file, scan_folder
from tuner.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MTP-capable target (64 wide, 2 blocks + 1 NextN block), a compatible smaller draft (32 wide),
    an EAGLE-3 head made for the target and one made for a 48-wide model."""
    d = tmp_path_factory.mktemp("heads")
    write_llama_gguf(d / "target.gguf", n_embd=64, n_layers=2, nextn_layers=1)
    write_llama_gguf(d / "draft.gguf", n_embd=32, n_layers=1)
    write_eagle3_head(d / "eagle3-good.gguf", target_n_embd=64, target_layers=(0, 1, 1))
    write_eagle3_head(d / "eagle3-other.gguf", target_n_embd=48, target_layers=(0, 1, 1))
    return d


def entry_for(families, name: str):
    for fam in families:
        for e in fam.targets:
            if e.target.path.name == name:
                return e
    raise AssertionError(f"no target entry for {name}")


def test_family_lists_every_route_of_an_mtp_target(folder: Path) -> None:
    models = scan_folder(folder, cache=False)
    kinds = {m.path.name: m.kind for m in models}
    assert kinds == {"target.gguf": "llm", "draft.gguf": "llm", "eagle3-good.gguf": "draft-head",
                     "eagle3-other.gguf": "draft-head"}
    families = group_families(models)
    assert len(families) == 1  # heads do not form families of their own
    e = entry_for(families, "target.gguf")
    assert e.target.mtp_layers == 1
    assert [c.model.path.name for c in e.drafts] == ["draft.gguf"]
    assert [(h.model.path.name, h.spec_type) for h in e.heads] == [("eagle3-good.gguf", "draft-eagle3")]
    assert e.routes == (
        ("draft-mtp", "1 MTP layer(s) inside the target"),
        ("draft-simple", "draft.gguf"),
        ("draft-eagle3", "eagle3-good.gguf"),
        ("ngram", "n-gram lookup (no extra model)"),
    )
    # the head made for a 48-wide model is refused with the rule named, not silently left out
    [(bad, verdict)] = e.mismatched_heads
    assert bad.path.name == "eagle3-other.gguf"
    assert verdict.rule == "target-hidden-size"
    assert "eagle3.target_hidden_size = 48" in verdict.message and "64 wide" in verdict.message
    # the 32-wide draft as a target: neither head fits it
    small = entry_for(families, "draft.gguf")
    assert small.heads == ()
    assert {v.rule for _, v in small.mismatched_heads} == {"target-hidden-size"}
    assert [t for t, _ in small.routes] == ["ngram"]


def test_scan_cli_shows_routes_and_refused_heads(folder: Path, capsys) -> None:
    assert main(["scan", str(folder), "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "head eagle3-good.gguf  draft-eagle3" in out
    assert "head eagle3-other.gguf does not fit (rule: target-hidden-size)" in out
    assert "routes: draft-mtp, draft-simple, draft-eagle3, ngram" in out
    assert main(["scan", str(folder), "--json", "--no-cache"]) == 0
    data = json.loads(capsys.readouterr().out)
    [t] = [t for f in data["families"] for t in f["targets"] if t["target"].endswith("target.gguf")]
    assert [r["spec_type"] for r in t["routes"]] == ["draft-mtp", "draft-simple", "draft-eagle3", "ngram"]
    assert t["heads"][0]["spec_type"] == "draft-eagle3"
    assert t["mismatched_heads"][0]["rule"] == "target-hidden-size"


def test_head_facts_read_keys_and_shapes(folder: Path) -> None:
    f = head_facts(scan_file(folder / "eagle3-good.gguf"))
    assert f.spec_type == "draft-eagle3" and f.architecture == "eagle3"
    assert f.target_layers == (0, 1, 1) and f.target_hidden_size == 64 and f.fc_in == 192
    assert f.n_embd == 64 and f.own_embd_vocab is None and not f.own_output
    assert f.n_vocab == stories_tokenizer().n_tokens


@pytest.fixture(scope="module")
def target(folder: Path):
    return scan_file(folder / "target.gguf")


@pytest.mark.parametrize(
    ("kwargs", "rule", "needle"),
    [
        (dict(target_layers=(0, 1)), "target-layers-count", "lists 2 layer ids"),
        (dict(target_layers=(0, 1, 5)), "target-layer-range", "refers to layer 5, but target.gguf has 2 layers"),
        (dict(n_embd=32), "shared-embedding-width", "no token_embd.weight of its own"),
        (dict(tokenizer=stories_tokenizer().with_extra_tokens(3)), "vocabulary", "515 tokens"),
        (dict(tokenizer=stories_tokenizer().with_token(100, "zz-other")), "vocabulary", "fingerprints differ"),
    ],
)
def test_each_rule_refuses_with_its_name(tmp_path: Path, target, kwargs: dict, rule: str, needle: str) -> None:
    p = write_eagle3_head(tmp_path / "h.gguf", target_n_embd=64, **{"target_layers": (0, 1, 1), **kwargs})
    v = check_head(target, scan_file(p))
    assert (v.matches, v.rule) == (False, rule), v.message
    assert needle in v.message


def test_fc_width_is_checked_against_the_target(tmp_path: Path, target) -> None:
    # the key says 64, but fc.weight was sized for 3 x 40: the loader would build fc from the key and fail
    p = write_eagle3_head(tmp_path / "h.gguf", target_n_embd=64)
    good = head_facts(scan_file(p))
    from dataclasses import replace

    v = check_head(target, scan_file(p), replace(good, fc_in=120))
    assert v.rule == "target-hidden-size" and "fc.weight takes 120 inputs" in v.message


def test_dflash_and_mtp_heads(tmp_path: Path, target) -> None:
    tok = stories_tokenizer()
    # a DFlash head: target_layers + its own width must equal the target's
    dflash = write_gguf(tmp_path / "dflash.gguf", architecture="dflash", tokenizer=tok,
                        kv={"dflash.embedding_length": 64, "dflash.block_count": 1, "dflash.target_layers": [0, 1]},
                        tensors={"fc.weight": __import__("numpy").zeros((64, 128), dtype="float32")})
    m = scan_file(dflash)
    assert m.kind == "draft-head" and dict(m.detail)["spec_type"] == "draft-dflash"
    assert check_head(target, m).matches
    wide = write_gguf(tmp_path / "dflash-wide.gguf", architecture="dflash", tokenizer=tok,
                      kv={"dflash.embedding_length": 96, "dflash.block_count": 1, "dflash.target_layers": [0]},
                      tensors={"fc.weight": __import__("numpy").zeros((96, 96), dtype="float32")})
    v = check_head(target, scan_file(wide))
    assert v.rule == "target-hidden-size" and "dflash.embedding_length = 96" in v.message
    nolayers = write_gguf(tmp_path / "dflash-nol.gguf", architecture="dflash", tokenizer=tok,
                          kv={"dflash.embedding_length": 64, "dflash.block_count": 1},
                          tensors={"fc.weight": __import__("numpy").zeros((64, 64), dtype="float32")})
    assert check_head(target, scan_file(nolayers)).rule == "target-layers-count"
    # an MTP head (every block is a nextn block) of another architecture
    import numpy as np

    mtp_t = {"blk.0.nextn.eh_proj.weight": np.zeros((64, 128), dtype=np.float32)}
    same = write_gguf(tmp_path / "mtp-llama.gguf", architecture="llama", tokenizer=tok,
                      kv={"llama.embedding_length": 64, "llama.block_count": 1}, tensors=mtp_t)
    other = write_gguf(tmp_path / "mtp-qwen.gguf", architecture="qwen35", tokenizer=tok,
                       kv={"qwen35.embedding_length": 64, "qwen35.block_count": 1}, tensors=mtp_t)
    assert scan_file(same).kind == "draft-head" and check_head(target, scan_file(same)).matches
    v = check_head(target, scan_file(other))
    assert v.rule == "target-architecture" and "qwen35" in v.message


def test_gemma4_assistant_needs_a_gemma4_target(tmp_path: Path, target) -> None:
    import numpy as np

    p = write_gguf(tmp_path / "assistant.gguf", architecture="gemma4-assistant", tokenizer=stories_tokenizer(),
                   kv={"gemma4-assistant.embedding_length": 32, "gemma4-assistant.embedding_length_out": 64},
                   tensors={"token_embd.weight": np.zeros((512, 32), dtype=np.float32)})
    v = check_head(target, scan_file(p))
    assert v.rule == "target-architecture" and "gemma4" in v.message
