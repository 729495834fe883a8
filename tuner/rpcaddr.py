"""llama.cpp RPC host addresses (``host:port`` for ``--rpc``): parsing, the loopback rule, a bounded
reachability probe and the log lines that name a lost host.

Neutral on purpose: the Settings validate ``rpc_hosts`` with it, the supervisor recognises a lost host
with it, the hardware package lists the hosts' devices (``tuner.hardware.rpc``), calibration places
layers on them. The only I/O is :func:`probe_endpoint`'s one TCP connect.
"""

from __future__ import annotations

import errno
import re
import socket
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


_HOST = re.compile(r"[A-Za-z0-9.\-_]+")  # matched whole (fullmatch: "$" would admit a trailing newline)


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
            if not _HOST.fullmatch(host):
                raise RpcHostError(f"{where}: {entry!r}: {host!r} is not an IPv4 address or host name")
            ep = RpcEndpoint(host, port)
            if ep not in out:
                out.append(ep)
    return tuple(out)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and 127.0.0.0/8 (the only binds that keep an RPC host off the network)."""
    return host == "localhost" or host.startswith("127.")


CONNECT_TIMEOUT_S = 2.0
"""Bounded TCP connect per endpoint before anything is passed to ``--rpc`` (llama.cpp's own has none)."""


def probe_endpoint(endpoint: RpcEndpoint, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """One bounded TCP connect to ``endpoint``; None when it accepted, else a note naming it.

    The connection is closed at once (a ``ggml-rpc-server`` sees a client that left before its hello and
    goes back to accept). At most ``timeout_s`` seconds (plus name resolution).
    """
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return f"RPC host {endpoint} refused the connection (no ggml-rpc-server listening on that port)"
    except TimeoutError:
        return (f"RPC host {endpoint} did not answer within {timeout_s:g} s (switched off, wrong address, "
                "or a firewall dropping the packets)")
    except socket.gaierror as exc:
        return f"RPC host {endpoint}: cannot resolve {endpoint.host!r} ({exc.strerror or exc})"
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENETUNREACH, errno.EHOSTUNREACH):
            return f"RPC host {endpoint}: no route to it (network unreachable or blackholed: {exc.strerror})"
        return f"RPC host {endpoint} unreachable: {exc.strerror or exc}"


def log_names_lost_host(lines: Sequence[str]) -> str | None:
    """The RPC endpoint a llama-server log says it lost (or could not reach), else None.

    Matches ggml-rpc.cpp's abort messages "Failed to connect to HOST:PORT" (``rpc_dispatcher::start``)
    and "Remote RPC server crashed or returned malformed response" (``rpc_dispatcher::work``; that one
    names no endpoint: ``"?"`` is returned).
    """
    for line in reversed(list(lines)):
        m = re.search(r"Failed to connect to (\S+)", line)
        if m:
            return m.group(1)
        if "Remote RPC server crashed" in line or "RPC handshake failed" in line:
            return "?"
    return None


__all__ = ["CONNECT_TIMEOUT_S", "DEFAULT_RPC_PORT", "RpcEndpoint", "RpcHostError", "is_loopback",
           "log_names_lost_host", "parse_rpc_hosts", "probe_endpoint"]
