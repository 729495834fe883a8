"""Why a model's process inside a llama-server router ended: the crash classes of
:func:`tuner.server.diagnosis.diagnose`, without the exit status the router throws away.

The router reports any abnormal end of a child as status 1 (vendor/sheredom/subprocess.h
``subprocess_join``; tools/server/server-models.cpp ``server_models::on_child_exit``), so the death's class
cannot come from a signal number. In order:

1. Draftwise killed it (liveness: ``hung``): that diagnosis.
2. A line of its log (the router relays the child's stderr, :class:`tuner.server.router_log.RouterLog`)
   names the cause: the log rules of :func:`diagnose` (out of memory, a missing file, a failed reload
   after idle sleep — ``wake_failed`` — …).
3. The kernel's OOM-kill counter moved since its load began: killed by the out-of-memory killer.
4. No line says why: the same configuration is started once on its own, as a single-model launch through
   :class:`tuner.server.supervisor.Supervisor`, which sees the real signal and applies the healing retries
   (a start that dies by SIGILL/SIGSEGV/SIGBUS is retried with ``--no-repack``, and a cure is recorded as a
   machine fact: :mod:`tuner.server.workarounds`). Its diagnosis is the class; a start that comes up
   normally means something outside ended the process (``crash_not_reproduced``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.server.config import ServerConfig
from tuner.server.diagnosis import CrashContext, Diagnosis, death_diagnosis, diagnose, not_reproduced
from tuner.server.dialect import Dialect
from tuner.server.oomcount import OomCounters

log = logging.getLogger(__name__)

#: The diagnosis of a child that ended with status 1 and no line saying why.
SILENT_SUMMARY = "ended without a message"


def silent_end(model: str, lines: Sequence[str]) -> Diagnosis:
    """A model's process ended with no error line: the router reports status 1 for any crash, so the cause
    is unknown (a signal, e.g. SIGKILL from the system for lack of memory, or a fault)."""
    return Diagnosis("exited", f"llama-server for {model} ended without an error line (the router reports every "
                     "crash as status 1, so the signal is not known)", tuple(lines[-20:]), None, None, 1,
                     SILENT_SUMMARY)


@dataclass(frozen=True)
class CrashFacts:
    """What is known about one ended model process besides its log.

    Fields:
        model: its id; ``config``: what it ran (its section's configuration, for a reproduction).
        phase: where it was (``loading``, ``serving``, ``waking``; :data:`tuner.server.diagnosis.PHASES`).
        killed: Draftwise's own diagnosis when it killed the process (liveness: ``hung``), else None.
        oom_before / oom_after: the kernel's OOM counters when its load began and now.
    """

    model: str
    config: ServerConfig
    phase: str | None = None
    killed: Diagnosis | None = None
    oom_before: OomCounters = (None, None)
    oom_after: OomCounters = (None, None)


#: ``reproduce(config)``: start ``config`` alone once; its diagnosis when it failed or a cure's note, None
#: when it came up without one.
ReproduceFn = Callable[[ServerConfig], Diagnosis | None]


def classify(lines: Sequence[str], facts: CrashFacts, reproduce: ReproduceFn | None) -> Diagnosis:
    """The class of an ended model process (the module docstring's order). ``reproduce`` None = no
    single-model start (a second crash of the same start, or the caller forbids it)."""
    if facts.killed is not None:
        return facts.killed
    ctx = CrashContext(phase=facts.phase, oom_before=facts.oom_before, oom_after=facts.oom_after)
    found = diagnose(None, lines, ctx)
    if found.code != "exited":
        return replace(found, returncode=1)
    if ctx.oom_moved:
        killed = death_diagnosis(-9, list(lines), ctx)
        if killed is not None:
            return replace(killed, returncode=1)
    silent = silent_end(facts.model, lines)
    if reproduce is None:
        return silent
    alone = reproduce(facts.config)
    if alone is None:
        return not_reproduced(silent)
    return alone


def reproduce_alone(binary: Path, dialect: Dialect, timeout_s: float | None = None) -> ReproduceFn:
    """A :data:`ReproduceFn` that starts the configuration once through a :class:`Supervisor` of ``binary``
    (loopback, a free port, no key, no idle sleep, no crash restarts; the healing retries apply) and stops it:
    the start's diagnosis when it failed, the cure's note when one was recorded (``cpu_kernels``), else None."""

    def run(config: ServerConfig) -> Diagnosis | None:
        from tuner.server.supervisor import ServerStartError, Supervisor

        alone = replace(config, host="127.0.0.1", port=None, api_key=None, sleep_idle_s=None, alias=None)
        sup = Supervisor(binary, dialect, auto_restart=False, liveness_timeout_s=None)
        try:
            sup.start_and_wait(alone, timeout_s=timeout_s)
        except ServerStartError as exc:
            log.info("the crashed model did not start alone either: %s", exc.diagnosis.message)
            return exc.diagnosis
        finally:
            sup.stop(grace_s=5.0)
        note = sup.diagnosis
        return note if note is not None and note.code == "cpu_kernels" else None

    return run


__all__ = ["SILENT_SUMMARY", "CrashFacts", "ReproduceFn", "classify", "reproduce_alone", "silent_end"]
