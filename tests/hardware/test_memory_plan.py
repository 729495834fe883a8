"""Memory plan rules: KV formula and slot rules, layer placement by ngl, draft/MTP KV, header reading."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.hardware.conftest import dense_spec, gpu_devices
from tuner.hardware.devices import Devices
from tuner.hardware.memory import (
    GIB,
    MIB,
    MemoryRequest,
    ModelMemorySpec,
    kv_type_bytes,
    load_model_spec,
    max_target_ngl,
    plan_memory,
    spec_from_header,
)

CPU_ONLY = Devices((), 16 * GIB, 12 * GIB, 4, (), 8, None, True)


def small(n_layer=8, n_head_kv=2, head_dim=64, **kw) -> ModelMemorySpec:
    return dense_spec("m", file_bytes=kw.pop("file_bytes", 400 * MIB), n_layer=n_layer, n_embd=512, n_head=8,
                      n_head_kv=n_head_kv, head_dim=head_dim, n_ff=1536, n_vocab=32000, **kw)


def test_kv_bytes_follow_the_formula_on_the_cpu():
    m = small()
    plan = plan_memory(MemoryRequest(target=m, n_ctx=1000, n_parallel=1), CPU_ONLY)
    # n_ctx padded to 256: 1000 -> 1024; n_layer x n_ctx x n_head_kv x (k + v) x 2 bytes (f16)
    assert plan.n_ctx == 1024
    assert plan.host.need.target_kv_bytes == 8 * 1024 * 2 * (64 + 64) * 2
    q8 = plan_memory(MemoryRequest(target=m, n_ctx=1024, cache_type_k="q8_0", cache_type_v="q8_0"), CPU_ONLY)
    assert q8.host.need.target_kv_bytes == pytest.approx(8 * 1024 * 2 * 128 * 34 / 32)
    with pytest.raises(ValueError, match="-ctk"):
        kv_type_bytes("q3_weird")


def test_slots_and_unified_kv_rules():
    m = small()
    # explicit -np 2 -c 512: per-slot KV, n_ctx_slot 256 (reference 5.3 [emp])
    p = plan_memory(MemoryRequest(target=m, n_ctx=512, n_parallel=2), CPU_ONLY)
    assert (p.n_parallel, p.n_ctx_slot, p.kv_unified, p.n_ctx) == (2, 256, False, 512)
    # auto -np: 4 slots, unified KV, n_ctx_slot = the whole pool
    a = plan_memory(MemoryRequest(target=m, n_ctx=512, n_parallel=None), CPU_ONLY)
    assert (a.n_parallel, a.n_ctx_slot, a.kv_unified) == (4, 512, True)
    # the KV pool is the same size either way: slots split it, they do not multiply it
    assert a.host.need.target_kv_bytes == p.host.need.target_kv_bytes
    # -np 3 -c 1000: n_ctx padded to 1024, per slot 1024/3 = 341 -> padded to 512, 3 x 512 = 1536 cells
    q = plan_memory(MemoryRequest(target=m, n_ctx=1000, n_parallel=3), CPU_ONLY)
    assert (q.n_ctx_slot, q.n_ctx) == (512, 1536)


def test_draft_kv_uses_the_same_n_ctx_and_draft_cache_types():
    t, d = small(n_layer=8), small(n_layer=2, file_bytes=60 * MIB)
    t = replace(t, context_length=131072)
    d = replace(d, context_length=32768)  # training context must NOT size the draft KV
    base = MemoryRequest(target=t, draft=d, spec_type="draft-simple", n_ctx=2048, cache_type_k="q8_0",
                         cache_type_v="q8_0")
    p = plan_memory(base, CPU_ONLY)
    assert p.host.need.draft_kv_bytes == 2 * 2048 * 2 * 128 * 2  # f16 default for -ctkd/-ctvd
    p2 = plan_memory(replace(base, cache_type_k_draft="q8_0", cache_type_v_draft="q8_0"), CPU_ONLY)
    assert p2.host.need.draft_kv_bytes < p.host.need.draft_kv_bytes
    # a draft that --spec-type does not use costs nothing, and the plan says so
    n = plan_memory(replace(base, spec_type="ngram-mod"), CPU_ONLY)
    assert n.host.need.draft_weights_bytes == 0 and any("does not use it" in x for x in n.notes)


def test_mtp_layers_get_kv_only_in_the_mtp_context():
    t = replace(small(n_layer=9), mtp_layers=1)
    none = plan_memory(MemoryRequest(target=t, n_ctx=1024), CPU_ONLY)
    assert none.host.need.target_kv_bytes == 8 * 1024 * 2 * 128 * 2  # trunk only
    mtp = plan_memory(MemoryRequest(target=t, spec_type="draft-mtp", n_ctx=1024), CPU_ONLY)
    assert mtp.host.need.mtp_kv_bytes == 1 * 1024 * 2 * 128 * 2
    assert mtp.host.need.draft_weights_bytes == 0  # MTP weights are shared with the target
    bad = plan_memory(MemoryRequest(target=small(), spec_type="draft-mtp"), CPU_ONLY)
    assert any("no MTP layers" in x for x in bad.notes)


def test_ngl_places_output_first_then_last_blocks():
    m = small(n_layer=8)
    devs = gpu_devices(("CUDA0", 24576, 24000))
    one = plan_memory(MemoryRequest(target=m, ngl=1), devs)
    assert one.devices[0].output_on_device and one.devices[0].target_layers == 0
    assert one.devices[0].need.target_weights_bytes == m.output_bytes
    four = plan_memory(MemoryRequest(target=m, ngl=4), devs)
    assert four.devices[0].target_layers == 3
    assert four.devices[0].need.target_weights_bytes == m.output_bytes + 3 * m.block_bytes[0]
    assert four.host.need.target_weights_bytes == m.input_bytes + 5 * m.block_bytes[0]
    full = plan_memory(MemoryRequest(target=m), devs)
    assert full.devices[0].target_layers == 8 and full.target_ngl == 9
    # token embeddings never leave the CPU
    assert full.host.need.target_weights_bytes == m.input_bytes
    # KV follows its layer
    assert four.devices[0].need.target_kv_bytes == 3 * 4096 * 2 * 128 * 2


def test_two_gpus_split_by_free_memory_or_tensor_split():
    m = small(n_layer=8)
    devs = gpu_devices(("CUDA0", 24576, 24000), ("CUDA1", 12288, 8000))
    p = plan_memory(MemoryRequest(target=m), devs)
    # upper_bound over cumulative splits [0.75, 1.0] of il/9: layers 0..6 -> CUDA0, 7 + output -> CUDA1
    assert [d.target_layers for d in p.devices] == [7, 1]
    assert p.devices[1].output_on_device
    ts = plan_memory(MemoryRequest(target=m, tensor_split=(1.0, 1.0)), devs)
    assert sum(d.target_layers for d in ts.devices) == 8 and ts.devices[0].target_layers in (4, 5)


def test_fits_and_margin_and_max_ngl_agree():
    m = small(n_layer=32, file_bytes=8 * GIB)
    devs = gpu_devices(("CUDA0", 6144, 5000))
    req = MemoryRequest(target=m, n_ctx=4096)
    best = max_target_ngl(req, devs)
    assert 0 < best < 33
    ok = plan_memory(replace(req, ngl=best), devs)
    bad = plan_memory(replace(req, ngl=best + 1), devs)
    assert ok.fits and ok.margin_bytes >= 0 and not bad.fits and bad.margin_bytes < 0
    # linear search gives the same answer as the binary search
    linear = max(n for n in range(0, 34) if plan_memory(replace(req, ngl=n), devs).fits)
    assert linear == best
    # the margin counts: a bigger --fit-target leaves fewer layers
    assert max_target_ngl(replace(req, margin_bytes=3 * GIB), devs) < best
    # the budget decides, not the total
    assert max_target_ngl(req, gpu_devices(("CUDA0", 6144, 2000))) < best


def test_unknown_budget_is_not_a_fit_failure():
    m = small()
    devs = gpu_devices(("CUDA0", 8192, 8000))
    d = replace(devs.devices[0], budget_bytes=None)
    p = plan_memory(MemoryRequest(target=m), Devices((d,), GIB * 8, GIB * 8, 4))
    assert p.fits and p.devices[0].fits is None and any("budget unknown" in n for n in p.notes)


def test_host_ram_is_checked():
    m = small(file_bytes=2 * GIB)
    tight = Devices((), 4 * GIB, 1 * GIB, 4)
    p = plan_memory(MemoryRequest(target=m), tight)
    assert not p.fits and p.host.fits is False and p.margin_bytes < 0


def test_spec_from_real_header(stories260k_session):
    from tuner.catalog.header import read_header

    h = read_header(stories260k_session)
    s = spec_from_header(h)
    assert s.n_layer == 5 and s.n_embd == 64 and s.n_vocab == 512
    assert s.weights_bytes == sum(t.n_bytes for t in h.tensors)
    assert s.n_embd_k_gqa == (4 * 8,) * 5  # 4 KV heads of 8
    assert s.block_bytes[0] == sum(t.n_bytes for t in h.tensors if t.name.startswith("blk.0."))
    assert load_model_spec(stories260k_session) == s


def test_spec_from_header_hybrid_mtp_and_swa():
    from types import SimpleNamespace as NS

    tensors = [NS(name=f"blk.{i}.w", n_bytes=100) for i in range(8)] + [
        NS(name="token_embd.weight", n_bytes=1000), NS(name="output_norm.weight", n_bytes=10)]
    kv = {"general.architecture": "qwen35", "qwen35.block_count": 8, "qwen35.embedding_length": 256,
          "qwen35.attention.head_count": 8, "qwen35.attention.head_count_kv": 2,
          "qwen35.attention.key_length": 64, "qwen35.attention.value_length": 64,
          "qwen35.full_attention_interval": 4, "qwen35.nextn_predict_layers": 1, "qwen35.vocab_size": 1000}
    s = spec_from_header(NS(kv=kv, tensors=tensors, path="/m/q.gguf"))
    assert s.n_embd_k_gqa == (0, 0, 0, 128, 0, 0, 0, 128)
    assert s.mtp_layers == 1 and s.tied_output and s.output_bytes == 10 + 1000
    assert s.weights_bytes == 8 * 100 + 1000 + 10  # the tied token_embd counted once
    assert s.recurrent_layer_bytes == () and any("not counted" in n for n in s.notes)
    # with the ssm.* keys the recurrent state is counted per sequence (f32 conv + state rows)
    kv.update({"qwen35.ssm.conv_kernel": 4, "qwen35.ssm.inner_size": 512, "qwen35.ssm.state_size": 64,
               "qwen35.ssm.group_count": 4})
    r = spec_from_header(NS(kv=kv, tensors=tensors, path="/m/q.gguf"))
    per_layer = 4 * (3 * (512 + 2 * 4 * 64) + 64 * 512)
    assert r.recurrent_layer_bytes == (per_layer,) * 3 + (0,) + (per_layer,) * 3 + (0,)
    p2 = plan_memory(MemoryRequest(target=r, n_ctx=1024, n_parallel=2), CPU_ONLY)
    # trunk = 7 layers (the last is MTP): 1 attention layer with KV, 6 recurrent layers x 2 sequences
    assert p2.host.need.target_kv_bytes == 1024 * 128 * 2 * 2 + 6 * per_layer * 2
    kv2 = {"general.architecture": "gemma3", "gemma3.block_count": 12, "gemma3.embedding_length": 256,
           "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 1,
           "gemma3.attention.sliding_window": 512}
    g = spec_from_header(NS(kv=kv2, tensors=[], path=None))
    assert g.swa_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10) and g.swa_window == 512
    long = plan_memory(MemoryRequest(target=g, n_ctx=32768), CPU_ONLY)
    # 2 global layers hold 32768 cells, 10 SWA layers pad(512 + 512) = 1024 cells
    assert long.host.need.target_kv_bytes == (2 * 32768 + 10 * 1024) * 64 * 2 * 2
    with pytest.raises(ValueError, match="block_count"):
        spec_from_header(NS(kv={"general.architecture": "llama"}, tensors=[], path="/m/x.gguf"))


def test_plan_accepts_a_path_or_model_file_and_summarises(stories260k_session):
    from types import SimpleNamespace

    by_path = plan_memory(MemoryRequest(target=str(stories260k_session), n_ctx=512), CPU_ONLY)
    by_file = plan_memory(MemoryRequest(target=SimpleNamespace(path=stories260k_session), n_ctx=512), CPU_ONLY)
    assert by_path == by_file and by_path.host.need.target_weights_bytes > 1_000_000
    assert "Verdict: fits" in by_path.summary and "n_ctx 512" in by_path.summary
    tight = plan_memory(MemoryRequest(target=small(file_bytes=2 * GIB)), Devices((), 4 * GIB, GIB, 4))
    assert "does NOT fit" in tight.summary
    with pytest.raises(TypeError):
        plan_memory(MemoryRequest(target=42), CPU_ONLY)


def test_ngl_spellings_of_llama_cpp():
    m = small(n_layer=8)
    devs = gpu_devices(("CUDA0", 24576, 24000))
    full = plan_memory(MemoryRequest(target=m), devs)
    assert plan_memory(MemoryRequest(target=m, ngl="all"), devs) == full
    assert plan_memory(MemoryRequest(target=m, ngl="auto"), devs) == full
    assert plan_memory(MemoryRequest(target=m, ngl="4"), devs).devices[0].target_layers == 3
    with pytest.raises(ValueError, match="-ngl"):
        plan_memory(MemoryRequest(target=m, ngl="most"), devs)


@pytest.mark.parametrize("spec_type", ["draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"])
def test_every_draft_model_type_is_planned(spec_type):
    from tuner.spectypes import DRAFT_MODEL_TYPES

    assert spec_type in DRAFT_MODEL_TYPES  # the one definition the plan uses
    t, d = small(n_layer=8), small(n_layer=2, file_bytes=60 * MIB)
    p = plan_memory(MemoryRequest(target=t, draft=d, spec_type=spec_type, n_ctx=2048), CPU_ONLY)
    assert p.host.need.draft_weights_bytes == d.weights_bytes and p.host.need.draft_kv_bytes > 0
    assert not any("does not use it" in n for n in p.notes)
    # "draft" alone is no --spec-type value: nothing is planned for it
    bad = plan_memory(MemoryRequest(target=t, draft=d, spec_type="draft", n_ctx=2048), CPU_ONLY)
    assert bad.host.need.draft_weights_bytes == 0 and any("does not use it" in n for n in bad.notes)


def test_logits_rows_follow_the_servers_output_limit():
    """tools/server/server-context.cpp server_output_limits: min(n_batch, n_parallel x (1 + n_draft))."""
    from tuner.hardware.memory import reserve_outputs, spec_draft_n_max

    assert spec_draft_n_max("none") == 0 and spec_draft_n_max("draft-simple") == 3
    assert spec_draft_n_max("draft-simple", 16) == 16 and spec_draft_n_max("ngram-mod") == 64
    assert spec_draft_n_max("ngram-cache", 3) == 8 and spec_draft_n_max("none,ngram-simple,draft-mtp") == 48
    assert reserve_outputs(512, 2048, 1, 0) == 1 and reserve_outputs(512, 2048, 1, 3) == 4
    assert reserve_outputs(512, 2048, 4, 64) == 260 and reserve_outputs(512, 256, 8, 64) == 256
    big_vocab = replace(small(), n_vocab=262144)
    base = MemoryRequest(target=big_vocab, n_ctx=4096)
    alone = plan_memory(base, CPU_ONLY)
    mod = plan_memory(replace(base, spec_type="ngram-mod"), CPU_ONLY)
    assert (alone.target_outputs, mod.target_outputs) == (1, 65)
    # 65 logits rows of 262144 f32 outgrow the layer activations: the peak is the logits, plus the f16 mask
    assert mod.host.need.compute_bytes == 65 * 4 * (262144 + 512) + 512 * 4096 * 2
    assert alone.host.need.compute_bytes == 512 * 4 * (8 * 512 + 2 * 1536) + 512 * 4096 * 2
    tool = plan_memory(replace(base, n_outputs_max=2048), CPU_ONLY)  # llama-fit-params: n_outputs_max = n_batch
    assert tool.target_outputs == 512


def test_sliding_window_masks_and_a_draft_without_global_layers():
    g = replace(small(n_layer=6), swa_window=512, swa_layers=(0, 1, 2, 3, 4))
    p = plan_memory(MemoryRequest(target=g, n_ctx=32768), CPU_ONLY)
    only_swa = replace(small(n_layer=2), swa_window=512, swa_layers=(0, 1))
    q = plan_memory(MemoryRequest(target=only_swa, n_ctx=32768), CPU_ONLY)
    dense = plan_memory(MemoryRequest(target=small(n_layer=2), n_ctx=32768), CPU_ONLY)
    # f16 masks of 512 tokens: full 32768 cells + SWA pad(512 + 512) = 1024 cells; SWA-only: 1024 cells
    assert p.host.need.compute_bytes - dense.host.need.compute_bytes == 512 * 1024 * 2
    assert dense.host.need.compute_bytes - q.host.need.compute_bytes == 512 * (32768 - 1024) * 2


def test_compute_buffers_follow_the_layers_and_the_output_layer():
    """One compute buffer per backend that runs part of the graph; the logits live where the output
    layer is (llama.cpp offloads it first: ngl 1 = the output layer alone on the GPU)."""
    from tuner.hardware.memory import compute_buffer_bytes, host_input_bytes

    m = replace(small(n_layer=8), n_vocab=152064)
    devs = gpu_devices(("CUDA0", 24576, 24000))
    act = 512 * 4 * (8 * 512 + 2 * 1536)
    mask = 512 * 4096 * 2
    logits = 1 * 4 * (152064 + 512)
    full = plan_memory(MemoryRequest(target=m, n_ctx=4096), devs)
    assert full.devices[0].need.compute_bytes == max(act, logits) + mask
    assert full.host.need.compute_bytes == host_input_bytes(m, 512, 4096, True) == 512 * 4 * 512 * 2 + mask
    out_only = plan_memory(MemoryRequest(target=m, n_ctx=4096, ngl=1), devs)
    assert out_only.devices[0].need.compute_bytes == logits  # no block there: no activations, no mask
    assert out_only.host.need.compute_bytes == act + mask
    half = plan_memory(MemoryRequest(target=m, n_ctx=4096, ngl=5), devs)
    assert half.devices[0].need.compute_bytes == half.host.need.compute_bytes == act + mask
    assert compute_buffer_bytes(m, 512, 4096, True, True, n_outputs=512) == 512 * 4 * (152064 + 512) + mask
    # without flash attention the mask is f32 and the attention step (n_head x n_kv x n_tokens f32 KQ and
    # ~7 rows of n_head x head_dim) is the peak at this context
    nofa = plan_memory(MemoryRequest(target=m, n_ctx=4096, flash_attn=False), CPU_ONLY)
    assert nofa.host.need.compute_bytes == 8 * 4096 * 512 * 4 + 512 * 4 * 7 * 8 * 64 + 512 * 4096 * 4


def test_cpu_repack_copies_follow_the_build_and_the_layer_placement():
    """ggml-cpu repack.cpp: Q4_0/Q4_K/IQ4_NL/MXFP4 weights with ne[1] % 8 == 0 get a CPU_REPACK copy on an
    AVX2 build (Q2_K needs AVX-512), only for layers the CPU runs; the build's fact decides, the CPU's flags
    are only the guess without one (and no guess copies anything next to a local GPU)."""
    from types import SimpleNamespace as NS

    from tuner.hardware.buffers import CpuBuffers

    tensors = [NS(name=f"blk.{i}.ffn_up.weight", n_bytes=1000, shape=(64, 256), ggml_type=12) for i in range(4)]
    tensors += [NS(name="blk.0.ffn_down.weight", n_bytes=500, shape=(256, 60), ggml_type=12),  # 60 % 8 != 0
                NS(name="blk.1.attn_q.weight", n_bytes=700, shape=(64, 64), ggml_type=10),  # Q2_K: AVX-512
                NS(name="blk.2.attn_k.weight", n_bytes=300, shape=(64, 64), ggml_type=14),  # Q6_K: AMX only
                NS(name="token_embd.weight", n_bytes=4000, shape=(64, 512), ggml_type=12),  # get_rows: never
                NS(name="output.weight", n_bytes=2000, shape=(64, 512), ggml_type=2)]
    kv = {"general.architecture": "llama", "llama.block_count": 4, "llama.embedding_length": 64,
          "llama.attention.head_count": 4, "llama.vocab_size": 512}
    s = spec_from_header(NS(kv=kv, tensors=tensors, path=None))
    repack = {(layer, flag): nb for layer, flag, _, nb, _ in s.extra_buffer_weights if flag}
    assert repack == {(-1, "avx2"): 2000, (0, "avx2"): 1000, (1, "avx2"): 1000, (2, "avx2"): 1000,
                      (3, "avx2"): 1000, (1, "avx512"): 700}

    def build(*flags: str) -> Devices:
        return replace(CPU_ONLY, cpu_buffers=CpuBuffers(("CPU_REPACK",), flags))

    plain = plan_memory(MemoryRequest(target=s, n_ctx=256), CPU_ONLY)
    avx2 = plan_memory(MemoryRequest(target=s, n_ctx=256), build("avx2"))
    both = plan_memory(MemoryRequest(target=s, n_ctx=256), build("avx2", "avx512"))
    w = lambda p: p.host.need.target_weights_bytes  # noqa: E731
    assert (w(avx2) - w(plain), w(both) - w(plain)) == (6000, 6700)
    # the plan says how much of "target W" is those copies (plan's "three sizes for one file", stop 12)
    assert (plain.repack_host_bytes, avx2.repack_host_bytes, both.repack_host_bytes) == (0, 6000, 6700)
    assert both.extra_buffers == (("CPU_REPACK", 6700, 6700),)
    guessed = plan_memory(MemoryRequest(target=s, n_ctx=256), replace(CPU_ONLY, cpu_features=("avx2", "avx512f")))
    assert guessed.repack_host_bytes == 6700 and guessed.cpu_buffers.source == "CPU flags"
    gpu = replace(gpu_devices(("CUDA0", 8192, 8000)), cpu_buffers=CpuBuffers(("CPU_REPACK",), ("avx2",)))
    two = plan_memory(MemoryRequest(target=s, n_ctx=256, ngl=3), gpu)  # output + blocks 2, 3 on the GPU
    assert two.host.need.target_weights_bytes == s.input_bytes + 2 * 1000 + 500 + 700 + 2 * 1000
    assert two.repack_host_bytes == 2 * 1000  # blocks 0, 1 run on the CPU
    # without a fact, a local GPU's host buffer type comes first (src/llama-model.cpp make_cpu_buft_list)
    guess_gpu = replace(gpu_devices(("CUDA0", 8192, 8000)), cpu_features=("avx2",))
    assert plan_memory(MemoryRequest(target=s, n_ctx=256, ngl=3), guess_gpu).repack_host_bytes == 0


def test_the_prompt_cache_limit_is_counted_on_the_host(stories260k):
    """``--cache-ram`` is a ceiling in host RAM (llama-server's prompt cache): it adds exactly its bytes to the
    host's need, no GPU's, and the summary names it; 0 counts nothing."""
    from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory

    spec = load_model_spec(stories260k)
    base = plan_memory(MemoryRequest(target=spec, n_ctx=512), ())
    cached = plan_memory(MemoryRequest(target=spec, n_ctx=512, prompt_cache_bytes=1024 * 2**20), ())
    assert cached.host.need.total_bytes - base.host.need.total_bytes == 1024 * 2**20
    assert cached.host.need.prompt_cache_bytes == 1024 * 2**20 and base.host.need.prompt_cache_bytes == 0
    assert "prompt cache up to 1.0 GiB" in cached.summary and "prompt cache" not in base.summary
