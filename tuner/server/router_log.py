"""One router's log, split by model process.

A llama-server router relays every line its children write to stderr into its own log, prefixed with the
child's port: ``[ 4711] line`` (tools/server/server-models.cpp ``server_monitor::on_line``: ``LOG("[%5d] %s",
port, line)``). Everything a child prints goes there — common/log.cpp's lines and what ggml writes to stderr
directly, such as ``GGML_ABORT``'s message — so a child's crash is read from these lines.
:class:`RouterLog` is the router process's line callback: it keeps the last lines of each port and hands
each line to the listeners of its port (a model's idle-sleep watch).
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Callable

#: ``[PORT] `` at the start of a relayed line (the port right-aligned in 5 columns).
_PREFIX = re.compile(r"^\[\s*(\d{1,5})\] ?")
#: The router's own line when a model's process ended (``server_monitor::run``: "instance name=%s exited with
#: status %d"), logged after ``server_models::on_child_exit`` updated the model's status.
_EXIT = re.compile(r"\binstance name=(\S+) exited with status (-?\d+)")
#: Lines kept per port, and ports kept (the oldest port's lines go first).
KEEP_LINES = 400
KEEP_PORTS = 32


class RouterLog:
    """The router's lines by child port (thread-safe: :meth:`on_line` runs on the router's log reader).

    Args:
        keep_lines: lines kept per port.
        keep_ports: ports whose lines are kept.
    """

    def __init__(self, keep_lines: int = KEEP_LINES, keep_ports: int = KEEP_PORTS) -> None:
        self._keep_lines, self._keep_ports = keep_lines, keep_ports
        self._lines: collections.OrderedDict[int, collections.deque[str]] = collections.OrderedDict()
        self._listeners: dict[int, Callable[[str], None]] = {}
        self._exits: collections.deque[tuple[str, int]] = collections.deque(maxlen=1000)
        self._lock = threading.Lock()

    def on_line(self, line: str) -> None:
        """One line of the router's output (its own lines are not kept here)."""
        m = _PREFIX.match(line)
        if m is None:
            ended = _EXIT.search(line)
            if ended is not None:
                with self._lock:
                    self._exits.append((ended.group(1), int(ended.group(2))))
            return
        port, text = int(m.group(1)), line[m.end():]
        with self._lock:
            kept = self._lines.get(port)
            if kept is None:
                kept = self._lines[port] = collections.deque(maxlen=self._keep_lines)
                while len(self._lines) > self._keep_ports:
                    self._lines.popitem(last=False)
            kept.append(text)
            listener = self._listeners.get(port)
        if listener is not None:
            listener(text)

    def lines(self, port: int | None, n: int | None = None) -> list[str]:
        """The last ``n`` lines (all kept when None) of the child on ``port``, without the prefix, oldest
        first; [] for None or an unknown port."""
        with self._lock:
            kept = list(self._lines.get(port, ())) if port is not None else []
        return kept if n is None else kept[-n:]

    def take_exits(self) -> list[tuple[str, int]]:
        """``(model id, exit status)`` of every model process that ended since the last call, oldest first
        (status 0 = a normal stop: an unload, an eviction; 1 = any crash, the router keeps no signal)."""
        with self._lock:
            out = list(self._exits)
            self._exits.clear()
        return out

    def listen(self, port: int, callback: Callable[[str], None] | None) -> None:
        """Call ``callback(line)`` for each later line of ``port`` (None removes it). One listener per port."""
        with self._lock:
            if callback is None:
                self._listeners.pop(port, None)
            else:
                self._listeners[port] = callback


def own_lines(lines: list[str]) -> list[str]:
    """The router's own lines of ``lines`` (the relayed ``[PORT]`` lines of its models left out)."""
    return [line for line in lines if _PREFIX.match(line) is None]


__all__ = ["KEEP_LINES", "KEEP_PORTS", "RouterLog", "own_lines"]
