"""What a saved profile's ``server_config`` may hold before anything of it is served.

A profile is a file in the user's private profiles folder; whoever can write there must not be able to make
Draftwise serve another model, send the weights to another machine, listen elsewhere or keep the served
requests somewhere else. :func:`tuner.calibration.serving.profile_server_config` (``serve --models``, the app,
the router) calls :func:`check_server_config`, which refuses, each with a :class:`tuner.profiles.ProfileError`
naming the field:

- a field of the wrong JSON type;
- a serving setting of its own (:data:`SERVED_FIELDS`: listen address, API key, CORS, idle sleep, the folder
  of kept requests; the port is ignored, the tune records the one it used);
- ``model_path`` other than the profile's target, a target outside the models folder, a ``draft_path`` that
  is not a GGUF file of the models folder (resolved: ``..`` and links outside it do not count);
- an RPC host that is neither on this machine (loopback) nor in the ``rpc_hosts`` setting: llama.cpp's RPC
  protocol has no authentication, and llama-server hands the host the target's layers
  (ggml/src/ggml-rpc/ggml-rpc.cpp ``ggml_backend_rpc_buffer_set_tensor``);
- a number outside its option's bounds (:mod:`tuner.options`: threads, slots, context size, draft lengths,
  GPU layers against the model's blocks, prompt cache against this machine's RAM).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from tuner.options import Limits, OptionError, check, machine_limits
from tuner.profiles import Profile, ProfileError
from tuner.rpcaddr import RpcEndpoint, RpcHostError, is_loopback, parse_rpc_hosts

SERVED_FIELDS = ("host", "port", "api_key", "cors_origins", "alias", "cache_ram_mib", "sleep_idle_s",
                 "log_prompts_dir", "no_repack")
"""``ServerConfig`` fields that a serving path sets and the tune never does: where and to whom the server
listens, the API key, CORS, the model id, the prompt-cache limit, idle sleep, the capture of served requests
(the user's settings and flags) and ``--no-repack`` (the supervisor, from this machine's recorded CPU
workaround). The local-only fallback of an RPC configuration keeps every one of them
(:func:`tuner.calibration.serving.rpc_fallback_config`)."""

_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model_path": (str,), "draft_path": (str, type(None)), "spec_type": (str, type(None)),
    "n_max": (int, type(None)), "n_min": (int, type(None)), "p_min": (int, float, type(None)),
    "ngl": (int, str, type(None)), "draft_ngl": (int, str, type(None)), "n_ctx": (int, type(None)),
    "n_parallel": (int, type(None)), "cache_type_k": (str, type(None)), "cache_type_v": (str, type(None)),
    "threads": (int, type(None)), "fit": (bool, type(None)), "alias": (str, type(None)),
    "cache_ram_mib": (int, type(None)), "ngram_n_max": (int, type(None)), "ngram_n_min": (int, type(None)),
    "spec_autotune": (bool,), "rpc": (list, tuple), "no_repack": (bool,), "omp_passive": (bool,),
    "poll": (int, type(None)),
}

# A profile's own value of these is refused (None / the default is what the tune writes); the words say
# who chooses them instead.
_NOT_FROM_A_PROFILE = {
    "host": ("127.0.0.1", "the listen address"),
    "api_key": (None, "the API key"),
    "cors_origins": ("localhost", "which web pages may use the server"),
    "sleep_idle_s": (None, "idle sleep"),
    "log_prompts_dir": (None, "where served requests are kept"),
}

# Each numeric field and the option (tuner/options.py) whose bounds it goes through; the drafts' shortest
# lengths share the draft length's option, so they are never longer than the longest draft allowed.
_NUMBERS = {
    "threads": "threads", "n_parallel": "n_parallel", "n_ctx": "n_ctx", "n_max": "n_max", "n_min": "n_min",
    "ngram_n_max": "n_max", "ngram_n_min": "n_min", "p_min": "p_min", "cache_ram_mib": "cache_ram_mib",
    "ngl": "ngl", "draft_ngl": "draft_ngl",
}


def check_server_config(prof: Profile, models_dir: Path | None, rpc_allowed: Collection[str]) -> dict[str, Any]:
    """``prof.server_config`` checked (see the module docstring), without the fields serving sets
    (host, port, API key, CORS, idle sleep, kept requests).

    Args:
        prof: the profile.
        models_dir: the models folder it is served from (``serve --models DIR``, the app's folder); None =
            the target's own folder.
        rpc_allowed: the ``rpc_hosts`` setting (``host:port`` strings); loopback hosts are always allowed.

    Returns:
        The JSON object to build the ``ServerConfig`` from.

    Raises:
        ProfileError: named by the target's path, the reason naming the field (``server_config.model_path``,
            ``server_config.rpc`` with the host and how to allow it, ``server_config.threads 1000000: must
            be …``).
    """
    where = prof.target_path
    obj = prof.server_config
    if not isinstance(obj, dict):
        raise ProfileError(where, "server_config is not a JSON object")
    _check_types(obj, where)
    _check_not_served(obj, where)
    target, draft = _check_models(obj, prof, models_dir)
    _check_rpc(obj.get("rpc"), where, rpc_allowed)
    _check_numbers(obj, where, target, draft)
    return {k: v for k, v in obj.items() if k not in ("host", "api_key", "port", "cors_origins")}


def _check_types(obj: dict[str, Any], where: str) -> None:
    """Each known field of the JSON type it must have (a bool is not a number). Raises ProfileError."""
    for key, types in _FIELD_TYPES.items():
        if key not in obj:
            continue
        value = obj[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ProfileError(where, f"server_config.{key} = {value!r} has the wrong type")


def _check_not_served(obj: dict[str, Any], where: str) -> None:
    """No serving setting of the profile's own (:data:`_NOT_FROM_A_PROFILE`). Raises ProfileError."""
    for key, (allowed, what) in _NOT_FROM_A_PROFILE.items():
        value = obj.get(key, allowed)
        if value is None or value == allowed or (key in ("host", "api_key") and value == ""):
            continue
        raise ProfileError(where, f"server_config.{key} = {value!r}: a profile cannot choose {what}; it comes "
                           "from the settings and command line only")


