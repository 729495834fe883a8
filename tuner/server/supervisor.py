"""Supervised llama-server: start, readiness, stop, crash restart, with diagnosis.

States: :mod:`tuner.server.states` (the table of allowed transitions). One ``_set_state`` changes the
state and checks the table (an illegal change raises :class:`~tuner.server.states.IllegalTransition`);
a message without a change (a silent but working server, a cure's note) goes out through ``_announce``.
Every change and announcement is reported to the ``on_state`` callbacks, called from a non-GUI thread.
The API key reaches the child through :mod:`tuner.server.keyhandoff` (a memfd, never the argv); full
logs go to one private file per launch (:mod:`tuner.server.serverlogs`).

Ready means, in this order (docs: /work/shared/reference/llama-server.md §4, §6):

1. ``GET /health`` answers 200 (503 "Loading model" while loading; server-http.cpp);
2. ``GET /props`` reports *our* ``model_path`` and, where psutil can tell, our child holds the
   listening socket: another process on the port is never mistaken for ours;
3. one short greedy completion succeeds (a server can answer /health and then die of OOM on the
   first real request);
4. for speculative configurations ``/slots[].speculative`` is true for every slot; otherwise the
   start fails with ``speculation_inactive`` and the reason from the log (an incompatible draft
   leaves the server running without speculation: server-context.cpp ``load_model``). ik_llama.cpp
   has no such field (:attr:`Dialect.spec_on_slots`): there every slot's start-up line
   "speculative decoding context initialized" must be in the log
   (:func:`tuner.server.diagnosis.speculators_initialized`).

Liveness while ready: every ``health_interval_s`` the supervisor asks ``/health`` (timeout
``HEALTH_TIMEOUT_S``). llama-server answers it from its HTTP thread pool without the main loop
(tools/server/server-context.cpp ``server_routes::init_routes``, ``get_health``; the pool has
``n_parallel + 4`` threads or more, tools/server/server-http.cpp ``server_http_context::init``), so
a server busy with a long prompt still answers. When no answer came for ``liveness_timeout_s``,
the child counts as hung only if it also made no progress: it is stopped (``T`` state, e.g.
SIGSTOP) or its CPU time did not grow in that window. A starved but working server (CPU time
rising, e.g. a long prompt on a loaded 2-core machine) is left alone and the silence is logged
once. A hung child is killed (the whole tree) and handled like a crash: restarted with backoff
(``auto_restart``), reported through ``on_state`` (the tray shows it), or failed.

The port is picked free by the supervisor unless the configuration names one; a "couldn't bind"
on a picked port is retried on a new port. Stop = SIGTERM, wait, SIGKILL of the whole tree
(:mod:`tuner.process`).

After a failed start or a crash, :func:`tuner.server.restart_policy.next_step` (pure) decides from
this ``start()``'s history: a start that dies by SIGILL before ready is retried with ``--no-repack``,
one that dies by SIGSEGV/SIGBUS is retried unchanged and then with ``--no-repack`` (every launch, with
or without ``auto_restart``); when ``--no-repack`` cures it the fact is recorded
(:mod:`tuner.server.workarounds`) and every later launch applies it. While serving (``auto_restart``)
a crash is restarted with back-off (1, 2, 4, 8, 16, 30 s; reset by a crash after 60 s of ready time,
which does not count); only 5 starts in a row that never reach ready give up; 3 quick failures of a
configuration fall back to the last other configuration that reached ready, and a lost RPC host
switches to the local-only configuration at once. Each crash is diagnosed with its phase and the
kernel's OOM counters (:mod:`tuner.server.oomcount`) read at spawn and after the death.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tuner import process
from tuner.errors import DraftwiseError
from tuner.logs import redact
from tuner.process import clean_env
from tuner.server import restart_policy as policy
from tuner.server import workarounds
from tuner.server.argv import build_argv
from tuner.server.client import ServerClient, ServerClientError, ServerHTTPError
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import (
    CrashContext,
    Diagnosis,
    diagnose,
    load_hang,
    speculation_reason,
    speculators_initialized,
    startup_phase,
)
from tuner.server.dialect import Dialect, probe_dialect
from tuner.server.discovery import ServerBinary, find_server
from tuner.server.keyhandoff import KeyHandoff, remove_key_file, sweep_stale_key_files, write_key_file
from tuner.server.oomcount import OomCounters, read_oom_counters
from tuner.server.restarts import CrashBook, Step, lost_rpc_host, record_cure, relaunch_message, served_death
from tuner.server.serverlogs import new_log_path
from tuner.server.states import LIVE, IllegalTransition, ServerState, StateChange, StateMachine

log = logging.getLogger(__name__)

#: The states :meth:`Supervisor.wait_ready` waits for.
_SETTLED = frozenset({ServerState.READY, ServerState.FAILED, ServerState.STOPPED})


#: Prompt of the readiness completion (any text works; this one suits the demo model).
READY_PROMPT = "Once upon a time"
#: Seconds one liveness ``/health`` request may take.
HEALTH_TIMEOUT_S = 3.0
#: CPU seconds the child's process tree must gain while silent to count as working, not hung.
LIVENESS_MIN_CPU_S = 0.05


class ServerStartError(DraftwiseError, RuntimeError):
    """The server did not become ready; ``diagnosis`` says why (with log evidence)."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        super().__init__(f"{diagnosis.code}: {diagnosis.message}")


