"""How the served endpoint's API key reaches llama-server without touching its command line.

llama-server reads ``--api-key-file PATH`` once at start (common/arg.cpp, the ``--api-key-file`` handler
opens it with ``std::ifstream``). On Linux the path is ``/dev/fd/N`` of an anonymous memory file the child
inherits (``os.memfd_create``): nothing is written to disk, so no exit path (kill -9 included) leaves the
key behind. Elsewhere it is a private file (mode 0600) in ``data_dir()/run`` (0700), named with the
writing process's pid, removed as soon as the server has read it and on stop; a file left by a process
killed in between is deleted by :func:`sweep_stale_key_files` when the next supervisor is created.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tuner import paths, process

#: Prefix of the fallback key files (only where no memfd exists: not Linux).
KEY_FILE_PREFIX = "draftwise-api-key-"


@dataclass(eq=False)
class KeyHandoff:
    """One key hand-off: ``path`` is what goes on the argv; ``fd`` the descriptor the child inherits
    (``/dev/fd/N`` of a memfd: never on disk), or ``file`` a private file (mode 0600) removed as soon as
    the server has read it, on stop, and by :func:`sweep_stale_key_files` after a kill -9."""

    path: Path
    fd: int | None = None
    file: Path | None = None

    def close_parent_side(self) -> None:
        """After the spawn: our copy of the fd is not needed (the child has its own)."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def remove(self) -> None:
        """Close the fd and delete the file (both idempotent)."""
        self.close_parent_side()
        if self.file is not None:
            self.file.unlink(missing_ok=True)
            self.file = None


def _key_dir() -> Path:
    return paths.ensure_private_dir(paths.data_dir() / "run")


def write_key_file(key: str) -> KeyHandoff:
    """Hand ``key`` to the child for ``--api-key-file``: a memfd (``/dev/fd/N``) on Linux, else a file
    ``KEY_FILE_PREFIX<pid>-*.txt`` (mode 0600) in the private folder ``data_dir()/run`` (0700).

    Raises:
        OSError: neither could be created.
    """
    data = (key + "\n").encode("utf-8")
    if hasattr(os, "memfd_create") and Path("/dev/fd").is_dir():
        try:
            fd = os.memfd_create("draftwise-api-key", 0)  # not inheritable until passed explicitly
        except OSError:
            fd = None
        if fd is not None:
            os.write(fd, data)
            return KeyHandoff(Path(f"/dev/fd/{fd}"), fd=fd)
    fd, name = tempfile.mkstemp(prefix=f"{KEY_FILE_PREFIX}{os.getpid()}-", suffix=".txt", dir=_key_dir())
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return KeyHandoff(Path(name), file=Path(name))


def remove_key_file(handoff: KeyHandoff | None) -> None:
    """Release a key hand-off from :func:`write_key_file` (None is fine)."""
    if handoff is not None:
        handoff.remove()


def _stale(f: Path) -> bool:
    """True when key file ``f`` belongs to no running process (or, named the old way without a pid,
    is older than a minute)."""
    pid_text = f.name[len(KEY_FILE_PREFIX):].split("-", 1)[0]
    if pid_text.isdigit():
        return not process.process_exists(int(pid_text))
    try:
        return time.time() - f.stat().st_mtime >= 60
    except OSError:
        return False


def sweep_stale_key_files(folder: Path | None = None) -> list[Path]:
    """Delete fallback key files left by a Draftwise process that no longer runs (killed with
    SIGKILL between writing the file and the server reading it); returns what was deleted. Called
    when a supervisor is created. Files of running processes are left alone.

    Args:
        folder: where to look (default: ``data_dir()/run`` and the temporary folder).
    """
    gone: list[Path] = []
    folders = [folder] if folder is not None else [paths.data_dir() / "run", Path(tempfile.gettempdir())]
    for d in folders:
        try:
            candidates = list(d.glob(f"{KEY_FILE_PREFIX}*.txt"))
        except OSError:
            continue
        for f in candidates:
            if not _stale(f):
                continue
            try:
                f.unlink()
                gone.append(f)
            except OSError:
                pass
    return gone


__all__ = ["KEY_FILE_PREFIX", "KeyHandoff", "remove_key_file", "sweep_stale_key_files", "write_key_file"]
