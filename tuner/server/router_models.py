"""What the router supervisor knows of each model of its preset: the process now serving it, its readiness,
idle sleep, liveness and crash history (:class:`ModelTrack`), and the read-only view menus show
(:class:`ModelView`).

A model's process is known by its port (``status.args`` of ``GET /models``) and watched directly on it: its
own ``/health`` for liveness (:class:`tuner.server.liveness.Liveness`) and ``/props`` for idle sleep
(:class:`tuner.server.sleep.SleepWatch`, fed with the process's log lines), both through a client limited to
:data:`tuner.server.client.NON_WAKING_PATHS`. A model process requires the router's key (it inherits
``LLAMA_API_KEY``), which the supervisor holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tuner.server import capture
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis
from tuner.server.liveness import Liveness
from tuner.server.oomcount import OomCounters
from tuner.server.preset import RouterModel
from tuner.server.restart_policy import Attempt
from tuner.server.router_child import RouterChild
from tuner.server.router_log import RouterLog
from tuner.server.router_status import ModelStatus
from tuner.server.sleep import SleepEvent, SleepStatus, SleepWatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelView:
    """One model of the served router, for menus and tabs (a snapshot).

    Fields:
        model_id: what requests send as ``model``; ``model``: its preset entry (path, tuned, decision words).
        status: ``unloaded``, ``loading``, ``loaded``, ``sleeping`` (the router's word; ``unknown`` before the
            first answer).
        ready: its current process passed the readiness checks.
        current: it is the model the endpoint serves now (the user's pick, or the last one a request loaded).
        restarts: crash restarts of it since the router started.
        problem: why it failed last (one line), or "" .
        given_up: it crashed too often and was taken out of the preset.
    """

    model_id: str
    model: RouterModel
    status: str = "unknown"
    ready: bool = False
    current: bool = False
    restarts: int = 0
    problem: str = ""
    given_up: bool = False


@dataclass
class ModelTrack:
    """The supervisor's record of one model (mutated by its threads under the supervisor's lock).

    Fields:
        model: its preset entry.
        status: the router's last word on it.
        child: its current process (None while not running or not found yet).
        port / ended_port: the port of its current process, and of the one before it (the last that ended).
        previous_ready_s: how long the process before the current one had been ready (None = never).
        load_began_s: ``time.monotonic()`` when its current process was first seen (``load_began_unix_s``: the
            wall clock then, for the capture folder's files).
        oom_at_load: the kernel's OOM counters then.
        ready_at_s: when its current process passed the readiness checks (None = not yet).
        checking: the readiness checks run.
        killed: Draftwise's own diagnosis when it killed the current process (``hung``, ``load_hang``).
        attempts: this router start's ended processes of the model, for :func:`restart_policy.next_step`.
        restarts: crash restarts so far; ``reproduced``: a single-model start already classified a crash.
        problem: the last failure's diagnosis; ``given_up``: taken out of the preset.
    """

    model: RouterModel
    status: ModelStatus | None = None
    child: RouterChild | None = None
    port: int | None = None
    ended_port: int | None = None
    previous_ready_s: float | None = None
    load_began_s: float | None = None
    load_began_unix_s: float = 0.0
    oom_at_load: OomCounters = (None, None)
    ready_at_s: float | None = None
    checking: bool = False
    killed: Diagnosis | None = None
    attempts: list[Attempt] = field(default_factory=list)
    restarts: int = 0
    reproduced: bool = False
    problem: Diagnosis | None = None
    given_up: bool = False
    sleep: SleepWatch | None = None
    liveness: Liveness | None = None
    router_log: RouterLog | None = None
    pruner: capture.Pruner | None = None

    @property
    def model_id(self) -> str:
        """The model's id."""
        return self.model.model_id

    @property
    def sleep_status(self) -> SleepStatus:
        """Idle sleep of its current process (never asleep without one)."""
        return self.sleep.status if self.sleep is not None else SleepStatus()

    def new_process(self, port: int, oom: OomCounters) -> None:
        """A new process serves the model on ``port`` (its load just began); the one before it, if it was still
        followed, ended (a crash the router answered with a new load at once, or an unload and a load)."""
        if self.port is not None and self.child is not None:
            self.ended_port = self.port
            self.previous_ready_s = time.monotonic() - self.ready_at_s if self.ready_at_s is not None else None
        self.close()
        self.child, self.port = None, port
        self.load_began_s, self.load_began_unix_s, self.oom_at_load = time.monotonic(), time.time(), oom
        self.ready_at_s, self.checking, self.killed = None, False, None

    def ended(self) -> float | None:
        """Its current process ended: the watches close; returns how long it had been ready (None = never)."""
        ready_s = time.monotonic() - self.ready_at_s if self.ready_at_s is not None else None
        self.close()
        self.ended_port, self.child, self.ready_at_s, self.checking = self.port, None, None, False
        return ready_s

    def attach(self, router_pid: int, router_log: RouterLog, api_key: str | None, idle_s: int | None,
               interval_s: float, liveness_timeout_s: float | None, announce: Callable[[str], None]) -> bool:
        """Find the process on :attr:`port` among the router's descendants and start watching it (its idle
        sleep when ``idle_s`` is set, its liveness when ``liveness_timeout_s`` is); False when not found yet."""
        if self.child is not None or self.port is None:
            return self.child is not None
        child = RouterChild.find(router_pid, self.port, router_log, self.load_began_s)
        if child is None:
            return False
        self.child = child
        if idle_s:
            self.sleep = SleepWatch(child.base_url, api_key, idle_s, interval_s=interval_s)
            self.router_log = router_log
            router_log.listen(child.port, self.sleep.on_line)
        if self.model.config.log_prompts_dir is not None:
            self.pruner = capture.Pruner(self.model.config.log_prompts_dir)
        if liveness_timeout_s is not None:
            self.liveness = Liveness(child, child.base_url, api_key=api_key, timeout_s=liveness_timeout_s,
                                     interval_s=interval_s, announce=announce)
        return True

    def tick(self) -> tuple[Diagnosis | None, SleepEvent | None]:
        """One round of the watches of a ready process: ``(hung diagnosis, idle-sleep change)``."""
        if self.child is None or self.ready_at_s is None:
            return None, None
        if self.pruner is not None:
            self.pruner.tick()
        event = self.sleep.poll() if self.sleep is not None else None
        if self.liveness is not None:
            self.liveness.sleeping = self.sleep is not None and self.sleep.status.sleeping
            hung = self.liveness.check()
            if hung is not None:
                return hung, event
        return None, event

    def close(self) -> None:
        """Close the watches' clients (the process is gone or no longer followed)."""
        if self.router_log is not None and self.port is not None:
            self.router_log.listen(self.port, None)
            self.router_log = None
        if self.sleep is not None:
            self.sleep.close()
        if self.liveness is not None:
            self.liveness.close()
        self.sleep = self.liveness = None
        self.pruner = None

    def view(self, current: bool) -> ModelView:
        """A :class:`ModelView` snapshot."""
        return ModelView(self.model_id, self.model, self.status.value if self.status is not None else "unknown",
                         self.ready_at_s is not None, current, self.restarts,
                         self.problem.short if self.problem is not None else "", self.given_up)


def serving_config(model: RouterModel, host: str, port: int | None, api_key: str | None,
                   cors_origins: str | None, sleep_idle_s: int | None) -> ServerConfig:
    """``model``'s configuration as a client of the router sees it served: the router's address, key and CORS,
    the model id as alias, the router's idle sleep."""
    return replace(model.config, host=host, port=port, api_key=api_key, cors_origins=cors_origins,
                   alias=model.model_id, sleep_idle_s=sleep_idle_s)


__all__ = ["ModelTrack", "ModelView", "serving_config"]
