"""A private network for the RPC tests: loopback inside a network namespace, RPC hosts, dead hosts.

``run_in_netns(module, *args)`` runs ``python -m module args`` inside ``unshare -n`` with ``lo`` up (the
test's own namespace: nothing it starts is reachable from, or reaches, anything outside) and returns the
JSON object the module prints last. Where unprivileged namespaces are not allowed the tests that need one
skip with the reason.

Dead hosts, the two kinds the "unreachable host" check needs:

* closed port: nothing listens (the kernel answers RST: connect fails at once);
* blackholed: ``ip route add blackhole`` for a subnet inside the namespace (the route drops the packets;
  Linux fails the connect at once with EINVAL), and a *silent* host that drops SYNs and never answers —
  a listening socket whose accept queue is full (backlog 0, one connection queued, never accepted): the
  kernel drops further SYNs, so a client's connect waits until its own timeout, like a switched-off host
  or a firewall that drops. (``tc``/``netem`` and ``iptables`` are not available in this kernel/image.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def netns_problem() -> str | None:
    """None when ``unshare -n`` with ``ip link set lo up`` works here, else why not."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip not installed"
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n failed: {exc}"
    return None if p.returncode == 0 else f"unshare -n not permitted: {p.stderr.strip()}"


def run_in_netns(module: str, *args: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run ``python -m module args`` in a fresh network namespace; its last stdout line parsed as JSON.

    Raises:
        AssertionError: non-zero exit or no JSON (with its output).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -m "$@"', sys.executable,
                        module, *args], capture_output=True, text=True, timeout=timeout_s, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    return json.loads(lines[-1])


class SilentHost:
    """A TCP port on 127.0.0.1 that never answers a SYN (full accept queue; see the package docs)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.queued = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        self.extra: list[socket.socket] = []
        try:  # Linux queues backlog + 1: fill it for sure
            self.extra.append(socket.create_connection(("127.0.0.1", self.port), timeout=0.5))
        except OSError:
            pass

    def close(self) -> None:
        for s in [self.queued, *self.extra, self.listener]:
            s.close()
