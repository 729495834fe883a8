"""One GGUF hyper-parameter reader (tuner/catalog/hparams.py) with llama.cpp's rule, used by the scan's table and
the memory plan: scalar or per-layer keys, KV heads copied from the per-layer head counts, the head size from
layer 0, a wrong array length named as a file llama.cpp refuses."""

from __future__ import annotations

import pytest

from tests.synth import stories_tokenizer, write_gguf
from tuner.catalog.header import ArrayRef, read_header
from tuner.catalog.hparams import read_hparams
from tuner.catalog.scan import scan_file
from tuner.hardware.devices import Devices
from tuner.hardware.memory import GIB, MemoryRequest, load_model_spec, plan_memory


def _kv(n_layer: int = 4, n_embd: int = 512, **keys: object) -> dict[str, object]:
    kv: dict[str, object] = {"general.architecture": "llama", "llama.block_count": n_layer,
                             "llama.embedding_length": n_embd}
    kv.update({f"llama.{k.replace('__', '.')}": v for k, v in keys.items()})
    return kv


def test_a_scalar_applies_to_every_layer_and_an_array_is_per_layer():
    hp = read_hparams(_kv(attention__head_count=8, attention__head_count_kv=2, feed_forward_length=1536))
    assert hp.n_head == (8,) * 4 and hp.n_head_kv == (2,) * 4 and hp.n_ff == (1536,) * 4
    assert hp.key_length == hp.value_length == 512 // 8 and hp.notes == ()
    hybrid = read_hparams(_kv(attention__head_count=8, attention__head_count_kv=(0, 0, 2, 0)))
    assert hybrid.n_head_kv == (0, 0, 2, 0) and hybrid.n_head_kv_max == 2
    explicit = read_hparams(_kv(attention__head_count=8, attention__key_length=128, attention__value_length=96))
    assert (explicit.key_length, explicit.value_length) == (128, 96)


def test_missing_kv_heads_are_each_layers_own_head_count_and_the_head_size_is_layer_0s():
    """src/llama-model.cpp ``load_hparams`` copies the per-layer ``n_head_arr`` into ``n_head_kv_arr``;
    ``n_embd_head_k = n_embd / n_head()`` with ``n_head()`` = layer 0 (src/llama-hparams.cpp)."""
    hp = read_hparams(_kv(attention__head_count=(4, 8, 8, 8)))
    assert hp.n_head_kv == (4, 8, 8, 8)
    assert hp.key_length == hp.value_length == 512 // 4  # not 512 // 8, the largest
    no_heads_first = read_hparams(_kv(attention__head_count=(0, 8, 8, 8)))
    assert no_heads_first.key_length == 0  # llama.cpp reads no head size when layer 0 has no heads


def test_a_wrong_array_length_is_a_note_and_still_read():
    hp = read_hparams(_kv(attention__head_count=8, attention__head_count_kv=(2, 2, 1)))
    (note,) = hp.notes
    assert note == ("llama.attention.head_count_kv has 3 values for 4 layers: llama.cpp refuses this file "
                    "(wrong array length)")
    assert hp.n_head_kv == (2, 2, 1, 1)  # padded with its last value
    assert read_hparams(_kv(attention__head_count=(8, 8, 8, 8, 8, 8))).n_head == (8,) * 4
    with pytest.raises(ValueError, match="llama.block_count missing"):
        read_hparams({"general.architecture": "llama"}, "x.gguf")
    with pytest.raises(ValueError, match="general.architecture missing"):
        read_hparams({}, "x.gguf")


def test_a_long_array_is_read_from_the_file(tmp_path):
    """More than 64 layers: the header keeps the array in the file (``ArrayRef``); the reader decodes it."""
    heads = tuple([4] + [8] * 69)
    path = write_gguf(tmp_path / "long.gguf", kv=_kv(70, attention__head_count=heads))
    kv = read_header(path).kv
    assert isinstance(kv["llama.attention.head_count"], ArrayRef)
    hp = read_hparams(kv)
    assert hp.n_head == heads and hp.n_head_kv == heads and hp.key_length == 512 // 4


def _per_layer_file(tmp_path, **keys):
    """A loadable-looking GGUF (tokenizer, block tensors) whose layers have different head counts."""
    import numpy as np

    tensors = {f"blk.{i}.attn_q.weight": np.zeros((8, 512), dtype=np.float32) for i in range(4)}
    tensors["token_embd.weight"] = np.zeros((8, 512), dtype=np.float32)
    return write_gguf(tmp_path / "per-layer.gguf", kv=_kv(context_length=2048, **keys), tensors=tensors,
                      tokenizer=stories_tokenizer())


def test_the_scan_and_the_memory_plan_read_the_same_shape(tmp_path):
    """The scan's table keeps the largest head counts and layer 0's head size; the memory plan's KV widths
    follow each layer's own KV heads (the copied head counts) at that head size."""
    path = _per_layer_file(tmp_path, attention__head_count=(4, 8, 8, 8))
    row = scan_file(path)
    assert row.kind == "llm", row.error
    assert (row.n_head, row.n_head_kv, row.key_length, row.value_length) == (8, 8, 128, 128)
    spec = load_model_spec(path)
    assert spec.n_embd_k_gqa == spec.n_embd_v_gqa == (4 * 128, 8 * 128, 8 * 128, 8 * 128)
    assert spec.n_head == 4 and spec.n_embd_head_k == 128 and spec.notes == ()
    bad = _per_layer_file(tmp_path, attention__head_count=8, attention__head_count_kv=(2, 2, 1))
    assert "llama.cpp refuses this file" in dict(scan_file(bad).detail)["note"]
    assert any("llama.cpp refuses this file" in n for n in load_model_spec(bad).notes)


@pytest.mark.parametrize("which, n_layer, k_gqa, swa_layers, compute, total", [
    # recorded before the one reader (f3ec5f4): n_ctx 4096, one slot, CPU only, no extra CPU buffer
    ("stories", 5, 32, (), 5_947_392, 9_742_080),
    ("gemma", 18, 256, (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16), 24_117_248, 300_062_720),
])
def test_the_real_headers_give_todays_memory_plan(request, which, n_layer, k_gqa, swa_layers, compute, total):
    path = request.getfixturevalue("stories260k_session" if which == "stories" else "gemma3_270m")
    spec = load_model_spec(path)
    assert (spec.n_layer, spec.swa_layers) == (n_layer, swa_layers)
    assert spec.n_embd_k_gqa == spec.n_embd_v_gqa == (k_gqa,) * n_layer
    plan = plan_memory(MemoryRequest(target=spec, n_ctx=4096, n_parallel=1), Devices((), 16 * GIB, 8 * GIB, 2))
    # the KV cache from the header alone: f16 K and V per cell, full layers 4096 cells, Gemma's sliding-window
    # layers min(4096, 512 + 512) padded to 256 (src/llama-kv-cache-iswa.cpp)
    swa_cells = 1024 if swa_layers else 0
    kv = (n_layer - len(swa_layers)) * 4096 * k_gqa * 4 + len(swa_layers) * swa_cells * k_gqa * 4
    assert plan.host.need.target_kv_bytes == kv
    assert (plan.host.need.compute_bytes, plan.total_bytes) == (compute, total)