def startup_timeout_for(config: ServerConfig, base_s: float = 30.0, s_per_gib: float = 20.0) -> float:
    """Seconds to wait for readiness: ``base_s`` plus ``s_per_gib`` per GiB of target + draft
    files (a slow disk reads roughly 50 MB/s; the load also builds the KV cache)."""
    return base_s + s_per_gib * config.model_bytes() / 2**30


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(os.path.abspath(str(a))) == os.path.normpath(os.path.abspath(str(b)))


class _Liveness:
    """The liveness rule for one ready child (see the module docstring); :meth:`check` is called
    from the monitor thread about every ``health_interval_s``."""

    def __init__(self, sup: Supervisor, child: process.ChildProcess, cfg: ServerConfig) -> None:
        self.sup = sup
        self.child = child
        self.client = ServerClient(sup.base_url or "", api_key=cfg.api_key, timeout_s=HEALTH_TIMEOUT_S)
        now = time.monotonic()
        self.last_ok = now
        self.next_check = now + sup.health_interval_s
        self.cpu_mark = self._cpu()
        self.busy_noted = False

    def _cpu(self) -> float | None:
        usage = process.tree_usage(self.child.pid)
        return usage[1] if usage is not None else None

    def check(self) -> Diagnosis | None:
        """None while alive (or busy); the ``hung`` diagnosis when the child must be killed."""
        now = time.monotonic()
        if now < self.next_check:
            return None
        timeout = self.sup.liveness_timeout_s or 0.0
        h = self.client.health(timeout_s=min(HEALTH_TIMEOUT_S, max(0.5, timeout)))
        now = time.monotonic()
        self.next_check = now + self.sup.health_interval_s
        if h.ok:
            if self.busy_noted:
                self.sup._announce("llama-server answers /health again")
            self.last_ok, self.cpu_mark, self.busy_noted = now, self._cpu(), False
            return None
        silent = now - self.last_ok
        if silent < timeout:
            return None
        stopped = process.process_stopped(self.child.pid)
        cpu = self._cpu()
        gained = None if cpu is None or self.cpu_mark is None else cpu - self.cpu_mark
        if not stopped and gained is not None and gained >= LIVENESS_MIN_CPU_S:
            # working (a long prompt on a starved machine): not hung; measure the next window
            if not self.busy_noted:
                self.sup._announce(f"llama-server has not answered /health for {silent:.0f} s but is working "
                               f"({gained:.1f} CPU s in that time): not restarted")
                self.busy_noted = True
            self.last_ok, self.cpu_mark = now, cpu
            return None
        why = "it is stopped (SIGSTOP?)" if stopped else "its CPU time did not grow"
        return Diagnosis("hung", f"llama-server did not answer /health for {silent:.0f} s and {why}: "
                         "killed as hung", tuple(self.child.log_lines(20)) + (f"/health: {h.message}",))

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            log.debug("closing the liveness client failed", exc_info=True)


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
            like a crash (see the module docstring); None = no liveness checks.
        health_interval_s: seconds between liveness ``/health`` requests.
        rpc_fallback: with ``auto_restart``, the configuration to serve instead when a configuration
            with RPC hosts (``ServerConfig.rpc``) crashes because a host is gone (its log names the lost
            host: ``tuner.hardware.rpc.log_names_lost_host``); the switch is reported as a state change
            with code ``rpc_host_lost``. Set later with :meth:`set_rpc_fallback`.

    Raises (constructor): ServerNotFoundError, DialectError.
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
        self.auto_restart = auto_restart
        self.max_restarts = max_restarts
        self.backoff_s = tuple(backoff_s) or (1.0,)
        self.healthy_after_s = healthy_after_s
        self._oom_counters = oom_counters
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._tail_lines = tail_lines
        self.ready_n_predict = ready_n_predict
        if liveness_timeout_s is not None and not liveness_timeout_s > 0:
            raise ValueError(f"liveness_timeout_s must be > 0 seconds or None, got {liveness_timeout_s}")
        self.liveness_timeout_s = liveness_timeout_s
        self.health_interval_s = max(0.1, float(health_interval_s))

        self._lock = threading.RLock()
        self._machine = StateMachine(self._lock, lambda: (self.base_url, self._config, self._book.restart_count))
        if on_state is not None:
            self._machine.listen(on_state)
        self._gen = 0
        self._child: process.ChildProcess | None = None
        self._config: ServerConfig | None = None
        self._requested: ServerConfig | None = None
        self._port: int | None = None
        self._startup_timeout_s = 30.0
        self._book = CrashBook()  # this start()'s crashes, the configurations that reached ready
        self._ready_at: float | None = None
        self._oom_at_spawn: OomCounters = (None, None)
        self._rpc_fallback = rpc_fallback
        self.rpc_lost: str | None = None
        self._log_path: Path | None = None
        self._argv: list[str] | None = None
        self._last_lines: list[str] = []
        self._key_files: set[KeyHandoff] = set()
        sweep_stale_key_files()

    # ------------------------------------------------------------------ public read-only state
    @property
    def state(self) -> ServerState:
        """The current :class:`ServerState`."""
        return self._machine.state

    @property
    def base_url(self) -> str | None:
        """``http://host:port`` of the current child (None when none was launched)."""
        cfg, port = self._config, self._port
        if cfg is None or port is None:
            return None
        host = cfg.host if cfg.host not in ("0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    @property
    def diagnosis(self) -> Diagnosis | None:
        """Why the last start failed / the last crash happened (None if nothing failed)."""
        return self._machine.diagnosis

    @property
    def config(self) -> ServerConfig | None:
        """The configuration being served (with the actual port), or None."""
        return self._config

    @property
    def argv(self) -> list[str] | None:
        """The argv of the current/last child."""
        return list(self._argv) if self._argv else None

    @property
    def pid(self) -> int | None:
        """Pid of the running child, or None."""
        child = self._child
        return child.pid if child is not None and child.is_alive() else None

    @property
    def log_path(self) -> Path | None:
        """File with the full log of the current/last child."""
        return self._log_path

    @property
    def restart_count(self) -> int:
        """Crash restarts since the last :meth:`start`."""
        return self._book.restart_count

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` log lines of the current (or last) child, oldest first."""
        child = self._child
        if child is not None:
            return child.log_lines(n)
        return self._last_lines[-n:]

    def client(self, timeout_s: float = 10.0) -> ServerClient:
        """A new :class:`ServerClient` for the current child (caller closes it).

        Raises: RuntimeError when no server was launched.
        """
        url = self.base_url
        if url is None:
            raise RuntimeError("no llama-server launched: call start() first")
        return ServerClient(url, api_key=self._config.api_key if self._config else None, timeout_s=timeout_s)

    def on_state(self, callback: Callable[[StateChange], None]) -> Callable[[], None]:
        """Register ``callback(StateChange)``; returns a function that unregisters it.

        Callbacks run on supervisor threads (or the thread calling start/stop), never on purpose
        on the GUI thread, in state order, while the supervisor holds its lock: they must return
        quickly (e.g. emit a Qt signal) and must not wait for another thread that uses this
        supervisor. Exceptions they raise are swallowed (and logged).
        """
        return self._machine.listen(callback)

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
            self._requested = config
            self._book.begin()
            self._machine.diagnosis = None
            self._startup_timeout_s = startup_timeout_s if startup_timeout_s is not None else startup_timeout_for(config)
            self._gen += 1
            gen = self._gen
        self._launch(gen, config, message=f"starting {config.model_path.name}")

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
        only if there was no child. A second ``stop()`` while one runs stops with it (no second
        ``stopping``), and a ``start()`` that came in between keeps its new child."""
        with self._lock:
            self._gen += 1
            child = self._child
            if child is None and self.state in (ServerState.STOPPED, ServerState.FAILED):
                return None
            if self.state is not ServerState.STOPPING:
                self._set_state(ServerState.STOPPING, message="stopping")
        rc = child.stop(grace_s) if child is not None else None
        for handoff in list(self._key_files):  # not left to the monitor thread (a daemon)
            remove_key_file(handoff)
            self._key_files.discard(handoff)
        with self._lock:
            if child is not None:
                self._last_lines = child.log_lines()
            if self._child is child:
                self._child = None
            if self.state is ServerState.STOPPING:
                self._set_state(ServerState.STOPPED, message="stopped")
        return rc

    def restart(self, config: ServerConfig | None = None) -> None:
        """Stop and start again (with ``config`` or the last requested configuration); returns
        at once like :meth:`start`.

        Raises: RuntimeError when nothing was started before and no ``config`` is given;
        UnsupportedConfigError like :meth:`start`.
        """
        cfg = config or self._requested
        if cfg is None:
            raise RuntimeError("restart(): nothing was started before and no config given")
        self.stop()
        self.start(cfg)

    def close(self) -> None:
        """Same as :meth:`stop` (for ``with`` blocks)."""
        self.stop()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals
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

    def _launch(self, gen: int, config: ServerConfig, message: str, port_attempt: int = 0,
                prefer_port: int | None = None) -> None:
        """Spawn ``config`` (with the recorded workarounds) and its monitor thread. Port: the config's,
        else ``prefer_port`` (a restart keeps its endpoint; taken = "port busy", retried on a free one),
        else a free one."""
        config = workarounds.apply_workarounds(config, self.binary.path)  # a recorded machine fact
        port = config.port if config.port is not None else prefer_port or process.free_port(
            config.host if config.host not in ("0.0.0.0", "::") else "127.0.0.1")
        cfg = config.with_port(port)
        key_file = write_key_file(cfg.api_key) if cfg.api_key and self.dialect.has("--api-key-file") else None
        argv = build_argv(self.binary.path, cfg, self.dialect, api_key_file=key_file.path if key_file else None)
        log_path = new_log_path(port, self._log_dir)
        with self._lock:
            if gen != self._gen:
                remove_key_file(key_file)
                return
            self._config = cfg
            self._port = port
            self._argv = argv
            self._log_path = log_path
            self._set_state(ServerState.STARTING, message=message)
            self._oom_at_spawn = self._read_oom()
            try:
                child = process.spawn(argv, env=clean_env(os.environ), log_path=log_path,
                                      tail_lines=self._tail_lines,
                                      pass_fds=(key_file.fd,) if key_file and key_file.fd is not None else ())
            except OSError as exc:
                remove_key_file(key_file)
                self._set_state(ServerState.FAILED, Diagnosis(
                    "not_executable", f"cannot execute {self.binary.path}: {exc}", (), None, None, None),
                    message=f"cannot execute {self.binary.path}")
                return
            self._child = child
            log.info("llama-server pid %s started: %s", child.pid, redact(" ".join(argv)))
            if key_file is not None:
                key_file.close_parent_side()
                self._key_files.add(key_file)
        t = threading.Thread(target=self._monitor, args=(gen, child, cfg, config, port_attempt, key_file),
                             name=f"llama-server-monitor-{child.pid}", daemon=True)
        t.start()

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

    def _monitor(self, gen: int, child: process.ChildProcess, cfg: ServerConfig, requested: ServerConfig,
                 port_attempt: int, key_file: KeyHandoff | None = None) -> None:
        """The launch's thread. A state change the table refuses (a supervisor bug) is logged here."""
        try:
            self._follow_launch(gen, child, cfg, requested, port_attempt, key_file)
        except IllegalTransition:
            log.exception("llama-server pid %s: the supervisor made a state change its table forbids", child.pid)

    def _follow_launch(self, gen: int, child: process.ChildProcess, cfg: ServerConfig, requested: ServerConfig,
                       port_attempt: int, key_file: KeyHandoff | None) -> None:
        try:
            outcome = self._bring_up(gen, child, cfg)
        except Exception as exc:  # a bug must not leave the state hanging in "starting"
            log.exception("internal error while checking readiness of pid %s", child.pid)
            outcome = Diagnosis("exited", f"internal error while checking readiness: {exc!r}",
                                tuple(child.log_lines(20)))
        finally:
            remove_key_file(key_file)  # read at start-up; a restart writes a new one
            self._key_files.discard(key_file)
        if not self._alive_gen(gen):
            return
        if isinstance(outcome, Diagnosis):
            if (outcome.code == "port_busy" and requested.port is None and port_attempt < 3):
                child.wait(5.0)
                self._launch(gen, requested, message="port was taken, retrying on another port",
                             port_attempt=port_attempt + 1)
                return
            self._after_crash(gen, child, outcome, ready_s=None)
            return
        if not self._became_ready(gen, cfg, requested):
            return
        hung = self._watch(gen, child, cfg)
        if not self._alive_gen(gen):
            return
        ready_s = time.monotonic() - (self._ready_at or time.monotonic())
        if hung is not None:
            child.kill()
            self._after_crash(gen, child, hung, ready_s)
            return
        if child.returncode is not None:
            self._after_crash(gen, child, served_death(self._exit_diagnosis(child, "serving"), child.returncode),
                              ready_s)

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

    def _watch(self, gen: int, child: process.ChildProcess, cfg: ServerConfig) -> Diagnosis | None:
        """Wait while ready: returns when the child exited or was superseded (None), or with the
        ``hung`` diagnosis (the liveness rule, :class:`_Liveness`)."""
        watch = _Liveness(self, child, cfg) if self.liveness_timeout_s is not None else None
        try:
            while self._alive_gen(gen):
                if child.wait(min(0.5, self.health_interval_s)) is not None:
                    return None
                hung = watch.check() if watch is not None else None
                if hung is not None:
                    return hung
        finally:
            if watch is not None:
                watch.close()
        return None

    def _read_oom(self) -> OomCounters:
        try:
            return self._oom_counters()
        except Exception:  # noqa: BLE001 - an injected or platform reader must not stop a launch
            log.debug("cannot read the OOM counters", exc_info=True)
            return None, None

    def _exit_diagnosis(self, child: process.ChildProcess, phase: str | None = None,
                        first_decode: bool = False) -> Diagnosis:
        """:func:`diagnose` of an exited child with its :class:`CrashContext`: the phase (``phase``, or
        from its log and ``first_decode`` while starting) and the OOM counters at spawn and now."""
        child.wait(2.0)
        lines = child.log_lines(200)
        ctx = CrashContext(phase=phase or startup_phase(lines, first_decode),
                           oom_before=self._oom_at_spawn, oom_after=self._read_oom())
        return diagnose(child.returncode, lines, ctx)

    def set_rpc_fallback(self, config: ServerConfig | None) -> None:
        """The local-only configuration to switch to when an RPC host is lost (see the class docs)."""
        with self._lock:
            self._rpc_fallback = config

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
            step = self._book.decide(diag, ready_s, self._config, self._requested, self._policy_settings(),
                                     self._rpc_fallback, lost)  # policy
            self._transition(step)  # transition
        if step.config is None or isinstance(step.action, policy.GiveUp) or not self._wait(gen, step.action.delay_s):
            return  # gave up, or superseded during the back-off
        with self._lock:
            if not self._alive_gen(gen):
                return
            self._startup_timeout_s = startup_timeout_for(step.config)
        self._launch(gen, step.config, relaunch_message(step.action, step.config, self._book.restart_count),
                     prefer_port=self._port)  # relaunch

    def _policy_settings(self) -> policy.PolicySettings:
        """This supervisor's side of :func:`restart_policy.next_step` (the crash book adds the rest)."""
        return policy.PolicySettings(
            auto_restart=self.auto_restart, can_no_repack=self.dialect.first("--no-repack", "-nr") is not None,
            backoff_s=self.backoff_s, healthy_after_s=self.healthy_after_s, fallback_after=self.max_restarts,
            cpu_flags=workarounds.cpu_identity().flags)

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

    def _wait(self, gen: int, delay_s: float) -> bool:
        """Sleep ``delay_s`` seconds; False as soon as this launch was superseded (a stop or a start)."""
        t_end = time.monotonic() + delay_s
        while time.monotonic() < t_end:
            if not self._alive_gen(gen):
                return False
            time.sleep(min(0.1, max(0.0, t_end - time.monotonic())))
        return self._alive_gen(gen)

    def _bring_up(self, gen: int, child: process.ChildProcess, cfg: ServerConfig) -> Diagnosis | None:
        """Run the readiness checks; None when ready, else the failure's :class:`Diagnosis`."""
        deadline = child.started_at_s + self._startup_timeout_s
        assert cfg.port is not None
        with ServerClient(self.base_url or "", api_key=cfg.api_key, timeout_s=5.0) as client:

            def exited() -> Diagnosis | None:
                return None if child.poll() is None else self._exit_diagnosis(child)

            # 1 + 2: /health 200 and identity
            foreign_seen: str | None = None
            while True:
                if not self._alive_gen(gen):
                    return None
                d = exited()
                if d is not None:
                    return d
                if time.monotonic() > deadline:
                    if foreign_seen is not None:
                        return Diagnosis("not_ours", f"another server answers on port {cfg.port}: {foreign_seen}",
                                         tuple(child.log_lines(20)), "--port")
                    return load_hang(self._startup_timeout_s, child.log_lines(50))
                h = client.health(timeout_s=2.0)
                if h.ok:
                    ident = self._identity(client, child, cfg)
                    if ident is None:
                        break
                    foreign_seen = ident
                time.sleep(0.15)
            # 3: one short completion
            try:
                client.completion(READY_PROMPT, self.ready_n_predict, temperature=0.0, cache_prompt=False,
                                  timeout_s=max(10.0, deadline - time.monotonic() + 30.0))
            except ServerClientError as exc:
                # the child may be dying (e.g. OOM on the first request): give it a moment
                if child.wait(5.0) is not None:
                    return self._exit_diagnosis(child, first_decode=True)
                return Diagnosis("request_failed", f"the first completion failed: {exc}",
                                 tuple(child.log_lines(20)) + (str(exc),))
            # 4: speculation really on
            if cfg.is_speculative:
                try:
                    slots = client.slots()
                except ServerHTTPError as exc:
                    return Diagnosis("speculation_inactive",
                                     f"cannot confirm speculation: /slots answered {exc.status_code}",
                                     tuple(child.log_lines(20)))
                except ServerClientError as exc:
                    if child.wait(5.0) is not None:
                        return self._exit_diagnosis(child, first_decode=True)
                    return Diagnosis("request_failed", f"/slots failed: {exc}", tuple(child.log_lines(20)))
                if not self.dialect.spec_on_slots and slots and not any("speculative" in s for s in slots):
                    # ik_llama.cpp: no /slots[].speculative; its per-slot start-up log line says it
                    if speculators_initialized(child.log_lines()) >= len(slots):
                        return None
                    lines = child.log_lines(400)
                    return Diagnosis("speculation_inactive",
                                     f"speculation inactive: {speculation_reason(lines)}",
                                     tuple(lines[-20:]), "--spec-type", None, None)
                if not slots or not all(bool(s.get("speculative")) for s in slots):
                    lines = child.log_lines(400)
                    reason = speculation_reason(lines)
                    d = diagnose(None, lines)
                    ev = d.evidence if d.code == "draft_incompatible" else tuple(lines[-20:])
                    return Diagnosis("speculation_inactive", f"speculation inactive: {reason}", ev,
                                     "--spec-type", None, None)
        return None

    def _identity(self, client: ServerClient, child: process.ChildProcess, cfg: ServerConfig) -> str | None:
        """None when the answering server is our child, else what answered instead."""
        try:
            props = client.props()
        except ServerClientError as exc:
            return f"/props failed: {exc}"
        mp = props.get("model_path")
        if not mp or not _same_path(str(mp), cfg.model_path):
            return f"model_path {mp!r} is not {str(cfg.model_path)!r}"
        assert cfg.port is not None
        if child.listens_on(cfg.port) is False:
            return "the listening socket belongs to another process"
        return None


__all__ = ["IllegalTransition", "ServerStartError", "ServerState", "StateChange", "Supervisor", "startup_timeout_for"]
