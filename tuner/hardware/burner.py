"""A bounded burner: one core kept busy for a few seconds by a child process that stops by itself.

The tune's thread stage (``tuner.calibration.search.threads``) measures each thread setting of llama-server
idle and "with one other busy program": this module is that program. :class:`BoundedBurner` starts the
running Python interpreter on a spin loop that ends on its own after ``seconds`` (the child checks the
clock; nothing has to stop it), started through :func:`tuner.process.spawn`, so it dies with Draftwise too
(its parent-death signal) and, being in Draftwise's own process tree, the load watcher
(``tuner.hardware.host.LoadWatcher``) does not count it as another program.
"""

from __future__ import annotations

import sys

from tuner import process

SPIN = ("import sys, time\n"
        "end = time.monotonic() + float(sys.argv[1])\n"
        "x = 0\n"
        "while time.monotonic() < end:\n"
        "    for _ in range(20000):\n"
        "        x = (x * 1103515245 + 12345) & 0x7FFFFFFF\n")
"""The child's program: spin until ``argv[1]`` seconds have passed, then exit."""

MAX_S = 120.0
"""The longest a burner may run (seconds): "a few seconds" never becomes minutes by mistake."""


class BoundedBurner:
    """One core busy for at most ``seconds`` (module docstring); a context manager.

    Args:
        seconds: how long the child spins (0 < seconds ≤ :data:`MAX_S`).

    Raises:
        ValueError: ``seconds`` outside that range.
    """

    def __init__(self, seconds: float) -> None:
        if not 0 < seconds <= MAX_S:
            raise ValueError(f"a bounded burner runs 0 to {MAX_S:g} seconds, not {seconds!r}")
        self.seconds = float(seconds)
        self._child: process.ChildProcess | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while started, else None."""
        return self._child.pid if self._child is not None else None

    def start(self) -> BoundedBurner:
        """Start the child (idempotent while it runs).

        Raises:
            OSError: the interpreter could not be started.
        """
        if self._child is None or not self._child.is_alive():
            self._child = process.spawn([sys.executable, "-c", SPIN, f"{self.seconds:.3f}"])
        return self

    def alive(self) -> bool:
        """True while the child spins."""
        return self._child is not None and self._child.is_alive()

    def stop(self) -> None:
        """End the child now (idempotent; it ends by itself anyway)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(grace_s=1.0)

    def __enter__(self) -> BoundedBurner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["MAX_S", "SPIN", "BoundedBurner"]
