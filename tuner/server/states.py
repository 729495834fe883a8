"""The supervisor's state machine: its states, the one table of allowed transitions, and the holder
that changes the state and tells the listeners.

:class:`tuner.server.supervisor.Supervisor` changes its state in one place (``_set_state`` →
:meth:`StateMachine.change`), which calls :func:`check_transition` against :data:`TRANSITIONS`; a
change the table does not list raises :class:`IllegalTransition` (a bug in the supervisor, never a
user's error) and leaves the state as it was. A message without a state change (a silent but working
server, a cure's note) is not a transition: :meth:`StateMachine.announce` sends it as a
:class:`StateChange` whose ``state`` equals its ``previous``.

The table (:data:`TRANSITIONS`; tests/server/test_states.py checks this copy against it)::

    from        allowed to
    stopped     starting
    starting    starting, ready, failed, stopping
    ready       starting, failed, stopping, sleeping, switching, applying
    sleeping    ready, starting, switching, failed, stopping, applying
    switching   ready, starting, failed, stopping
    applying    starting, failed, stopping
    stopping    stopped
    failed      starting, stopping

Three states are for features built on this table: ``sleeping`` (llama-server's idle sleep,
``--sleep-idle-seconds``: the model is unloaded until the next request; ``/props`` says
``is_sleeping``, tools/server/server-context.cpp ``get_res_props``, and a reload that fails is a
crash), ``switching`` (router mode, ``llama-server`` without ``-m``: another model is being loaded,
tools/server/server-models.cpp ``server_models::load``; :class:`tuner.server.router.RouterSupervisor`) and
``applying`` (the served server is restarted to apply a start-up setting, such as ``--log-prompts-dir`` or a
changed ``--server-arg``: ``Supervisor.restart(config, applying=…)``, from ready or from sleeping, on the same
port).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tuner.errors import DraftwiseError
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis

log = logging.getLogger(__name__)


class ServerState(str, enum.Enum):
    """Supervisor states (see the module docstring); the value is the word logs and callbacks show."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    SLEEPING = "sleeping"
    SWITCHING = "switching"
    APPLYING = "applying"
    STOPPING = "stopping"
    FAILED = "failed"


_S = ServerState

#: ``TRANSITIONS[a]``: the states the supervisor may change to from ``a``. Why each exists:
#: starting → starting: a taken port retried on another, a healing retry, a restart after its back-off;
#: ready → starting: a crash, a hung server, an RPC host lost; sleeping → starting: the reload after
#: sleep crashed; sleeping → switching: the router loads another model while the served one sleeps (a request
#: named it, or the user picked it); failed → starting: a new ``start()``; ready / sleeping → applying →
#: starting: a restart that applies a start-up setting; * → stopping: ``stop()`` (failed too: a child may be
#: left); stopping → stopped only.
TRANSITIONS: Mapping[ServerState, frozenset[ServerState]] = MappingProxyType({
    _S.STOPPED: frozenset({_S.STARTING}),
    _S.STARTING: frozenset({_S.STARTING, _S.READY, _S.FAILED, _S.STOPPING}),
    _S.READY: frozenset({_S.STARTING, _S.FAILED, _S.STOPPING, _S.SLEEPING, _S.SWITCHING, _S.APPLYING}),
    _S.SLEEPING: frozenset({_S.READY, _S.STARTING, _S.SWITCHING, _S.FAILED, _S.STOPPING, _S.APPLYING}),
    _S.SWITCHING: frozenset({_S.READY, _S.STARTING, _S.FAILED, _S.STOPPING}),
    _S.APPLYING: frozenset({_S.STARTING, _S.FAILED, _S.STOPPING}),
    _S.STOPPING: frozenset({_S.STOPPED}),
    _S.FAILED: frozenset({_S.STARTING, _S.STOPPING}),
})

#: States in which a child may run, so ``stop()`` has something to end and ``start()`` stops first.
LIVE: frozenset[ServerState] = frozenset({_S.STARTING, _S.READY, _S.SLEEPING, _S.SWITCHING, _S.APPLYING,
                                          _S.STOPPING})


class IllegalTransition(DraftwiseError, RuntimeError):
    """The supervisor tried a state change that :data:`TRANSITIONS` does not allow (a bug).

    Attributes: ``previous`` and ``state`` (:class:`ServerState`).
    """

    def __init__(self, previous: ServerState, state: ServerState) -> None:
        self.previous = previous
        self.state = state
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS.get(previous, frozenset()))) or "nothing"
        super().__init__(f"llama-server state cannot change from {previous.value} to {state.value} "
                         f"(from {previous.value} only to: {allowed})")


def allowed(previous: ServerState, state: ServerState) -> bool:
    """True when :data:`TRANSITIONS` lets ``previous`` change to ``state``."""
    return state in TRANSITIONS.get(previous, frozenset())


