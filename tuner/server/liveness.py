"""The liveness rule for a ready llama-server: silent *and* making no progress means hung.

Every ``interval_s`` the supervisor's monitor thread calls :meth:`Liveness.check`, which asks
``GET /health`` (timeout :data:`HEALTH_TIMEOUT_S`). llama-server answers it from its HTTP thread pool
without the main loop (tools/server/server-context.cpp ``server_routes::init_routes``, ``get_health``;
the pool has ``n_parallel + 4`` threads or more, tools/server/server-http.cpp
``server_http_context::init``), so a server busy with a long prompt still answers. When no answer came
for ``timeout_s``, the child counts as hung only if it also made no progress: it is stopped (``T``
state, e.g. SIGSTOP) or the CPU time of its process tree grew by less than :data:`LIVENESS_MIN_CPU_S`
in that window. A starved but working server (a long prompt on a loaded 2-core machine) is left alone
and the silence is announced once. A server asleep (idle sleep, :mod:`tuner.server.sleep`) uses no CPU
by design, so while :attr:`Liveness.sleeping` is set only a stopped process counts as hung.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tuner import process
from tuner.server.client import NON_WAKING_PATHS, ServerClient
from tuner.server.diagnosis import Diagnosis
from tuner.server.watched import WatchedProcess

log = logging.getLogger(__name__)

#: Seconds one liveness ``/health`` request may take.
HEALTH_TIMEOUT_S = 3.0
#: CPU seconds the child's process tree must gain while silent to count as working, not hung.
LIVENESS_MIN_CPU_S = 0.05


class Liveness:
    """The liveness rule for one ready child (see the module docstring).

    Args:
        child: the llama-server process.
        base_url: ``http://host:port`` it serves.
        api_key: the endpoint's key, or None.
        timeout_s: seconds of silence after which a child that made no progress is hung.
        interval_s: seconds between ``/health`` requests.
        announce: called with one line for people when the silence is first seen on a working child
            and when it answers again (the supervisor's announcement, no state change).
    """

    def __init__(self, child: WatchedProcess, base_url: str, *, api_key: str | None, timeout_s: float,
                 interval_s: float, announce: Callable[[str], None]) -> None:
        self.child = child
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.announce = announce
        self.client = ServerClient(base_url, api_key=api_key, timeout_s=HEALTH_TIMEOUT_S, paths=NON_WAKING_PATHS)
        now = time.monotonic()
        self.last_ok = now
        self.next_check = now + interval_s
        self.cpu_mark = self._cpu()
        self.busy_noted = False
        #: set by the launch's watch while the server sleeps (then low CPU is no sign of a hang)
        self.sleeping = False

    def _cpu(self) -> float | None:
        usage = process.tree_usage(self.child.pid)
        return usage[1] if usage is not None else None

    def check(self) -> Diagnosis | None:
        """None while alive (or silent but working, or not yet due); the ``hung`` diagnosis when the
        child must be killed."""
        now = time.monotonic()
        if now < self.next_check:
            return None
        h = self.client.health(timeout_s=min(HEALTH_TIMEOUT_S, max(0.5, self.timeout_s)))
        now = time.monotonic()
        self.next_check = now + self.interval_s
        if h.ok:
            if self.busy_noted:
                self.announce("llama-server answers /health again")
            self.last_ok, self.cpu_mark, self.busy_noted = now, self._cpu(), False
            return None
        silent = now - self.last_ok
        if silent < self.timeout_s:
            return None
        stopped = process.process_stopped(self.child.pid)
        cpu = self._cpu()
        gained = None if cpu is None or self.cpu_mark is None else cpu - self.cpu_mark
        if not stopped and (self.sleeping or (gained is not None and gained >= LIVENESS_MIN_CPU_S)):
            # working (a long prompt on a starved machine), or asleep: not hung; measure the next window
            if not self.busy_noted:
                why = "is asleep (idle sleep)" if self.sleeping else f"is working ({gained or 0:.1f} CPU s in that time)"
                self.announce(f"llama-server has not answered /health for {silent:.0f} s but {why}: not restarted")
                self.busy_noted = True
            self.last_ok, self.cpu_mark = now, cpu
            return None
        why = "it is stopped (SIGSTOP?)" if stopped else "its CPU time did not grow"
        return Diagnosis("hung", f"llama-server did not answer /health for {silent:.0f} s and {why}: "
                         "killed as hung", tuple(self.child.log_lines(20)) + (f"/health: {h.message}",))

    def close(self) -> None:
        """Close the ``/health`` client (errors are logged at DEBUG)."""
        try:
            self.client.close()
        except Exception:
            log.debug("closing the liveness client failed", exc_info=True)


__all__ = ["HEALTH_TIMEOUT_S", "LIVENESS_MIN_CPU_S", "Liveness"]
