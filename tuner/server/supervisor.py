"""Supervised llama-server: start, readiness, stop, crash restart, with diagnosis.

The supervisor composes one module per concern and holds the threads and the lock:

- the states and the table of allowed transitions (:mod:`tuner.server.states`): one ``_set_state``
  changes the state and checks the table (an illegal change raises
  :class:`~tuner.server.states.IllegalTransition`); a message without a change (a silent but working
  server, a cure's note) goes out through ``_announce``. Every change and announcement reaches the
  ``on_state`` callbacks, called from a non-GUI thread;
- the API key's hand-off to the child (:mod:`tuner.server.keyhandoff`: a memfd, never the argv);
- readiness (:mod:`tuner.server.readiness`: /health, our identity, one completion, speculation on);
- liveness while ready (:mod:`tuner.server.liveness`: silent *and* no progress = hung, killed and
  handled like a crash);
- idle sleep (:mod:`tuner.server.sleep`, with ``ServerConfig.sleep_idle_s``): ``ready`` → ``sleeping`` when
  llama-server unloaded the model, ``sleeping`` → ``ready`` when a request loaded it again (the message says
  how long the reload took); a reload that fails is a crash like any other (``wake_failed``);
- after a failed start or a crash: the pure :func:`tuner.server.restart_policy.next_step` decides from
  this ``start()``'s history kept in a :class:`tuner.server.restarts.CrashBook`, then the supervisor
  makes the transition, waits the action's delay and relaunches (``_after_crash``). A start that dies by
  SIGILL before ready is retried with ``--no-repack``, one that dies by SIGSEGV/SIGBUS unchanged and then
  with ``--no-repack`` (every launch, with or without ``auto_restart``); when ``--no-repack`` cures it the
  fact is recorded (:mod:`tuner.server.workarounds`) and every later launch applies it. While serving
  (``auto_restart``) a crash is restarted with back-off (1, 2, 4, 8, 16, 30 s; reset by a crash after
  60 s of ready time, which does not count); only 5 starts in a row that never reach ready give up; 3
  quick failures of a configuration fall back to the last other configuration that reached ready, and a
  lost RPC host switches to the local-only configuration at once. Each crash is diagnosed with its phase
  and the kernel's OOM counters (:mod:`tuner.server.oomcount`) read at spawn and after the death;
- full logs, one private file per launch (:mod:`tuner.server.serverlogs`).

The port is picked free by the supervisor unless the configuration names one; a "couldn't bind" on a
picked port is retried on a new port, and a restart keeps its port. Stop = SIGTERM, wait, SIGKILL of the
whole tree (:mod:`tuner.process`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tuner import process
from tuner.errors import DraftwiseError
from tuner.server import restart_policy as policy
from tuner.server import workarounds
from tuner.server.argv import build_argv
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis, load_hang
from tuner.server.dialect import Dialect, probe_dialect
from tuner.server.discovery import ServerBinary, find_server
from tuner.server.keyhandoff import sweep_stale_key_files
from tuner.server.launch import Launch, pick_port
from tuner.server.oomcount import OomCounters, read_oom_counters
from tuner.server.restarts import CrashBook, Step, lost_rpc_host, record_cure, relaunch_message, served_death
from tuner.server.serverlogs import new_log_path
from tuner.server.sleep import SleepEvent, SleepStatus
from tuner.server.states import LIVE, IllegalTransition, ServerState, StateChange, StateMachine

log = logging.getLogger(__name__)

#: The states :meth:`Supervisor.wait_ready` waits for.
_SETTLED = frozenset({ServerState.READY, ServerState.FAILED, ServerState.STOPPED})


class ServerStartError(DraftwiseError, RuntimeError):
    """The server did not become ready; ``diagnosis`` says why (with log evidence)."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        super().__init__(f"{diagnosis.code}: {diagnosis.message}")


def startup_timeout_for(config: ServerConfig, base_s: float = 30.0, s_per_gib: float = 20.0) -> float:
    """Seconds to wait for readiness: ``base_s`` plus ``s_per_gib`` per GiB of target + draft
    files (a slow disk reads roughly 50 MB/s; the load also builds the KV cache)."""
    return base_s + s_per_gib * config.model_bytes() / 2**30


