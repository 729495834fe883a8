"""MoE targets: expert tensors read from the header, --n-cpu-moe / --cpu-moe placement on injected GPUs,
and a generated qwen3moe model planned against the real CPU server's buffers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.hardware.conftest import dense_spec, gpu_devices
from tuner.hardware.devices import Devices
from tuner.hardware.memory import (
    GIB,
    MIB,
    MemoryRequest,
    load_model_spec,
    max_target_ngl,
    plan_memory,
)


def moe_spec(n_layer: int = 48, block_mib: int = 360, expert_mib: int = 340):
    """A Qwen3-30B-A3B-like Q4 spec: 48 blocks of ~360 MiB, ~340 MiB of it experts (128 x 768 wide, 8 used)."""
    base = dense_spec("moe", file_bytes=n_layer * block_mib * MIB + 600 * MIB, n_layer=n_layer, n_embd=2048,
                      n_head=32, n_head_kv=4, head_dim=128, n_ff=6144, n_vocab=151936)
    return replace(base, block_bytes=(block_mib * MIB,) * n_layer, expert_bytes=(expert_mib * MIB,) * n_layer,
                   n_expert=128, n_expert_used=8, n_ff_exp=768)


GPU_8G = gpu_devices(("CUDA0", 8192, 7800))


def test_n_cpu_moe_moves_the_experts_of_the_first_blocks_to_the_host():
    m = moe_spec()
    devs = gpu_devices(("CUDA0", 81920, 80000))  # room for everything: only the override moves bytes
    full = plan_memory(MemoryRequest(target=m, n_ctx=4096), devs)
    assert full.expert_host_bytes == 0 and full.devices[0].target_layers == 48
    ten = plan_memory(MemoryRequest(target=m, n_ctx=4096, n_cpu_moe=10), devs)
    moved = 10 * 340 * MIB
    assert ten.expert_host_bytes == moved
    assert ten.devices[0].target_layers == 48  # the blocks stay on the GPU, only their experts move
    assert full.devices[0].need.target_weights_bytes - ten.devices[0].need.target_weights_bytes == moved
    assert ten.host.need.target_weights_bytes - full.host.need.target_weights_bytes == moved
    # the CPU now runs the expert matmuls of those blocks: the host gets a compute buffer for them
    assert ten.host.need.compute_bytes > full.host.need.compute_bytes
    every = plan_memory(MemoryRequest(target=m, n_ctx=4096, cpu_moe=True), devs)
    assert every.expert_host_bytes == 48 * 340 * MIB
    # experts of blocks that are on the CPU anyway are not counted twice
    part = plan_memory(MemoryRequest(target=m, n_ctx=4096, ngl=21, n_cpu_moe=40), devs)
    assert part.expert_host_bytes == (40 - 28) * 340 * MIB  # blocks 28..47 + output are on the GPU
    same = plan_memory(MemoryRequest(target=m, n_ctx=4096, ngl=21), devs)
    weights = lambda p: p.host.need.target_weights_bytes + sum(d.need.target_weights_bytes for d in p.devices)  # noqa: E731
    assert weights(part) == weights(same) == m.weights_bytes  # bytes move, none appear or vanish


def test_expert_offload_gives_an_moe_target_a_real_placement_on_8_gb():
    m = moe_spec()
    dense_only = max_target_ngl(MemoryRequest(target=m, n_ctx=4096), GPU_8G)
    assert dense_only < 20  # 17 GiB of weights: most blocks must stay on the CPU
    with_cpu_moe = max_target_ngl(MemoryRequest(target=m, n_ctx=4096, cpu_moe=True), GPU_8G)
    assert with_cpu_moe == 49  # attention + router of every block fits once the experts stay on the CPU
    plan = plan_memory(MemoryRequest(target=m, n_ctx=4096, cpu_moe=True), GPU_8G)
    assert plan.fits and plan.devices[0].need.target_weights_bytes < 2 * GIB
    # --n-cpu-moe N: more experts on the CPU never fits fewer layers
    counts = [max_target_ngl(MemoryRequest(target=m, n_ctx=4096, n_cpu_moe=n), GPU_8G) for n in (0, 12, 24, 36, 48)]
    assert counts == sorted(counts) and counts[0] == dense_only and counts[-1] == 49
    # an MoE target next to a dense draft on the GPU
    draft = dense_spec("0.6B", file_bytes=int(0.6 * GIB), n_layer=28, n_embd=1024, n_head=16, n_head_kv=8,
                       head_dim=128, n_ff=3072, n_vocab=151936)
    both = MemoryRequest(target=m, draft=draft, spec_type="draft-simple", n_ctx=4096, cpu_moe=True)
    assert max_target_ngl(both, GPU_8G) == 49
    assert plan_memory(both, GPU_8G).devices[0].draft_layers == 28
    dense = plan_memory(MemoryRequest(target=dense_spec("d", file_bytes=GIB, n_layer=8, n_embd=512, n_head=8,
                                                        n_head_kv=2, head_dim=64, n_ff=1536, n_vocab=32000),
                                      n_cpu_moe=4), GPU_8G)
    assert any("no MoE expert tensors" in n for n in dense.notes)
    with pytest.raises(ValueError, match="--n-cpu-moe"):
        plan_memory(MemoryRequest(target=m, n_cpu_moe=-1), GPU_8G)


def test_header_of_a_generated_qwen3moe(tmp_path):
    from tests.synth import write_moe_gguf

    s = load_model_spec(write_moe_gguf(tmp_path / "moe.gguf", n_embd=128, n_layers=3, n_expert=8, n_expert_used=2,
                                       n_ff_exp=64))
    assert s.architecture == "qwen3moe" and (s.n_expert, s.n_expert_used, s.n_ff_exp) == (8, 2, 64)
    assert s.expert_bytes == (3 * 8 * 64 * 128 * 2,) * 3  # gate/up/down experts, F16
    assert all(e < b for e, b in zip(s.expert_bytes, s.block_bytes))


@pytest.mark.server
@pytest.mark.parametrize("repack", [True, False], ids=["repack", "no-repack"])
@pytest.mark.parametrize("n_ctx", [512, 4096])
def test_generated_moe_loads_in_the_real_server_and_matches_the_plan(llama_server_bin, tmp_path, n_ctx, repack):
    """The plan of a generated MoE agrees with the real server's load lines, with ggml's extra CPU buffer
    types on (the plan told the build's types: on an AMX build the dense F16 matrices get an AMX copy beside
    the mapped file, the experts do not) and off (``--no-repack``, the workaround on CPUs whose repacked
    kernels trap). ``--no-warmup``: loading runs no kernel, so the repack mode loads on such CPUs too."""
    from tests.synth import server_load_log, write_moe_gguf
    from tuner.hardware.buffers import EXTRA_CPU_BUFFER_TYPES, CpuBuffers, parse_cpu_build, parse_load_buffers

    path = write_moe_gguf(tmp_path / "moe.gguf", n_embd=256, n_layers=4, n_expert=16, n_expert_used=4, n_ff_exp=256)
    lines = server_load_log([str(llama_server_bin), "-m", str(path), "-c", str(n_ctx), "-np", "1", "-lv", "4",
                             "--fit", "off", "--host", "127.0.0.1", "--port", "0", "-t", "1", "--no-warmup",
                             *([] if repack else ["--no-repack"])], 120)
    assert any("model loaded" in x for x in lines), "".join(lines[-10:])
    bufs, build = parse_load_buffers(lines).target, parse_cpu_build(lines)
    types = set(build.extra_types) | ({"CPU_REPACK"} if "avx2" in build.build_flags else set())
    fact = CpuBuffers(tuple(t for t in EXTRA_CPU_BUFFER_TYPES if t in types), build.build_flags, no_repack=not repack)
    req = MemoryRequest(target=load_model_spec(path), n_ctx=n_ctx, n_parallel=1)
    plan = plan_memory(req, Devices((), None, None, None, cpu_buffers=fact))
    assert tuple(n for n, _, _ in plan.extra_buffers) == build.extra_types
    for (name, copy, _), (_, sbytes) in zip(plan.extra_buffers, build.extra_bytes):
        assert abs(copy - sbytes) <= 0.01 * MIB, (name, copy / MIB, sbytes / MIB)
    h = plan.host.need
    assert abs(h.target_weights_bytes - bufs.model_bytes) <= 0.01 * bufs.model_bytes, bufs.by_backend
    assert abs(h.target_kv_bytes - bufs.kv_bytes) <= 0.01 * bufs.kv_bytes
    assert abs(h.compute_bytes - bufs.compute_bytes) <= 0.10 * bufs.compute_bytes, (h.compute_bytes / MIB,
                                                                                  bufs.compute_bytes / MIB)
    assert abs(plan.total_bytes - bufs.total_bytes) <= 0.10 * bufs.total_bytes
