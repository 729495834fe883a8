"""Classification of every kind, split sets, folder walking and the scan cache."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.synth import (
    stories_tokenizer,
    write_gguf,
    write_llama_gguf,
    write_split_gguf,
    write_vocab_gguf,
)
from tuner.catalog import scan as scan_mod
from tuner.catalog.scan import scan_file, scan_folder

F32 = np.float32


def _kinds(rows) -> dict[str, str]:
    return {r.path.name: r.kind for r in rows}


def test_real_model_is_an_llm(stories260k_session: Path) -> None:
    m = scan_file(stories260k_session)
    assert m.kind == "llm" and m.error is None
    assert m.architecture == "llama" and m.n_layers == 5 and m.context_length == 2048
    assert m.n_embd == 64 and m.n_head == 8 and m.n_head_kv == 4 and m.key_length == 8
    assert m.mtp_layers == 0 and m.quantization == "F32"
    assert m.n_params == 292800
    t = m.tokenizer
    assert (t.model, t.vocab_type, t.n_tokens, t.bos_id, t.eos_id) == ("llama", "SPM", 512, 1, 2)
    # stories260K has no add_* keys: llama.cpp's SPM defaults apply
    assert t.add_bos is True and t.add_eos is False
    assert len(t.fingerprint) == 32


def test_kinds(tmp_path: Path) -> None:
    tok = stories_tokenizer()
    write_llama_gguf(tmp_path / "llm.gguf")
    write_gguf(
        tmp_path / "mmproj-model-f16.gguf",
        architecture="clip",
        kv={"clip.has_vision_encoder": True, "clip.projector_type": "mlp"},
        tensors={"v.patch_embd.weight": np.zeros((8, 8), F32)},
    )
    write_vocab_gguf(tmp_path / "ggml-vocab-llama-spm.gguf", tok)
    write_gguf(
        tmp_path / "bert.gguf",
        architecture="bert",
        tokenizer=tok,
        kv={"bert.block_count": 1, "bert.pooling_type": 1},
        tensors={"token_embd.weight": np.zeros((512, 8), F32)},
    )
    write_gguf(
        tmp_path / "qwen3-embedding.gguf",
        architecture="qwen3",
        tokenizer=tok,
        kv={"qwen3.block_count": 1, "qwen3.pooling_type": 3},
        tensors={"token_embd.weight": np.zeros((512, 8), F32)},
    )
    write_gguf(
        tmp_path / "eagle3-head.gguf",
        architecture="eagle3",
        tokenizer=tok,
        kv={"eagle3.block_count": 1, "eagle3.target_layers": [2, 5, 8]},
        tensors={"blk.0.attn_q.weight": np.zeros((8, 16), F32)},
    )
    write_gguf(
        tmp_path / "dflash-draft.gguf",
        architecture="dflash",
        tokenizer=tok,
        kv={"dflash.block_count": 1, "dflash.block_size": 16},
        tensors={"blk.0.attn_q.weight": np.zeros((8, 8), F32), "markov_w1.weight": np.zeros((8, 8), F32)},
    )
    write_gguf(
        tmp_path / "mtp-head.gguf",
        architecture="qwen35",
        tokenizer=tok,
        kv={"qwen35.block_count": 1, "qwen35.nextn_predict_layers": 1},
        tensors={"blk.0.nextn.eh_proj.weight": np.zeros((16, 8), F32)},
    )
    write_gguf(
        tmp_path / "futurearch.gguf",
        architecture="futurearch-9000",
        tokenizer=tok,
        kv={"futurearch-9000.block_count": 1},
        tensors={"token_embd.weight": np.zeros((512, 8), F32)},
    )
    write_gguf(
        tmp_path / "notok.gguf",
        architecture="llama",
        kv={"llama.block_count": 1},
        tensors={"token_embd.weight": np.zeros((512, 8), F32)},
    )
    (tmp_path / "page.gguf").write_bytes(b"<!doctype html>\n<html>Access denied</html>")
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "v1.gguf").write_bytes(b"GGUF" + struct.pack("<III", 1, 0, 0) + b"\0" * 32)
    (tmp_path / "be.gguf").write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 0) + b"\0" * 32)
    cut_src = write_llama_gguf(tmp_path / "cut.gguf.tmp")
    (tmp_path / "cut.gguf").write_bytes(cut_src.read_bytes()[:-100])
    cut_src.unlink()
    (tmp_path / "notes.txt").write_text("not a model")

    rows = {r.path.name: r for r in scan_folder(tmp_path)}
    assert _kinds(rows.values()) == {
        "llm.gguf": "llm",
        "mmproj-model-f16.gguf": "mmproj",
        "ggml-vocab-llama-spm.gguf": "vocab-only",
        "bert.gguf": "embedding",
        "qwen3-embedding.gguf": "embedding",
        "eagle3-head.gguf": "draft-head",
        "dflash-draft.gguf": "draft-head",
        "mtp-head.gguf": "draft-head",
        "futurearch.gguf": "unsupported",
        "notok.gguf": "broken",
        "page.gguf": "broken",
        "empty.gguf": "broken",
        "v1.gguf": "broken",
        "be.gguf": "broken",
        "cut.gguf": "broken",
    }
    assert dict(rows["dflash-draft.gguf"].detail)["spec_type"] == "draft-dspark"
    assert dict(rows["eagle3-head.gguf"].detail)["spec_type"] == "draft-eagle3"
    assert dict(rows["mtp-head.gguf"].detail)["spec_type"] == "draft-mtp"
    assert "futurearch-9000" in rows["futurearch.gguf"].error
    assert "tokenizer" in rows["notok.gguf"].error
    assert "HTML" in rows["page.gguf"].error
    assert "empty" in rows["empty.gguf"].error
    assert "version 1" in rows["v1.gguf"].error
    assert "big-endian" in rows["be.gguf"].error
    assert "truncated: tensor" in rows["cut.gguf"].error
    for name, r in rows.items():
        if r.kind not in ("broken", "unsupported"):
            assert r.error is None, name


def test_mtp_layers_of_a_target(tmp_path: Path) -> None:
    p = write_llama_gguf(tmp_path / "mtp.gguf", n_layers=3, nextn_layers=1)
    m = scan_file(p)
    assert m.kind == "llm" and m.n_layers == 4 and m.mtp_layers == 1


def test_complete_split_set_is_one_model(tmp_path: Path) -> None:
    shards = write_split_gguf(tmp_path, "model-q4", 3)
    single = write_llama_gguf(tmp_path / "single" / "whole.gguf")
    rows = scan_folder(tmp_path)
    split = [r for r in rows if r.path.name.startswith("model-q4")]
    assert len(split) == 1
    m = split[0]
    assert m.kind == "llm" and m.path == shards[0] and m.shards == tuple(shards)
    assert m.size_bytes == sum(p.stat().st_size for p in shards)
    assert m.tokenizer is not None and m.tokenizer.n_tokens == 512
    assert m.n_params == scan_file(single).n_params  # all shards' tensors counted


def test_incomplete_split_set_names_the_missing_shard(tmp_path: Path) -> None:
    shards = write_split_gguf(tmp_path, "big", 3)
    shards[1].unlink()
    rows = scan_folder(tmp_path)
    assert len(rows) == 1
    assert rows[0].kind == "broken"
    assert "big-00002-of-00003.gguf" in rows[0].error
    shards[0].unlink()
    rows = scan_folder(tmp_path)
    assert rows[0].kind == "broken" and "big-00001-of-00003.gguf" in rows[0].error


def test_split_shard_with_wrong_split_no(tmp_path: Path) -> None:
    shards = write_split_gguf(tmp_path, "sw", 2)
    shards[1].rename(tmp_path / "tmp.bin")
    shards[0].rename(shards[1])  # first shard's content under the second name
    (tmp_path / "tmp.bin").rename(shards[0])
    rows = scan_folder(tmp_path)
    assert len(rows) == 1 and rows[0].kind == "broken"
    assert "sw-00001-of-00002.gguf" in rows[0].error or "split.no" in rows[0].error


def test_look_alike_names_are_not_splits(tmp_path: Path) -> None:
    write_llama_gguf(tmp_path / "best-of-breed.gguf")
    write_llama_gguf(tmp_path / "llama-1-of-2.gguf", seed=1)
    write_llama_gguf(tmp_path / "solo-00001-of-00001.gguf", seed=2)
    rows = scan_folder(tmp_path)
    assert sorted(r.path.name for r in rows) == ["best-of-breed.gguf", "llama-1-of-2.gguf", "solo-00001-of-00001.gguf"]
    assert all(r.kind == "llm" and len(r.shards) == 1 for r in rows)


def test_recursive_with_symlink_loops_and_odd_entries(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    write_llama_gguf(tmp_path / "a" / "b" / "deep.gguf")
    (tmp_path / "a" / "b" / "loop").symlink_to(tmp_path)  # a symlink loop
    (tmp_path / "a" / "self").symlink_to(tmp_path / "a")
    (tmp_path / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")
    (tmp_path / "folder.gguf").mkdir()  # a directory with a model-like name
    os.mkfifo(tmp_path / "pipe.gguf")  # reading it would block forever
    (tmp_path / "link.gguf").symlink_to(tmp_path / "a" / "b" / "deep.gguf")  # same file twice
    rows = scan_folder(tmp_path)
    models = [r for r in rows if r.path.name != "pipe.gguf"]
    assert [r.path.name for r in models] == ["deep.gguf"] or [r.path.name for r in models] == ["link.gguf"]
    assert models[0].kind == "llm"
    # the FIFO is listed (never opened), not skipped silently
    (pipe,) = [r for r in rows if r.path.name == "pipe.gguf"]
    assert pipe.kind == "broken" and "not a regular file" in pipe.error and "FIFO" in pipe.error


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without read permission")
def test_unreadable_file_is_broken(tmp_path: Path) -> None:
    p = write_llama_gguf(tmp_path / "locked.gguf")
    p.chmod(0)
    try:
        rows = scan_folder(tmp_path)
    finally:
        p.chmod(0o644)
    assert rows[0].kind == "broken" and "cannot open" in rows[0].error


def test_unreadable_file_is_broken_when_open_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write_llama_gguf(tmp_path / "locked.gguf")
    real_open = os.open

    def deny(path, *a, **k):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", deny)  # every model file is opened through tuner.storage.open_regular
    rows = scan_folder(tmp_path, cache=False)
    assert rows[0].kind == "broken" and "Permission denied" in rows[0].error


def test_cache_reuses_unchanged_files_and_rereads_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models"
    a = write_llama_gguf(models / "a.gguf")
    write_vocab_gguf(models / "v.gguf")
    first = scan_folder(models)
    cache_file = Path(os.environ["DRAFTWISE_HOME"]) / "cache" / "scan-cache.json"
    assert cache_file.is_file()

    calls: list[Path] = []
    real = scan_mod.read_header

    def counting(path, *args, **kwargs):
        calls.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(scan_mod, "read_header", counting)
    second = scan_folder(models)
    assert second == first and calls == []

    # a changed file (new size and mtime) is read again; the other one still comes from the cache
    write_llama_gguf(a, n_layers=3)
    third = scan_folder(models)
    assert [p.name for p in calls] == ["a.gguf"]
    assert {r.path.name: r.n_layers for r in third}["a.gguf"] == 3

    # a deleted file is dropped from the cache
    import json

    (models / "v.gguf").unlink()
    assert [r.path.name for r in scan_folder(models)] == ["a.gguf"]
    assert [Path(k).name for k in json.loads(cache_file.read_text())["entries"]] == ["a.gguf"]
    write_vocab_gguf(models / "v.gguf")

    # cache=False reads everything
    calls.clear()
    scan_folder(models, cache=False)
    assert sorted(p.name for p in calls) == ["a.gguf", "v.gguf"]


def test_corrupt_cache_is_ignored(tmp_path: Path) -> None:
    write_llama_gguf(tmp_path / "m" / "a.gguf")
    cache_file = Path(os.environ["DRAFTWISE_HOME"]) / "cache" / "scan-cache.json"
    cache_file.parent.mkdir(parents=True)
    cache_file.write_text("{not json")
    rows = scan_folder(tmp_path / "m")
    assert rows[0].kind == "llm"


def test_missing_folder_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="models folder not found"):
        scan_folder(tmp_path / "nope")


def test_copies_of_the_real_model(tmp_path: Path, stories260k_session: Path) -> None:
    for name in ("x.gguf", "sub/y.GGUF"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copyfile(stories260k_session, tmp_path / name)
    rows = scan_folder(tmp_path)
    assert [r.kind for r in rows] == ["llm", "llm"]
    assert rows[0].tokenizer.fingerprint == rows[1].tokenizer.fingerprint


def test_split_shard_paths_rule(tmp_path: Path) -> None:
    from tuner.catalog.split import missing_shards, split_shard_paths

    first = tmp_path / "Model-Q4-00001-of-00003.gguf"
    assert [p.name for p in split_shard_paths(first)] == [
        "Model-Q4-00001-of-00003.gguf", "Model-Q4-00002-of-00003.gguf", "Model-Q4-00003-of-00003.gguf"]
    for look_alike in ("best-of-breed.gguf", "x-00001-of-00001.gguf", "x-0001-of-0003.gguf"):
        assert split_shard_paths(tmp_path / look_alike) == (tmp_path / look_alike,)
    first.write_bytes(b"")
    assert [p.name for p in missing_shards(first)] == ["Model-Q4-00002-of-00003.gguf", "Model-Q4-00003-of-00003.gguf"]
