"""Atomic file writes and safe JSON loading, used by settings, profiles and caches.

A write goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the target, so a crash leaves either the old or the new file, never half.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from tuner.errors import DraftwiseError

_SPECIAL_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    """Plain words for what ``st_mode`` is: ``"a regular file"``, ``"a FIFO (named pipe)"``, ...."""
    if stat.S_ISREG(mode):
        return "a regular file"
    for test, words in _SPECIAL_KINDS:
        if test(mode):
            return words
    return "a special file"


class NotRegularFileError(DraftwiseError, OSError):
    """A path the project would read is a FIFO, socket, device or folder, not a regular file.
    ``path`` names it, ``kind`` says what it is (:func:`file_kind`). Subclass of ``OSError``, so
    every ``except OSError`` that reports a file it cannot read reports this one too."""

    def __init__(self, path: Path | str, kind: str) -> None:
        self.path = Path(path)
        self.kind = kind
        super().__init__(errno.EINVAL, f"not a regular file: it is {kind}", str(path))

    def __str__(self) -> str:
        return f"{self.path}: not a regular file (it is {self.kind})"


def open_regular(path: Path | str) -> BinaryIO:
    """Open ``path`` for binary reading only if it is a regular file, never blocking.

    The file is opened with ``O_NONBLOCK`` (opening a FIFO with no writer would otherwise wait
    forever), checked with ``fstat`` on the open descriptor (no race between the check and the
    read), and switched back to blocking reads. Every path the project reads (models, prompt
    files, key files, settings, caches, profiles) goes through this function.

    Returns:
        A binary file object positioned at 0 (the caller closes it).

    Raises:
        NotRegularFileError: a FIFO, socket, device or folder (naming which).
        OSError: the file cannot be opened (missing, permission, name too long, ...).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise NotRegularFileError(path, "a folder") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, file_kind(mode))
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: Path | str, limit_bytes: int | None = None) -> bytes:
    """The whole content of the regular file ``path`` (see :func:`open_regular`).

    Args:
        limit_bytes: refuse files larger than this (``OSError`` naming the size), or ``None``.

    Raises:
        NotRegularFileError: not a regular file.
        OSError: cannot be read, or larger than ``limit_bytes``.
    """
    with open_regular(path) as fh:
        if limit_bytes is not None:
            size = os.fstat(fh.fileno()).st_size
            if size > limit_bytes:
                raise OSError(errno.EFBIG, f"file is {size} bytes, more than the {limit_bytes} allowed", str(path))
            data = fh.read(limit_bytes + 1)
            if len(data) > limit_bytes:
                raise OSError(errno.EFBIG, f"file grew past the {limit_bytes} bytes allowed", str(path))
            return data
        return fh.read()


class CorruptFileError(DraftwiseError, ValueError):
    """A JSON file exists but cannot be parsed. ``path`` names it, ``moved_to`` is where it was kept aside."""

    def __init__(self, path: Path, reason: str, moved_to: Path | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.moved_to = moved_to
        where = f"; kept aside as {moved_to}" if moved_to else ""
        super().__init__(f"{path}: {reason}{where}")


def _state_base(path: Path) -> Path | None:
    """The Draftwise state folder (config, data, cache, logs) ``path`` lies in, or None."""
    from tuner import paths

    try:
        p = Path(path).absolute()
        for base in (paths.config_dir, paths.data_dir, paths.cache_dir, paths.log_dir):
            b = base().absolute()
            if p.is_relative_to(b):
                return b
    except (OSError, ValueError):
        return None
    return None


#: A temp file of an atomic write older than this was left by a killed process.
STALE_TEMP_AGE_S = 600.0


def _sweep_stale_temps(path: Path) -> None:
    """Remove ``.<name>.*.tmp`` files next to ``path`` older than ``STALE_TEMP_AGE_S`` (a write
    killed between its temp file and the rename leaves one; they would accumulate)."""
    now = time.time()
    try:
        for old in path.parent.glob(f".{path.name}.*.tmp"):
            try:
                if now - old.stat().st_mtime > STALE_TEMP_AGE_S:
                    old.unlink()
            except OSError:
                pass
    except OSError:
        pass


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
    from tuner.paths import ensure_private_dir

    base = _state_base(path)
    if base is not None:
        ensure_private_dir(base)  # Draftwise's own folders are owner-only, also when made by an older version
    ensure_private_dir(path.parent, fix_existing=base is not None)
    _sweep_stale_temps(path)
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


def keep_aside(path: Path, tag: str = "corrupt") -> Path:
    """Rename ``path`` to ``<name>.<tag>-<unix time>`` (a new name, never over another file) and
    return the new path, so a file Draftwise cannot use is never silently overwritten.

    Raises:
        OSError: the folder is not writable.
    """
    path = Path(path)
    stamp = int(time.time())
    moved = path.with_name(f"{path.name}.{tag}-{stamp}")
    n = 1
    while moved.exists():
        moved = path.with_name(f"{path.name}.{tag}-{stamp}-{n}")
        n += 1
    os.replace(path, moved)
    return moved


def parse_json_bytes(raw: bytes) -> Any:
    """Parse JSON from bytes (UTF-8, a leading UTF-8 byte-order mark accepted).

    Raises:
        ValueError: not UTF-8, not JSON, nested too deeply, or an integer too long to convert
            (the message says which).
    """
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ValueError(str(exc)) from None


def load_json(path: Path, keep_aside: bool = True) -> Any:
    """Read a JSON file (a UTF-8 byte-order mark is accepted).

    Returns:
        The parsed value, or ``None`` when the file does not exist.

    Raises:
        CorruptFileError: the file is not valid JSON. With ``keep_aside`` it is first renamed
            to ``<name>.corrupt-<unix time>`` so it is never silently overwritten.
        NotRegularFileError: the path is a FIFO, socket, device or folder.
        OSError: the file cannot be read.
    """
    path = Path(path)
    try:
        raw = read_regular_bytes(path)
    except FileNotFoundError:
        return None
    try:
        return parse_json_bytes(raw)
    except ValueError as exc:
        moved = None
        if keep_aside:
            moved = _keep_aside(path)
        raise CorruptFileError(path, f"not valid JSON ({exc})", moved) from exc


_keep_aside = keep_aside
