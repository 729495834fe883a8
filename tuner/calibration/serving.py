"""From a candidate or a saved profile to a :class:`tuner.server.config.ServerConfig`.

``draftwise serve --models DIR`` (tuner/server/command.py) calls :func:`config_from_profile`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tuner.profiles import Profile, ProfileError, ProfileStore
from tuner.server.config import ServerConfig

from .candidates import Candidate


class NoProfileError(LookupError):
    """No usable profile for the requested target; the message says which command to run."""


def candidate_config(
    candidate: Candidate,
    target_path: str | Path,
    n_ctx: int | None = None,
    threads: int | None = None,
) -> ServerConfig:
    """The launch configuration of ``candidate`` for ``target_path`` (port left to the supervisor).

    Each component gets its own draft length: ``n_max``/``n_min``/``p_min`` go to the ``draft-*``
    component, ``ngram_n_max``/``ngram_n_min`` to the n-gram one (a chain has both).
    Speculative candidates get ``n_parallel`` 1 (every slot needs draft state; the server's default
    is 4 slots). The baseline also uses 1 slot so both are compared on equal terms.
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
        threads=threads,
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
    return ServerConfig(**kw)


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


def find_profile(models_dir: str | Path, target: str | None = None, store: ProfileStore | None = None) -> Profile:
    """The saved profile for a target in ``models_dir``.

    With ``target`` None: the most recent profile whose target lies in ``models_dir``.

    Raises:
        NoProfileError: none saved ("no profile: run draftwise tune --models DIR first").
        ProfileError: the profile file is corrupt (it has been kept aside).
    """
    models_dir = Path(models_dir).resolve()
    store = store or ProfileStore()
    hint = f"no profile: run draftwise tune --models {models_dir}" + (f" --target {target}" if target else "") + " first"
    path = _resolve_target(models_dir, target)
    if path is not None:
        prof = store.load(path)
        if prof is None:
            raise NoProfileError(hint)
        return prof
    candidates = []
    for p in store.all():
        tp = Path(p.target_path)
        if tp.parent != models_dir and models_dir not in tp.parents:
            continue
        if target is not None and target not in (tp.name, tp.stem):
            continue
        candidates.append(p)
    if not candidates:
        raise NoProfileError(hint)
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
        ProfileError: the profile file is corrupt or malformed (names the file and key).
    """
    prof = find_profile(models_dir, target, store)
    try:
        cfg = config_from_json(prof.server_config)
    except (KeyError, TypeError) as exc:
        raise ProfileError(str(prof.target_path), f"server_config is malformed ({exc})") from exc
    return cfg if cfg.port is None else replace(cfg, port=None)


__all__ = [
    "NoProfileError",
    "candidate_config",
    "config_from_json",
    "config_from_profile",
    "config_to_json",
    "find_profile",
]
