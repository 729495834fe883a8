"""A bounded CPU burner: one core busy in random bursts, stopping by itself (tests and bench/).

``Burner(total_s=60)`` keeps one core busy in bursts of 2–10 s (random, seeded) separated by pauses of
0.5–3 s, for at most ``total_s`` seconds, then exits on its own. It runs detached from the caller's
process tree (double fork, POSIX), so the load watcher (``tuner.hardware.host.LoadWatcher``) counts it
as "another program", like a browser or an IDE. ``stop()`` (or leaving the ``with`` block) ends it
early; it never outlives ``total_s`` either way.
"""

from __future__ import annotations

import os
import random
import signal
import time


def _burn(total_s: float, seed: int, min_burst_s: float, max_burst_s: float) -> None:
    rng = random.Random(seed)
    end = time.monotonic() + total_s
    x = 0
    while time.monotonic() < end:
        burst_end = min(end, time.monotonic() + rng.uniform(min_burst_s, max_burst_s))
        while time.monotonic() < burst_end:
            for _ in range(20000):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        pause = min(max(0.0, end - time.monotonic()), rng.uniform(0.5, 3.0))
        time.sleep(pause)


class Burner:
    """One core busy in random 2–10 s bursts for at most ``total_s`` seconds (module docstring).

    Args:
        total_s: hard limit of the burner's life (seconds).
        seed: random seed of the burst/pause lengths.
        min_burst_s, max_burst_s: burst lengths.
    """

    def __init__(self, total_s: float = 60.0, seed: int = 1, min_burst_s: float = 2.0, max_burst_s: float = 10.0):
        self.total_s = total_s
        self.seed = seed
        self.min_burst_s = min_burst_s
        self.max_burst_s = max_burst_s
        self.pid: int | None = None

    def start(self) -> Burner:
        """Start the detached burner; ``pid`` is its process id."""
        r, w = os.pipe()
        child = os.fork()
        if child == 0:  # first child: fork the burner and exit, so it is re-parented outside our tree
            try:
                os.close(r)
                grandchild = os.fork()
                if grandchild == 0:
                    os.close(w)
                    try:
                        _burn(self.total_s, self.seed, self.min_burst_s, self.max_burst_s)
                    finally:
                        os._exit(0)
                os.write(w, str(grandchild).encode())
                os.close(w)
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while True:
            chunk = os.read(r, 64)
            if not chunk:
                break
            data += chunk
        os.close(r)
        os.waitpid(child, 0)
        self.pid = int(data) if data else None
        return self

    def stop(self) -> None:
        """End the burner now (idempotent)."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.pid = None

    def alive(self) -> bool:
        """True while the burner process exists."""
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie re-parented to a subreaper still answers kill(0): check its state
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return True

    def __enter__(self) -> Burner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
