"""One model's process inside a llama-server router, seen as a :class:`tuner.server.watched.WatchedProcess`.

The router spawns each model as its own ``llama-server`` (tools/server/server-models.cpp
``server_models::load``: the rendered preset, ``--host 127.0.0.1 --port <free>``) and reaps it itself, so
Draftwise knows it by its port (``status.args`` of ``GET /models``) and finds its pid among the router's
descendants (:func:`tuner.process.descendant_with_args`). Its log lines are the router's lines for that
port (:class:`tuner.server.router_log.RouterLog`). The exit status is not ours to read: the router reports
every crash as 1 (:mod:`tuner.server.router_status`), so :meth:`RouterChild.poll` says 1 once it is gone.
"""

from __future__ import annotations

import time

from tuner import process
from tuner.server.router_log import RouterLog

#: What :meth:`RouterChild.poll` reports for a gone process (the router's own report of any crash).
GONE_STATUS = 1


class RouterChild:
    """The process serving one model of a router.

    Args:
        pid: its process id; ``port``: its loopback port; ``log``: the router's log by port.
        started_at_s: ``time.monotonic()`` when its load began.
    """

    def __init__(self, pid: int, port: int, log: RouterLog, started_at_s: float | None = None) -> None:
        self.pid, self.port, self._log = pid, port, log
        self.started_at_s = time.monotonic() if started_at_s is None else started_at_s

    @classmethod
    def find(cls, router_pid: int, port: int, log: RouterLog, started_at_s: float | None = None) -> RouterChild | None:
        """The router's child listening on ``port`` (``--port PORT`` in its command line), None when there is
        none (not spawned yet, or gone)."""
        pid = process.descendant_with_args(router_pid, ("--port", str(port)))
        return cls(pid, port, log, started_at_s) if pid is not None else None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the process itself (it requires the router's key)."""
        return f"http://127.0.0.1:{self.port}"

    def poll(self) -> int | None:
        """None while it runs, :data:`GONE_STATUS` once gone (zombies count as gone)."""
        return None if process.process_exists(self.pid) else GONE_STATUS

    @property
    def returncode(self) -> int | None:
        """Same as :meth:`poll`."""
        return self.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait up to ``timeout_s`` seconds (None = until it ends) for it to end."""
        t_end = None if timeout_s is None else time.monotonic() + timeout_s
        while (rc := self.poll()) is None:
            if t_end is not None and time.monotonic() >= t_end:
                return None
            time.sleep(0.05)
        return rc

    def is_alive(self) -> bool:
        """True while it runs."""
        return self.poll() is None

    def log_lines(self, n: int | None = None) -> list[str]:
        """Its last ``n`` lines (all kept when None) from the router's log, oldest first."""
        return self._log.lines(self.port, n)

    def listens_on(self, port: int) -> bool | None:
        """True when this process holds the listening socket on ``port``; None when psutil may not look."""
        pids = process.pids_listening_on(port)
        return None if pids is None else self.pid in pids

    def kill(self) -> None:
        """SIGKILL it (and anything it started); the router then reports it ended (status 1)."""
        process.kill_tree(self.pid)


__all__ = ["GONE_STATUS", "RouterChild"]
