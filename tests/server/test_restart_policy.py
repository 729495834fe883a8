"""The restart policy (tuner/server/restart_policy.py) on a table of crash histories: pure, no server."""

from __future__ import annotations

import pytest

from tuner.server.diagnosis import Diagnosis
from tuner.server.restart_policy import (
    NO_REPACK,
    UNCHANGED,
    Attempt,
    Fallback,
    GiveUp,
    PolicySettings,
    Restart,
    RetryWithChange,
    backoff,
    describe,
    healed,
    next_step,
)

ILL = Diagnosis("cpu_instructions", "killed (SIGILL)", ("l1",), returncode=-4, summary="CPU instructions, SIGILL")
SEGV = Diagnosis("segfault", "segfault", ("l2",), returncode=-11, summary="segmentation fault")
KILL = Diagnosis("killed", "killed by the system", returncode=-9,
                 summary="killed by the system, probably for lack of memory")
HANG = Diagnosis("load_hang", "load hang: not ready after 30 s")
FLAG = Diagnosis("flag_unknown", "unknown flag --bogus", flag="--bogus")


def crash(d: Diagnosis, ready_s: float | None = None, no_repack: bool = False, retry: str | None = None,
          epoch: int = 0) -> Attempt:
    return Attempt(d, ready_s, no_repack, retry, epoch)


SERVE = PolicySettings(auto_restart=True)
SERVE_FB = PolicySettings(auto_restart=True, has_fallback=True)
SWEEP = PolicySettings(auto_restart=False)

# (id, history, settings, expected action type, expected detail: delay / retry / kind / code)
TABLE = [
    # healing retries, with or without auto_restart
    ("sigill-first-start", [crash(ILL)], SWEEP, RetryWithChange, NO_REPACK),
    ("segv-first-start", [crash(SEGV)], SWEEP, RetryWithChange, UNCHANGED),
    ("segv-twice", [crash(SEGV), crash(SEGV, retry=UNCHANGED)], SWEEP, RetryWithChange, NO_REPACK),
    ("segv-then-sigill", [crash(SEGV), crash(ILL, retry=UNCHANGED)], SWEEP, RetryWithChange, NO_REPACK),
    ("sigill-no-repack-crashed-too", [crash(ILL), crash(ILL, no_repack=True, retry=NO_REPACK)], SWEEP, GiveUp,
     "cpu_instructions"),
    ("segv-three-times", [crash(SEGV), crash(SEGV, retry=UNCHANGED), crash(SEGV, no_repack=True, retry=NO_REPACK)],
     SWEEP, GiveUp, "crash_persistent"),
    ("already-no-repack", [crash(ILL, no_repack=True)], SWEEP, GiveUp, "cpu_instructions"),
    ("segv-with-users-no-repack", [crash(SEGV, no_repack=True)], SWEEP, GiveUp, "crash_persistent"),
    ("binary-without-the-flag", [crash(ILL)], PolicySettings(can_no_repack=False), GiveUp, "cpu_instructions"),
    ("sigill-while-serving-is-a-restart", [crash(ILL, ready_s=500.0)], SERVE, Restart, 1.0),
    # not healable, first start: give up with the diagnosis
    ("bad-flag", [crash(FLAG)], SERVE, GiveUp, "flag_unknown"),
    ("killed-before-ever-ready", [crash(KILL)], SERVE, GiveUp, "killed"),
    ("no-auto-restart", [crash(KILL, ready_s=500.0)], SWEEP, GiveUp, "killed"),
    # back-off: 1, 2, 4, 8, 16, 30 over quick repeats; a crash after 60 s ready resets it
    ("crash-after-long-ready", [crash(KILL, ready_s=500.0)], SERVE, Restart, 1.0),
    ("second-quick", [crash(KILL, ready_s=30.0)] * 2, SERVE, Restart, 2.0),
    ("fourth-quick", [crash(KILL, ready_s=30.0)] * 4, SERVE, Restart, 8.0),
    ("capped", [crash(KILL, ready_s=5.0)] * 9, SERVE, Restart, 30.0),
    ("reset-by-long-ready", [crash(KILL, ready_s=5.0)] * 6 + [crash(KILL, ready_s=61.0)], SERVE, Restart, 1.0),
    ("after-reset-second", [crash(KILL, ready_s=5.0)] * 6 + [crash(KILL, ready_s=61.0), crash(HANG)], SERVE,
     Restart, 2.0),
    # quick crashes that reached ready never give up
    ("twenty-quick-crashes", [crash(KILL, ready_s=5.0)] * 20, SERVE, Restart, 30.0),
    # only 5 starts in a row that never reach ready end it
    ("four-never-ready", [crash(KILL, ready_s=500.0)] + [crash(HANG)] * 4, SERVE, Restart, 16.0),
    ("five-never-ready", [crash(KILL, ready_s=500.0)] + [crash(HANG)] * 5, SERVE, GiveUp, "load_hang"),
    ("five-never-ready-with-fallback", [crash(KILL, ready_s=500.0)] + [crash(HANG, epoch=1)] * 5, SERVE_FB,
     GiveUp, "load_hang"),
    # fallback: the third quick failure of one configuration, when another one reached ready
    ("two-quick-with-fallback", [crash(KILL, ready_s=5.0)] * 2, SERVE_FB, Restart, 2.0),
    ("third-quick-falls-back", [crash(KILL, ready_s=5.0)] * 3, SERVE_FB, Fallback, "last-good"),
    ("new-epoch-counts-again", [crash(KILL, ready_s=5.0)] * 3 + [crash(KILL, ready_s=5.0, epoch=1)], SERVE_FB,
     Restart, 8.0),
    ("two-never-ready-restarts", [crash(KILL, ready_s=90.0), crash(HANG), crash(HANG)], SERVE_FB, Restart, 4.0),
    ("three-never-ready-restarts-fall-back", [crash(KILL, ready_s=90.0)] + [crash(HANG)] * 3, SERVE_FB, Fallback,
     "last-good"),
    # an RPC host lost: the local-only configuration at once
    ("rpc-lost", [crash(KILL, ready_s=5.0)], PolicySettings(auto_restart=True, rpc_lost=True), Fallback, "rpc"),
]


