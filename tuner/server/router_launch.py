"""One llama-server router process: its preset file, argv, environment, spawn and readiness.

The router is ``llama-server --models-preset FILE --models-max N --host H --port P --cors-origins O`` (no
``-m``: tools/server/server.cpp ``llama_server`` runs the routes of tools/server/server-models.cpp). What is
per model lives in the preset (:mod:`tuner.server.preset`), which Draftwise writes here and nowhere else:
``data_dir()/router/models.ini``, mode 0600 in a 0700 folder, rewritten before every start, so the router
never reads a file someone else wrote. Security, from the router's source:

- the API key goes into the router's **environment** as ``LLAMA_API_KEY`` (common/arg.cpp ``--api-key``'s
  environment name): never on an argv, never on disk. The router strips ``--api-key*`` from its children's
  arguments (``unset_reserved_args``) but passes them its whole environment (``get_environment``), so each
  model's own loopback port requires the key too; without it any local process could bypass the router's;
- ``LLAMA_CACHE`` points at an empty private folder: the router lists every model of the Hugging Face cache
  as servable (``common_preset_context::load_from_cache``, common/hf-cache.cpp reads ``LLAMA_CACHE`` first),
  and only the folder's models are to be served;
- no ``LLAMA_ARG_*`` variable reaches it (:func:`tuner.process.clean_env`): the router would pass them on;
- loopback only (:func:`router_problem`): the router's model-management routes (``POST /models`` downloads
  from Hugging Face, load, unload, reload) are behind the same key, and llama-server itself warns not to
  expose router mode to untrusted networks; a LAN setting is served one model at a time.

Children are spawned from the router's own ``/proc/self/exe`` (``get_server_exec_path``), so a wrapper
script given as the server binary would be bypassed for them: such a binary is served one model at a time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tuner import paths, process
from tuner.logs import redact
from tuner.rpcaddr import is_loopback
from tuner.server.argv import server_env
from tuner.server.client import ServerClient
from tuner.server.diagnosis import CrashContext, Diagnosis, diagnose, load_hang
from tuner.server.dialect import ROUTER_FLAG, Dialect
from tuner.server.launch import CHILD_UMASK
from tuner.server.preset import RouterPlan, render_preset
from tuner.server.router_log import own_lines
from tuner.storage import atomic_write_text

log = logging.getLogger(__name__)

#: The preset's file name inside :func:`router_dir`.
PRESET_NAME = "models.ini"
#: Seconds a router may take to answer ``/health`` after its spawn (it loads no model by itself).
ROUTER_START_S = 30.0


def router_dir() -> Path:
    """``data_dir()/router`` (0700): the preset and the empty model cache of the router."""
    return paths.ensure_private_dir(paths.data_dir() / "router")


def is_script(binary: Path | str) -> bool:
    """True when ``binary`` is a script (``#!`` first), e.g. a ``--server WRAPPER``; False for a program or an
    unreadable file."""
    try:
        with open(binary, "rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return False


def router_problem(binary: Path | str, dialect: Dialect, host: str) -> str | None:
    """Why ``binary`` cannot serve several models from one endpoint listening on ``host``, in words; None when
    it can (see the module docstring for the reasons)."""
    problem = dialect.router_problem()
    if problem is not None:
        return problem
    if is_script(binary):
        return (f"{Path(binary).name} is a wrapper script, and llama-server's router starts each model from its "
                "own executable, past the wrapper")
    if not is_loopback(host):
        return ("the endpoint is open to the network, and llama-server's router adds model-management routes "
                "(download, load, unload) that should stay on this machine")
    return None


def router_argv(binary: Path | str, plan: RouterPlan, preset_path: Path | str, dialect: Dialect) -> list[str]:
    """The router's argv (pure): the preset, ``--models-max``, where it listens, CORS where the binary has it.
    ``plan.port`` must be set.

    Raises:
        ValueError: ``plan.port`` is None.
    """
    if plan.port is None:
        raise ValueError("RouterPlan.port is None: pick a port before building the argv")
    argv = [str(binary), ROUTER_FLAG, str(preset_path), "--models-max", str(max(1, plan.models_max)),
            "--host", plan.host, "--port", str(plan.port)]
    if plan.cors_origins and dialect.has("--cors-origins"):
        argv += ["--cors-origins", plan.cors_origins]
    return argv


def router_env(environ: Mapping[str, str], api_key: str | None, cache_dir: Path) -> dict[str, str]:
    """The router's environment: ``environ`` without ``LLAMA_ARG_*`` / ``LLAMA_API_KEY``, ``LLAMA_CACHE`` =
    ``cache_dir`` and, with a key, ``LLAMA_API_KEY`` = it (every child inherits it)."""
    env = process.clean_env(environ)
    env["LLAMA_CACHE"] = str(cache_dir)
    if api_key:
        env["LLAMA_API_KEY"] = api_key
    return env


def write_preset(plan: RouterPlan, binary: Path | str, dialect: Dialect, folder: Path | None = None) -> Path:
    """Render ``plan``'s preset and write it atomically, mode 0600, into ``folder`` (default :func:`router_dir`).

    Raises:
        tuner.server.preset.PresetError: a model cannot be written (nothing is written then).
        OSError: the file cannot be written.
    """
    text = render_preset(plan, binary, dialect)
    path = (folder or router_dir()) / PRESET_NAME
    atomic_write_text(path, text, mode=0o600)
    return path


class RouterLaunch:
    """One router process, from spawn to death (it decides nothing: the supervisor does).

    Args:
        binary, dialect: the llama-server and its dialect; ``plan``: what it serves (``port`` set).
        preset_path: the written preset; ``log_path``: the file for its whole log (its models' lines too).
    """

    def __init__(self, binary: Path, dialect: Dialect, plan: RouterPlan, preset_path: Path, log_path: Path) -> None:
        self.binary, self.dialect, self.plan, self.log_path = binary, dialect, plan, log_path
        self.argv = router_argv(binary, plan, preset_path, dialect)
        self.child: process.ChildProcess | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the router."""
        host = self.plan.host
        return f"http://[{host}]:{self.plan.port}" if ":" in host else f"http://{host}:{self.plan.port}"

    def spawn(self, tail_lines: int, on_line: Callable[[str], None]) -> process.ChildProcess:
        """Start the router (its log to :attr:`log_path`, each line also to ``on_line``).

        Raises:
            OSError: it cannot be executed.
        """
        cache = paths.ensure_private_dir(router_dir() / "empty-model-cache")
        env = router_env(os.environ, self.plan.api_key, cache)
        for m in self.plan.models:  # the router passes its environment to every model's child: passive for all
            env.update(server_env(m.config))
        child = process.spawn(self.argv, env=env, log_path=self.log_path, tail_lines=tail_lines, on_line=on_line,
                              umask=CHILD_UMASK)  # its models inherit it: captured requests are the user's only
        log.info("llama-server router pid %s started: %s", child.pid, redact(" ".join(self.argv)))
        self.child = child
        return child

    def check_ready(self, alive: Callable[[], bool], timeout_s: float = ROUTER_START_S) -> Diagnosis | None:
        """None once the router answers ``/health`` and its ``/props`` says ``role`` router on our socket; else
        why not (its death's diagnosis, ``not_ours``, ``load_hang``, ``cancelled`` once ``alive`` is False)."""
        child = self.child
        assert child is not None and self.plan.port is not None
        deadline = child.started_at_s + timeout_s
        foreign: str | None = None
        with ServerClient(self.base_url, api_key=self.plan.api_key, timeout_s=3.0) as client:
            while True:
                if not alive():
                    return Diagnosis("cancelled", "the start was superseded (stopped, or started again)")
                if child.poll() is not None:
                    return self.death("loading")
                if time.monotonic() > deadline:
                    if foreign is not None:
                        return Diagnosis("not_ours", f"another server answers on port {self.plan.port}: {foreign}",
                                         tuple(child.log_lines(20)), "--port")
                    return load_hang(timeout_s, child.log_lines(50))
                if client.health(timeout_s=2.0).ok:
                    foreign = self._identity_problem(client, child)
                    if foreign is None:
                        return None
                time.sleep(0.15)

    def _identity_problem(self, client: ServerClient, child: process.ChildProcess) -> str | None:
        """None when the server answering is our router; else what answered."""
        try:
            props = client.props()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ours yet"
            return f"/props failed: {exc}"
        if props.get("role") != "router":
            return f"/props says model_path {props.get('model_path')!r}, not a router"
        assert self.plan.port is not None
        if child.listens_on(self.plan.port) is False:
            return "the listening socket belongs to another process"
        return None

    def death(self, phase: str) -> Diagnosis:
        """:func:`diagnose` of the ended router (its own exit status is real: it is our child)."""
        child = self.child
        assert child is not None
        child.wait(2.0)
        return diagnose(child.returncode, own_lines(child.log_lines(400)), CrashContext(phase=phase))


__all__ = ["PRESET_NAME", "ROUTER_START_S", "RouterLaunch", "is_script", "router_argv", "router_dir", "router_env",
           "router_problem", "write_preset"]
