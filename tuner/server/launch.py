"""One llama-server process of a supervisor, from spawn to death.

A :class:`Launch` holds what belongs to one process: its configuration with the port, its argv, its log
file, its API-key hand-off (:mod:`tuner.server.keyhandoff`), the child and the kernel's OOM counters at
spawn, its idle-sleep watch (:mod:`tuner.server.sleep`, when it runs with ``--sleep-idle-seconds``) and the
pruning of its captured requests (:mod:`tuner.server.capture`, when it runs with ``--log-prompts-dir``). Every
llama-server starts with umask 077, so the files it writes (captured requests) are its user's only.
The supervisor's monitor thread runs it through :meth:`Launch.check_ready` (:mod:`tuner.server.readiness`),
:meth:`Launch.watch` (:mod:`tuner.server.liveness`, and the sleep watch's changes) and, when it ended,
:meth:`Launch.death` (:func:`tuner.server.diagnosis.diagnose` with the phase and the OOM counters).
It decides nothing: what follows a failure is the supervisor's (:mod:`tuner.server.restart_policy`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from tuner import process
from tuner.logs import redact
from tuner.process import clean_env
from tuner.server import capture
from tuner.server.argv import build_argv, command_line, server_env
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import CrashContext, Diagnosis, diagnose, startup_phase
from tuner.server.dialect import IDLE_SLEEP_FLAG, Dialect
from tuner.server.keyhandoff import remove_key_file, write_key_file
from tuner.server.liveness import Liveness
from tuner.server.oomcount import OomCounters
from tuner.server.readiness import READY_PROMPT, bring_up
from tuner.server.sleep import WAKING_MESSAGE, SleepEvent, SleepStatus, SleepWatch

log = logging.getLogger(__name__)

#: The file-mode creation mask of every llama-server: what it writes (captured requests) is its user's only.
CHILD_UMASK = 0o077


def local_host(host: str) -> str:
    """The address a client on this machine uses for a server listening on ``host`` (a wildcard
    ``0.0.0.0`` / ``::`` → ``127.0.0.1``)."""
    return host if host not in ("0.0.0.0", "::") else "127.0.0.1"


def pick_port(config: ServerConfig, prefer_port: int | None = None) -> int:
    """``config.port``, else ``prefer_port`` (a restart keeps its endpoint), else a free port."""
    if config.port is not None:
        return config.port
    return prefer_port or process.free_port(local_host(config.host))


class Launch:
    """One llama-server process (see the module docstring).

    Args:
        binary: the llama-server executable; ``dialect``: its flag dialect.
        cfg: the configuration with its port (:func:`pick_port`); ``requested``: what the supervisor asked for (``port``
            None = picked by the supervisor, so a taken one may be retried).
        log_path: the file for its full log.
        port_attempt: taken ports retried before this launch.
        oom_counters: reads the kernel's OOM-kill counters (:mod:`tuner.server.oomcount`).

    Raises (constructor):
        OSError: the key hand-off could not be created.
        UnsupportedConfigError: the binary lacks a needed flag.
    """

    def __init__(self, binary: Path, dialect: Dialect, cfg: ServerConfig, requested: ServerConfig, log_path: Path,
                 port_attempt: int, oom_counters: Callable[[], OomCounters]) -> None:
        self.binary, self.dialect, self.cfg, self.requested = binary, dialect, cfg, requested
        self.log_path, self.port_attempt = log_path, port_attempt
        self._oom_counters = oom_counters
        self.key = write_key_file(cfg.api_key) if cfg.api_key and dialect.has("--api-key-file") else None
        try:
            self.argv = build_argv(binary, cfg, dialect, api_key_file=self.key.path if self.key else None)
        except Exception:
            self.release_key()
            raise
        self.env = server_env(cfg)  # set on top of the cleaned environment (OMP_WAIT_POLICY=PASSIVE or nothing)
        self.child: process.ChildProcess | None = None
        self.spawned_unix_s = 0.0
        self.oom_at_spawn: OomCounters = (None, None)
        self.sleep = SleepWatch(self.base_url, cfg.api_key, cfg.sleep_idle_s) if IDLE_SLEEP_FLAG in self.argv else None

    @property
    def sleep_status(self) -> SleepStatus:
        """Where this launch stands with idle sleep (never asleep without ``--sleep-idle-seconds``)."""
        return self.sleep.status if self.sleep is not None else SleepStatus()

    @property
    def base_url(self) -> str:
        """``http://host:port`` of this launch (IPv6 hosts in brackets; a wildcard host → 127.0.0.1)."""
        host = local_host(self.cfg.host)
        return f"http://[{host}]:{self.cfg.port}" if ":" in host else f"http://{host}:{self.cfg.port}"

    def read_oom(self) -> OomCounters:
        """The OOM counters now (``(None, None)`` when the reader fails: it never stops a launch)."""
        try:
            return self._oom_counters()
        except Exception:  # noqa: BLE001 - an injected or platform reader must not stop a launch
            log.debug("cannot read the OOM counters", exc_info=True)
            return None, None

    def spawn(self, tail_lines: int) -> process.ChildProcess:
        """Start the process (a cleaned environment with :attr:`env` on top, the key's fd inherited, its log to
        :attr:`log_path`).

        Raises:
            OSError: it could not be executed (the key hand-off is released).
        """
        self.oom_at_spawn = self.read_oom()
        self.spawned_unix_s = time.time()
        key = self.key
        try:
            child = process.spawn(self.argv, env={**clean_env(os.environ), **self.env}, log_path=self.log_path,
                                  tail_lines=tail_lines,
                                  pass_fds=(key.fd,) if key is not None and key.fd is not None else (),
                                  on_line=self.sleep.on_line if self.sleep is not None else None, umask=CHILD_UMASK)
        except OSError:
            self.release_key()
            raise
        log.info("llama-server pid %s started: %s", child.pid, redact(command_line(self.argv, self.env)))
        if key is not None:
            key.close_parent_side()
        self.child = child
        return child

    def release_key(self) -> None:
        """End the key hand-off (idempotent): llama-server read the key at start-up."""
        remove_key_file(self.key)

    def check_ready(self, child: process.ChildProcess, base_url: str, timeout_s: float, n_predict: int,
                    alive: Callable[[], bool]) -> Diagnosis | None:
        """:func:`tuner.server.readiness.bring_up` with a deadline ``timeout_s`` seconds after the spawn;
        None when ready, else why not (``cancelled`` once ``alive`` turned False). The key hand-off ends
        either way; an internal error is logged and reported as the diagnosis, never left to hang the start.
        With capture on, the readiness completion's own file is deleted (it is not a user's request)."""
        try:
            with ServerClient(base_url, api_key=self.cfg.api_key, timeout_s=5.0) as client:
                outcome = bring_up(child, self.cfg, client, self.dialect, deadline=child.started_at_s + timeout_s,
                                   timeout_s=timeout_s, alive=alive, n_predict=n_predict,
                                   died=lambda first_decode: self.death(child, first_decode=first_decode))
            if outcome is None and self.cfg.log_prompts_dir is not None:
                capture.drop_probe(self.cfg.log_prompts_dir, READY_PROMPT, self.spawned_unix_s)
            return outcome
        except Exception as exc:  # a bug must not leave the state hanging in "starting"
            log.exception("internal error while checking readiness of pid %s", child.pid)
            return Diagnosis("exited", f"internal error while checking readiness: {exc!r}", tuple(child.log_lines(20)))
        finally:
            self.release_key()

    def watch(self, child: process.ChildProcess, base_url: str, alive: Callable[[], bool], interval_s: float,
              liveness_timeout_s: float | None, announce: Callable[[str], None],
              on_sleep: Callable[[SleepEvent], None] | None = None) -> Diagnosis | None:
        """Wait while ready: None when the child exited or ``alive`` turned False; the ``hung`` diagnosis
        when :class:`tuner.server.liveness.Liveness` says so (``liveness_timeout_s`` None = no checks). With
        idle sleep, each change of :class:`tuner.server.sleep.SleepWatch` goes to ``on_sleep``, and the
        liveness check knows when the server sleeps (it uses no CPU then by design). With capture on, its
        folder is pruned every :data:`tuner.server.capture.PRUNE_INTERVAL_S` (:class:`~tuner.server.capture.Pruner`)
        and once more when the watch ends."""
        pruner = capture.Pruner(self.cfg.log_prompts_dir) if self.cfg.log_prompts_dir is not None else None
        watch = None
        if liveness_timeout_s is not None:
            watch = Liveness(child, base_url, api_key=self.cfg.api_key, timeout_s=liveness_timeout_s,
                             interval_s=interval_s, announce=announce)
        sleep = self.sleep
        if sleep is not None:
            sleep.interval_s = interval_s
        try:
            while alive():
                if pruner is not None:
                    pruner.tick()
                exited = child.wait(min(0.5, interval_s)) is not None
                if sleep is not None and sleep.wake_began():
                    announce(WAKING_MESSAGE)  # before the poll, which waits for the reload
                if exited:  # a wake that died at once (its model gone) was still a wake: announced above first
                    return None
                event = sleep.poll() if sleep is not None else None
                if event is not None and on_sleep is not None and alive():
                    on_sleep(event)
                if watch is not None:
                    watch.sleeping = sleep is not None and sleep.status.sleeping
                hung = watch.check() if watch is not None else None
                if hung is not None:
                    return hung
        finally:
            if watch is not None:
                watch.close()
            if sleep is not None:
                sleep.close()
            if pruner is not None:
                pruner.prune()
        return None

    def death(self, child: process.ChildProcess, phase: str | None = None, first_decode: bool = False) -> Diagnosis:
        """:func:`diagnose` of the exited ``child`` with its :class:`CrashContext`: the phase (``phase``, or
        from its log and ``first_decode`` while starting) and the OOM counters at spawn and now."""
        child.wait(2.0)
        lines = child.log_lines(200)
        if phase == "serving" and self.sleep is not None and self.sleep.waking:
            phase = "waking"  # it died loading the model again after idle sleep
        ctx = CrashContext(phase=phase or startup_phase(lines, first_decode),
                           oom_before=self.oom_at_spawn, oom_after=self.read_oom())
        return diagnose(child.returncode, lines, ctx)


__all__ = ["Launch", "local_host", "pick_port"]