def in_models_folder(path: Path, folder: Path) -> bool:
    """True when ``path`` is a ``*.gguf`` file of ``folder``: resolved, it lies under the resolved folder, or it
    is the file one of the folder's own ``*.gguf`` entries leads to (the scan's walk, links followed:
    :func:`tuner.catalog.folder.gguf_files_under`, so a folder of links into a blob store counts, whose files'
    names have no suffix). A path that leaves the folder through ``..`` or a link of its own does not.
    Raises nothing."""
    try:
        resolved = path.resolve()
        root = folder.resolve()
    except (OSError, RuntimeError):
        return False
    if resolved.is_relative_to(root):  # a file of the folder, a GGUF by its name
        return resolved.name.lower().endswith(".gguf") or path.name.lower().endswith(".gguf")
    from tuner.catalog.folder import gguf_files_under

    for p in gguf_files_under(folder):
        try:
            if p.resolve() == resolved:
                return True
        except (OSError, RuntimeError):
            continue
    return False


def _check_models(obj: dict[str, Any], prof: Profile, models_dir: Path | None) -> tuple[Path, Path | None]:
    """``model_path`` is the profile's target, the target a file of the models folder, the draft one too.
    Returns (target, draft). Raises ProfileError naming the field."""
    where = prof.target_path
    target = Path(prof.target_path)
    folder = Path(models_dir) if models_dir is not None else target.parent
    if "model_path" not in obj:
        raise ProfileError(where, "server_config.model_path is missing")
    model = Path(obj["model_path"])
    if _identity(model) != _identity(target):
        raise ProfileError(where, f"server_config.model_path = {str(model)!r} is not the profile's target "
                           f"{str(target)!r}: a profile serves only its own target; re-tune")
    if models_dir is not None and not in_models_folder(target, folder):
        raise ProfileError(where, f"target_path {str(target)!r} is not a model file of {folder}: a profile serves "
                           "only a model of the folder it is served from; re-tune")
    draft = obj.get("draft_path")
    if draft is None:
        return target, None
    if not in_models_folder(Path(draft), folder):
        raise ProfileError(where, f"server_config.draft_path = {draft!r} is not a GGUF file of the models folder "
                           f"{folder}: a profile drafts only with a model of its folder; re-tune")
    return target, Path(draft)


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _check_rpc(value: object, where: str, allowed: Collection[str]) -> None:
    """Every RPC host parses and is loopback or one of ``allowed``. Raises ProfileError naming the host."""
    if not value:
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ProfileError(where, f"server_config.rpc = {value!r} is not a list of host:port strings")
    try:
        hosts = parse_rpc_hosts(list(value), where=f"{where}: server_config.rpc")
        ok: set[RpcEndpoint] = set(parse_rpc_hosts(list(allowed), where="setting rpc_hosts"))
    except RpcHostError as exc:
        raise ProfileError(where, str(exc)) from exc
    for ep in hosts:
        if is_loopback(ep.host) or ep in ok:
            continue
        raise ProfileError(
            where, f"server_config.rpc holds {ep}, an RPC host that is not on this machine and not in the "
            f"rpc_hosts setting: llama-server would send the model's weights to it, and RPC has no "
            f"authentication. If it is yours, allow it: add {ep} to the rpc_hosts setting (the app's Serve tab, "
            f"RPC hosts) or tune with --rpc {ep}, which adds it")


def _check_numbers(obj: dict[str, Any], where: str, target: Path, draft: Path | None) -> None:
    """Each numeric field within its option's bounds (:func:`tuner.options.check`): this machine's CPUs and
    RAM, the target's and the draft's blocks for their GPU layers. Raises ProfileError naming the field."""
    machine = machine_limits()
    facts = {"ngl": (target, _blocks(target)), "draft_ngl": (draft, _blocks(draft) if draft is not None else None)}
    for key, name in _NUMBERS.items():
        value = obj.get(key)
        if value is None:
            continue
        limits = machine
        if key in facts:
            model, blocks = facts[key]
            limits = Limits(blocks=blocks, model=model.name if model is not None else None)
        try:
            check(name, value, where=f"server_config.{key}", limits=limits, keywords=key in facts)
        except OptionError as exc:
            raise ProfileError(where, str(exc)) from None


def _blocks(model: Path) -> int | None:
    """The model's blocks (GGUF ``<arch>.block_count``), None when its header cannot be read (serving then
    names the file)."""
    from tuner.catalog.header import GGUFError, read_header

    try:
        header = read_header(model)
    except (GGUFError, OSError):
        return None
    arch = header.kv.get("general.architecture")
    blocks = header.kv.get(f"{arch}.block_count") if isinstance(arch, str) else None
    return blocks if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks > 0 else None


__all__ = ["SERVED_FIELDS", "check_server_config", "in_models_folder"]
