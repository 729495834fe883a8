"""A model process of the router ended: its class without the exit status the router throws away
(tuner/server/router_crash.py), from recorded llama-server logs and a stand-in for the single-model start."""

from __future__ import annotations

from pathlib import Path

from tests.server.conftest import DATA
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis
from tuner.server.router_crash import CrashFacts, classify, silent_end

CFG = ServerConfig(Path("/models/m.gguf"), n_ctx=256)
QUIET = ["0.00.019.295 I srv  llama_server: initializing ...", "0.00.041.855 I srv  load_model: loaded"]


def never(_cfg: ServerConfig) -> Diagnosis | None:
    raise AssertionError("no single-model start when the log or the counters say why")


def test_a_log_line_names_the_cause() -> None:
    lines = (DATA / "wake-failed.txt").read_text().splitlines()
    d = classify(lines, CrashFacts("m", CFG, phase="waking"), never)
    assert d.code == "wake_failed" and d.returncode == 1


def test_the_kernels_oom_killer_without_a_line() -> None:
    d = classify(QUIET, CrashFacts("m", CFG, "serving", oom_before=(3, 0), oom_after=(4, 0)), never)
    assert d.code == "oom_killed" and "out-of-memory killer" in d.message


def test_draftwises_own_kill_is_its_diagnosis() -> None:
    hung = Diagnosis("hung", "llama-server did not answer /health for 31 s and it is stopped (SIGSTOP?)")
    assert classify(QUIET, CrashFacts("m", CFG, "serving", killed=hung), never) is hung


def test_no_line_a_single_model_start_tells() -> None:
    started: list[ServerConfig] = []

    def came_up(cfg: ServerConfig) -> Diagnosis | None:
        started.append(cfg)
        return None

    d = classify(QUIET, CrashFacts("m", CFG, "serving"), came_up)
    assert started == [CFG] and d.code == "crash_not_reproduced" and "ended without a message" in d.message
    # the recorded AMX trap names no cause in its log (the signal says it): the start alone finds the cure
    trap = (DATA / "amx-trap" / "trap-llama-server.txt").read_text().splitlines()
    cured = Diagnosis("cpu_kernels", "… runs with --no-repack", tuple(trap[-3:]), "--no-repack")
    assert classify(trap, CrashFacts("m", CFG, "warm-up"), lambda _cfg: cured) is cured
    assert classify(QUIET, CrashFacts("m", CFG, "serving"), None) == silent_end("m", QUIET)
    assert silent_end("m", QUIET).summary == "ended without a message"
