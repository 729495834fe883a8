"""Atomic file writes and safe JSON loading, used by settings, profiles and caches.

A write goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the target, so a crash leaves either the old or the new file, never half.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


class CorruptFileError(ValueError):
    """A JSON file exists but cannot be parsed. ``path`` names it, ``moved_to`` is where it was kept aside."""

    def __init__(self, path: Path, reason: str, moved_to: Path | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.moved_to = moved_to
        where = f"; kept aside as {moved_to}" if moved_to else ""
        super().__init__(f"{path}: {reason}{where}")


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename).

    Args:
        path: destination; parent folders are created.
        data: the complete new content.
        mode: optional permission bits (e.g. ``0o600`` for secrets), applied before the rename.

    Raises:
        OSError: the folder is not writable (the old file, if any, is untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write UTF-8 ``text`` atomically; see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, obj: Any, mode: int | None = None) -> None:
    """Write ``obj`` as indented JSON atomically; see :func:`atomic_write_bytes`."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


def load_json(path: Path, keep_aside: bool = True) -> Any:
    """Read a JSON file.

    Returns:
        The parsed value, or ``None`` when the file does not exist.

    Raises:
        CorruptFileError: the file is not valid JSON. With ``keep_aside`` it is first renamed
            to ``<name>.corrupt-<unix time>`` so it is never silently overwritten.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        moved = None
        if keep_aside:
            moved = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            os.replace(path, moved)
        raise CorruptFileError(path, f"not valid JSON ({exc})", moved) from exc
