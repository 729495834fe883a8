"""The seed's table: an 8 GiB GPU, a 27B Q4_K_M target (~16 GiB, 64 blocks), drafts fully on the GPU.

Seed measurements: the target alone fits about 24 GPU layers; with a 0.6 / 2.5 / 5.5 GiB draft fully
on the GPU about 20 / 13 / 0. The plan must give the same within ±3 layers.

How the counts moved when the compute buffers became llama.cpp's (issue 12): before, every model holding
the output layer was charged logits for all 512 ubatch tokens (512 x 152064 x 4 B = 297 MiB); the server
reserves one row per slot (x (1 + n_max) with a draft), so 23 / 19 / 11 / 0 became 24 / 20 / 12 / 1 —
the last "1" is the output layer alone (llama.cpp offloads it first), still no target block on the GPU.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.hardware.conftest import dense_spec, gpu_devices
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
        # the 9B draft alone nearly fills the card: no target block on the GPU (at most the output
        # layer, which llama.cpp offloads first), and one more layer is too many
        plan = plan_memory(replace(req, ngl=ngl), GPU_8G)
        assert ngl <= 1 and plan.fits and plan.devices[0].target_layers == 0
        assert plan.devices[0].need.draft_weights_bytes > 5 * GIB
        assert not plan_memory(replace(req, ngl=ngl + 1), GPU_8G).fits


def test_bigger_draft_never_leaves_more_target_layers():
    counts = [max_target_ngl(_req(DRAFTS[g]), GPU_8G) for g in (0.6, 2.5, 5.5)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]


def test_seed_counts_exactly_as_reported_in_issue_12():
    """The figures quoted in the test docstring (a change in the plan must update them there)."""
    counts = [max_target_ngl(_req(d), GPU_8G) for d in (None, DRAFTS[0.6], DRAFTS[2.5], DRAFTS[5.5])]
    assert counts == [24, 20, 12, 1]
    # the old rule (logits for every ubatch token, as llama-fit-params still reserves) gave fewer
    old = [max_target_ngl(replace(_req(d), n_outputs_max=512), GPU_8G) for d in (None, DRAFTS[2.5], DRAFTS[5.5])]
    assert old == [23, 12, 0]


GPU_16G = gpu_devices(("CUDA0", 16384, 15800))
GPU_24G = gpu_devices(("CUDA0", 24576, 23800))


@pytest.mark.parametrize("draft_gib", [None, 0.6, 2.5, 5.5])
def test_more_memory_never_fits_fewer_layers_and_longer_context_never_more(draft_gib):
    from tuner.hardware.memory import context_trade

    draft = DRAFTS[draft_gib] if draft_gib else None
    by_gpu = []
    for devs in (GPU_8G, GPU_16G, GPU_24G):
        per_ctx = [max_target_ngl(replace(_req(draft), n_ctx=c), devs) for c in (2048, 4096, 8192, 16384, 32768)]
        assert per_ctx == sorted(per_ctx, reverse=True), (draft_gib, per_ctx)
        by_gpu.append(per_ctx)
        trade = context_trade(replace(_req(draft), n_ctx=4096), devs, ceiling=131072)
        assert trade.max_ngl_at_ctx == per_ctx[1]
        # everything on the GPU at the largest context, one step (256) more does not fit
        top = trade.max_ctx_all_on_gpu
        if top:
            whole = replace(_req(draft), ngl=None, n_ctx=top)
            assert plan_memory(whole, devs).fits
            if top < 131072:
                assert not plan_memory(replace(whole, n_ctx=top + 256), devs).fits
    for small, big in zip(by_gpu, by_gpu[1:]):
        assert all(b >= s for s, b in zip(small, big)), (draft_gib, by_gpu)
    ctx_tops = [context_trade(_req(draft), d, ceiling=131072).max_ctx_all_on_gpu for d in (GPU_8G, GPU_16G, GPU_24G)]
    assert ctx_tops == sorted(ctx_tops)
    # a 16 GiB Q4_K_M target never fits whole on 8 GiB; on 24 GiB it does at some context
    assert ctx_tops[0] == 0 and (draft_gib == 5.5 or ctx_tops[2] > 0)
