"""Where each llama-server's full log goes: one private file per launch, the oldest pruned."""

from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path

from tuner import paths

log = logging.getLogger(__name__)

#: Log files kept in the log folder (older ones are deleted when a new one is named).
MAX_LOG_FILES = 100


def new_log_path(port: int, folder: Path | None = None) -> Path:
    """The file for the log of a llama-server about to listen on ``port``:
    ``<folder>/llama-server-YYYYmmdd-HHMMSS-ffffff-<port>.log``.

    ``folder`` (default ``tuner.paths.log_dir()``) is made private (0700) and pruned to the newest
    :data:`MAX_LOG_FILES` server logs first (by modification time); a folder that cannot be made or
    pruned is logged at DEBUG and the path is returned anyway (the spawn then reports the error).
    """
    folder = folder or paths.log_dir()
    try:
        paths.ensure_private_dir(folder)
        logs = sorted(folder.glob("llama-server-*.log"), key=lambda p: p.stat().st_mtime)
        for old in logs[:-MAX_LOG_FILES]:
            old.unlink(missing_ok=True)
    except OSError:
        log.debug("cannot prune old server logs in %s", folder, exc_info=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return folder / f"llama-server-{stamp}-{port}.log"


__all__ = ["MAX_LOG_FILES", "new_log_path"]
