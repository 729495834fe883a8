"""The supervisor's crash book: what one ``start()`` has been through, and what to launch next.

:func:`tuner.server.restart_policy.next_step` decides from a history; this module keeps that history
for one :class:`tuner.server.supervisor.Supervisor` (under the supervisor's lock: no threads or locks
here) and turns the policy's action into the next launch: :meth:`CrashBook.follow` returns a
:class:`Step` (the configuration, the diagnosis and the line for people), the supervisor then makes the
state transition, waits the action's delay and relaunches. It also keeps the configurations that reached
ready (the fallback's candidates) and finds the RPC host a crash lost (:func:`lost_rpc_host`).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from tuner.rpcaddr import log_names_lost_host, parse_rpc_hosts, probe_endpoint
from tuner.server import restart_policy as policy
from tuner.server import workarounds
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis

log = logging.getLogger(__name__)

#: Flags that turn ggml's repacked CPU kernels off (a launch with one is a ``--no-repack`` launch).
NO_REPACK_FLAGS = frozenset({"--no-repack", "-nr"})


@dataclass(frozen=True)
class Step:
    """What follows an ended launch: ``config`` to launch (None = gave up, the state becomes failed),
    ``diagnosis`` and ``message`` for the state change, ``action`` the policy's action, ``switched``
    True when ``config`` is another configuration from now on (a fallback), and ``rpc_lost`` the lost
    RPC host(s) when the local-only configuration takes over."""

    config: ServerConfig | None
    diagnosis: Diagnosis
    message: str
    action: policy.Action
    switched: bool = False
    rpc_lost: str | None = None


def runs_no_repack(cfg: ServerConfig | None) -> bool:
    """True when ``cfg`` launches llama-server with its repacked CPU kernels off."""
    return cfg is not None and (cfg.no_repack or bool(NO_REPACK_FLAGS & set(cfg.extra_args)))


def served_death(diag: Diagnosis, returncode: int) -> Diagnosis:
    """The diagnosis of a child that exited while ready: a plain exit is a crash (``crashed``), with
    its status when not 0; any other class stays."""
    if diag.code != "exited":
        return diag
    if returncode != 0:
        return replace(diag, code="crashed", message=f"llama-server crashed (exit status {returncode})")
    return replace(diag, code="crashed", message="llama-server exited unexpectedly")


def lost_rpc_host(lines: list[str], rpc: tuple[str, ...] | list[str]) -> str | None:
    """The RPC host(s) a crashed child's log says it lost (``tuner.rpcaddr.log_names_lost_host``),
    probed when the log does not name it (at most 1 s per host, in parallel; all of ``rpc`` when none
    answers as gone); None when the crash was not about an RPC host."""
    lost = log_names_lost_host(lines)
    if lost is None or lost != "?":
        return lost
    eps = parse_rpc_hosts(list(rpc))
    with ThreadPoolExecutor(max_workers=min(8, len(eps))) as pool:
        gone = [str(e) for e, note in zip(eps, pool.map(lambda e: probe_endpoint(e, 1.0), eps)) if note]
    return ", ".join(gone) if gone else ", ".join(rpc)


def _rpc_fallback_message(lost: str | None, cfg: ServerConfig) -> str:
    draft = f"draft {cfg.draft_path.name}, " if cfg.draft_path else ""
    ngl = cfg.ngl if cfg.ngl is not None else "auto"
    return (f"RPC host {lost} lost while serving: falling back to this machine only "
            f"({draft}{cfg.spec_type or 'none'}, ngl {ngl})")


def relaunch_message(action: policy.Action, cfg: ServerConfig, restart_count: int) -> str:
    """The starting line of the launch that follows ``action`` ("retrying X with --no-repack",
    "restarting X (restart 2)")."""
    name = cfg.model_path.name
    if isinstance(action, policy.RetryWithChange):
        return f"retrying {name} " + ("with --no-repack" if action.no_repack else "unchanged")
    return f"restarting {name} (restart {restart_count})"


def record_cure(binary: Path, healed: tuple[Diagnosis, str | None] | None) -> Diagnosis | None:
    """The note of :meth:`CrashBook.healed` (None: the launch was no healing retry); a ``--no-repack`` cure
    (a cause) is first recorded as a machine fact for ``binary``
    (:func:`tuner.server.workarounds.record_no_repack`; a failure to write it is logged), so a launch right
    after this one uses it."""
    if healed is None:
        return None
    note, cause = healed
    if cause is not None:
        try:
            workarounds.record_no_repack(binary, cause, note.evidence)
        except (OSError, ValueError):
            log.warning("cannot record the --no-repack workaround", exc_info=True)
    return note


@dataclass
class CrashBook:
    """The crash story of the current ``start()`` and the configurations that reached ready.

    Fields:
        history: this start's ended launches, oldest first (:class:`restart_policy.Attempt`).
        epoch: which configuration runs: 0 for the one ``start()`` got, +1 at each fallback.
        retry: the current launch is a healing retry of this kind (``restart_policy.UNCHANGED`` /
            ``NO_REPACK``), else None.
        restart_count: crash restarts since ``start()``.
        good: configurations that reached ready (any ``start()`` of this supervisor), newest last.
    """

    history: list[policy.Attempt] = field(default_factory=list)
    epoch: int = 0
    retry: str | None = None
    restart_count: int = 0
    good: list[ServerConfig] = field(default_factory=list)

    def begin(self) -> None:
        """A new ``start()``: forget the last one's crashes (not the configurations that worked)."""
        self.history, self.epoch, self.retry, self.restart_count = [], 0, None, 0

    def record(self, diag: Diagnosis, ready_s: float | None, cfg: ServerConfig | None) -> None:
        """A launch of ``cfg`` ended with ``diag`` after ``ready_s`` seconds of ready time (None = never)."""
        self.history.append(policy.Attempt(diag, ready_s, runs_no_repack(cfg), self.retry, self.epoch))

    def healed(self) -> tuple[Diagnosis, str | None] | None:
        """When the launch that just became ready was a healing retry: its note and the workaround's
        cause (:func:`restart_policy.healed`)."""
        return policy.healed(self.history, self.retry)

    def mark_ready(self, requested: ServerConfig) -> None:
        """The current launch (of ``requested``) became ready: its retry, if any, is over."""
        self.retry = None
        if requested in self.good:
            self.good.remove(requested)
        self.good.append(requested)

    def last_good_other(self, current: ServerConfig | None) -> ServerConfig | None:
        """The last configuration that reached ready and is not ``current`` (a workaround such as
        ``no_repack`` does not make a configuration another one)."""
        if current is None:
            return None
        plain = replace(current, no_repack=False)
        return next((c for c in reversed(self.good) if replace(c, no_repack=False) != plain), None)

    def decide(self, diag: Diagnosis, ready_s: float | None, running: ServerConfig | None,
               current: ServerConfig | None, settings: policy.PolicySettings, rpc_fallback: ServerConfig | None = None,
               lost: str | None = None) -> Step:
        """Record the launch of ``running`` that ended (:meth:`record`), ask
        :func:`restart_policy.next_step` with ``settings`` completed by this book (``has_fallback``) and the
        crash (``rpc_lost``), and :meth:`follow` its answer for ``current``, the configuration being served."""
        self.record(diag, ready_s, running)
        settings = replace(settings, has_fallback=self.last_good_other(current) is not None,
                           rpc_lost=lost is not None and rpc_fallback is not None)
        return self.follow(policy.next_step(self.history, settings), current, ready_s is None, rpc_fallback, lost)

    def follow(self, action: policy.Action, current: ServerConfig | None, never_ready: bool,
               rpc_fallback: ServerConfig | None = None, lost: str | None = None) -> Step:
        """Book ``action`` (the policy's answer for the last recorded launch) and say what follows.

        Args:
            current: the configuration being served (None: nothing to relaunch, the start gives up).
            never_ready: the launch that ended never became ready.
            rpc_fallback / lost: the local-only configuration and the RPC host(s) the crash lost.
        """
        if isinstance(action, policy.GiveUp) or current is None:
            return Step(None, action.diagnosis, policy.describe(action, 0, never_ready), action)
        if isinstance(action, policy.RetryWithChange):
            self.retry = action.retry
            cfg = replace(current, no_repack=True) if action.no_repack else current
            return Step(cfg, action.diagnosis, policy.describe(action, 0), action)
        self.retry = None
        self.restart_count += 1
        step = Step(current, action.diagnosis, policy.describe(action, self.restart_count, never_ready), action)
        if isinstance(action, policy.Fallback) and action.kind == "rpc" and rpc_fallback is not None:
            diag = replace(action.diagnosis, code="rpc_host_lost", message=f"RPC host {lost} lost while serving")
            step = Step(rpc_fallback, diag, _rpc_fallback_message(lost, rpc_fallback), action, rpc_lost=lost)
        elif isinstance(action, policy.Fallback):
            step = replace(step, config=self.last_good_other(current) or current)
        if step.config is not current:
            self.epoch += 1
            step = replace(step, switched=True)
        return step


__all__ = ["NO_REPACK_FLAGS", "CrashBook", "Step", "lost_rpc_host", "record_cure", "relaunch_message",
           "runs_no_repack", "served_death"]
