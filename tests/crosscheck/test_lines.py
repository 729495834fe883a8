"""The lines under a plan are typed: each says its kind, and only llama-server's cached disagreement is one
(no reader looks for words). Nothing here starts llama-server: the fake answers ``--help`` for the argv."""

from __future__ import annotations

from tests.hardware.conftest import gpu_devices
from tuner.crosscheck.lines import CheckLine, plan_check_lines
from tuner.crosscheck.server_check import server_cross_check
from tuner.hardware.devices import Devices
from tuner.hardware.memory import GIB, MIB, MemoryRequest, load_model_spec, plan_memory


def _report(plan, compute_mib: int) -> list[str]:
    """A ``-lv 4 --fit on`` projection table with the plan's CUDA0 weights and KV and the given compute."""
    need = plan.devices[0].need
    host = plan.host.need
    return ["I common_params_fit_impl: getting device memory data for initial parameters:",
            "I common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute |",
            f"I common_memory_breakdown_print: |   - CUDA0 (Fake) | 8192 = 100 + (999 = "
            f"{need.target_weights_bytes // MIB} + {need.target_kv_bytes // MIB} + {compute_mib}) + 0 |",
            f"I common_memory_breakdown_print: |   - Host | {host.total_bytes // MIB} = "
            f"{host.target_weights_bytes // MIB} + {host.target_kv_bytes // MIB} + {host.compute_bytes // MIB} |"]


def test_each_line_says_what_it_is(stories260k_session, fake_server_bin):
    gpu = gpu_devices(("CUDA0", 8192, 7800))
    req = MemoryRequest(target=load_model_spec(stories260k_session), n_ctx=2048)
    trade = plan_check_lines(req, gpu, None)  # no binary: no cross-check line
    assert [(x.kind, x.disagrees) for x in trade] == [("trade", False), ("trade", False)]
    assert trade[0].text == "At n_ctx 2048: 6 of 6 target layers fit on the GPU (output layer first)."
    assert plan_check_lines(req, Devices((), GIB, GIB, 1), None) == ()  # no GPU: no trade either
    assert plan_check_lines(req, gpu, fake_server_bin)[2:] == (CheckLine(
        "Not cross-checked with llama-server yet (draftwise plan --server-check runs it once).", False, "not_checked"),)

    plan = plan_memory(req, gpu)
    for compute_mib, kind in ((plan.devices[0].need.compute_bytes // MIB, "agrees"), (900, "disagrees")):
        seeded = server_cross_check(req, gpu, fake_server_bin, runner=lambda argv, t: _report(plan, compute_mib),
                                    use_cache=False)  # what `draftwise plan --server-check` leaves in the cache
        assert seeded.ok and not seeded.cached, seeded.note
        (line,) = plan_check_lines(req, gpu, fake_server_bin)[2:]
        assert line.kind == kind and line.disagrees is (kind == "disagrees"), line
    assert "target compute on CUDA0" in line.text
