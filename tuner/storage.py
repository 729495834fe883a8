"""Atomic file writes and safe JSON loading, used by settings, profiles and caches.

A write goes to a temporary file in the same folder, is flushed and fsynced, then
renamed over the target, so a crash leaves either the old or the new file, never half.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from tuner.errors import DraftwiseError
from tuner.units import MIB, format_bytes

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


class FileTooLargeError(DraftwiseError, OSError):
    """A file is larger than what the project reads of its kind (a settings file, a profile, a cache). It is
    left as it is (neither read, moved nor rewritten). ``path``, ``size_bytes`` (at least; a file that grows
    while read says what was read), ``limit_bytes`` and ``what`` (``"a settings file"``) name it."""

    def __init__(self, path: Path | str, size_bytes: int, limit_bytes: int, what: str = "a file") -> None:
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes
        self.what = what
        super().__init__(errno.EFBIG, self.reason, str(path))

    @property
    def reason(self) -> str:
        """The words without the path: ``"512.0 MiB, larger than the 1.0 MiB a settings file may be; …"``."""
        return (f"{format_bytes(self.size_bytes)}, larger than the {format_bytes(self.limit_bytes)} {self.what} "
                "may be; it is left as it is, unread (move it away or make it smaller)")

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def read_regular_bytes(path: Path | str, limit_bytes: int | None = None, what: str = "a file") -> bytes:
    """The whole content of the regular file ``path`` (see :func:`open_regular`).

    Args:
        limit_bytes: refuse files larger than this, checked on the open file before anything is read (so a
            sparse file of 512 MiB costs no memory), and again while reading (a file that grows); ``None``:
            no limit.
        what: the file's kind in the error's words (``"a settings file"``).

    Raises:
        NotRegularFileError: not a regular file.
        FileTooLargeError: larger than ``limit_bytes`` (an ``OSError``).
        OSError: cannot be read.
    """
    with open_regular(path) as fh:
        if limit_bytes is not None:
            size = os.fstat(fh.fileno()).st_size
            if size > limit_bytes:
                raise FileTooLargeError(path, size, limit_bytes, what)
            data = fh.read(limit_bytes + 1)
            if len(data) > limit_bytes:
                raise FileTooLargeError(path, len(data), limit_bytes, what)
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
KEEP_COPIES = 5
"""How many of one file's copies kept aside (``settings.json.invalid-<time>``, ``<name>.corrupt-<time>``) and
of its temp files left by interrupted writes (``.settings.json.*.tmp``) are kept: the newest five."""
DEFAULT_JSON_LIMIT_BYTES = 64 * MIB
"""The most :func:`load_json` reads of a file whose caller names no limit of its own."""


def _newest_first(paths: list[Path]) -> list[Path]:
    """``paths`` that still exist, newest modification first (ties: the name, descending)."""
    dated = []
    for p in paths:
        try:
            dated.append((p.stat().st_mtime_ns, p.name, p))
        except OSError:
            continue
    return [p for _, _, p in sorted(dated, reverse=True)]


def prune_copies(path: Path, tag: str, keep: int = KEEP_COPIES) -> None:
    """Remove all but the newest ``keep`` of the copies ``<name>.<tag>-*`` kept aside next to ``path`` (each
    repair of a bad settings key keeps one; they piled up). Never raises."""
    path = Path(path)
    try:
        copies = [p for p in path.parent.glob(f"{glob.escape(path.name)}.{tag}-*") if p.is_file()]
    except OSError:
        return
    for p in _newest_first(copies)[keep:]:
        try:
            p.unlink()
        except OSError:
            continue


def _sweep_stale_temps(path: Path) -> None:
    """Remove the ``.<name>.*.tmp`` files next to ``path`` that a write killed between its temp file and the
    rename left: every one older than ``STALE_TEMP_AGE_S``, and all but the newest ``KEEP_COPIES`` (so they
    never pile up; a write in progress elsewhere is among the newest)."""
    now = time.time()
    try:
        temps = _newest_first(list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp")))
    except OSError:
        return
    for i, p in enumerate(temps):
        try:
            if i >= KEEP_COPIES or now - p.stat().st_mtime > STALE_TEMP_AGE_S:
                p.unlink()
        except OSError:
            continue


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


def aside_name(path: Path, tag: str) -> Path:
    """A new name ``<name>.<tag>-<unix time>`` next to ``path`` for a copy kept aside; a later copy in the same
    second is ``…-<time>-<n>``, ``n`` above any such copy there (so names never repeat after a prune)."""
    path = Path(path)
    stamp = int(time.time())
    first = path.with_name(f"{path.name}.{tag}-{stamp}")
    try:
        taken = [p.name for p in path.parent.glob(f"{glob.escape(first.name)}*")]
    except OSError:
        taken = []
    if not taken and not first.exists():
        return first
    numbers = [int(n) for n in (t[len(first.name) + 1:] for t in taken) if n.isdigit()]
    n = max(numbers, default=0) + 1
    moved = path.with_name(f"{first.name}-{n}")
    while moved.exists():
        n += 1
        moved = path.with_name(f"{first.name}-{n}")
    return moved


def keep_aside(path: Path, tag: str = "corrupt") -> Path:
    """Rename ``path`` to ``<name>.<tag>-<unix time>`` (a new name, never over another file) and
    return the new path, so a file Draftwise cannot use is never silently overwritten. Only the newest
    :data:`KEEP_COPIES` such copies are kept (:func:`prune_copies`).

    Raises:
        OSError: the folder is not writable.
    """
    moved = aside_name(path, tag)
    os.replace(path, moved)
    prune_copies(path, tag)
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


def load_json(path: Path, keep_aside: bool = True, limit_bytes: int = DEFAULT_JSON_LIMIT_BYTES,
              what: str = "a state file") -> Any:
    """Read a JSON file (a UTF-8 byte-order mark is accepted).

    Args:
        limit_bytes: the most this kind of file may hold (settings 1 MiB, a profile 32 MiB, the scan cache
            64 MiB); a larger file is refused before anything is read.
        what: the file's kind in the error's words.

    Returns:
        The parsed value, or ``None`` when the file does not exist.

    Raises:
        CorruptFileError: the file is not valid JSON. With ``keep_aside`` it is first renamed
            to ``<name>.corrupt-<unix time>`` so it is never silently overwritten.
        FileTooLargeError: larger than ``limit_bytes``; left where it is.
        NotRegularFileError: the path is a FIFO, socket, device or folder.
        OSError: the file cannot be read.
    """
    path = Path(path)
    try:
        raw = read_regular_bytes(path, limit_bytes=limit_bytes, what=what)
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
