"""The synthetic GGUF generator (tests/synth.py): structure, and the acceptance dial on the real server."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.synth import (
    complete_greedy,
    make_family,
    raw_llama_server,
    stories_tokenizer,
    write_llama_gguf,
    write_split_gguf,
)


def _tensors(path: Path) -> dict[str, np.ndarray]:
    return {t.name: np.asarray(t.data).astype(np.float32) for t in gguf.GGUFReader(path).tensors}


@pytest.fixture(scope="module")
def small_family(tmp_path_factory: pytest.TempPathFactory):
    return make_family(tmp_path_factory.mktemp("fam"), n_embd=64, n_layers=4, draft_layers=2, eps=0.25, dtype="f32")


def test_stories_tokenizer() -> None:
    tok = stories_tokenizer()
    assert tok.model == "llama" and tok.n_tokens == 512
    assert tok.tokens[:3] == ("<unk>", "<s>", "</s>") and tok.bos_id == 1 and tok.eos_id == 2
    assert len(tok.scores) == len(tok.token_types) == 512
    assert tok.token_types.count(1) == 512 - 3 - 256  # unk, two controls, 256 byte tokens


def test_family_shares_blocks_and_scales_the_rest(small_family) -> None:
    t = _tensors(small_family.target)
    g = _tensors(small_family.good_draft)
    u = _tensors(small_family.unrelated_draft)
    assert set(g) < set(t)
    for name, arr in g.items():  # embeddings, norms, output and the first 2 blocks are identical
        assert np.array_equal(arr, t[name]), name
    assert not np.array_equal(u["blk.0.attn_q.weight"], t["blk.0.attn_q.weight"])
    # blocks past the first two: attn_output / ffn_down scaled by eps (compare with an eps=1 copy)
    ref = _tensors(
        write_llama_gguf(small_family.target.parent / "ref.gguf", n_embd=64, n_layers=4, dtype="f32")
    )
    for name in ("blk.2.attn_output.weight", "blk.3.ffn_down.weight"):
        assert np.allclose(t[name], 0.25 * ref[name], atol=1e-6)
    assert np.array_equal(t["blk.2.attn_q.weight"], ref["blk.2.attn_q.weight"])


def test_non_normal_output_rows_are_zero(small_family) -> None:
    out = _tensors(small_family.target)["output.weight"]
    types = np.array(stories_tokenizer().token_types)
    assert out.shape == (512, 64)
    assert not out[types != 1].any()
    assert (np.abs(out[types == 1]).sum(axis=1) > 0).all()


def test_weights_from_and_f16(tmp_path: Path) -> None:
    src = write_llama_gguf(tmp_path / "src.gguf", seed=5)
    copy = write_llama_gguf(tmp_path / "copy.gguf", seed=99, weights_from=src, dtype="f16")
    a, b = _tensors(src), _tensors(copy)
    assert np.allclose(a["blk.1.ffn_up.weight"], b["blk.1.ffn_up.weight"], atol=1e-2)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(copy).tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_split_writer_keys(tmp_path: Path) -> None:
    shards = write_split_gguf(tmp_path, "m", 3)
    assert [p.name for p in shards] == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    readers = [gguf.GGUFReader(p) for p in shards]
    assert [int(r.fields["split.no"].contents()) for r in readers] == [0, 1, 2]
    assert "general.architecture" in readers[0].fields and "general.architecture" not in readers[1].fields
    assert "tokenizer.ggml.tokens" not in readers[2].fields
    assert sum(len(r.tensors) for r in readers) == int(readers[0].fields["split.tensors.count"].contents())


# --- the acceptance dial on the real llama-server -------------------------------------------


def _generate(server: Path, target: Path, draft: Path | None, prompts: list[str], log: Path) -> tuple[list[str], int, int]:
    args = ["-m", str(target), "-c", "512", "-np", "1", "-t", "1"]
    if draft is not None:
        args += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--spec-draft-p-min", "0"]
    with raw_llama_server(server, args, log=log) as client:
        return complete_greedy(client, prompts, 32)


@pytest.mark.server
def test_acceptance_dial_on_real_server(llama_server_bin: Path, tmp_path: Path) -> None:
    """eps 0 → the draft predicts the target exactly; an unrelated draft is almost never accepted;
    outputs vary with the prompt and speculation is lossless (greedy)."""
    fam = make_family(tmp_path / "f", n_embd=128, n_layers=4, draft_layers=2, eps=0.0, dtype="f32")
    prompts = ["Once upon a time", "The dog ran to the park and", "Lily saw a big red ball"]
    base, _, _ = _generate(llama_server_bin, fam.target, None, prompts, tmp_path / "base.log")
    assert len(set(base)) == len(prompts), base  # not one repeated output
    assert all(len(set(o.split())) > 3 for o in base), base  # not one repeated token
    same, dn, da = _generate(llama_server_bin, fam.target, fam.good_draft, prompts, tmp_path / "good.log")
    assert same == base
    assert dn > 0 and da / dn > 0.95, (dn, da)
    other, dn_u, da_u = _generate(llama_server_bin, fam.target, fam.unrelated_draft, prompts, tmp_path / "bad.log")
    assert other == base
    assert dn_u > 0 and da_u / dn_u < 0.3, (dn_u, da_u)


@pytest.mark.server
def test_split_set_loads_in_llama_server(llama_server_bin: Path, tmp_path: Path) -> None:
    """The split writer follows gguf-split's layout closely enough for llama.cpp to load the set."""
    shards = write_split_gguf(tmp_path, "sp", 3, n_embd=64, n_layers=2)
    outs, _, _ = _generate(llama_server_bin, shards[0], None, ["Once upon a time"], tmp_path / "split.log")
    # shard 1 holds only a third of the tensors: generating text proves the other shards were loaded
    assert outs[0].strip()