def check_transition(previous: ServerState, state: ServerState) -> None:
    """Accept a state change the table allows.

    Raises:
        IllegalTransition: ``previous`` → ``state`` is not in :data:`TRANSITIONS`.
    """
    if not allowed(previous, state):
        raise IllegalTransition(previous, state)


@dataclass(frozen=True)
class StateChange:
    """One state transition (or an announcement: ``state`` == ``previous``), as passed to ``on_state``
    callbacks.

    Fields: ``state`` (new), ``previous``, ``base_url`` (``http://host:port`` or None),
    ``diagnosis`` (for failed/crash restarts, else None), ``config`` (the configuration being
    served), ``restart_count`` (crash restarts so far), ``message`` (one line for people),
    ``time_s`` (``time.time()``).
    """

    state: ServerState
    previous: ServerState
    base_url: str | None
    diagnosis: Diagnosis | None
    config: ServerConfig | None
    restart_count: int
    message: str
    time_s: float

    def __str__(self) -> str:
        """The new state's name (``"ready"``), so ``str(change)`` reads like the state."""
        return self.state.value


#: ``snapshot()``: what a :class:`StateChange` reports besides the states: ``(base_url, config,
#: restart_count)`` of the supervisor at that moment.
SnapshotFn = Callable[[], "tuple[str | None, ServerConfig | None, int]"]


class StateMachine:
    """The supervisor's current state, the diagnosis that goes with it, and the ``on_state`` listeners.

    Every method is called with ``lock`` held or takes it (an ``RLock``, the supervisor's own);
    :attr:`cond` (on that lock) is notified at every change and announcement.

    Args:
        lock: the owner's lock.
        snapshot: the owner's ``(base_url, config, restart_count)`` for each :class:`StateChange`.
    """

    def __init__(self, lock: threading.RLock, snapshot: SnapshotFn) -> None:
        self.lock = lock
        self.cond = threading.Condition(lock)
        self.state = ServerState.STOPPED
        self.diagnosis: Diagnosis | None = None
        self._snapshot = snapshot
        self._callbacks: list[Callable[[StateChange], None]] = []

    def listen(self, callback: Callable[[StateChange], None]) -> Callable[[], None]:
        """Register ``callback(StateChange)``; returns a function that unregisters it."""
        with self.lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self.lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove

    def wait(self, states: frozenset[ServerState], timeout_s: float | None = None,
             cancel: threading.Event | None = None) -> ServerState | None:
        """Block until the state is one of ``states`` and return it; None when ``cancel`` was set or
        ``timeout_s`` seconds (None = no limit) passed first."""
        t_end = None if timeout_s is None else time.monotonic() + timeout_s
        with self.cond:
            while self.state not in states:
                if (cancel is not None and cancel.is_set()) or (t_end is not None and time.monotonic() >= t_end):
                    return None
                self.cond.wait(0.1)
            return self.state

    def change(self, state: ServerState, diagnosis: Diagnosis | None = None, message: str = "") -> None:
        """Change to ``state`` (logged: a failure or a restart's cause as a warning, the rest as info) and
        tell the listeners; ``diagnosis``, when given, becomes :attr:`diagnosis`.

        Raises:
            IllegalTransition: the table does not allow the change (nothing changed, nobody told).
        """
        with self.lock:
            prev = self.state
            check_transition(prev, state)
            self.state = state
            if state is ServerState.FAILED or (diagnosis is not None and state is ServerState.STARTING):
                log.warning("llama-server %s -> %s: %s%s", prev.value, state.value, message or state.value,
                            f" ({diagnosis.code}: {diagnosis.message})" if diagnosis is not None else "")
            else:
                log.info("llama-server %s -> %s: %s", prev.value, state.value, message or state.value)
            self._emit(prev, diagnosis, message)

    def announce(self, message: str, diagnosis: Diagnosis | None = None) -> None:
        """Tell the listeners ``message`` without a state change (``state`` == ``previous``)."""
        with self.lock:
            log.info("llama-server %s: %s", self.state.value, message)
            self._emit(self.state, diagnosis, message)

    def _emit(self, prev: ServerState, diagnosis: Diagnosis | None, message: str) -> None:
        if diagnosis is not None:
            self.diagnosis = diagnosis
        base_url, config, restarts = self._snapshot()
        change = StateChange(self.state, prev, base_url, diagnosis, config, restarts, message or self.state.value,
                             time.time())
        self.cond.notify_all()
        for cb in list(self._callbacks):
            try:
                cb(change)
            except Exception:  # a listener's bug must not stop the supervisor; it is logged
                log.exception("a state callback failed on %s", self.state.value)


__all__ = ["LIVE", "TRANSITIONS", "IllegalTransition", "ServerState", "StateChange", "StateMachine", "allowed",
           "check_transition"]
