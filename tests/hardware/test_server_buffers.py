"""Our plan against the buffer sizes a real llama-server reports at load (-lv 4), on the CPU."""

from __future__ import annotations

import pytest

from tests.hardware.conftest import cpu_only_devices
from tests.synth import server_load_log
from tuner.hardware.buffers import parse_load_buffers
from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory


def test_parse_load_buffers_splits_target_and_draft():
    log = [
        "I load_tensors:   CPU_Mapped model buffer size =   163.57 MiB\n",
        "I llama_kv_cache:        CPU KV buffer size =    72.00 MiB\n",
        "I sched_reserve:        CPU compute buffer size =    25.02 MiB\n",
        "I common_speculative_init_result: loading draft model 'd.gguf'\n",
        "I load_tensors:   CPU_Mapped model buffer size =    28.51 MiB\n",
        "I load_tensors:        CUDA0 model buffer size =    10.00 MiB\n",
    ]
    b = parse_load_buffers(log)
    assert b.target.model_bytes == round(163.57 * 2**20) and b.target.kv_bytes == 72 * 2**20
    assert b.draft.model_bytes == round(38.51 * 2**20)
    assert ("model", "CUDA0", 10 * 2**20) in b.draft.by_backend
    with pytest.raises(ValueError, match="-lv 4"):
        parse_load_buffers(["I srv  llama_server: model loaded\n"])


def _load(server, target, draft, n_ctx, n_parallel, no_repack=False):
    argv = [str(server), "-m", str(target), "-c", str(n_ctx), "-lv", "4", "--fit", "off", "--host", "127.0.0.1",
            "--port", "0", "-t", "1", "--no-warmup"] + (["--no-repack"] if no_repack else [])
    if n_parallel is not None:
        argv += ["-np", str(n_parallel)]
    if draft is not None:
        argv += ["-md", str(draft), "--spec-type", "draft-simple"]
    lines = server_load_log(argv, 120)
    return parse_load_buffers(lines), lines


@pytest.mark.server
@pytest.mark.parametrize("n_ctx, n_parallel", [(1000, 1), (2048, 2), (1024, None)])
def test_plan_matches_llama_server(llama_server_bin, synth_family, n_ctx, n_parallel):
    devs = cpu_only_devices(llama_server_bin)  # the mode in force: a recorded --no-repack is on the argv too
    bufs, lines = _load(llama_server_bin, synth_family.target, synth_family.good_draft, n_ctx, n_parallel,
                        devs.cpu_buffers.no_repack)
    t, d = load_model_spec(synth_family.target), load_model_spec(synth_family.good_draft)
    plan = plan_memory(MemoryRequest(target=t, draft=d, spec_type="draft-simple", n_ctx=n_ctx,
                                     n_parallel=n_parallel), devs)
    # the server agrees on the slot layout
    slots = next(x for x in lines if "n_slots" in x and "n_ctx_slot" in x)
    assert f"n_slots = {plan.n_parallel}" in slots and f"n_ctx_slot = {plan.n_ctx_slot}" in slots
    h = plan.host.need
    assert bufs.draft is not None
    for ours, theirs, tol in (
        (h.target_weights_bytes, bufs.target.model_bytes, 0.10),
        (h.target_kv_bytes, bufs.target.kv_bytes, 0.10),
        (h.draft_weights_bytes, bufs.draft.model_bytes, 0.10),
        (h.draft_kv_bytes, bufs.draft.kv_bytes, 0.10),
        (h.compute_bytes, bufs.target.compute_bytes + bufs.draft.compute_bytes, 0.10),
        (h.output_bytes, bufs.target.output_bytes + bufs.draft.output_bytes, 0.10),
        (plan.total_bytes, bufs.total_bytes, 0.02),
    ):
        # the log prints sizes with 0.01 MiB resolution (a 512-token vocabulary's output buffer is "0.00 MiB")
        assert abs(ours - theirs) <= max(tol * theirs, 0.01 * 2**20), (ours / 2**20, theirs / 2**20)
