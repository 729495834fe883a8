"""Every tuned model of a folder from one endpoint: a supervised llama-server router.

llama-server's router mode (``llama-server --models-preset FILE`` without ``-m``; tools/server/server-models.cpp)
runs one process per model, started when a request names it in its ``model`` field (``--models-autoload``,
on by default) or when ``POST /models/load`` asks, at most ``--models-max`` at once (the least recently used
idle one is unloaded first: ``server_lru_sched::pick_victim``). An unknown ``model`` gets the router's own
error (400 "model 'x' not found", ``router_validate_model``). :class:`RouterSupervisor` runs it the way
:class:`tuner.server.supervisor.Supervisor` runs one model, and offers the same face (``state``,
``base_url``, ``config``, ``argv``, ``pid``, ``sleep_status``, ``diagnosis``, ``on_state``, ``stop``), so the app
holds either:

- the preset: written by Draftwise only (:mod:`tuner.server.router_launch`, :mod:`tuner.server.preset`), with
  the recorded CPU workarounds applied to every model (:mod:`tuner.server.workarounds`);
- states (:mod:`tuner.server.states`): ``starting`` (the router, then the first model), ``ready`` (the
  *current* model — the user's pick, or the last one a request loaded — passed the readiness checks),
  ``switching`` (another model loads: :meth:`RouterSupervisor.switch`, or a request named it), ``sleeping``
  (the current model's idle sleep), ``failed``, ``stopping``, ``stopped``;
- per model (:mod:`tuner.server.router_models`): the readiness checks of a single launch on its own process
  (:func:`tuner.server.readiness.bring_up`: ``/health``, our model on our socket, one completion,
  ``/slots[].speculative``), liveness and idle sleep on its own port, a load that hangs killed as ``load_hang``;
- the router never restarts a crashed model and reports every crash as status 1: each crash is classified
  from the model's log lines (:mod:`tuner.server.router_crash`, a single-model start when no line says why),
  then :func:`tuner.server.restart_policy.next_step` decides on the model's own history — load it again
  after a back-off, or give up: the model is taken out of the preset (requests for it get the router's
  "not found") and, when it is the current one, the state becomes ``failed``. A ``--no-repack`` cure found
  by the classification rewrites the preset (the router reloads only the sections that changed);
- the router process itself: readiness (``/health``, ``/props`` ``role`` router on our socket), liveness,
  and its crashes restarted with the same policy (its models die with it: they read EOF on stdin).
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
from tuner.server.client import NON_WAKING_PATHS, ServerClient, ServerClientError
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis, load_hang
from tuner.server.dialect import Dialect, probe_dialect
from tuner.server.discovery import ServerBinary, find_server
from tuner.server.liveness import Liveness
from tuner.server.oomcount import OomCounters, read_oom_counters
from tuner.server.preset import RouterPlan
from tuner.server.router_follow import ModelFollower
from tuner.server.router_launch import RouterLaunch
from tuner.server.router_log import RouterLog
from tuner.server.router_models import ModelTrack, ModelView, serving_config
from tuner.server.router_status import parse_models
from tuner.server.serverlogs import new_log_path
from tuner.server.sleep import SleepStatus
from tuner.server.states import LIVE, IllegalTransition, ServerState, StateChange, StateMachine
from tuner.server.supervisor import ServerStartError

log = logging.getLogger(__name__)

_S = ServerState
_SETTLED = frozenset({_S.READY, _S.FAILED, _S.STOPPED})


class RouterError(DraftwiseError, RuntimeError):
    """A router request that cannot be made (no router runs, no such model); the message says which."""


class RouterSupervisor(ModelFollower):
    """Runs one llama-server router (see the module docstring). Synchronous use::

        sup = RouterSupervisor(binary)
        sup.start_and_wait(plan, initial="model-a")   # raises ServerStartError
        sup.switch("model-b")                          # raises ServerStartError
        sup.stop()

    Args:
        binary / dialect: the llama-server (None = :func:`find_server`) and its dialect (None = probed).
        log_dir: where the router's log goes (default ``tuner.paths.log_dir()``).
        health_interval_s: seconds between two looks at ``/models`` and the models' own checks.
        liveness_timeout_s: a process silent this long and making no progress is killed as hung (None = off).
        backoff_s / healthy_after_s / give_up_after: the restart policy's (:mod:`tuner.server.restart_policy`).
        ready_n_predict: tokens of each model's readiness completion.
        reproduce: classify a crash with no error line by one single-model start of its configuration.
        preset_dir: where the preset is written (default ``data_dir()/router``).
        on_state: a first state callback; ``oom_counters``: reads the kernel's OOM counters.

    Raises (constructor): ServerNotFoundError, DialectError.
    """

    def __init__(self, binary: ServerBinary | str | Path | None = None, dialect: Dialect | None = None, *,
                 log_dir: Path | None = None, health_interval_s: float = 1.0, liveness_timeout_s: float | None = 30.0,
                 backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0), healthy_after_s: float = 60.0,
                 give_up_after: int = 5, ready_n_predict: int = 4, reproduce: bool = True,
                 preset_dir: Path | None = None, on_state: Callable[[StateChange], None] | None = None,
                 oom_counters: Callable[[], OomCounters] = read_oom_counters) -> None:
        binary = find_server() if binary is None else binary
        self.binary = binary if isinstance(binary, ServerBinary) else ServerBinary(Path(binary), "given", None)
        self.dialect = dialect if dialect is not None else probe_dialect(self.binary.path)
        self.health_interval_s, self.liveness_timeout_s = max(0.1, health_interval_s), liveness_timeout_s
        self._policy = policy.PolicySettings(auto_restart=True, can_no_repack=False, backoff_s=tuple(backoff_s),
                                             healthy_after_s=healthy_after_s, give_up_after=give_up_after)
        self.ready_n_predict, self._reproduce = ready_n_predict, reproduce
        self._log_dir, self._preset_dir, self._oom = log_dir, preset_dir, oom_counters
        self._lock = threading.RLock()
        self._machine = StateMachine(self._lock, lambda: (self.base_url, self.config, self._restarts))
        if on_state is not None:
            self._machine.listen(on_state)
        self._gen = 0
        self._plan: RouterPlan | None = None
        self._launch: RouterLaunch | None = None
        self._log = RouterLog()
        self._tracks: dict[str, ModelTrack] = {}
        self._current: str | None = None
        self._wanted: str | None = None
        self._router_attempts: list[policy.Attempt] = []
        self._router_ready_at: float | None = None
        self._restarts = 0
        self._last_lines: list[str] = []
        self.rpc_lost: str | None = None  # the single-model supervisor's field; a router serves no RPC placement

    # ------------------------------------------------------------------ read-only state
    @property
    def state(self) -> ServerState:
        """The current :class:`ServerState` (of the router and its current model)."""
        return self._machine.state

    @property
    def diagnosis(self) -> Diagnosis | None:
        """Why the last start, load or model failed (None if nothing failed)."""
        return self._machine.diagnosis

    @property
    def plan(self) -> RouterPlan | None:
        """What the router serves (with its port), None before :meth:`start`."""
        return self._plan

    @property
    def base_url(self) -> str | None:
        """``http://host:port`` of the router, None before :meth:`start`."""
        return self._launch.base_url if self._launch is not None else None

    @property
    def current(self) -> str | None:
        """The id of the model the endpoint serves now (None before the first one is ready)."""
        return self._current

    @property
    def config(self) -> ServerConfig | None:
        """The current model's configuration as served through the router (its address, key, id), or None."""
        plan, track = self._plan, self._tracks.get(self._current or self._wanted or "")
        if plan is None or track is None:
            return None
        return serving_config(track.model, plan.host, plan.port, plan.api_key, plan.cors_origins, plan.sleep_idle_s)

    @property
    def argv(self) -> list[str] | None:
        """The router's argv (the models' own are in ``GET /models``)."""
        return list(self._launch.argv) if self._launch is not None else None

    @property
    def pid(self) -> int | None:
        """Pid of the running router (its models are its children), or None."""
        child = self._launch.child if self._launch is not None else None
        return child.pid if child is not None and child.is_alive() else None

    @property
    def log_path(self) -> Path | None:
        """The router's log file (its models' lines included, each after ``[PORT]``)."""
        return self._launch.log_path if self._launch is not None else None

    @property
    def sleep_status(self) -> SleepStatus:
        """Idle sleep of the current model."""
        track = self._tracks.get(self._current or "")
        return track.sleep_status if track is not None else SleepStatus()

    @property
    def restart_count(self) -> int:
        """Crash restarts (of the router and of its models) since :meth:`start`."""
        return self._restarts

    def models(self) -> list[ModelView]:
        """Every model of the plan in plan order, as a snapshot (no I/O: the last look at ``/models``)."""
        with self._lock:
            return [t.view(t.model_id == self._current) for t in self._tracks.values()]

    def model_pid(self, model: str) -> int | None:
        """Pid of the process serving ``model`` now, or None."""
        track = self._tracks.get(model)
        child = track.child if track is not None else None
        return child.pid if child is not None and child.is_alive() else None

    def log_tail(self, n: int = 50) -> list[str]:
        """The router's last ``n`` log lines (its models' too), oldest first."""
        child = self._launch.child if self._launch is not None else None
        return child.log_lines(n) if child is not None else self._last_lines[-n:]

    def client(self, timeout_s: float = 10.0) -> ServerClient:
        """A new :class:`ServerClient` of the router (caller closes it). Raises RuntimeError before a start."""
        if self.base_url is None or self._plan is None:
            raise RuntimeError("no llama-server router launched: call start() first")
        return ServerClient(self.base_url, api_key=self._plan.api_key, timeout_s=timeout_s)

    def on_state(self, callback: Callable[[StateChange], None]) -> Callable[[], None]:
        """Register ``callback(StateChange)`` (same rules as :meth:`Supervisor.on_state`); returns its remover."""
        return self._machine.listen(callback)

    # ------------------------------------------------------------------ control
    def start(self, plan: RouterPlan, initial: str) -> None:
        """Write the preset, launch the router and load ``initial``; returns at once (state ``starting``).

        Raises:
            RouterError: ``initial`` is not a model of ``plan``.
            tuner.server.preset.PresetError: a model cannot be written into the preset (nothing launched).
            OSError: the preset cannot be written.
        """
        if plan.model(initial) is None:
            ids = ", ".join(m.model_id for m in plan.models)
            raise RouterError(f"{initial!r} is not one of the router's models ({ids})")
        if self.state in LIVE:
            self.stop()
        plan = plan if plan.port is not None else plan.with_port(process.free_port(plan.host))
        preset = self._write(plan)
        with self._lock:
            self._gen += 1
            self._plan, self._wanted, self._current = plan, initial, None
            self._tracks = {m.model_id: ModelTrack(m) for m in plan.models}
            self._router_attempts, self._restarts, self._machine.diagnosis = [], 0, None
            gen = self._gen
        self._spawn(gen, preset, f"starting llama-server's router ({len(plan.models)} models) with {initial}")

    def wait_ready(self, timeout_s: float | None = None, cancel: threading.Event | None = None) -> str:
        """Block until ``ready``; returns ``base_url``. ``timeout_s`` None = the router's start plus the initial
        model's load-hang limit.

        Raises:
            ServerStartError: failed (with its diagnosis), timed out (``load_hang``), cancelled or stopped.
        """
        limit = timeout_s if timeout_s is not None else self._load_limit_s(self._wanted) + 30.0
        reached = self._machine.wait(_SETTLED, limit, cancel)
        if reached is _S.READY:
            return self.base_url or ""
        if reached is _S.FAILED:
            raise ServerStartError(self.diagnosis or Diagnosis("exited", "llama-server's router failed"))
        lines = tuple(self.log_tail(20))
        if reached is _S.STOPPED or (cancel is not None and cancel.is_set()):
            self.stop(grace_s=2.0)
            raise ServerStartError(Diagnosis("cancelled", "llama-server's router was stopped before it was ready",
                                             lines))
        self.stop(grace_s=2.0)
        raise ServerStartError(load_hang(limit, list(lines)))

    def start_and_wait(self, plan: RouterPlan, initial: str, timeout_s: float | None = None,
                       cancel: threading.Event | None = None) -> str:
        """:meth:`start` then :meth:`wait_ready`; returns ``base_url`` (raises as both do)."""
        self.start(plan, initial)
        return self.wait_ready(timeout_s, cancel)

    def switch(self, model: str, timeout_s: float | None = None, cancel: threading.Event | None = None) -> str:
        """Make ``model`` the current model: load it through the router (``POST /models/load``; under
        ``--models-max`` the least recently used idle model is unloaded first) and wait for its readiness.
        Returns ``base_url`` at once when it is current and ready already.

        Raises:
            RouterError: no router runs, or ``model`` is not one of its models (or was taken out).
            ServerStartError: it failed to load (its diagnosis), timed out, was cancelled or stopped.
        """
        with self._lock:
            track = self._tracks.get(model)
            if self._launch is None or self.state not in (_S.READY, _S.SLEEPING, _S.SWITCHING, _S.FAILED):
                raise RouterError("no llama-server router is serving: start it first")
            if track is None or track.given_up:
                raise RouterError(f"{model!r} is not served by this router")
            self._wanted = model
            if track.ready_at_s is not None and track.child is not None:  # loaded and checked already
                self._model_ready(model)
                return self.base_url or ""
            self._to_loading(model, f"loading {model}")
        self._request_load(model)
        return self._wait_current(model, timeout_s if timeout_s is not None else self._load_limit_s(model), cancel)

    def apply(self, plan: RouterPlan, setting: str, timeout_s: float | None = None) -> str:
        """Serve ``plan``'s models from now on (the same listen address, port and key): a start-up setting of the
        models changed (``setting`` in words, e.g. "keeping served requests"). The preset is written again and
        read by the router (``GET /models?reload=1``: only the models whose section changed are unloaded), then
        the current model is loaded again: ``ready`` / ``sleeping`` → ``applying`` → ``starting`` → ``ready``.

        Raises:
            RouterError: no router serves, or the current model is not in ``plan``.
            tuner.server.preset.PresetError, OSError: the preset cannot be written (nothing changed).
            ServerStartError: the current model did not load again (its diagnosis).
        """
        with self._lock:
            old, current = self._plan, self._current or self._wanted
            if self._launch is None or old is None or self.state not in (_S.READY, _S.SLEEPING):
                raise RouterError("no llama-server router is serving: start it first")
            if current is None or plan.model(current) is None:
                raise RouterError(f"{current!r} is not one of the new plan's models")
            plan = replace(plan, host=old.host, port=old.port, api_key=old.api_key, cors_origins=old.cors_origins)
            self._plan, self._wanted = plan, current
            for m in plan.models:
                self._tracks.setdefault(m.model_id, ModelTrack(m)).model = m
            try:
                self._write(self._kept_plan() or plan)
            except BaseException:
                self._plan = old
                raise
            self._machine.change(_S.APPLYING, message=f"restarting {current} to apply: {setting}")
        with self.client(timeout_s=60.0) as client:
            statuses = parse_models(client.router_models(reload=True))
        with self._lock:
            track = self._tracks[current]
            still = statuses.get(current)
            self._machine.change(_S.STARTING, message=f"loading {current} again ({setting})")
            if still is not None and still.running and still.port == track.port and track.ready_at_s is not None:
                self._model_ready(current)  # its section did not change: the same process serves on
        self._request_load(current)
        return self._wait_current(current, timeout_s if timeout_s is not None else self._load_limit_s(current), None)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """Stop the router and every model (SIGTERM to its process group, then SIGKILL); its exit status."""
        with self._lock:
            self._gen += 1
            launch = self._launch
            child = launch.child if launch is not None else None
            if self.state is _S.STOPPED or (child is None and self.state is _S.FAILED):
                return None
            if self.state is not _S.STOPPING:
                self._machine.change(_S.STOPPING, message="stopping")
        rc = child.stop(grace_s) if child is not None else None
        with self._lock:
            for track in self._tracks.values():
                track.ended()
                track.status = None  # nothing runs: no stale "loaded" in the menus
            if child is not None:
                self._last_lines = child.log_lines()
            if self.state is _S.STOPPING:
                self._machine.change(_S.STOPPED, message="stopped")
        return rc

    def close(self) -> None:
        """Same as :meth:`stop`."""
        self.stop()

    # ------------------------------------------------------------------ helpers of the control side
    def _wait_current(self, model: str, timeout_s: float, cancel: threading.Event | None) -> str:
        t_end = time.monotonic() + timeout_s
        while True:
            left = t_end - time.monotonic()
            reached = self._machine.wait(_SETTLED, max(0.0, min(left, 0.5)), cancel)
            if reached is _S.READY and self._current == model:
                return self.base_url or ""
            if reached is _S.FAILED:
                raise ServerStartError(self.diagnosis or Diagnosis("exited", f"{model} did not load"))
            if reached is _S.STOPPED or (cancel is not None and cancel.is_set()):
                raise ServerStartError(Diagnosis("cancelled", f"loading {model} was cancelled"))
            if left <= 0:
                raise ServerStartError(load_hang(timeout_s, self.log_tail(50)))

    # ------------------------------------------------------------------ the router process
    def _spawn(self, gen: int, preset: Path, message: str) -> None:
        with self._lock:
            plan = self._plan
            if plan is None or gen != self._gen:
                return
            assert plan.port is not None
            launch = RouterLaunch(self.binary.path, self.dialect, plan, preset, new_log_path(plan.port, self._log_dir))
            self._launch = launch
            self._machine.change(_S.STARTING, message=message)
            try:
                child = launch.spawn(process.DEFAULT_TAIL_LINES * 4, self._log.on_line)
            except OSError as exc:
                why = Diagnosis("not_executable", f"cannot execute {self.binary.path}: {exc}")
                self._machine.change(_S.FAILED, why, message=f"cannot execute {self.binary.path}")
                return
        threading.Thread(target=self._monitor, args=(gen, launch, child), name=f"llama-router-{child.pid}",
                         daemon=True).start()

    def _monitor(self, gen: int, launch: RouterLaunch, child: process.ChildProcess) -> None:
        """The router's thread: its readiness, the first model's load, then :meth:`_follow`."""
        alive = functools.partial(self._alive, gen)
        try:
            diag = launch.check_ready(alive)
            if not alive():
                return
            if diag is not None:
                self._router_ended(gen, child, diag, None)
                return
            self._router_ready_at = time.monotonic()
            self._request_load(self._wanted or "")
            hung = self._follow(gen, launch, child)
            if alive():
                ready_s = time.monotonic() - (self._router_ready_at or time.monotonic())
                self._router_ended(gen, child, hung or launch.death("serving"), ready_s)
        except IllegalTransition:
            log.exception("llama-server router pid %s: a state change its table forbids", child.pid)

    def _follow(self, gen: int, launch: RouterLaunch, child: process.ChildProcess) -> Diagnosis | None:
        """While the router runs: look at ``/models``, the ended processes and each model's watches every
        ``health_interval_s``; returns the router's ``hung`` diagnosis, or None when it ended or was superseded."""
        key = launch.plan.api_key
        watch = (Liveness(child, launch.base_url, api_key=key, timeout_s=self.liveness_timeout_s,
                          interval_s=self.health_interval_s, announce=self._machine.announce)
                 if self.liveness_timeout_s is not None else None)
        try:
            with ServerClient(launch.base_url, api_key=key, timeout_s=5.0, paths=NON_WAKING_PATHS) as client:
                while self._alive(gen) and child.wait(self.health_interval_s) is None:
                    for model, status in self._log.take_exits():
                        self._process_ended(gen, model, status)
                    try:
                        self._observe(gen, parse_models(client.router_models()))
                    except ServerClientError:
                        log.debug("the router did not answer /models", exc_info=True)
                    self._watch_models(gen)
                    hung = watch.check() if watch is not None else None
                    if hung is not None:
                        child.kill()
                        return hung
        finally:
            if watch is not None:
                watch.close()
        return None

    def _router_ended(self, gen: int, child: process.ChildProcess, diag: Diagnosis, ready_s: float | None) -> None:
        """The router ended (or never came up): its models died with it; the policy restarts it or gives up."""
        child.kill()
        with self._lock:
            if not self._alive(gen):
                return
            self._last_lines = child.log_lines()
            for track in self._tracks.values():
                track.ended()
            self._router_attempts.append(policy.Attempt(diag, ready_s))
            step = policy.next_step(self._router_attempts, self._policy)
            if isinstance(step, policy.GiveUp):
                self._machine.change(_S.FAILED, step.diagnosis, message=policy.describe(step, self._restarts))
                return
            self._restarts += 1
            self._current = None
            self._machine.change(_S.STARTING, diag, message=policy.describe(step, self._restarts, ready_s is None))
            plan = self._kept_plan()
        if not self._sleep(gen, getattr(step, "delay_s", 1.0)) or plan is None:
            return
        try:
            preset = self._write(plan)
        except (OSError, DraftwiseError) as exc:
            with self._lock:
                if self._alive(gen):
                    self._machine.change(_S.FAILED, Diagnosis("exited", f"cannot write the router's preset: {exc}"),
                                         message=f"cannot write the router's preset: {exc}")
            return
        self._spawn(gen, preset, "starting llama-server's router again")



__all__ = ["RouterError", "RouterSupervisor"]
