"""The build's CPU-buffer fact (``tuner.crosscheck.cpu_buffers``): the store follows the recorded ``--no-repack``
workaround, and one real probe launch of this machine's llama-server agrees with the plan and the server."""

from __future__ import annotations

import pytest

from tests.hardware.conftest import cpu_only_devices, record_workaround
from tests.hardware.test_cpu_buffers import NO_REPACK, TRAP
from tuner.crosscheck.cpu_buffers import (
    known_cpu_buffers,
    probe_cpu_buffers,
    record_cpu_buffers,
    workaround_sentence,
)
from tuner.crosscheck.server_check import compare_with_server, server_config_for
from tuner.hardware.buffers import CpuBuffers, parse_cpu_build
from tuner.hardware.memory import MIB, MemoryRequest, load_model_spec, plan_memory
from tuner.hardware.repack import no_repack_sentence


def test_the_fact_store_follows_the_workaround(tmp_path, monkeypatch):
    """A fact read with repacking on is cached per build; a recorded workaround turns the extra buffers off
    (and names its cause); a fact probed under --no-repack is asked again once the workaround is gone."""
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    assert known_cpu_buffers(binary) is None
    fact = record_cpu_buffers(binary, TRAP, [str(binary), "-m", "x.gguf"])
    assert fact == CpuBuffers(("AMX",), parse_cpu_build(TRAP).build_flags)
    assert known_cpu_buffers(binary) == fact and workaround_sentence(binary) is None
    record_workaround(binary, "sigill")
    on = known_cpu_buffers(binary)
    assert on.no_repack and on.in_force == () and on.cause == "sigill" and on.types == ("AMX",)
    assert workaround_sentence(binary) == no_repack_sentence("sigill", ("AMX",))
    other = tmp_path / "bin" / "other-server"
    other.write_text("#!/bin/sh\n")
    record_cpu_buffers(other, NO_REPACK, [str(other), "--no-repack"])
    assert known_cpu_buffers(other) is None  # no workaround for it: the build's types were never seen


@pytest.mark.server
def test_probe_and_plan_agree_with_this_machines_server(llama_server_bin, gemma3_270m):
    """One probe launch reads this build's extra buffers (cached afterwards); the plan for Gemma 3 270M
    agrees with the real server started with the argv it would get, names the same extra buffer types as
    its load lines, with the same sizes; and a build that does not trap never gets --no-repack."""
    from tuner.crosscheck.server_check import check_argv, run_server_log
    from tuner.process import free_port
    from tuner.server.argv import build_argv
    from tuner.server.dialect import probe_dialect

    devs = cpu_only_devices(llama_server_bin)
    fact = devs.cpu_buffers
    if "avx2" in fact.build_flags and not fact.no_repack:  # a CPU that traps runs with the repacked kernels off
        assert "CPU_REPACK" in fact.types  # the self-test model's 680-row Q4_0 matrices: never AMX
    assert probe_cpu_buffers(llama_server_bin) == fact  # from the cache
    req = MemoryRequest(target=load_model_spec(gemma3_270m), n_ctx=4096, n_parallel=1)
    argv = build_argv(llama_server_bin, server_config_for(req, binary=llama_server_bin).with_port(free_port()),
                      probe_dialect(llama_server_bin))
    assert ("--no-repack" in argv) is fact.no_repack
    lines = run_server_log(check_argv(argv, free_port()), 120)
    parts = compare_with_server(req, devs, lines)
    assert all(p.agrees for p in parts), [p.sentence() for p in parts if not p.agrees]
    plan, server = plan_memory(req, devs), parse_cpu_build(lines)
    assert tuple(n for n, _, _ in plan.extra_buffers) == server.extra_types
    for (name, copy, _), (sname, sbytes) in zip(plan.extra_buffers, server.extra_bytes):
        assert abs(copy - sbytes) <= 0.01 * MIB, (name, copy / MIB, sname, sbytes / MIB)
