"""A machine whose CPU crashes in ggml's repacked kernels (tests/fakes/amx_trap_server.py: the real server
unless ``--no-repack`` is missing, then the recorded AMX trap and death by the signal): the doctor's probe
is where the crash, the retry and the recorded workaround happen, the doctor says so in one sentence, its
quantized self-test passes with the workaround, and the memory plan and the server check agree in that
mode (no extra CPU buffer)."""

from __future__ import annotations

import json

import pytest

from tests.fakes.amx_trap_server import launches, make_trap_server
from tuner.crosscheck.build import build_probes
from tuner.crosscheck.cpu_buffers import known_cpu_buffers, workaround_sentence
from tuner.crosscheck.server_check import server_cross_check
from tuner.hardware.devices import detect_devices
from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory
from tuner.hardware.repack import no_repack_sentence


def _doctor(binary, capsys, *extra: str) -> tuple[int, str]:
    from tuner import cli

    rc = cli.main(["doctor", "--server", str(binary), "--timeout", "60", *extra])
    return rc, capsys.readouterr().out


@pytest.mark.server
def test_the_doctor_on_a_trapping_cpu_gets_the_workaround_and_says_so(llama_server_bin, tmp_path, capsys):
    trap = make_trap_server(tmp_path / "sigill", llama_server_bin, "sigill")
    rc, out = _doctor(trap, capsys, "--json")
    report = json.loads(out)
    cpu, st = report["devices"]["cpu_buffers"], report["self_test"]
    assert rc == 0 and st["ok"], st
    assert cpu["no_repack"] and cpu["cause"] == "sigill" and cpu["types"] == []
    ran = launches(tmp_path / "sigill")
    # the probe crashed without --no-repack and ran with it; the self-test started with it at once
    assert "--no-repack" not in ran[0] and all("--no-repack" in a for a in ran[1:]) and len(ran) == 3
    assert "--no-repack" in st["argv"] and st["buffers"] == []  # no extra buffer in the mode in force
    rc, text = _doctor(trap, capsys)  # the fact is cached: no crash any more
    sentence = no_repack_sentence("sigill")
    assert rc == 0 and f"cpu kernels:  {sentence}" in text and "AMX kernels" in sentence
    assert len(launches(tmp_path / "sigill")) == 4
    assert workaround_sentence(trap) == sentence


@pytest.mark.server
def test_a_segfault_is_not_called_an_amx_crash(llama_server_bin, tmp_path, capsys):
    trap = make_trap_server(tmp_path / "sigsegv", llama_server_bin, "sigsegv")
    rc, text = _doctor(trap, capsys, "--no-self-test")
    assert rc == 0 and f"cpu kernels:  {no_repack_sentence('sigsegv')}" in text and "AMX" not in text
    assert known_cpu_buffers(trap).cause == "sigsegv"


@pytest.mark.server
def test_the_plan_and_the_server_check_agree_in_the_mode_in_force(llama_server_bin, gemma3_270m, tmp_path):
    """With the workaround recorded, the plan for Gemma 3 270M has no extra CPU buffer, and the server check
    runs llama-server with --no-repack (it would crash without) and agrees with it."""
    trap = make_trap_server(tmp_path / "trap", llama_server_bin, "sigill")
    devs = detect_devices(trap, build_probes())  # the probe crashes here, and the workaround is recorded
    assert devs.cpu_buffers.no_repack and devs.cpu_buffers.in_force == ()
    req = MemoryRequest(target=load_model_spec(gemma3_270m), n_ctx=4096, n_parallel=1)
    plan = plan_memory(req, devs)
    assert plan.extra_buffers == () and plan.repack_host_bytes == 0
    check = server_cross_check(req, devs, trap)
    assert check.ok and "--no-repack" in check.argv, check.note
    assert check.agrees, check.disagreements
