"""What the app tells the user when the served llama-server changes state: a crash and its restart, a hang, a
lost RPC host, a start that failed, idle sleep and waking, a setting applied by a restart. The words come from
the supervisor's own message (``tuner.server.StateChange.message``: what happened and what it does about it)."""

from __future__ import annotations

from typing import Any, Protocol

from tuner.server import ServerState, SleepStatus, StateChange
from tuner.ui import flow
from tuner.ui.serve_targets import Controller, follow_router
from tuner.ui.state import AppState


class Notified(Controller, Protocol):
    """What :func:`on_state_change` uses of :class:`tuner.ui.controller.AppController`."""

    stopping: bool
    notify: Any
    sleep_changed: Any


def on_state_change(c: Notified, change: StateChange) -> None:
    """Supervisor transitions while serving: crash restarts and failures become notifications."""
    if c.serving is None or c.stopping:
        return
    state, prev = change.state, change.previous
    diag = change.diagnosis
    if follow_router(c, change):
        return
    if ServerState.SLEEPING in (state, prev) and state in (ServerState.SLEEPING, ServerState.READY):
        _sleep_changed(c, change)
    elif state is ServerState.STARTING and prev is ServerState.READY and diag is not None \
            and diag.code == "rpc_host_lost":
        c.notify.emit("Draftwise: RPC host lost", f"{change.message}.")
        c.status.emit(change.message)
    elif state is ServerState.STARTING and prev in (ServerState.READY, ServerState.SLEEPING):
        # the supervisor's message says what happened and what it does, in plain words: "llama-server
        # crashed (killed by the system, probably for lack of memory); restarting in 2 s (restart 3)"
        # or, after idle sleep, "crashed (could not load the model again after idle sleep); …"
        c.sleep = SleepStatus()
        what = "hung" if diag is not None and diag.code == "hung" else "crashed"
        c.notify.emit(f"Draftwise: llama-server {what}", f"{change.message}.")
        c.status.emit(change.message)
    elif state is ServerState.STARTING and diag is not None:
        # a restart that did not come up, tried again (or a --no-repack retry): each one is said
        c.notify.emit("Draftwise: llama-server did not start", f"{change.message}.")
        c.status.emit(change.message)
    elif state is ServerState.READY and prev is ServerState.STARTING and change.restart_count:
        c.metrics_reset()
        c.server_changed.emit(c.serving)
        sup = c.runner.supervisor
        lost = sup.rpc_lost if sup is not None else None
        cfg = change.config
        if lost and cfg is not None and not cfg.rpc:
            msg = f"RPC host {lost} lost: serving on this machine only (the profile's local-only configuration)"
            c.notify.emit("Draftwise: serving on this machine only", msg + ".")
            c.set_state(AppState.SERVING, msg)
        else:
            c.notify.emit("Draftwise: llama-server restarted",
                      f"llama-server crashed and was restarted ({change.message}).")
            c.set_state(AppState.SERVING, "llama-server restarted")
    elif state is ServerState.APPLYING:
        c.status.emit(change.message)  # "restarting llama-server to apply: keeping served requests"
    elif state is ServerState.FAILED:
        msg = flow.describe_supervisor_failure(c.runner)
        c.notify.emit("Draftwise: llama-server stopped", msg)
        c.set_state(AppState.ERROR, msg)


def _sleep_changed(c: Notified, change: StateChange) -> None:
    """The served server fell asleep, or woke (idle sleep): the views are told; the supervisor's status
    (read now) has the reload time of the wake."""
    sup = c.runner.supervisor
    status = sup.sleep_status if sup is not None else SleepStatus()
    if change.state is ServerState.SLEEPING and not status.sleeping:
        status = SleepStatus(sleeping=True, last_reload_s=status.last_reload_s, sleeps=status.sleeps)
    c.sleep = status
    c.sleep_changed.emit(status)
    c.status.emit(change.message)
