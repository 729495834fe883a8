"""What the supervisor does after a llama-server start failed or a served one died (pure).

:func:`next_step` reads the history of this :meth:`Supervisor.start`'s launches and returns one
action; it holds no threads, locks or I/O, so a table of histories tests it
(tests/server/test_restart_policy.py). The rules, in order:

1. **Healing retries** (every launch, ``auto_restart`` or not): a start that dies before ready with
   SIGILL is retried once with ``--no-repack``; with SIGSEGV/SIGBUS it is retried once unchanged and,
   when that crashes too, once with ``--no-repack`` (ggml's repacked CPU kernels, e.g. AMX, trap on some
   CPUs: :mod:`tuner.server.workarounds`). When the ``--no-repack`` start crashes too, the diagnosis
   becomes :func:`tuner.server.diagnosis.retries_failed` (with the rebuild command).
2. No restarts (``auto_restart`` off, or the configuration never reached ready since ``start()``):
   give up with the diagnosis.
3. An RPC host lost while serving: the local-only fallback at once.
4. Crash loops: a crash after the server had been ready for ``healthy_after_s`` (60 s) does not count
   and resets the back-off; the other failures ("quick": never ready, or ready for less) back off
   1, 2, 4, 8, 16 s, capped at 30 s; ``give_up_after`` (5) consecutive starts that never reach ready
   end it; after ``fallback_after`` (3) quick failures in a row of one configuration, the last other
   configuration that reached ready is served instead, when there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tuner.server.diagnosis import Diagnosis, cured_by_no_repack, not_reproduced, retries_failed

#: Diagnosis codes a healing retry answers: SIGILL; SIGSEGV and SIGBUS.
CPU_FAULT = "cpu_instructions"
MEMORY_FAULTS = frozenset({"segfault", "bus_error"})
HEALABLE = MEMORY_FAULTS | {CPU_FAULT}
#: :attr:`Attempt.retry` values.
UNCHANGED, NO_REPACK = "unchanged", "no-repack"
#: The crash each healing retry records as a workaround's cause.
CAUSE_OF = {"cpu_instructions": "sigill", "segfault": "sigsegv", "bus_error": "sigbus"}


@dataclass(frozen=True)
class Attempt:
    """One launch that ended, as the policy sees it.

    Fields:
        diagnosis: why it ended.
        ready_s: seconds it was ready before it died; None = it never became ready.
        no_repack: it ran with ``--no-repack``.
        retry: it was a healing retry: :data:`UNCHANGED` or :data:`NO_REPACK`; None otherwise.
        epoch: which configuration it ran: 0 for the one ``start()`` got, +1 at each fallback.
    """

    diagnosis: Diagnosis
    ready_s: float | None = None
    no_repack: bool = False
    retry: str | None = None
    epoch: int = 0


@dataclass(frozen=True)
class PolicySettings:
    """The supervisor's side of the decision.

    Fields:
        auto_restart: restart a served server after a crash.
        can_no_repack: the binary has ``--no-repack``.
        has_fallback: another configuration reached ready in this supervisor.
        rpc_lost: the crash lost an RPC host and a local-only configuration is set.
        backoff_s: delays of successive quick restarts (the last repeats).
        healthy_after_s: ready this long, a crash does not count.
        fallback_after: quick failures in a row of one configuration before the fallback.
        give_up_after: starts in a row that never reach ready before giving up.
        cpu_flags: the CPU's flags, for the rebuild command of a crash ``--no-repack`` does not cure.
    """

    auto_restart: bool = False
    can_no_repack: bool = True
    has_fallback: bool = False
    rpc_lost: bool = False
    backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
    healthy_after_s: float = 60.0
    fallback_after: int = 3
    give_up_after: int = 5
    cpu_flags: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Restart:
    """Start the same configuration again after ``delay_s`` seconds."""

    delay_s: float
    diagnosis: Diagnosis


@dataclass(frozen=True)
class RetryWithChange:
    """A healing retry, at once: :data:`UNCHANGED` or :data:`NO_REPACK` (``no_repack`` True)."""

    retry: str
    diagnosis: Diagnosis
    delay_s: float = 0.0

    @property
    def no_repack(self) -> bool:
        """The retry adds ``--no-repack``."""
        return self.retry == NO_REPACK


@dataclass(frozen=True)
class Fallback:
    """Serve another configuration after ``delay_s``: ``kind`` ``rpc`` (the local-only one, an RPC host
    is gone) or ``last-good`` (the last other configuration that reached ready)."""

    kind: str
    delay_s: float
    diagnosis: Diagnosis


@dataclass(frozen=True)
class GiveUp:
    """Stop trying: the state becomes failed with ``diagnosis``; ``reason`` is "" for a single failure."""

    diagnosis: Diagnosis
    reason: str = ""


Action = Restart | RetryWithChange | Fallback | GiveUp


def _never_ready_run(history: Sequence[Attempt]) -> list[Attempt]:
    """The trailing attempts that never became ready, oldest first."""
    run: list[Attempt] = []
    for a in reversed(history):
        if a.ready_s is not None:
            break
        run.append(a)
    return run[::-1]


def _heal(history: Sequence[Attempt], settings: PolicySettings) -> RetryWithChange | None:
    """Rule 1: the healing retry the last crash calls for, or None."""
    run = _never_ready_run(history)
    last = history[-1]
    if not run or last.diagnosis.code not in HEALABLE or not settings.can_no_repack:
        return None
    if any(a.no_repack for a in run) or any(a.diagnosis.code not in HEALABLE for a in run):
        return None  # --no-repack was tried in this run already, or it did not start with a crash
    if last.diagnosis.code == CPU_FAULT or last.retry == UNCHANGED:
        return RetryWithChange(NO_REPACK, last.diagnosis)
    return RetryWithChange(UNCHANGED, last.diagnosis)


def _launch_label(a: Attempt) -> str:
    if a.retry == UNCHANGED:
        return "retried unchanged"
    return "with --no-repack" if a.no_repack else "as asked"


def conclusive(history: Sequence[Attempt], settings: PolicySettings) -> Diagnosis:
    """The last failure's diagnosis, or — when a crashing start crashed with ``--no-repack`` too (the
    healing retry, or the user's own flag) — :func:`tuner.server.diagnosis.retries_failed` over the
    crashes of that run."""
    last = history[-1]
    run = _never_ready_run(history)
    crashed = [a for a in run if a.diagnosis.code in HEALABLE]
    if last.no_repack and last.diagnosis.code in HEALABLE and len(crashed) == len(run):
        return retries_failed([(_launch_label(a), a.diagnosis) for a in run], settings.cpu_flags)
    return last.diagnosis


def _quick_run(history: Sequence[Attempt], healthy_after_s: float) -> int:
    """Failures since (and including) the last crash after a healthy stretch of ready time."""
    n = 0
    for a in reversed(history):
        n += 1
        if a.ready_s is not None and a.ready_s >= healthy_after_s:
            break
    return n


def backoff(history: Sequence[Attempt], settings: PolicySettings) -> float:
    """Seconds before the next restart: ``backoff_s[k - 1]`` (the last entry repeats) for the k-th
    failure since the last crash that came after ``healthy_after_s`` of ready time (that crash is k = 1)."""
    k = _quick_run(history, settings.healthy_after_s)
    steps = settings.backoff_s or (1.0,)
    return steps[min(k, len(steps)) - 1]


def _quick_failures_of_epoch(history: Sequence[Attempt], healthy_after_s: float) -> int:
    last = history[-1]
    n = 0
    for a in reversed(history):
        if a.epoch != last.epoch or (a.ready_s is not None and a.ready_s >= healthy_after_s):
            break
        n += 1
    return n


def next_step(history: Sequence[Attempt], settings: PolicySettings) -> Action:
    """The action after the last entry of ``history`` (this ``start()``'s ended launches, oldest first).

    Raises:
        ValueError: ``history`` is empty.
    """
    if not history:
        raise ValueError("next_step needs at least the attempt that just ended")
    heal = _heal(history, settings)
    if heal is not None:
        return heal
    diag = conclusive(history, settings)
    ever_ready = any(a.ready_s is not None for a in history)
    if not settings.auto_restart or not ever_ready:
        return GiveUp(diag)
    if settings.rpc_lost:
        return Fallback("rpc", 0.0, diag)
    never = len(_never_ready_run(history))
    if never >= settings.give_up_after:
        return GiveUp(diag, f"gave up after {never} starts in a row that never became ready")
    delay = backoff(history, settings)
    if settings.has_fallback and _quick_failures_of_epoch(history, settings.healthy_after_s) >= settings.fallback_after:
        return Fallback("last-good", delay, diag)
    return Restart(delay, diag)


def healed(history: Sequence[Attempt], retry: str | None) -> tuple[Diagnosis, str | None] | None:
    """When a healing retry (``retry``: the launch that just became ready) ends a crashing start:
    ``(note, cause)`` — :func:`tuner.server.diagnosis.cured_by_no_repack` with the workaround's cause
    (``sigill`` / ``sigsegv`` / ``sigbus``) for a ``--no-repack`` retry, or
    :func:`tuner.server.diagnosis.not_reproduced` and None for an unchanged one. None otherwise."""
    run = _never_ready_run(history)
    if retry is None or not run or run[0].diagnosis.code not in HEALABLE:
        return None
    first = run[0].diagnosis
    if retry == NO_REPACK:
        return cured_by_no_repack(first), CAUSE_OF[first.code]
    return not_reproduced(first), None


def describe(action: Action, restart_number: int, phase_failed: bool = False) -> str:
    """One line for people about ``action`` (the state change's message), e.g. "llama-server crashed
    (killed by the system, probably for lack of memory); restarting in 2 s (restart 3)".

    Args:
        restart_number: the restart this action starts (``Supervisor.restart_count`` after it).
        phase_failed: the launch that ended never became ready (a restart that did not come up).
    """
    d = action.diagnosis
    what = ("llama-server did not start" if phase_failed else
            "llama-server stopped answering" if d.code == "hung" else "llama-server crashed")
    if isinstance(action, GiveUp):
        return f"{d.message}; {action.reason}" if action.reason else d.message
    if isinstance(action, RetryWithChange):
        if action.no_repack:
            return (f"{what} ({d.short}); retrying with --no-repack (llama.cpp's repacked CPU kernels off)")
        return f"{what} ({d.short}); retrying once unchanged to tell a CPU fault from a damaged file or a bug"
    if isinstance(action, Fallback):
        return (f"{what} ({d.short}); falling back to the last configuration that worked; restarting in "
                f"{action.delay_s:g} s (restart {restart_number})")
    return f"{what} ({d.short}); restarting in {action.delay_s:g} s (restart {restart_number})"