class Supervisor:
    """Runs one llama-server at a time as a supervised child process.

    Synchronous use (e.g. from a worker thread)::

        sup = Supervisor()
        sup.start(config)
        base_url = sup.wait_ready(timeout_s=60, cancel=event)   # raises ServerStartError
        client = sup.client()
        ...
        sup.stop()

    Args:
        binary: a :class:`ServerBinary`, a path, or None (:func:`find_server`).
        dialect: the binary's flag dialect, or None (probed from ``--help``).
        auto_restart: restart after a crash while ready (the serving use); off for calibration.
            The healing retries of a start that crashes (``--no-repack``) happen either way.
        max_restarts: quick failures in a row of one configuration (never ready, or ready for less
            than ``healthy_after_s``) before falling back to the last other configuration that reached
            ready; without one the restarts go on (see :mod:`tuner.server.restart_policy`).
        backoff_s: delays before successive quick restarts (the last one repeats).
        healthy_after_s: a crash after this many seconds of ready time does not count and resets
            the back-off.
        oom_counters: reads the kernel's OOM-kill counters (:func:`tuner.server.oomcount.read_oom_counters`;
            tests inject one).
        log_dir: where full logs go (default ``tuner.paths.log_dir()``).
        tail_lines: log lines kept in memory.
        ready_n_predict: tokens of the readiness completion.
        on_state: a first state callback (more with :meth:`on_state`).
        liveness_timeout_s: while ready, a child that has not answered ``/health`` for this many
            seconds and made no progress (stopped, or no CPU time gained) is killed and handled
            like a crash (:mod:`tuner.server.liveness`); None = no liveness checks.
        health_interval_s: seconds between liveness ``/health`` requests.
        rpc_fallback: with ``auto_restart``, the configuration to serve instead when a configuration
            with RPC hosts (``ServerConfig.rpc``) crashes because a host is gone (its log names the lost
            host: ``tuner.rpcaddr.log_names_lost_host``); the switch is reported as a state change
            with code ``rpc_host_lost``. Set later with :meth:`set_rpc_fallback`.

    Raises (constructor): ServerNotFoundError, DialectError; ValueError for a ``liveness_timeout_s`` ≤ 0.
    """

    def __init__(self, binary: ServerBinary | str | Path | None = None, dialect: Dialect | None = None, *,
                 auto_restart: bool = False, max_restarts: int = 3,
                 backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0), healthy_after_s: float = 60.0,
                 log_dir: Path | None = None, tail_lines: int = process.DEFAULT_TAIL_LINES, ready_n_predict: int = 4,
                 on_state: Callable[[StateChange], None] | None = None,
                 liveness_timeout_s: float | None = 30.0, health_interval_s: float = 2.0,
                 rpc_fallback: ServerConfig | None = None,
                 oom_counters: Callable[[], OomCounters] = read_oom_counters) -> None:
        if binary is None:
            binary = find_server()
        if not isinstance(binary, ServerBinary):
            binary = ServerBinary(path=Path(binary), source="given", build=None)
        self.binary = binary
        self.dialect = dialect if dialect is not None else probe_dialect(binary.path)
        self.auto_restart, self.max_restarts, self.healthy_after_s = auto_restart, max_restarts, healthy_after_s
        self.backoff_s = tuple(backoff_s) or (1.0,)
        self._oom_counters = oom_counters
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._tail_lines = tail_lines
        self.ready_n_predict = ready_n_predict
        if liveness_timeout_s is not None and not liveness_timeout_s > 0:
            raise ValueError(f"liveness_timeout_s must be > 0 seconds or None, got {liveness_timeout_s}")
        self.liveness_timeout_s = liveness_timeout_s
        self.health_interval_s = max(0.1, float(health_interval_s))
        self._lock = threading.RLock()
        self._machine = StateMachine(self._lock, lambda: (self.base_url, self.config, self._book.restart_count))
        if on_state is not None:
            self._machine.listen(on_state)
        self._gen = 0  # +1 at each start and stop: a launch's threads stand down once it moved on
        self._child: process.ChildProcess | None = None
        self._current: Launch | None = None  # the last launch: its configuration with the port, argv, log file
        self._requested: ServerConfig | None = None  # what this start serves (a fallback changes it)
        self._startup_timeout_s = 30.0
        self._book = CrashBook()
        self._ready_at: float | None = None
        self._rpc_fallback = rpc_fallback
        self.rpc_lost: str | None = None
        self._last_lines: list[str] = []
        self._launches: set[Launch] = set()  # launches whose monitor thread runs
        sweep_stale_key_files()

    # ------------------------------------------------------------------ public read-only state
    @property
    def state(self) -> ServerState:
        """The current :class:`ServerState`."""
        return self._machine.state

    @property
    def base_url(self) -> str | None:
        """``http://host:port`` of the current child (None when none was launched)."""
        return self._current.base_url if self._current is not None else None

    @property
    def diagnosis(self) -> Diagnosis | None:
        """Why the last start failed / the last crash happened (None if nothing failed)."""
        return self._machine.diagnosis

    @property
    def config(self) -> ServerConfig | None:
        """The configuration being served (with the actual port), or None."""
        return self._current.cfg if self._current is not None else None

    @property
    def argv(self) -> list[str] | None:
        """The argv of the current/last child."""
        return list(self._current.argv) if self._current is not None else None

    @property
    def pid(self) -> int | None:
        """Pid of the running child, or None."""
        child = self._child
        return child.pid if child is not None and child.is_alive() else None

    @property
    def log_path(self) -> Path | None:
        """File with the full log of the current/last child."""
        return self._current.log_path if self._current is not None else None

    @property
    def sleep_status(self) -> SleepStatus:
        """Idle sleep of the current launch: asleep now, waking, the last reload's seconds."""
        return self._current.sleep_status if self._current is not None else SleepStatus()

    @property
    def restart_count(self) -> int:
        """Crash restarts since the last :meth:`start`."""
        return self._book.restart_count

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` log lines of the current (or last) child, oldest first."""
        child = self._child
        return child.log_lines(n) if child is not None else self._last_lines[-n:]

    def client(self, timeout_s: float = 10.0) -> ServerClient:
        """A new :class:`ServerClient` for the current child (caller closes it).

        Raises: RuntimeError when no server was launched.
        """
        url = self.base_url
        if url is None:
            raise RuntimeError("no llama-server launched: call start() first")
        return ServerClient(url, api_key=self.config.api_key if self.config else None, timeout_s=timeout_s)

    def on_state(self, callback: Callable[[StateChange], None]) -> Callable[[], None]:
        """Register ``callback(StateChange)``; returns a function that unregisters it.

        Callbacks run on supervisor threads (or the thread calling start/stop), never on purpose
        on the GUI thread, in state order, while the supervisor holds its lock: they must return
        quickly (e.g. emit a Qt signal) and must not wait for another thread that uses this
        supervisor. Exceptions they raise are swallowed (and logged).
        """
        return self._machine.listen(callback)

    def set_rpc_fallback(self, config: ServerConfig | None) -> None:
        """The local-only configuration to switch to when an RPC host is lost (see the class docs)."""
        with self._lock:
            self._rpc_fallback = config

    # ------------------------------------------------------------------ control
    def start(self, config: ServerConfig, startup_timeout_s: float | None = None) -> None:
        """Launch ``config`` and return at once (state ``starting``); readiness is checked in
        the background, see :meth:`wait_ready`. A running server is stopped first.

        Args:
            config: what to serve; ``port`` None = pick a free port.
            startup_timeout_s: load-hang limit (default :func:`startup_timeout_for`).

        Raises:
            UnsupportedConfigError: the binary lacks a needed flag (nothing is launched).
        """
        if self.state in LIVE:
            self.stop()
        # validate the argv before launching anything (raises UnsupportedConfigError)
        build_argv(self.binary.path, config if config.port is not None else config.with_port(1), self.dialect)
        config = workarounds.apply_workarounds(config, self.binary.path)
        with self._lock:
            gen = self._begin(config, startup_timeout_s)
        self._launch(gen, config, message=f"starting {config.model_path.name}")

    def _begin(self, config: ServerConfig, startup_timeout_s: float | None) -> int:
        """A new start of ``config`` (caller holds the lock; the previous launch stands down): its generation."""
        self._requested = config
        self._book.begin()
        self._machine.diagnosis = None
        self._startup_timeout_s = startup_timeout_for(config) if startup_timeout_s is None else startup_timeout_s
        self._gen += 1
        return self._gen

    def wait_ready(self, timeout_s: float | None = None, cancel: threading.Event | None = None) -> str:
        """Block until ready; returns ``base_url``.

        Args:
            timeout_s: give up after this many seconds: the child is stopped and the start fails
                with ``load_hang`` (None = the start's own load-hang limit).
            cancel: when set, the child is stopped and ``ServerStartError`` (``cancelled``) raised.

        Raises:
            ServerStartError: failed (with its diagnosis), timed out, cancelled or stopped.
        """
        reached = self._machine.wait(_SETTLED, timeout_s, cancel)
        if reached is ServerState.READY:
            return self.base_url or ""
        if reached is ServerState.FAILED:
            raise ServerStartError(self.diagnosis or Diagnosis("exited", "llama-server failed"))
        if reached is ServerState.STOPPED:
            raise ServerStartError(Diagnosis("cancelled", "llama-server was stopped before it was ready",
                                             tuple(self.log_tail(20))))
        if cancel is not None and cancel.is_set():
            lines = self.log_tail(20)
            self.stop(grace_s=2.0)
            raise ServerStartError(Diagnosis("cancelled", "start cancelled", tuple(lines)))
        with self._lock:
            gen = self._gen
        self._fail_now(gen, load_hang(timeout_s or 0.0, self.log_tail(50)))
        if self.state == ServerState.READY:  # became ready in the last instant
            return self.base_url or ""
        raise ServerStartError(self.diagnosis or load_hang(timeout_s or 0.0, []))

    def start_and_wait(self, config: ServerConfig, timeout_s: float | None = None,
                       cancel: threading.Event | None = None) -> str:
        """:meth:`start` then :meth:`wait_ready`; returns ``base_url``.

        ``timeout_s`` is the load-hang limit in seconds (None = :func:`startup_timeout_for`).
        Raises: UnsupportedConfigError (nothing launched), ServerStartError (with its diagnosis).
        """
        self.start(config, startup_timeout_s=timeout_s)
        return self.wait_ready(timeout_s=None, cancel=cancel)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """Stop the child: SIGTERM, wait ``grace_s``, then kill the whole tree. Returns its exit
        status (None if nothing ran). State ends ``stopped``; a ``failed`` state stays failed
        only if there was no child. A second ``stop()`` while one runs waits with it."""
        with self._lock:
            self._gen += 1
            child = self._child
            if child is None and self.state in (ServerState.STOPPED, ServerState.FAILED):
                return None
            if self.state is not ServerState.STOPPING:
                self._set_state(ServerState.STOPPING, message="stopping")
        rc = child.stop(grace_s) if child is not None else None
        for launch in list(self._launches):  # key hand-offs are not left to the monitor threads (daemons)
            launch.release_key()
        with self._lock:
            if child is not None:
                self._last_lines = child.log_lines()
            if self._child is child:
                self._child = None
            if self.state is ServerState.STOPPING:
                self._set_state(ServerState.STOPPED, message="stopped")
        return rc

    def restart(self, config: ServerConfig | None = None, applying: str | None = None) -> None:
        """Stop and start again (with ``config`` or the last requested configuration); returns at once like
        :meth:`start`. ``applying`` (a start-up setting, in words): a ready or sleeping server goes ``applying`` →
        ``starting`` on its own port ("restarting llama-server to apply: …"), not through ``stopped``.

        Raises: RuntimeError (nothing started before, no ``config``); UnsupportedConfigError like :meth:`start`.
        """
        cfg = config or self._requested
        if cfg is None:
            raise RuntimeError("restart(): nothing was started before and no config given")
        if applying is None or self.state not in (ServerState.READY, ServerState.SLEEPING):
            self.stop()
            self.start(cfg)
            return
        build_argv(self.binary.path, cfg if cfg.port is not None else cfg.with_port(1), self.dialect)
        with self._lock:
            child, port = self._child, self.config.port if self.config is not None else None
            gen = self._begin(workarounds.apply_workarounds(cfg, self.binary.path), None)
            self._set_state(ServerState.APPLYING, message=f"restarting llama-server to apply: {applying}")
        if child is not None:
            child.stop()  # its monitor stands down: the generation moved on
        self._launch(gen, cfg, message=f"starting {cfg.model_path.name} ({applying})", prefer_port=port)

    def close(self) -> None:
        """Same as :meth:`stop` (for ``with`` blocks)."""
        self.stop()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ state and announcements
    def _set_state(self, state: ServerState, diagnosis: Diagnosis | None = None, message: str = "") -> None:
        """The one place that changes the state (:meth:`StateMachine.change`; caller holds the lock).

        Raises:
            IllegalTransition: the table of :mod:`tuner.server.states` does not allow the change.
        """
        self._machine.change(state, diagnosis, message)

    def _announce(self, message: str, diagnosis: Diagnosis | None = None) -> None:
        """Tell the ``on_state`` callbacks ``message`` without changing the state (a silent but working
        server, a cure's note): a :class:`StateChange` whose ``state`` equals its ``previous``."""
        self._machine.announce(message, diagnosis)

    # ------------------------------------------------------------------ one launch
    def _launch(self, gen: int, config: ServerConfig, message: str, port_attempt: int = 0,
                prefer_port: int | None = None) -> None:
        """Spawn ``config`` (with the recorded workarounds) and its monitor thread. Port: the config's,
        else ``prefer_port`` (a restart keeps its endpoint; taken = "port busy", retried on a free one),
        else a free one."""
        config = workarounds.apply_workarounds(config, self.binary.path)  # a recorded machine fact
        port = pick_port(config, prefer_port)
        launch = Launch(self.binary.path, self.dialect, config.with_port(port), config,
                        new_log_path(port, self._log_dir), port_attempt, self._oom_counters)
        with self._lock:
            if gen != self._gen:
                launch.release_key()
                return
            self._current = launch
            self._set_state(ServerState.STARTING, message=message)
            try:
                child = self._child = launch.spawn(self._tail_lines)
            except OSError as exc:
                self._set_state(ServerState.FAILED, Diagnosis(
                    "not_executable", f"cannot execute {self.binary.path}: {exc}", (), None, None, None),
                    message=f"cannot execute {self.binary.path}")
                return
            self._launches.add(launch)
        threading.Thread(target=self._monitor, args=(gen, launch, child), name=f"llama-server-monitor-{child.pid}",
                         daemon=True).start()

    def _fail_now(self, gen: int, diag: Diagnosis) -> None:
        """Fail the current start (only while ``starting``): kill the child, state failed."""
        with self._lock:
            if gen != self._gen or self.state != ServerState.STARTING:
                return
            self._gen += 1  # the monitor of this child stands down
            child = self._child
        if child is not None:
            child.kill()
        with self._lock:
            if child is not None:
                self._last_lines = child.log_lines()
                diag = replace(diag, returncode=child.returncode if diag.returncode is None else diag.returncode)
            self._child = None
            self._set_state(ServerState.FAILED, diag, message=diag.message)

    def _alive_gen(self, gen: int) -> bool:
        return gen == self._gen

    def _monitor(self, gen: int, launch: Launch, child: process.ChildProcess) -> None:
        """The launch's thread: readiness, then liveness while ready, then what follows its end.
        A state change the table refuses (a supervisor bug) is logged here, never raised into the void."""
        try:
            self._follow_launch(gen, launch, child)
        except IllegalTransition:
            log.exception("llama-server pid %s: the supervisor made a state change its table forbids", child.pid)
        finally:
            self._launches.discard(launch)

    def _follow_launch(self, gen: int, launch: Launch, child: process.ChildProcess) -> None:
        """Readiness (a taken port retried), ready, the watch, then :meth:`_after_crash`; each step stands
        down once the launch was superseded (``alive``)."""
        alive = functools.partial(self._alive_gen, gen)
        outcome = launch.check_ready(child, self.base_url or "", self._startup_timeout_s, self.ready_n_predict, alive)
        if not alive():
            return
        if outcome is not None:
            if outcome.code == "port_busy" and launch.requested.port is None and launch.port_attempt < 3:
                child.wait(5.0)
                self._launch(gen, launch.requested, message="port was taken, retrying on another port",
                             port_attempt=launch.port_attempt + 1)
                return
            self._after_crash(gen, child, outcome, ready_s=None)
            return
        if not self._became_ready(gen, launch.cfg, launch.requested):
            return
        hung = launch.watch(child, self.base_url or "", alive, self.health_interval_s, self.liveness_timeout_s,
                            self._announce, functools.partial(self._on_sleep, gen))
        if not alive():
            return
        ready_s = time.monotonic() - (self._ready_at or time.monotonic())
        if hung is not None:
            self._after_crash(gen, child, hung, ready_s)
        elif child.returncode is not None:
            self._after_crash(gen, child, served_death(launch.death(child, "serving"), child.returncode), ready_s)

    def _became_ready(self, gen: int, cfg: ServerConfig, requested: ServerConfig) -> bool:
        """State ``ready`` (False when this launch was superseded). A healing retry that came up ends
        its start's crash story: a ``--no-repack`` cure is recorded as a machine fact first (so a
        launch right after this one uses it), then announced; the note becomes the diagnosis (the doctor
        and the app read it)."""
        with self._lock:
            healed = self._book.healed()
        note = record_cure(self.binary.path, healed)
        with self._lock:
            if not self._alive_gen(gen):
                return False
            if healed is not None and healed[1] is not None and self._requested is not None:
                self._requested = replace(self._requested, no_repack=True)  # restarts keep it
            self._book.mark_ready(requested)
            self._ready_at = time.monotonic()
            self._set_state(ServerState.READY, message=f"serving {cfg.model_path.name} at {self.base_url}")
            if note is not None:
                self._announce(note.message, note)
        return True

    def _on_sleep(self, gen: int, event: SleepEvent) -> None:
        """Idle sleep changed (:mod:`tuner.server.sleep`): ``ready`` ↔ ``sleeping``, said in the event's words."""
        new = ServerState.SLEEPING if event.asleep else ServerState.READY
        with self._lock:
            if self._alive_gen(gen) and self.state in (ServerState.READY, ServerState.SLEEPING) and self.state is not new:
                self._set_state(new, message=event.message)

    # ------------------------------------------------------------------ after a launch ended
    def _after_crash(self, gen: int, child: process.ChildProcess, diag: Diagnosis, ready_s: float | None) -> None:
        """A launch ended (``ready_s``: how long it had been ready; None = never): the restart policy
        decides, the supervisor makes the transition, waits the action's delay and relaunches."""
        child.kill()
        if ready_s is None and diag.returncode is None:
            diag = replace(diag, returncode=child.returncode)
        cfg = self._requested
        rpc = cfg.rpc if cfg is not None and self.auto_restart and self._rpc_fallback is not None else ()
        lost = lost_rpc_host(child.log_lines(), rpc) if rpc else None
        with self._lock:
            if not self._alive_gen(gen):
                return
            self._last_lines = child.log_lines()
            step = self._book.decide(diag, ready_s, self.config, self._requested, _policy_settings(self),
                                     self._rpc_fallback, lost)  # policy
            self._transition(step)  # transition
        if step.config is None or isinstance(step.action, policy.GiveUp) \
                or not _wait_while(functools.partial(self._alive_gen, gen), step.action.delay_s):
            return  # gave up, or superseded during the back-off
        with self._lock:
            if not self._alive_gen(gen):
                return
            self._startup_timeout_s = startup_timeout_for(step.config)
        self._launch(gen, step.config, relaunch_message(step.action, step.config, self._book.restart_count),
                     prefer_port=self.config.port if self.config else None)  # relaunch

    def _transition(self, step: Step) -> None:
        """The state change ``step`` calls for (caller holds the lock): failed, or starting again."""
        if step.config is None:
            self._child = None
            self._set_state(ServerState.FAILED, step.diagnosis, message=step.message)
            return
        if step.switched:
            self._requested = step.config
        if step.rpc_lost is not None:
            self.rpc_lost = step.rpc_lost
        self._set_state(ServerState.STARTING, step.diagnosis, message=step.message)


def _policy_settings(sup: Supervisor) -> policy.PolicySettings:
    """``sup``'s side of :func:`restart_policy.next_step` (its crash book adds the rest)."""
    return policy.PolicySettings(
        auto_restart=sup.auto_restart, can_no_repack=sup.dialect.first("--no-repack", "-nr") is not None,
        backoff_s=sup.backoff_s, healthy_after_s=sup.healthy_after_s, fallback_after=sup.max_restarts,
        cpu_flags=workarounds.cpu_identity().flags)


def _wait_while(alive: Callable[[], bool], delay_s: float) -> bool:
    """Sleep ``delay_s`` seconds; False as soon as ``alive()`` turns False (the launch was superseded by a stop
    or a start)."""
    t_end = time.monotonic() + delay_s
    while time.monotonic() < t_end:
        if not alive():
            return False
        time.sleep(min(0.1, max(0.0, t_end - time.monotonic())))
    return alive()


__all__ = ["IllegalTransition", "ServerStartError", "ServerState", "StateChange", "Supervisor", "startup_timeout_for"]
