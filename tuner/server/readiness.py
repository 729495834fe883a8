"""When a started llama-server counts as ready: the four checks, in order.

1. ``GET /health`` answers 200 (503 "Loading model" while loading; tools/server/server-context.cpp
   ``get_health``);
2. ``GET /props`` reports *our* ``model_path`` and, where psutil can tell, our child holds the
   listening socket: another process on the port is never mistaken for ours (:func:`identity_problem`);
3. one short greedy completion succeeds (a server can answer /health and then die of OOM on the
   first real request);
4. for speculative configurations ``/slots[].speculative`` is true for every slot; otherwise the
   start fails with ``speculation_inactive`` and the reason from the log (an incompatible draft
   leaves the server running without speculation: tools/server/server-context.cpp ``load_model``).
   ik_llama.cpp has no such field (:attr:`Dialect.spec_on_slots`): there every slot's start-up line
   "speculative decoding context initialized" must be in the log
   (:func:`tuner.server.diagnosis.speculators_initialized`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from tuner.server.client import ServerClient, ServerClientError, ServerHTTPError
from tuner.server.config import ServerConfig
from tuner.server.diagnosis import Diagnosis, diagnose, load_hang, speculation_reason, speculators_initialized
from tuner.server.dialect import Dialect
from tuner.server.watched import WatchedProcess

#: Prompt of the readiness completion (any text works; this one suits the demo model).
READY_PROMPT = "Once upon a time"
#: Seconds between ``/health`` polls while the model loads.
POLL_S = 0.15

#: ``died(first_decode)``: the diagnosis of the exited child (``first_decode``: the readiness
#: completion had been sent, so that is the phase it died in).
DiedFn = Callable[[bool], Diagnosis]


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(os.path.abspath(str(a))) == os.path.normpath(os.path.abspath(str(b)))


def identity_problem(client: ServerClient, child: WatchedProcess, cfg: ServerConfig) -> str | None:
    """None when the server answering at ``client`` is ``child`` serving ``cfg.model_path``; else what
    answered instead (one line: "/props failed: …", "model_path '…' is not '…'", "the listening socket
    belongs to another process"). ``cfg.port`` must be set."""
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


def _wait_healthy(child: WatchedProcess, cfg: ServerConfig, client: ServerClient, deadline: float,
                  timeout_s: float, alive: Callable[[], bool], died: DiedFn) -> Diagnosis | None:
    """Checks 1 and 2: None once our child answers ``/health``; a diagnosis when it exited, did not
    answer by ``deadline`` (``load_hang``), another server kept answering (``not_ours``) or the launch was
    superseded (``cancelled``)."""
    foreign_seen: str | None = None
    while True:
        if not alive():
            return Diagnosis("cancelled", "the start was superseded (stopped, or started again)")
        if child.poll() is not None:
            return died(False)
        if time.monotonic() > deadline:
            if foreign_seen is not None:
                return Diagnosis("not_ours", f"another server answers on port {cfg.port}: {foreign_seen}",
                                 tuple(child.log_lines(20)), "--port")
            return load_hang(timeout_s, child.log_lines(50))
        if client.health(timeout_s=2.0).ok:
            foreign_seen = identity_problem(client, child, cfg)
            if foreign_seen is None:
                return None
        time.sleep(POLL_S)


def _first_completion(child: WatchedProcess, client: ServerClient, deadline: float, n_predict: int,
                      died: DiedFn) -> Diagnosis | None:
    """Check 3: one short greedy completion; a diagnosis when it failed (the child's death when it died)."""
    try:
        client.completion(READY_PROMPT, n_predict, temperature=0.0, cache_prompt=False,
                          timeout_s=max(10.0, deadline - time.monotonic() + 30.0))
    except ServerClientError as exc:
        # the child may be dying (e.g. OOM on the first request): give it a moment
        if child.wait(5.0) is not None:
            return died(True)
        return Diagnosis("request_failed", f"the first completion failed: {exc}",
                         tuple(child.log_lines(20)) + (str(exc),))
    return None


def _speculation_problem(child: WatchedProcess, client: ServerClient, dialect: Dialect,
                         died: DiedFn) -> Diagnosis | None:
    """Check 4: None when every slot has a speculator; else ``speculation_inactive`` with the log's reason."""
    try:
        slots = client.slots()
    except ServerHTTPError as exc:
        return Diagnosis("speculation_inactive", f"cannot confirm speculation: /slots answered {exc.status_code}",
                         tuple(child.log_lines(20)))
    except ServerClientError as exc:
        if child.wait(5.0) is not None:
            return died(True)
        return Diagnosis("request_failed", f"/slots failed: {exc}", tuple(child.log_lines(20)))
    lines = child.log_lines(400)
    if not dialect.spec_on_slots and slots and not any("speculative" in s for s in slots):
        # ik_llama.cpp: no /slots[].speculative; its per-slot start-up log line says it
        if speculators_initialized(child.log_lines()) >= len(slots):
            return None
        return Diagnosis("speculation_inactive", f"speculation inactive: {speculation_reason(lines)}",
                         tuple(lines[-20:]), "--spec-type", None, None)
    if slots and all(bool(s.get("speculative")) for s in slots):
        return None
    d = diagnose(None, lines)
    ev = d.evidence if d.code == "draft_incompatible" else tuple(lines[-20:])
    return Diagnosis("speculation_inactive", f"speculation inactive: {speculation_reason(lines)}", ev,
                     "--spec-type", None, None)


def bring_up(child: WatchedProcess, cfg: ServerConfig, client: ServerClient, dialect: Dialect, *,
             deadline: float, timeout_s: float, alive: Callable[[], bool], died: DiedFn,
             n_predict: int = 4) -> Diagnosis | None:
    """Run the readiness checks of the module docstring on a just-spawned child.

    Args:
        child: the llama-server process; ``cfg``: its configuration (``port`` set).
        client: a client of ``cfg``'s endpoint (the caller closes it).
        dialect: the binary's flag dialect (where speculation is confirmed).
        deadline: ``time.monotonic()`` after which a server not yet answering is a ``load_hang``;
            ``timeout_s``: the limit it stands for, in seconds (for the message).
        alive: False once this launch was superseded (a stop, another start).
        died: the diagnosis of the exited child (``died(first_decode)``).
        n_predict: tokens of the readiness completion.

    Returns:
        None when ready; else why not (``load_hang``, ``not_ours``, ``request_failed``,
        ``speculation_inactive``, the death's diagnosis, or ``cancelled`` when ``alive`` turned False while
        it waited for ``/health``).
    """
    problem = _wait_healthy(child, cfg, client, deadline, timeout_s, alive, died)
    if problem is None:
        problem = _first_completion(child, client, deadline, n_predict, died)
    if problem is None and cfg.is_speculative:
        problem = _speculation_problem(child, client, dialect, died)
    return problem


__all__ = ["READY_PROMPT", "bring_up", "identity_problem"]
