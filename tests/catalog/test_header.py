"""Header reader: agrees with gguf.GGUFReader, skips arrays lazily, refuses crafted and cut files."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.synth import corrupt_copy, write_gguf, write_llama_gguf
from tuner.catalog.header import ArrayRef, GGUFError, StringArray, read_header


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def raw_gguf(kvs: list[bytes], tensors: list[bytes] = (), version: int = 3, n_kv: int | None = None,
             n_tensors: int | None = None, tail: bytes = b"") -> bytes:
    """Hand-built GGUF bytes: magic, version, counts, the given KV and tensor-info blobs, tail."""
    head = b"GGUF" + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
    return head + b"".join(kvs) + b"".join(tensors) + tail


def kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", 8) + _s(value)


def kv_u32(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<I", 4) + struct.pack("<I", value)


def test_matches_gguf_reader_on_real_model(stories260k_session: Path) -> None:
    h = read_header(stories260k_session)
    r = gguf.GGUFReader(stories260k_session)
    assert h.version == 3
    assert h.file_size_bytes == stories260k_session.stat().st_size
    assert h.kv["general.architecture"] == "llama"
    assert h.kv["llama.block_count"] == 5
    tokens = h.kv["tokenizer.ggml.tokens"]
    assert isinstance(tokens, StringArray) and tokens.count == 512
    f = r.fields["tokenizer.ggml.tokens"]
    assert tokens.texts() == [bytes(f.parts[i]).decode() for i in f.data]
    scores = h.kv["tokenizer.ggml.scores"]
    assert isinstance(scores, ArrayRef) and scores.count == 512
    sf = r.fields["tokenizer.ggml.scores"]
    assert np.allclose(scores.values(), [float(sf.parts[i][0]) for i in sf.data])
    assert len(h.tensors) == len(r.tensors)
    by_name = {t.name: t for t in r.tensors}
    for t in h.tensors:
        rt = by_name[t.name]
        assert t.offset_bytes == rt.data_offset
        assert t.n_bytes == rt.n_bytes
        assert t.n_elements == rt.n_elements
        assert t.ggml_type == int(rt.tensor_type)
    assert h.data_offset == min(t.offset_bytes for t in h.tensors)


def test_reads_version_2(tmp_path: Path) -> None:
    p = tmp_path / "v2.gguf"
    p.write_bytes(raw_gguf([kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 3)], version=2))
    h = read_header(p)
    assert h.version == 2 and h.kv == {"general.architecture": "llama", "llama.block_count": 3}
    assert h.tensors == ()


def test_refuses_version_1_and_unknown_versions(tmp_path: Path) -> None:
    p = tmp_path / "v1.gguf"
    p.write_bytes(raw_gguf([kv_str("general.architecture", "llama")], version=1))
    with pytest.raises(GGUFError, match="version 1"):
        read_header(p)
    p.write_bytes(raw_gguf([kv_str("general.architecture", "llama")], version=9))
    with pytest.raises(GGUFError, match="unsupported GGUF version 9"):
        read_header(p)


def test_refuses_big_endian(tmp_path: Path) -> None:
    p = tmp_path / "be.gguf"
    p.write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 0) + b"\0" * 16)
    with pytest.raises(GGUFError, match="big-endian"):
        read_header(p)


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "empty file"),
        (b"<!DOCTYPE html><html><body>Not found</body></html>" * 3, "HTML"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n", "Git LFS"),
        (b"tjgg" + b"\0" * 100, "legacy GGML"),
        (b"GGUF\x03\0\0", "shorter than a GGUF header"),
    ],
)
def test_refuses_non_gguf(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(content)
    with pytest.raises(GGUFError, match=words) as info:
        read_header(p)
    assert info.value.path == p


def test_refuses_crafted_string_array_count_without_allocating(tmp_path: Path) -> None:
    # an array that claims 2**40 strings in a file of a few hundred bytes
    arr = _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, 2**40) + _s("a") * 4
    p = tmp_path / "crafted.gguf"
    p.write_bytes(raw_gguf([kv_str("general.architecture", "llama"), arr]))
    t0 = time.perf_counter()
    with pytest.raises(GGUFError, match="tokenizer.ggml.tokens.*2?1099511627776 strings"):
        read_header(p)
    assert time.perf_counter() - t0 < 5.0  # walking 2**40 strings would take hours


@pytest.mark.parametrize(
    "blob, words",
    [
        (_s("k") + struct.pack("<I", 9) + struct.pack("<IQ", 6, 2**50), "1125899906842624 elements"),
        (_s("k") + struct.pack("<I", 8) + struct.pack("<Q", 2**62), "truncated or corrupt header"),
        (struct.pack("<Q", 2**60), "truncated or corrupt header"),
        (_s("k") + struct.pack("<I", 77), "unknown GGUF value type 77"),
        (_s("k") + struct.pack("<I", 9) + struct.pack("<IQ", 55, 1), "unknown array element type 55"),
    ],
)
def test_refuses_crafted_lengths(tmp_path: Path, blob: bytes, words: str) -> None:
    p = tmp_path / "crafted.gguf"
    p.write_bytes(raw_gguf([blob]) + b"\0" * 64)
    with pytest.raises(GGUFError, match=words):
        read_header(p)


def test_refuses_crafted_kv_and_tensor_counts(tmp_path: Path) -> None:
    p = tmp_path / "counts.gguf"
    p.write_bytes(raw_gguf([], n_kv=2**40) + b"\0" * 64)
    with pytest.raises(GGUFError, match="key/value pairs"):
        read_header(p)
    p.write_bytes(raw_gguf([], n_tensors=2**33) + b"\0" * 64)
    with pytest.raises(GGUFError, match="tensors"):
        read_header(p)


def test_string_array_region_is_skipped_and_decodable(tmp_path: Path) -> None:
    texts = [f"tok{i}" for i in range(1000)] + ["ünï", ""]
    arr = _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, len(texts)) + b"".join(_s(t) for t in texts)
    p = tmp_path / "arr.gguf"
    p.write_bytes(raw_gguf([arr, kv_u32("after", 7)]))
    h = read_header(p)
    assert h.kv["after"] == 7  # parsing continued right after the skipped array
    tokens = h.kv["tokenizer.ggml.tokens"]
    assert tokens.texts() == texts
    offs = tokens.element_offsets((0, 5, len(texts)))
    assert offs[0] == 0 and offs[len(texts)] == tokens.end_offset_bytes - tokens.offset_bytes
    assert offs[5] == sum(8 + len(t.encode()) for t in texts[:5])


def test_truncated_tensor_data_names_the_tensor(tmp_path: Path) -> None:
    full = write_llama_gguf(tmp_path / "full.gguf", n_layers=2)
    cut = corrupt_copy(full, tmp_path / "cut.gguf", truncate_to=full.stat().st_size - 1000)
    h = read_header(full)
    last = max(h.tensors, key=lambda t: t.offset_bytes)
    with pytest.raises(GGUFError, match=rf"truncated: tensor '{last.name}'.*interrupted download"):
        read_header(cut)
    # without the data check the header itself is still readable
    assert len(read_header(cut, check_data=False).tensors) == len(h.tensors)


def test_truncated_inside_header(tmp_path: Path, stories260k_session: Path) -> None:
    cut = corrupt_copy(stories260k_session, tmp_path / "cut.gguf", truncate_to=3000)
    with pytest.raises(GGUFError, match="truncated"):
        read_header(cut)


def test_short_numeric_arrays_are_decoded(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "e.gguf", architecture="eagle3", kv={"eagle3.target_layers": [2, 15, 28]})
    assert read_header(p).kv["eagle3.target_layers"] == (2, 15, 28)


def test_unreadable_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="cannot open"):
        read_header(tmp_path / "missing.gguf")


def test_misaligned_tensor_offset(tmp_path: Path) -> None:
    # one F32 tensor of 8 elements whose stored offset (4) is not a multiple of the alignment (32)
    tensor = _s("w") + struct.pack("<I", 1) + struct.pack("<Q", 8) + struct.pack("<I", 0) + struct.pack("<Q", 4)
    p = tmp_path / "mis.gguf"
    p.write_bytes(raw_gguf([kv_str("general.architecture", "llama")], [tensor]) + b"\0" * 128)
    with pytest.raises(GGUFError, match="'w': data offset 4 is not a multiple of the alignment 32"):
        read_header(p)


@pytest.mark.parametrize("chunk", [64, 1000, 4096])
def test_small_read_chunks_give_the_same_header(
    chunk: int, stories260k_session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header is read in growing chunks; any first-chunk size must give the same result."""
    import tuner.catalog.header as header_mod

    full = read_header(stories260k_session)
    monkeypatch.setattr(header_mod, "FIRST_CHUNK_BYTES", chunk)
    assert read_header(stories260k_session) == full
