"""llama.cpp RPC host addresses (``host:port`` for ``--rpc``): parsing and the loopback rule.

Neutral on purpose: the Settings validate ``rpc_hosts`` with it, the hardware package probes the hosts
(``tuner.hardware.rpc``), the server and calibration pass them to ``--rpc``. No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.errors import DraftwiseError

DEFAULT_RPC_PORT = 50052
"""``ggml-rpc-server``'s default port (tools/rpc/rpc-server.cpp ``rpc_server_params``)."""

class RpcHostError(DraftwiseError, ValueError):
    """A ``--rpc`` / ``rpc_hosts`` value that is not ``host:port[,host:port...]``; names the entry."""


@dataclass(frozen=True)
class RpcEndpoint:
    """One ``ggml-rpc-server`` address. ``str()`` is the ``host:port`` form ``--rpc`` takes."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


_HOST = re.compile(r"^[A-Za-z0-9.\-_]+$")


def parse_rpc_hosts(value: str | Sequence[str] | None, where: str = "--rpc") -> tuple[RpcEndpoint, ...]:
    """``"a:50052,b:50053"`` (or a list of such strings) → endpoints, in order, duplicates dropped.

    ``None`` / empty → ``()``. IPv4 addresses and host names only: llama.cpp resolves with
    ``gethostbyname`` into an IPv4 socket (ggml/src/ggml-rpc/transport.cpp ``socket_t::connect``), and
    splits the endpoint at its last ``:`` (ggml-rpc.cpp ``parse_endpoint``).

    Raises:
        RpcHostError: an entry without a port, with a port outside 1..65535, or with characters a host
            name cannot hold; the message names ``where`` and the entry.
    """
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    out: list[RpcEndpoint] = []
    for item in items:
        if not isinstance(item, str):
            raise RpcHostError(f"{where}: {item!r} is not a host:port string")
        for raw in item.split(","):
            entry = raw.strip()
            if not entry:
                continue
            host, sep, port_s = entry.rpartition(":")
            if not sep or not host or not port_s.isdigit():
                raise RpcHostError(f"{where}: {entry!r} is not host:port (e.g. 192.168.1.20:{DEFAULT_RPC_PORT})")
            port = int(port_s)
            if not 1 <= port <= 65535:
                raise RpcHostError(f"{where}: {entry!r}: port {port} is outside 1..65535")
            if not _HOST.match(host):
                raise RpcHostError(f"{where}: {entry!r}: {host!r} is not an IPv4 address or host name")
            ep = RpcEndpoint(host, port)
            if ep not in out:
                out.append(ep)
    return tuple(out)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and 127.0.0.0/8 (the only binds that keep an RPC host off the network)."""
    return host == "localhost" or host.startswith("127.")


__all__ = ["DEFAULT_RPC_PORT", "RpcEndpoint", "RpcHostError", "is_loopback", "parse_rpc_hosts"]
