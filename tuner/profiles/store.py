"""Profile store: one JSON file per target in :func:`tuner.paths.profiles_dir` (atomic writes).

A file that is not valid JSON, or has an unknown schema, is renamed aside
(``<name>.corrupt-<unix time>``) and reported through :class:`ProfileError`; it is never
silently overwritten.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import replace
from pathlib import Path

from tuner import paths
from tuner.storage import CorruptFileError, atomic_write_json, load_json

from .profile import Profile, ProfileError, StalenessKeys, stale_reasons


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

    def load(self, target_path: Path | str) -> Profile | None:
        """The saved profile for ``target_path``, or ``None`` when there is none.

        Raises:
            ProfileError: the file is corrupt or has another schema; it has been kept aside
                (``moved_to``), so the next save starts clean.
        """
        path = self.path_for(target_path)
        try:
            obj = load_json(path, keep_aside=True)
        except CorruptFileError as exc:
            raise ProfileError(path, exc.reason, exc.moved_to) from exc
        if obj is None:
            return None
        try:
            return Profile.from_json(obj, path)
        except ProfileError as exc:
            moved = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            os.replace(path, moved)
            raise ProfileError(path, exc.reason, moved) from exc

    def all(self) -> list[Profile]:
        """Every readable profile in the folder (unreadable ones are skipped, not moved)."""
        out: list[Profile] = []
        if not self.folder.is_dir():
            return out
        for f in sorted(self.folder.glob("*.json")):
            try:
                obj = load_json(f, keep_aside=False)
                out.append(Profile.from_json(obj, f))
            except (CorruptFileError, ProfileError):
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
