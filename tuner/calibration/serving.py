"""From a candidate or a saved profile to a :class:`tuner.server.config.ServerConfig`.

``draftwise serve --models DIR`` (tuner/cli/serve.py) calls :func:`config_from_profile`.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from tuner.errors import DraftwiseError
from tuner.profiles import Profile, ProfileError, ProfileStore
from tuner.server.config import ServerConfig
from tuner.serverargs import PROFILE_EXTRA_ARGS_ALLOWED, SERVER_ARGS_ALLOWED

from .candidates import Candidate
from .profile_checks import SERVED_FIELDS, check_server_config
from .verifycost import synth_args


class NoProfileError(DraftwiseError, LookupError):
    """No usable profile for the requested target; the message says which command to run."""


def candidate_config(
    candidate: Candidate,
    target_path: str | Path,
    n_ctx: int | None = None,
    threads: int | None = None,
    server_args: tuple[str, ...] = (),
) -> ServerConfig:
    """The launch configuration of ``candidate`` for ``target_path`` (port left to the supervisor).

    Each component gets its own draft length: ``n_max``/``n_min``/``p_min`` go to the ``draft-*``
    component, ``ngram_n_max``/``ngram_n_min`` to the n-gram one (a chain has both).
    Speculative candidates get ``n_parallel`` 1 (every slot needs draft state; the server's default
    is 4 slots). The baseline also uses 1 slot so both are compared on equal terms. A candidate's
    ``draft_sampling`` becomes ``--spec-draft-sampling VALUE`` (b11434 common/arg.cpp). ``server_args``: the
    user's own flags as argv words (checked by ``tuner.serverargs.parse_server_args``), appended to
    ``extra_args`` of every candidate alike, the baseline included. The candidate's own thread setting (the
    thread stage's launches) goes before ``threads``. A verify-cost launch's ``synth_rates`` become
    ``--spec-synth-rates`` (:func:`tuner.calibration.verifycost.synth_args`); no served candidate has them.
    """
    spec = candidate.spec_type
    has_draft = any(t.startswith("draft") for t in candidate.spec_types)
    has_ngram = any(t.startswith("ngram") for t in candidate.spec_types)
    return ServerConfig(
        model_path=Path(target_path),
        draft_path=Path(candidate.draft_path) if candidate.draft_path else None,
        spec_type=spec,
        n_max=candidate.n_max if has_draft else None,
        n_min=candidate.n_min if has_draft else None,
        p_min=candidate.p_min if has_draft else None,
        ngram_n_max=candidate.ngram_n_max if has_ngram else None,
        ngram_n_min=candidate.ngram_n_min if has_ngram else None,
        spec_autotune=candidate.autotune,
        ngl=candidate.ngl,
        draft_ngl=candidate.draft_ngl if candidate.draft_path else None,
        n_ctx=n_ctx,
        n_parallel=1,
        threads=candidate.threads if candidate.threads is not None else threads,
        omp_passive=candidate.omp_passive,
        poll=candidate.poll,
        extra_args=(("--spec-draft-sampling", candidate.draft_sampling) if candidate.draft_sampling else ())
        + synth_args(candidate.synth_rates) + tuple(server_args),
        rpc=tuple(candidate.rpc),
    )


def config_to_json(config: ServerConfig) -> dict:
    """JSON form of a :class:`ServerConfig` (paths as strings)."""
    out = {}
    for name in ServerConfig.__dataclass_fields__:
        v = getattr(config, name)
        if isinstance(v, Path):
            v = str(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[name] = v
    return out


def config_from_json(obj: dict) -> ServerConfig:
    """Inverse of :func:`config_to_json` (unknown keys ignored).

    Raises:
        KeyError: ``model_path`` is missing.
    """
    fields = ServerConfig.__dataclass_fields__
    kw = {k: v for k, v in obj.items() if k in fields}
    if "extra_args" in kw and kw["extra_args"] is not None:
        kw["extra_args"] = tuple(kw["extra_args"])
    if "rpc" in kw:
        kw["rpc"] = tuple(kw["rpc"] or ())
    return ServerConfig(**kw)


def check_profile_extra_args(extra_args: object, where: str) -> tuple[str, ...]:
    """Validate a profile's ``server_config.extra_args`` against :data:`tuner.serverargs.SERVER_ARGS_ALLOWED`:
    the options Draftwise writes (:data:`PROFILE_EXTRA_ARGS_ALLOWED`) plus the user's own flags a profile is
    tuned with (``tuner.serverargs.USER_ONLY_ARGS``, e.g. ``--no-repack``); both declared once, there.

    Args:
        extra_args: the JSON value (a list of strings, or None).
        where: the profile file, for the message.

    Returns:
        The arguments as a tuple of strings.

    Raises:
        ProfileError: not a list of strings, or an option outside the allow-list (named; e.g.
            ``--host``, ``--tools``, ``--api-key``). A token such as ``-1`` counts as a value.
    """
    if extra_args is None:
        return ()
    if not isinstance(extra_args, (list, tuple)) or not all(isinstance(a, str) for a in extra_args):
        raise ProfileError(where, "server_config.extra_args must be a list of strings")
    for a in extra_args:
        if not a.startswith("-") or a[1:2].isdigit() or a[1:2] == ".":
            continue  # a value (negative numbers included)
        flag = a.split("=", 1)[0]
        if flag not in SERVER_ARGS_ALLOWED:
            raise ProfileError(
                where,
                f"server_config.extra_args holds {flag!r}, which a profile may not set (listen address, "
                "port, API key, tools and CORS come from the settings and command line only); re-tune or "
                "remove it",
            )
    return tuple(extra_args)


def profile_server_config(prof: Profile, models_dir: str | Path | None = None,
                          rpc_allowed: Collection[str] | None = None) -> ServerConfig:
    """The :class:`ServerConfig` a saved profile holds, checked (:mod:`tuner.calibration.profile_checks`):
    field types; the extra-arguments allow-list; no listen address, port, API key, CORS origin, idle sleep or
    folder of kept requests of its own (the caller applies the user's settings and flags); only its own target
    and a draft from the models folder; RPC hosts on this machine or in the ``rpc_hosts`` setting; every number
    within its option's bounds (:mod:`tuner.options`). Used by ``serve --models``, the app and the router.

    Args:
        prof: the profile.
        models_dir: the folder it is served from; None = the target's own folder.
        rpc_allowed: the RPC hosts the user allowed (``host:port``); None = the ``rpc_hosts`` setting (a bad
            setting allows none: only loopback hosts pass).

    Raises:
        ProfileError: named by the target, the reason naming the field (a wrong type, an option outside the
            allow-list, a serving setting, another model, a draft outside the folder, a foreign RPC host and how
            to allow it, a number out of range).
    """
    if rpc_allowed is None:
        from tuner.settings import load_settings_keeping_valid

        rpc_allowed = load_settings_keeping_valid(repair=False).settings.rpc_hosts  # a bad key is left out
    where = prof.target_path
    clean = check_server_config(prof, Path(models_dir) if models_dir is not None else None, rpc_allowed)
    clean["extra_args"] = check_profile_extra_args(clean.get("extra_args"), where)
    try:
        return config_from_json(clean)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(where, f"server_config is malformed ({exc})") from exc


def _resolve_target(models_dir: Path, target: str | None) -> Path | None:
    if target is None:
        return None
    p = Path(target)
    if p.is_file():
        return p.resolve()
    q = models_dir / target
    if q.is_file():
        return q.resolve()
    return None


def _identities_under(models_dir: Path) -> set[str]:
    """Resolved paths of every ``*.gguf`` under ``models_dir`` (links followed: a Hugging Face
    cache or a hand-made folder of links into a blob store maps to the blobs)."""
    out: set[str] = set()
    for root, _dirs, files in os.walk(models_dir, followlinks=True):
        for name in files:
            if name.lower().endswith(".gguf"):
                try:
                    out.add(str((Path(root) / name).resolve()))
                except (OSError, RuntimeError):
                    continue
    return out


def find_profile(models_dir: str | Path, target: str | None = None, store: ProfileStore | None = None) -> Profile:
    """The saved profile for a target in ``models_dir``. Read-only: nothing is renamed.

    One identity for a model file: its resolved path (``ProfileStore.path_for`` resolves too), so
    a folder of symlinks finds the profile ``tune`` saved for the files they point to, whether
    the folder, the files or both are links.

    With ``target`` None: the most recent profile whose target is one of the ``*.gguf`` files
    under ``models_dir`` (by resolved identity) or lies under it. A ``target`` name (file name or stem)
    is looked up among the ``*.gguf`` files under ``models_dir`` (``tuner.catalog.folder.find_named_model``),
    then among the saved profiles (a tuned file since removed).

    Raises:
        AmbiguousModelError: (``tuner.catalog.folder``) the ``target`` name is carried by two different
            files under ``models_dir`` (or saved profiles); the message lists them and says to pass a path.
        NoProfileError: none saved ("no profile: run draftwise tune --models DIR first").
        ProfileError: the profile file is corrupt, unreadable or from another schema version
            (never reported as missing; the file is left where it is).
    """
    user_dir = Path(models_dir)
    models_dir = user_dir.resolve()
    store = store or ProfileStore()
    hint = f"no profile: run draftwise tune --models {user_dir}" + (f" --target {target}" if target else "") + " first"
    path = _resolve_target(models_dir, target) or _resolve_target(user_dir, target)
    if path is None and target is not None and user_dir.is_dir():
        from tuner.catalog.folder import find_named_model

        named = find_named_model(user_dir, target, "--target")  # AmbiguousModelError: two files named so
        path = named.resolve() if named is not None else None
    if path is not None:
        prof = store.load(path, keep_aside=False)
        if prof is None:
            raise NoProfileError(hint)
        return prof
    inside = _identities_under(user_dir)
    profiles, problems = store.all_with_problems()
    candidates = []
    for p in profiles:
        tp = Path(p.target_path)
        try:
            resolved = str(tp.resolve())
        except (OSError, RuntimeError):
            resolved = str(tp)
        if resolved not in inside and tp.parent != models_dir and models_dir not in tp.parents:
            continue
        if target is not None and target not in (tp.name, tp.stem):
            continue
        candidates.append(p)
    if not candidates:
        if problems:
            bad = problems[0]
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ProfileError(bad.path, f"{bad.reason}{more}; no readable profile for {user_dir}: re-run "
                               f"draftwise tune --models {user_dir}")
        raise NoProfileError(hint)
    if target is not None and len({p.target_path for p in candidates}) > 1:
        from tuner.catalog.folder import AmbiguousModelError

        raise AmbiguousModelError("--target", target, sorted({Path(p.target_path) for p in candidates}))
    candidates.sort(key=lambda p: p.created_unix_s or 0.0, reverse=True)
    return candidates[0]


def config_from_profile(
    models_dir: str | Path, target: str | None = None, store: ProfileStore | None = None
) -> ServerConfig:
    """The winning :class:`ServerConfig` saved by ``draftwise tune`` for a target in ``models_dir``.

    Args:
        models_dir: the folder given to ``draftwise tune --models``.
        target: file name, stem or path of the target; ``None`` = the most recently tuned one there.
        store: profile store (default folder when ``None``).

    Returns:
        The configuration with ``port`` None (the caller picks one).

    Raises:
        NoProfileError: no profile ("no profile: run draftwise tune --models DIR first").
        ProfileError: the profile file is corrupt or malformed, or sets an option a profile may not
            (names the file and key; see :func:`profile_server_config`).
        AmbiguousModelError: the ``target`` name fits two different files (see :func:`find_profile`).
    """
    prof = find_profile(models_dir, target, store)
    return profile_server_config(prof, models_dir)


def rpc_fallback_config(config: ServerConfig, profile: Profile | None = None) -> ServerConfig | None:
    """The local-only configuration to serve when an RPC host of ``config`` is gone; None when
    ``config`` uses no RPC host.

    With the ``profile`` that ``config`` came from: the fastest local-only candidate its evidence
    measured (:func:`tuner.calibration.remote.local_fallback`), else the winner without ``--rpc`` on
    this machine's CPU. Every serving setting of ``config`` is kept (:func:`with_served`: listen address,
    port, key, CORS, model id, prompt cache, idle sleep, the capture of served requests, ``--no-repack``), and
    the user's own flags the profile was tuned with (``keys.server_args``) stay on the fallback's argv.
    """
    if not config.rpc:
        return None
    from .remote import local_fallback

    if profile is not None:
        try:
            winner = Candidate.from_json(profile.winner)
        except (TypeError, ValueError):
            winner = Candidate()
        cand = local_fallback(profile.evidence, winner)
        local = replace(candidate_config(cand, config.model_path, n_ctx=config.n_ctx, threads=config.threads,
                                         server_args=profile.keys.server_args),
                        omp_passive=config.omp_passive, poll=config.poll)  # the thread setting served
    else:
        local = replace(config, ngl=0, draft_ngl=0 if config.draft_path else None)
    return replace(with_served(local, config), rpc=())


def with_served(config: ServerConfig, served: ServerConfig) -> ServerConfig:
    """``config`` with every serving setting of ``served`` (:data:`SERVED_FIELDS`, the fields a serving path
    sets and the tune never does): how a fallback or a re-applied configuration keeps what the user chose."""
    return replace(config, **{name: getattr(served, name) for name in SERVED_FIELDS})


def reachable_config(config: ServerConfig, fallback: ServerConfig | None,
                     timeout_s: float = 2.0) -> tuple[ServerConfig, str | None]:
    """``(config, None)`` when every RPC host of ``config`` accepts a TCP connection within
    ``timeout_s`` (all probed in parallel), else ``(fallback, note naming the hosts)`` — llama-server
    would abort at start on an unreachable host (ggml-rpc.cpp ``rpc_dispatcher::start``). Without a
    fallback the config is returned with the note."""
    if not config.rpc:
        return config, None
    from concurrent.futures import ThreadPoolExecutor

    from tuner.hardware.rpc import parse_rpc_hosts, probe_endpoint

    eps = parse_rpc_hosts(list(config.rpc))
    with ThreadPoolExecutor(max_workers=min(8, len(eps))) as pool:
        notes = [n for n in pool.map(lambda e: probe_endpoint(e, timeout_s), eps) if n]
    if not notes:
        return config, None
    note = "; ".join(notes)
    if fallback is None:
        return config, note
    return fallback, f"{note}: serving this machine's local-only configuration instead"


__all__ = [
    "NoProfileError",
    "rpc_fallback_config",
    "with_served",
    "SERVED_FIELDS",
    "reachable_config",
    "candidate_config",
    "config_from_json",
    "config_from_profile",
    "config_to_json",
    "find_profile",
    "profile_server_config",
    "check_profile_extra_args",
    "PROFILE_EXTRA_ARGS_ALLOWED",
]
