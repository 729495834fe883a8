"""A supervised ``ggml-rpc-server``: this machine's devices offered to another machine's llama-server.

``draftwise rpc-host`` (CLI) and the tests use :class:`RpcHost`. The server is the one installed next to
``llama-server`` (``tuner.hardware.rpc.rpc_server_binary``), started through ``tuner.process``
(the project's one subprocess adapter) with a clean environment, restarted after a crash (with a back-off
and a limit), and stopped with its whole process tree.

Its flags (tools/rpc/rpc-server.cpp ``rpc_server_params_parse``): ``-H`` host (default 127.0.0.1),
``-p`` port (default 50052), ``-d`` devices (comma list of ggml device names), ``-t`` CPU threads,
``-c`` local tensor cache. The bind address is loopback unless the caller asks for another one; the RPC
protocol has no authentication (``tuner.hardware.rpc.NO_AUTH_WARNING``), so front ends print that
warning for any other address.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner import process
from tuner.errors import DraftwiseError  # the one subprocess adapter
from tuner.hardware.rpc import (
    DEFAULT_RPC_PORT,
    RpcEndpoint,
    is_loopback,
    probe_endpoint,
)
from tuner.process import clean_env


class RpcHostStartError(DraftwiseError, RuntimeError):
    """The RPC server could not be started or kept running. ``evidence``: its last log lines."""

    def __init__(self, message: str, evidence: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass(frozen=True)
class RpcHostConfig:
    """One ``ggml-rpc-server`` launch. ``device``: ggml device names (``CUDA0`` or ``CUDA0,CUDA1``),
    None = all of this machine's devices. ``threads``: CPU threads of its CPU device (None = its default
    1). ``cache``: ``-c`` (keep large tensors in a local file cache between runs)."""

    binary: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_RPC_PORT
    device: str | None = None
    threads: int | None = None
    cache: bool = False

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        return is_loopback(self.host)

    @property
    def endpoint(self) -> RpcEndpoint:
        """Where a llama-server reaches it (``--rpc`` value); 0.0.0.0 is reached via 127.0.0.1 here."""
        return RpcEndpoint("127.0.0.1" if self.host == "0.0.0.0" else self.host, self.port)


def rpc_host_argv(cfg: RpcHostConfig) -> list[str]:
    """The exact argv of ``cfg`` (pure)."""
    argv = [str(cfg.binary), "-H", cfg.host, "-p", str(cfg.port)]
    if cfg.device:
        argv += ["-d", cfg.device]
    if cfg.threads is not None:
        argv += ["-t", str(cfg.threads)]
    if cfg.cache:
        argv.append("-c")
    return argv


class RpcHost:
    """Runs one ``ggml-rpc-server`` and restarts it when it dies.

    ``start(timeout_s)`` returns once the port listens (raises :class:`RpcHostStartError` with the log tail
    when it exits or does not listen in time); ``supervise(stop)`` blocks until ``stop`` is set,
    restarting a crashed server after 1, 2, 4… s (at most ``max_restarts`` crashes within 5 minutes,
    then :class:`RpcHostStartError`); ``stop()`` ends it and its tree. ``on_event(message)`` receives each
    start, crash and restart in words.
    """

    def __init__(self, cfg: RpcHostConfig, *, max_restarts: int = 5,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.max_restarts = max_restarts
        self.on_event = on_event or (lambda _m: None)
        self._child: process.ChildProcess | None = None
        self._lock = threading.Lock()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The running server's pid, None when stopped."""
        c = self._child
        return c.pid if c is not None and c.is_alive() else None

    def log_tail(self, n: int = 20) -> list[str]:
        """Its last ``n`` log lines."""
        c = self._child
        return c.log_lines(n) if c is not None else []

    def start(self, timeout_s: float = 15.0) -> None:
        """Start the server and wait until its port listens (at most ``timeout_s`` seconds).

        Raises:
            RpcHostStartError: the binary cannot run, it exited (e.g. the port is taken: its log says so),
                or it did not listen within ``timeout_s``.
        """
        argv = rpc_host_argv(self.cfg)
        try:
            child = process.spawn(argv, env=clean_env(os.environ))
        except OSError as exc:
            raise RpcHostStartError(f"{self.cfg.binary} cannot run: {exc}") from exc
        with self._lock:
            self._child = child
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not child.is_alive():
                child.wait(2.0)
                tail = tuple(child.log_lines(20))
                raise RpcHostStartError(f"{self.cfg.binary.name} exited at start (exit {child.returncode}): "
                                   + (" | ".join(tail[-3:]) or "no output"), tail)
            listening = child.listens_on(self.cfg.port)
            if listening is None:  # psutil may not look: the log's endpoint line, then one TCP connect
                if any("transport" in line for line in child.log_lines(40)) and \
                        probe_endpoint(self.cfg.endpoint, 1.0) is None:
                    listening = True
            if listening:
                self.on_event(f"RPC host listening on {self.cfg.host}:{self.cfg.port} (pid {child.pid})")
                return
            time.sleep(0.05)
        tail = tuple(child.log_lines(20))
        child.kill()
        raise RpcHostStartError(f"{self.cfg.binary.name} did not listen on port {self.cfg.port} within {timeout_s:g} s",
                           tail)

    def supervise(self, stop: threading.Event, poll_s: float = 0.2) -> None:
        """Keep the server running until ``stop`` is set (then stop it). A crash is restarted after a
        back-off of 1, 2, 4, 8, 16 s.

        Raises:
            RpcHostStartError: more than ``max_restarts`` crashes within 300 s, or a restart that fails.
        """
        crashes: list[float] = []
        try:
            while not stop.wait(poll_s):
                c = self._child
                if c is not None and c.is_alive():
                    continue
                rc = c.wait(1.0) if c is not None else None
                now = time.monotonic()
                crashes = [t for t in crashes if now - t < 300.0] + [now]
                tail = tuple(c.log_lines(20)) if c is not None else ()
                if len(crashes) > self.max_restarts:
                    raise RpcHostStartError(f"{self.cfg.binary.name} crashed {len(crashes)} times within 5 minutes; "
                                       f"gave up (last exit {rc})", tail)
                delay = min(16.0, 2.0 ** (len(crashes) - 1))
                self.on_event(f"RPC host exited (exit {rc}); restarting in {delay:g} s")
                if stop.wait(delay):
                    break
                self.restarts += 1
                self.start()
        finally:
            self.stop()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the server and its tree (idempotent)."""
        with self._lock:
            c, self._child = self._child, None
        if c is not None:
            c.stop(grace_s)
