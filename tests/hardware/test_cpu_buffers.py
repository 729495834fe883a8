"""ggml's extra CPU buffer types in the memory plan: which weights AMX and CPU_REPACK copy, read from what the
build does (its load log), in the mode in force (``--no-repack`` = none), checked against the recorded AMX
machine's buffers (tests/hardware/data/amx-trap/). The fact store and the probe of this machine's build are
tested in tests/crosscheck/test_cpu_buffers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.crosscheck.server_check import compare_with_server, server_config_for
from tuner.hardware.buffers import CpuBuffers, parse_build_flags, parse_cpu_build
from tuner.hardware.devices import Devices
from tuner.hardware.memory import GIB, MIB, MemoryRequest, extra_buffer_class, load_model_spec, plan_memory
from tuner.hardware.repack import REPACK_SPEEDUP_PCT, no_repack_sentence

DATA = Path(__file__).resolve().parent / "data" / "amx-trap"
TRAP = (DATA / "trap-llama-server.txt").read_text(encoding="utf-8").splitlines()
NO_REPACK = (DATA / "no-repack-llama-server.txt").read_text(encoding="utf-8").splitlines()
# this machine's b11434 build (AVX2/AVX-512, no AMX), Gemma 3 270M Q4_K_M, -lv 4
CPU_REPACK_LOG = [
    "0.00.004.166 I cmn  common_param: system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | "
    "AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ",
    "0.01.587.775 I load_tensors:   CPU_Mapped model buffer size =   235.16 MiB",
    "0.01.587.792 I load_tensors:   CPU_REPACK model buffer size =    12.66 MiB",
    "0.01.656.254 I llama_kv_cache:        CPU KV buffer size =    24.00 MiB",
]


def test_the_load_log_names_the_builds_extra_cpu_buffers():
    """The recorded AMX machine: an AMX buffer beside the mapped file, and the build's features; with
    --no-repack none; this machine's AVX2 build: CPU_REPACK. A log without buffer lines is no answer."""
    amx = parse_cpu_build(TRAP)
    assert amx.extra_types == ("AMX",) and amx.extra_bytes == (("AMX", round(213.91 * MIB)),)
    assert {"amx_int8", "avx2", "avx512", "repack"} <= set(amx.build_flags)
    off = parse_cpu_build(NO_REPACK)
    assert off.extra_types == () and off.build_flags == amx.build_flags  # same build: REPACK = 1 still
    avx2 = parse_cpu_build(CPU_REPACK_LOG)
    assert avx2.extra_types == ("CPU_REPACK",) and "amx_int8" not in avx2.build_flags
    assert parse_build_flags(["system_info: n_threads = 2 | CPU : AVX2 = 1 | SVE_CNT = 16 | AMX_INT8 = 0 |"]) \
        == ("avx2",)
    with pytest.raises(ValueError, match="-lv 4"):
        parse_cpu_build(TRAP[:1])  # the system_info line alone cannot say "no extra buffer"


@pytest.mark.parametrize("ggml_type, shape, expert, expected", [
    (2, (256, 256), False, ("avx2", 256 * 8 * 18)),      # Q4_0: CPU_REPACK (rows % 8) and AMX (rows % 32)
    (2, (256, 680), False, ("avx2", -1)),                # 680 rows: a multiple of 8, not of 32
    (12, (1024, 640), False, ("avx2", 640 * 4 * 148)),   # Q4_K: AMX adds 4 bytes per 256-block
    (8, (640, 256), False, ("", 256 * 20 * 38)),         # Q8_0: AMX only on x86, +4 bytes per 32-block
    (14, (2048, 640), False, ("", 640 * 8 * 210)),       # Q6_K: AMX, same size
    (1, (256, 256), False, ("", 256 * 256 * 2)),         # F16: AMX keeps it as it is (AVX-512 code, no tiles)
    (1, (680, 256), False, ("", -1)),                    # F16 columns must be a multiple of 16
    (10, (256, 64), False, ("avx512", -1)),              # Q2_K: CPU_REPACK needs an AVX-512 build
    (2, (256, 64, 8), True, ("avx2", -1)),               # a MoE expert (MUL_MAT_ID): CPU_REPACK only
    (6, (640, 256), False, ("", -1)),                    # Q5_0: neither
    (0, (640, 256), False, ("", -1)),                    # F32: neither
])
def test_which_weights_each_extra_buffer_type_takes(ggml_type, shape, expert, expected):
    import numpy as np

    from tuner.hardware.memory import AMX_TYPES

    n_bytes = {0: 4.0, 1: 2.0, 2: 18 / 32, 6: 22 / 32, 8: 34 / 32, 10: 84 / 256, 12: 144 / 256, 14: 210 / 256}
    nb = int(np.prod(shape) * n_bytes[ggml_type])
    assert extra_buffer_class(ggml_type, shape, nb, expert) == expected
    assert set(AMX_TYPES) == {1, 2, 3, 8, 12, 13, 14, 23}  # amx.cpp supports_op's switch


