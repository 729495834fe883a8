"""What the readiness and liveness checks need of a llama-server process (a typing protocol).

Two kinds of process satisfy it: a single-model launch (:class:`tuner.process.ChildProcess`, our own child)
and one model's process inside a router (:class:`tuner.server.router_child.RouterChild`, a child of the
router), so :func:`tuner.server.readiness.bring_up` and :class:`tuner.server.liveness.Liveness` check both the
same way.
"""

from __future__ import annotations

from typing import Protocol


class WatchedProcess(Protocol):
    """A running llama-server: its ``pid``, whether it exited (``poll``, ``wait``), its last log lines and
    whether it holds a listening socket (``listens_on``: None when that cannot be told)."""

    pid: int

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait up to ``timeout_s`` seconds for it to exit: the status, or None."""

    def log_lines(self, n: int | None = None) -> list[str]:
        """The last ``n`` log lines (all kept when None), oldest first."""

    def listens_on(self, port: int) -> bool | None:
        """True when it (or a descendant) listens on ``port``; None when unknown."""


__all__ = ["WatchedProcess"]