@pytest.mark.parametrize("history, settings, kind, detail", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_policy_table(history, settings, kind, detail) -> None:
    action = next_step(history, settings)
    assert isinstance(action, kind), action
    if kind is Restart:
        assert action.delay_s == detail
    elif kind is RetryWithChange:
        assert action.retry == detail and action.delay_s == 0.0
    elif kind is Fallback:
        assert action.kind == detail
        assert action.delay_s == (0.0 if detail == "rpc" else backoff(history, settings))
    else:
        assert action.diagnosis.code == detail


def test_give_up_names_the_reason_and_the_last_diagnosis() -> None:
    action = next_step([crash(KILL, ready_s=500.0)] + [crash(HANG)] * 5, SERVE)
    assert isinstance(action, GiveUp)
    text = describe(action, 6, phase_failed=True)
    assert text.startswith(HANG.message) and "gave up after 5 starts in a row that never became ready" in text


def test_restart_line_in_plain_words() -> None:
    action = next_step([crash(KILL, ready_s=30.0)] * 2, SERVE)
    assert describe(action, 3) == ("llama-server crashed (killed by the system, probably for lack of memory); "
                                   "restarting in 2 s (restart 3)")
    retry = next_step([crash(ILL)], SWEEP)
    assert describe(retry, 0) == ("llama-server crashed (CPU instructions, SIGILL); retrying with --no-repack "
                                  "(llama.cpp's repacked CPU kernels off)")
    hung = Diagnosis("hung", "did not answer /health", summary="no answer for 30 s")
    assert describe(next_step([crash(hung, ready_s=600.0)], SERVE), 1).startswith("llama-server stopped answering")


def test_healed_tells_a_cure_from_a_passing_fault() -> None:
    note, cause = healed([crash(ILL)], NO_REPACK)
    assert cause == "sigill" and note.code == "cpu_kernels" and note.evidence == ILL.evidence
    note, cause = healed([crash(SEGV), crash(SEGV, retry=UNCHANGED)], NO_REPACK)
    assert cause == "sigsegv"
    note, cause = healed([crash(SEGV)], UNCHANGED)
    assert cause is None and note.code == "crash_not_reproduced"
    assert healed([crash(KILL, ready_s=90.0)], None) is None
    assert healed([crash(KILL, ready_s=90.0), crash(HANG)], None) is None


def test_empty_history_is_refused() -> None:
    with pytest.raises(ValueError):
        next_step([], SERVE)


def test_a_crash_with_no_repack_already_on_names_the_rebuild() -> None:
    action = next_step([crash(ILL, no_repack=True)], PolicySettings(cpu_flags=frozenset({"avx2"})))
    assert isinstance(action, GiveUp)
    assert "crashed once (with --no-repack:" in action.diagnosis.message
    assert "-DGGML_AVX2=ON" in action.diagnosis.message
