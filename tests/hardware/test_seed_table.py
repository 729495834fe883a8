"""The seed's table: an 8 GiB GPU, a 27B Q4_K_M target (~16 GiB, 64 blocks), drafts fully on the GPU.

Seed measurements: the target alone fits about 24 GPU layers; with a 0.6 / 2.5 / 5.5 GiB draft fully
on the GPU about 20 / 13 / 0. The plan must give the same within ±3 layers.
"""

from __future__ import annotations

import pytest

from tests.hardware.conftest import dense_spec, gpu_devices
from dataclasses import replace

from tuner.hardware.memory import GIB, MemoryRequest, max_target_ngl, plan_memory

# A dense 64-block 27B at Q4_K_M (152k vocab, GQA 8 KV heads of 128).
TARGET = dense_spec("27B-Q4_K_M", file_bytes=16 * GIB, n_layer=64, n_embd=5120, n_head=40, n_head_kv=8,
                    head_dim=128, n_ff=17408, n_vocab=152064)
DRAFTS = {
    0.6: dense_spec("0.6B", file_bytes=int(0.6 * GIB), n_layer=28, n_embd=1024, n_head=16, n_head_kv=8,
                    head_dim=128, n_ff=3072, n_vocab=152064, embd_bytes_per_param=1.0625,
                    out_bytes_per_param=0.0),
    2.5: dense_spec("4B", file_bytes=int(2.5 * GIB), n_layer=36, n_embd=2560, n_head=32, n_head_kv=8,
                    head_dim=128, n_ff=9728, n_vocab=152064),
    5.5: dense_spec("9B", file_bytes=int(5.5 * GIB), n_layer=36, n_embd=4096, n_head=32, n_head_kv=8,
                    head_dim=128, n_ff=12288, n_vocab=152064),
}
GPU_8G = gpu_devices(("CUDA0", 8192, 7800))  # an 8 GiB card with a desktop on it


def _req(draft=None) -> MemoryRequest:
    return MemoryRequest(target=TARGET, draft=draft, spec_type="draft-simple" if draft else "none",
                         ngl=None, draft_ngl=None if draft else None, n_ctx=4096, n_parallel=1)


def test_target_alone_fits_about_24_layers():
    ngl = max_target_ngl(_req(), GPU_8G)
    assert abs(ngl - 24) <= 3, ngl
    plan = plan_memory(replace(_req(), ngl=ngl), GPU_8G)
    # llama.cpp offloads the output layer first: ngl = blocks on the GPU + 1
    dev = plan.devices[0]
    assert plan.fits and dev.output_on_device and dev.target_layers == ngl - 1
    over = plan_memory(replace(_req(), ngl=ngl + 1), GPU_8G)
    assert not over.fits and over.margin_bytes < 0


@pytest.mark.parametrize("draft_gib, expected", [(0.6, 20), (2.5, 13), (5.5, 0)])
def test_draft_on_gpu_leaves_the_seed_layer_counts(draft_gib, expected):
    req = _req(DRAFTS[draft_gib])
    ngl = max_target_ngl(req, GPU_8G)
    assert abs(ngl - expected) <= 3, (draft_gib, ngl)
    alone = max_target_ngl(_req(), GPU_8G)
    assert ngl < alone
    if expected == 0:
        # the 9B draft alone nearly fills the card: target on the CPU, and one more layer is too many
        plan = plan_memory(replace(req, ngl=0), GPU_8G)
        assert plan.fits and plan.devices[0].target_layers == 0
        assert plan.devices[0].need.draft_weights_bytes > 5 * GIB
        assert not plan_memory(replace(req, ngl=1), GPU_8G).fits


def test_bigger_draft_never_leaves_more_target_layers():
    counts = [max_target_ngl(_req(DRAFTS[g]), GPU_8G) for g in (0.6, 2.5, 5.5)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
