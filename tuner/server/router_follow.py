"""The model side of :class:`tuner.server.router.RouterSupervisor`: what it does with each model of the
router's preset (see :mod:`tuner.server.router` for the whole story and :mod:`tuner.server.router_models` for the
per-model record).

Every look at ``GET /models`` goes through :meth:`ModelFollower._observe` (a new process: a load began; a
loaded one: the readiness checks in their own thread; a load past its limit: killed as ``load_hang``); every
process end the router logs through :meth:`ModelFollower._process_ended` (status 0: an unload or an eviction;
status 1: a crash, classified in its own thread by :func:`tuner.server.router_crash.classify`); both end in
:meth:`ModelFollower._model_failed`, the restart policy on the model's own history.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import DraftwiseError
from tuner.server import capture, workarounds
from tuner.server import restart_policy as policy
from tuner.server.client import ServerClient, ServerClientError, ServerHTTPError
from tuner.server.diagnosis import Diagnosis, load_hang, startup_phase
from tuner.server.dialect import Dialect
from tuner.server.discovery import ServerBinary
from tuner.server.oomcount import OomCounters
from tuner.server.preset import RouterPlan
from tuner.server.readiness import READY_PROMPT, bring_up
from tuner.server.router_child import RouterChild
from tuner.server.router_crash import CrashFacts, classify, reproduce_alone, silent_end
from tuner.server.router_launch import RouterLaunch, write_preset
from tuner.server.router_log import RouterLog
from tuner.server.router_models import ModelTrack
from tuner.server.router_status import ModelStatus
from tuner.server.sleep import SleepEvent
from tuner.server.states import ServerState, StateMachine
from tuner.server.supervisor import startup_timeout_for

log = logging.getLogger(__name__)

_S = ServerState


class ModelFollower:
    """The model side of the router supervisor (a base class: the supervisor owns every attribute below and
    the lock; these methods run on its monitor thread and on one short-lived thread per check or crash)."""

    #: Models loaded by requests within one look at ``/models`` that have not passed their checks yet
    #: (:meth:`_follow_loads`); the supervisor's own set once one was seen.
    _tied: frozenset[str] = frozenset()

    if TYPE_CHECKING:
        binary: ServerBinary
        dialect: Dialect
        health_interval_s: float
        liveness_timeout_s: float | None
        ready_n_predict: int
        _lock: threading.RLock
        _machine: StateMachine
        _gen: int
        _plan: RouterPlan | None
        _launch: RouterLaunch | None
        _log: RouterLog
        _tracks: dict[str, ModelTrack]
        _current: str | None
        _wanted: str | None
        _restarts: int
        _policy: policy.PolicySettings
        _reproduce: bool
        _preset_dir: Path | None
        _oom: Callable[[], OomCounters]

        @property
        def state(self) -> ServerState: ...

        @property
        def base_url(self) -> str | None: ...

        def client(self, timeout_s: float = 10.0) -> ServerClient: ...

    def _write(self, plan: RouterPlan) -> Path:
        """Write ``plan``'s preset with the recorded CPU workarounds applied to every model.

        Raises: PresetError, OSError (see :func:`tuner.server.router_launch.write_preset`).
        """
        binary = self.binary.path
        models = tuple(replace(m, config=workarounds.apply_workarounds(m.config, binary)) for m in plan.models)
        return write_preset(replace(plan, models=models), self.binary.path, self.dialect, self._preset_dir)

    def _kept_plan(self) -> RouterPlan | None:
        """The plan without the models given up (caller holds the lock); None before a start or when none is left."""
        plan = self._plan
        if plan is None:
            return None
        kept = tuple(m for m in plan.models if not self._tracks.get(m.model_id, ModelTrack(m)).given_up)
        return replace(plan, models=kept) if kept else None

    def _load_limit_s(self, model: str | None) -> float:
        track = self._tracks.get(model or "")
        return startup_timeout_for(track.model.config) if track is not None else 60.0

    def _to_loading(self, model: str, message: str) -> None:
        """State ``switching`` (``starting`` from ``failed``) for a model about to load (caller holds the lock)."""
        if self.state in (_S.READY, _S.SLEEPING):
            self._machine.change(_S.SWITCHING, message=message)
        elif self.state is _S.FAILED:
            self._machine.change(_S.STARTING, message=message)

    def _request_load(self, model: str) -> None:
        """``POST /models/load`` (a model already running is fine: a request may have loaded it)."""
        try:
            with self.client(timeout_s=10.0) as client:
                client.load_model(model)
        except ServerHTTPError as exc:
            if exc.status_code != 400:  # 400: it runs already (server-models.cpp ``post_router_models_load``)
                log.warning("the router refused to load %s: %s", model, exc)
        except (ServerClientError, RuntimeError):
            log.warning("cannot ask the router to load %s", model, exc_info=True)

    def _alive(self, gen: int) -> bool:
        return gen == self._gen

    def _sleep(self, gen: int, delay_s: float) -> bool:
        """Wait ``delay_s``; False as soon as this start was superseded."""
        t_end = time.monotonic() + delay_s
        while time.monotonic() < t_end:
            if not self._alive(gen):
                return False
            time.sleep(min(0.1, max(0.0, t_end - time.monotonic())))
        return self._alive(gen)

    def _observe(self, gen: int, statuses: dict[str, ModelStatus]) -> None:
        """The router's latest word on each model: a new process (a load began), a process to find, a loaded
        one to check; a load past its limit is killed as ``load_hang``. The loads that began are then followed
        (:meth:`_follow_loads`)."""
        with self._lock:
            if not self._alive(gen):
                return
            began: list[str] = []
            for model, track in self._tracks.items():
                new = statuses.get(model)
                if new is None or track.given_up:
                    continue
                track.status = new
                if new.running and new.port is not None and new.port != track.port:
                    track.new_process(new.port, self._read_oom())
                    began.append(model)
                if new.running and not self._attach(track):
                    continue
                if new.value == "loaded" and track.ready_at_s is None and not track.checking and track.child:
                    track.checking = True
                    threading.Thread(target=self._check_model, args=(gen, track, track.child),
                                     name=f"router-check-{model}", daemon=True).start()
                elif new.value == "loading" and track.child is not None and track.killed is None:
                    limit = self._load_limit_s(model)
                    if time.monotonic() - (track.load_began_s or time.monotonic()) > limit:
                        track.killed = load_hang(limit, track.child.log_lines(50))
                        track.child.kill()
            self._follow_loads(began)

    def _follow_loads(self, began: list[str]) -> None:
        """The models whose process began within one look at ``/models`` (caller holds the lock): the state
        ``switching`` for the wanted one and for the one a request loaded.

        Two or more loaded by requests within one look cannot be ordered: the ``/models`` listing has no
        per-model time (tools/server/server-models.cpp ``get_router_models``: its ``created`` is the router's
        clock at the answer, the same for every row; ``server_model_meta::last_used``, set by
        ``server_models::load`` and ``proxy_request``, orders the LRU eviction only and is not listed), and
        its rows come in table order, not load order. Those models are *tied*: the current model stays the
        current one while it runs; when it does not (it was unloaded, or none was serving), the first tied
        model that passes its readiness checks becomes the current one and the others do not replace it
        (:meth:`_model_ready`).
        """
        self._tied = self._tied.difference(began)
        by_request = [m for m in began if m not in (self._current, self._wanted)]
        if self._wanted in began and self._wanted != self._current:
            self._to_loading(self._wanted, f"loading {self._wanted}")
        if len(by_request) > 1:
            self._tied = self._tied.union(by_request)
            if self._current_runs():
                self._machine.announce(f"requests loaded {', '.join(by_request)} at once; still following "
                                       f"{self._current}")
                return
        for model in by_request:
            self._to_loading(model, f"loading {model} (a request named it)")

    def _current_runs(self) -> bool:
        """The current model passed its checks and its process runs (caller holds the lock)."""
        track = self._tracks.get(self._current or "")
        return (track is not None and track.ready_at_s is not None and track.status is not None
                and track.status.running)

    def _attach(self, track: ModelTrack) -> bool:
        plan, launch = self._plan, self._launch
        pid = launch.child.pid if launch is not None and launch.child is not None else None
        if plan is None or pid is None:
            return False
        return track.attach(pid, self._log, plan.api_key, plan.sleep_idle_s, self.health_interval_s,
                            self.liveness_timeout_s, self._machine.announce)

    def _watch_models(self, gen: int) -> None:
        """Each ready model's liveness and idle sleep (a hung one is killed: its crash is then handled)."""
        for track in list(self._tracks.values()):
            child = track.child
            hung, event = track.tick()
            if event is not None:
                self._on_sleep(gen, track.model_id, event)
            if hung is not None and child is not None:
                track.killed = hung
                child.kill()

    def _on_sleep(self, gen: int, model: str, event: SleepEvent) -> None:
        """The current model fell asleep or woke: ``ready`` ↔ ``sleeping`` (another model's sleep is a note)."""
        with self._lock:
            if not self._alive(gen):
                return
            if model != self._current:
                return
            new = _S.SLEEPING if event.asleep else _S.READY
            if self.state in (_S.READY, _S.SLEEPING) and self.state is not new:
                self._machine.change(new, message=f"{model}: {event.message}")

    def _check_model(self, gen: int, track: ModelTrack, child: RouterChild) -> None:
        """The readiness checks of a single launch on the model's own process (its thread)."""
        plan = self._plan
        assert plan is not None
        cfg = replace(track.model.config, host="127.0.0.1", port=child.port, api_key=plan.api_key)
        limit = self._load_limit_s(track.model_id)
        began = track.load_began_s or time.monotonic()
        try:
            with ServerClient(child.base_url, api_key=plan.api_key, timeout_s=5.0) as client:
                diag = bring_up(child, cfg, client, self.dialect, deadline=began + limit, timeout_s=limit,
                                alive=lambda: self._alive(gen) and track.child is child,
                                died=lambda _first: silent_end(track.model_id, child.log_lines(50)),
                                n_predict=self.ready_n_predict)
        except Exception as exc:  # a bug must not leave the model unchecked forever
            log.exception("internal error while checking %s", track.model_id)
            diag = Diagnosis("exited", f"internal error while checking {track.model_id}: {exc!r}")
        folder = track.model.config.log_prompts_dir
        if diag is None and folder is not None:  # the readiness completion is not a user's request
            capture.drop_probe(folder, READY_PROMPT, track.load_began_unix_s)
        with self._lock:
            track.checking = False
            if not self._alive(gen) or track.child is not child or child.poll() is not None:
                return  # superseded, or it died: its exit is handled as a crash
            if diag is None:
                track.ready_at_s, track.problem = time.monotonic(), None
                self._model_ready(track.model_id)
                return
            track.killed = diag
        self._model_failed(gen, track, diag, None, unload=True)

    def _model_ready(self, model: str) -> None:
        """A model passed its checks (caller holds the lock): it becomes the current one — unless the router's
        start still waits for another — and the state ``ready`` (``sleeping`` when it sleeps already)."""
        if self.state is _S.STARTING and self._wanted not in (None, model):
            return  # the router's start waits for its first model
        if model in self._tied:
            self._tied = self._tied - {model}
            if model != self._current and self.state in (_S.READY, _S.SLEEPING) and self._current_runs():
                return  # loaded within the same look as another request's model: it does not take over
        if self.state is _S.READY and model == self._current:
            return
        why = "" if model == self._wanted else " (a request named it)"
        if self.state is _S.READY:
            self._machine.change(_S.SWITCHING, message=f"loading {model}{why}")
        elif self.state is _S.FAILED:
            self._machine.change(_S.STARTING, message=f"loading {model}{why}")
        self._current = self._wanted = model
        if self.state in (_S.SWITCHING, _S.STARTING, _S.SLEEPING):
            self._machine.change(_S.READY, message=f"serving {model} at {self.base_url}")
        track = self._tracks.get(model)
        if track is not None and track.sleep_status.sleeping:
            self._machine.change(_S.SLEEPING, message=f"{model}: sleeping — memory freed")

    def _process_ended(self, gen: int, model: str, status: int) -> None:
        """The router logged that a model's process ended: a normal stop (status 0) or a crash (status 1)."""
        with self._lock:
            track = self._tracks.get(model)
            if track is None or not self._alive(gen):
                return
            waking = track.sleep is not None and track.sleep.waking
            if track.child is not None and track.child.is_alive() and track.ended_port is not None:
                ready_s = track.previous_ready_s  # a newer process serves it already: the old one ended
            else:
                ready_s = track.ended()
            if status == 0 and track.killed is None:
                if model == self._current and self.state in (_S.READY, _S.SLEEPING):
                    self._machine.announce(f"{model} was unloaded; a request that names it loads it again")
                return
        lines = self._log.lines(track.ended_port, 200)
        phase = "waking" if waking else "serving" if ready_s is not None else startup_phase(lines)
        threading.Thread(target=self._crashed, args=(gen, track, ready_s, phase), name=f"router-crash-{model}",
                         daemon=True).start()

    def _crashed(self, gen: int, track: ModelTrack, ready_s: float | None, phase: str) -> None:
        """Classify a model's crash (a single-model start when no line says why), then :meth:`_model_failed`."""
        plan = self._plan
        if plan is None:
            return
        repro = None
        if self._reproduce and not track.reproduced and track.killed is None:
            repro = reproduce_alone(self.binary.path, self.dialect, self._load_limit_s(track.model_id))
            track.reproduced = True
        facts = CrashFacts(track.model_id, track.model.config, phase, track.killed, track.oom_at_load,
                           self._read_oom())
        diag = classify(self._log.lines(track.ended_port, 200), facts, repro)
        if diag.code == "cpu_kernels":  # the start alone was cured by --no-repack: the preset gets it too
            self._rewrite(gen)
        self._model_failed(gen, track, diag, ready_s, unload=False, cured=diag.code == "cpu_kernels")

    def _model_failed(self, gen: int, track: ModelTrack, diag: Diagnosis, ready_s: float | None, *, unload: bool,
                      cured: bool = False) -> None:
        """The policy on a model's own history: load it again after the back-off (the current model), or give
        up (taken out of the preset; ``failed`` when it is the current or wanted one)."""
        model = track.model_id
        if unload:
            self._request_unload(model)
        with self._lock:
            if not self._alive(gen):
                return
            track.problem = diag
            track.attempts.append(policy.Attempt(diag, ready_s, no_repack=track.model.config.no_repack))
            step: policy.Action = policy.Restart(0.0, diag) if cured else policy.next_step(track.attempts, self._policy)
            mine = model in (self._current, self._wanted)
            if isinstance(step, policy.GiveUp):
                track.given_up = True
                text = f"{model}: {policy.describe(step, self._restarts)}"
                if mine and self.state is not _S.FAILED:
                    self._current = None if self._current == model else self._current
                    self._machine.change(_S.FAILED, diag, message=text)
                else:
                    self._machine.announce(text, diag)
                    self._back_from_loading(model, diag)
            else:
                self._restarts += 1
                track.restarts += 1
                text = f"{model}: {policy.describe(step, self._restarts, ready_s is None)}"
                if mine and self.state in (_S.READY, _S.SLEEPING, _S.SWITCHING, _S.STARTING):
                    self._wanted = model
                    self._machine.change(_S.STARTING, diag, message=text)
                else:
                    self._machine.announce(text, diag)
        if track.given_up:
            self._rewrite(gen)
        elif mine and self._sleep(gen, getattr(step, "delay_s", 0.0)):
            self._request_load(model)

    def _back_from_loading(self, model: str, diag: Diagnosis) -> None:
        """A model a request named failed to load (caller holds the lock): the state goes back to what it was
        before the load (``ready``: the current model is served, loaded again by the next request that names it;
        ``failed`` when none was)."""
        loading = any(t.status is not None and t.status.value == "loading" and t.model_id != model
                      for t in self._tracks.values())
        if loading:
            return  # another load runs: its end says where the endpoint stands
        if self.state is _S.SWITCHING and self._current is not None:
            self._machine.change(_S.READY, message=f"{model} could not be loaded ({diag.short}); still serving "
                                 f"{self._current}")
        elif self.state is _S.STARTING and self._current is None and self._wanted not in (None, model):
            self._machine.change(_S.FAILED, diag, message=f"{model} could not be loaded ({diag.short})")

    def _request_unload(self, model: str) -> None:
        try:
            with self.client(timeout_s=10.0) as client:
                client.unload_model(model)
        except (ServerClientError, RuntimeError):
            log.debug("cannot unload %s", model, exc_info=True)

    def _rewrite(self, gen: int) -> None:
        """Write the preset again (without the models given up, with the recorded workarounds) and have the
        router read it (``GET /models?reload=1``: only the sections that changed are unloaded)."""
        with self._lock:
            plan = self._kept_plan() if self._alive(gen) else None
        if plan is None:
            return
        try:
            self._write(plan)
            with self.client(timeout_s=30.0) as client:
                client.router_models(reload=True)
        except (OSError, DraftwiseError):
            log.warning("cannot rewrite the router's preset", exc_info=True)

    def _read_oom(self) -> OomCounters:
        try:
            return self._oom()
        except Exception:  # noqa: BLE001 - an injected or platform reader must not stop the router
            log.debug("cannot read the OOM counters", exc_info=True)
            return None, None



__all__ = ["ModelFollower"]
