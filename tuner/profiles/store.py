"""Profile store: one JSON file per target in :func:`tuner.paths.profiles_dir` (atomic writes).

A file that is not valid JSON, or has an unknown schema, is renamed aside
(``<name>.corrupt-<unix time>``) and reported through :class:`ProfileError`; it is never
silently overwritten.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner import paths
from tuner.storage import CorruptFileError, FileTooLargeError, atomic_write_json, load_json
from tuner.storage import keep_aside as keep_aside_file

from .profile import Profile, ProfileError, StalenessKeys, stale_reasons

MAX_PROFILE_BYTES = 32 * 1024 * 1024
"""The largest profile file read (32 MiB; a real one, with its evidence, is well under 1 MiB): a larger one is
refused unread and left where it is (:class:`tuner.storage.FileTooLargeError`)."""


def _load(path: Path, keep_aside: bool) -> Any:
    """:func:`tuner.storage.load_json` with the profile's size limit."""
    return load_json(path, keep_aside=keep_aside, limit_bytes=MAX_PROFILE_BYTES, what="a profile")


def _resolved(path: Path | str) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute()


def _check_own_target(profile: Profile, target_path: Path | str, path: Path) -> None:
    """The profile read for ``target_path`` says it is for that file (its ``target_path`` resolves to the
    same one). Raises ProfileError naming ``target_path`` otherwise: a profile file copied or edited to stand
    for another model is never served for this one."""
    if _resolved(profile.target_path) != _resolved(target_path):
        raise ProfileError(path, f"target_path {profile.target_path!r} is not {str(target_path)!r}, the model this "
                           "profile file stands for; re-tune")


class ProfileStore:
    """Load and save :class:`Profile` objects, one per target model path.

    Args:
        folder: where profiles live; default :func:`tuner.paths.profiles_dir` (honours
            ``DRAFTWISE_HOME``).
    """

    def __init__(self, folder: Path | str | None = None) -> None:
        self.folder = Path(folder) if folder is not None else paths.profiles_dir()

    def path_for(self, target_path: Path | str) -> Path:
        """The profile file for a target: ``<stem>-<10 hex of the absolute path's SHA-1>.json``."""
        p = Path(target_path).resolve()
        digest = hashlib.sha1(str(p).encode("utf-8")).hexdigest()[:10]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", p.stem)[:60] or "model"
        return self.folder / f"{stem}-{digest}.json"

    def save(self, profile: Profile) -> Path:
        """Write ``profile`` atomically (sets ``created_unix_s`` when missing); returns the file path."""
        if profile.created_unix_s is None:
            profile = replace(profile, created_unix_s=time.time())
        path = self.path_for(profile.target_path)
        atomic_write_json(path, profile.to_json())
        return path

    def load(self, target_path: Path | str, keep_aside: bool = True) -> Profile | None:
        """The saved profile for ``target_path``, or ``None`` when there is none.

        Args:
            keep_aside: rename a corrupt file aside (``<name>.corrupt-<time>``) so the next save
                starts clean; read-only callers (``serve``) pass False and nothing is renamed.

        Raises:
            ProfileError: the file is corrupt, not a regular file, has another schema (a
                profile from a newer Draftwise says so), or its ``target_path`` is another model than
                ``target_path``; with ``keep_aside`` it has been moved (``moved_to``). Corrupt is never
                reported as missing.
        """
        path = self.path_for(target_path)
        try:
            obj = _load(path, keep_aside)
        except CorruptFileError as exc:
            raise ProfileError(path, exc.reason, exc.moved_to) from exc
        except FileTooLargeError as exc:
            raise ProfileError(path, exc.reason) from exc
        except OSError as exc:
            raise ProfileError(path, f"cannot read it ({exc})") from exc
        if obj is None:
            return None
        try:
            profile = Profile.from_json(obj, path)
            _check_own_target(profile, target_path, path)
            return profile
        except ProfileError as exc:
            moved = keep_aside_file(path) if keep_aside else None
            raise ProfileError(path, exc.reason, moved) from exc

    def all_with_problems(self) -> tuple[list[Profile], list[ProfileError]]:
        """Every readable profile, and one :class:`ProfileError` per file that is not (nothing
        is moved): for reporting "corrupt" rather than "no profile"."""
        out: list[Profile] = []
        bad: list[ProfileError] = []
        if not self.folder.is_dir():
            return out, bad
        for f in sorted(self.folder.glob("*.json")):
            try:
                obj = _load(f, False)
                out.append(Profile.from_json(obj, f))
            except (CorruptFileError, FileTooLargeError) as exc:
                bad.append(ProfileError(f, exc.reason))
            except ProfileError as exc:
                bad.append(exc)
            except OSError as exc:
                bad.append(ProfileError(f, f"cannot read it ({exc})"))
        return out, bad

    def all(self) -> list[Profile]:
        """Every readable profile in the folder (unreadable ones are skipped, not moved)."""
        out: list[Profile] = []
        if not self.folder.is_dir():
            return out
        for f in sorted(self.folder.glob("*.json")):
            try:
                obj = _load(f, False)
                out.append(Profile.from_json(obj, f))
            except (CorruptFileError, ProfileError, OSError):
                continue
        return out

    def find(self, target: str | None = None) -> list[Profile]:
        """Profiles whose target path equals ``target`` (resolved) or whose file name/stem equals it.

        With ``target`` None, every profile.
        """
        profiles = self.all()
        if target is None:
            return profiles
        resolved = str(Path(target).resolve())
        return [
            p
            for p in profiles
            if p.target_path == resolved or Path(p.target_path).name == target or Path(p.target_path).stem == target
        ]

    @staticmethod
    def stale_reasons(profile: Profile, current: StalenessKeys) -> list[str]:
        """Reasons ``profile`` is stale against the current keys (empty list = fresh)."""
        return stale_reasons(profile.keys, current)