def _amx_devices(no_repack: bool = False) -> Devices:
    flags = parse_cpu_build(TRAP).build_flags
    return Devices((), 16 * GIB, 8 * GIB, 2, cpu_buffers=CpuBuffers(("AMX", "CPU_REPACK"), flags, no_repack,
                                                                    cause="sigill" if no_repack else None))


def test_gemma_plan_agrees_with_the_amx_machines_buffers_in_each_mode(gemma3_270m):
    """The AMX fixture ran Gemma 3 270M with -c 8192 -np 1: with the build fact AMX the plan has its
    213.91 MiB AMX copy (the tied Q8_0 output and the Q8_0/Q4_K/Q6_K block matrices; Q5_0 stays) beside
    the mapped file, and its start-up projection (Host 211 + AMX 213) agrees; with --no-repack in force
    there is no extra buffer and the --no-repack run agrees. Each mode disagrees with the other log."""
    spec = load_model_spec(gemma3_270m)
    req = MemoryRequest(target=spec, n_ctx=8192, n_parallel=1)
    amx = plan_memory(req, _amx_devices())
    ((name, copy, moved),) = amx.extra_buffers
    assert name == "AMX" and abs(copy - 213.91 * MIB) < 0.01 * MIB
    assert abs(amx.host.need.target_weights_bytes - copy - 235.16 * MIB) < 0.01 * MIB  # the mapped file
    assert (spec.weights_bytes - moved) // MIB == 211  # the projection's Host row
    for plan_devs, log, agrees in ((_amx_devices(), TRAP, True), (_amx_devices(True), NO_REPACK, True),
                                   (_amx_devices(), NO_REPACK, False), (_amx_devices(True), TRAP, False)):
        parts = compare_with_server(req, plan_devs, log)
        assert {p.source for p in parts} == {"start-up projection", "allocated buffers"}
        assert all(p.agrees for p in parts) is agrees, [p.sentence() for p in parts if not p.agrees]
    off = plan_memory(req, _amx_devices(True))
    assert off.extra_buffers == () and off.repack_host_bytes == 0 and off.cpu_buffers.in_force == ()
    assert plan_memory(MemoryRequest(target=spec, n_ctx=8192, n_parallel=1, no_repack=True),
                       _amx_devices()).repack_host_bytes == 0
    assert server_config_for(MemoryRequest(target=spec, no_repack=True)).no_repack


def test_the_plan_prints_the_buffer_type_in_force(gemma3_270m):
    from tuner.cli.hardware import repack_lines

    req = MemoryRequest(target=load_model_spec(gemma3_270m), n_ctx=8192, n_parallel=1)
    (amx,) = repack_lines(plan_memory(req, _amx_devices()))
    assert amx.startswith("Weights in host RAM include 213.9 MiB repacked") and "ggml's AMX buffer" in amx
    (off,) = repack_lines(plan_memory(req, _amx_devices(True)))
    assert off == no_repack_sentence("sigill", ("AMX", "CPU_REPACK")) and "AMX kernels" in off
    guess = Devices((), 16 * GIB, 8 * GIB, 2, cpu_features=("avx2",))
    (guessed,) = repack_lines(plan_memory(req, guess))
    assert "ggml's CPU_REPACK buffer" in guessed and "guessed from the CPU's flags" in guessed


def test_a_users_no_repack_flag_is_planned_with_no_extra_buffer(gemma3_270m, capsys, monkeypatch):
    """``--server-arg=--no-repack`` (the last of --no-repack / -nr / --repack wins) plans no extra copy."""
    from tuner import cli
    from tuner.cli import hardware as cli_hw
    from tuner.hardware.repack import no_repack_in

    assert no_repack_in(["-tb", "2", "--no-repack"]) and no_repack_in(["-nr"])
    assert not no_repack_in(["--no-repack", "--repack"]) and not no_repack_in([])
    monkeypatch.setattr(cli_hw, "_detect", lambda server, rpc: (_amx_devices(), None))
    base = ["plan", "--target", str(gemma3_270m), "--ctx-size", "8192", "--np", "1", "--json", "--no-cross-check"]
    assert cli.main(base) == 0
    assert json.loads(capsys.readouterr().out)["repack_host_bytes"] > 200 * MIB
    assert cli.main(base + ["--server-arg=--no-repack"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["repack_host_bytes"] == 0 and off["extra_buffers"] == []


def test_the_workaround_sentence_claims_amx_only_for_an_illegal_instruction():
    ill = no_repack_sentence("sigill")
    assert ill.startswith("Repacked CPU kernels are off: this CPU crashes in llama.cpp's AMX kernels;")
    for seg in (no_repack_sentence("sigsegv"), no_repack_sentence("sigbus"),
                no_repack_sentence("sigill", ("CPU_REPACK",))):  # a build without AMX cannot crash in it
        assert "AMX" not in seg and "crashes in llama.cpp's repacked CPU kernels" in seg
    assert (f"about {REPACK_SPEEDUP_PCT} % faster" in ill) is (REPACK_SPEEDUP_PCT > 0)
