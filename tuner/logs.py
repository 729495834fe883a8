"""Draftwise's own log: the standard ``logging`` module, one rotating file under the state directory.

Every entry point calls :func:`setup_logging` once (the CLI with ``--verbose`` for debug lines on
stderr too, the app at start-up). Modules log through ``logging.getLogger(__name__)``; a swallowed
exception is logged with ``log.exception`` / ``exc_info=True`` so a bug report can carry its traceback.
Uncaught exceptions of the main thread and of worker threads go to the file as well.

What never reaches the log: API keys (a filter masks ``--api-key X``, ``Authorization: Bearer X`` and
``api_key=X`` shapes in every record, in case one slips into a message or an argv) and prompt texts
(nothing logs them; the sweep logs prompt indexes and categories only).
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import re
import sys
import threading
from pathlib import Path
from types import TracebackType

from tuner import paths
from tuner.safetext import safe_text

LOG_FILE_NAME = "draftwise.log"
MAX_LOG_BYTES = 1 * 1024 * 1024
"""Size at which the file is rotated (bytes); :data:`BACKUP_COUNT` old files are kept."""
BACKUP_COUNT = 3

_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
_SECRET = re.compile(
    r"(?P<pre>(--api-key[ =]|Bearer\s+|api[_-]?key[\"']?\s*[:=]\s*[\"']?))(?P<secret>[^\s\"',]+)",
    re.IGNORECASE,
)
_lock = threading.Lock()
_file_handler: logging.Handler | None = None


def log_path() -> Path:
    """The log file: ``tuner.paths.log_dir() / "draftwise.log"`` (``DRAFTWISE_HOME`` redirects it)."""
    return paths.log_dir() / LOG_FILE_NAME


def redact(text: str) -> str:
    """``text`` with every API-key-shaped value replaced by ``***``."""
    return _SECRET.sub(lambda m: m.group("pre") + "***", text)


class _RedactFilter(logging.Filter):
    """Masks secrets in the formatted message and in the exception text of each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A :class:`~logging.handlers.RotatingFileHandler` whose files are owner-only (mode 0600) whatever the
    umask: the log sits in a 0700 folder but holds paths, argv and server output of this user. The current
    file is created (or tightened, when an older version left it 0644) at every open; the rotated files
    ``draftwise.log.1`` … are renames of it and keep its mode (older ones are tightened at set-up)."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.name == "posix":
                os.fchmod(fd, 0o600)
            return open(fd, "a", encoding=self.encoding, errors=self.errors)  # the handler keeps and closes it
        except BaseException:
            os.close(fd)
            raise


def _tighten_rotated(base: Path) -> None:
    """Mode 0600 for ``draftwise.log.1`` … ``.BACKUP_COUNT`` left by an older version (we own them)."""
    if os.name != "posix":
        return
    for i in range(1, BACKUP_COUNT + 1):
        try:
            os.chmod(f"{base}.{i}", 0o600)
        except OSError:
            continue


class _RedactFormatter(logging.Formatter):
    """Masks secrets, and shows text from files and child processes safely (:func:`tuner.safetext.safe_text`):
    the message is one line whatever it holds (a newline or an escape sequence in a file name is written
    ``\\n``, ``\\x1b``; a byte of a non-UTF-8 file name ``\\xff``, so writing the record never fails); a
    traceback keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = safe_text(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        return redact(safe_text(super().format(record), keep="\n"))


class _ConsoleFormatter(_RedactFormatter):
    """The ``--verbose`` stderr lines: a debug or info record that carries a traceback (an expected,
    handled failure such as no NVIDIA driver) prints its one line and says the traceback is in the log
    file; warnings and errors keep theirs on the terminal as well."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING or not (record.exc_info or record.exc_text):
            return super().format(record)
        short = logging.makeLogRecord(record.__dict__)
        short.exc_info = None
        short.exc_text = None
        short.stack_info = None
        return super().format(short) + " (traceback in the log file)"


def setup_logging(verbose: bool = False, stderr: bool | None = None) -> Path:
    """Attach the rotating file handler to the ``tuner`` logger (idempotent) and return the file's path.
    The file and its rotated copies are mode 0600 in a 0700 folder.

    Args:
        verbose: log debug lines (the CLI's ``--verbose``); otherwise info and above.
        stderr: also print records on stderr (default: when ``verbose``); warnings and errors of the
            core are printed by the front ends themselves, so the default stays quiet.

    Never raises: a log folder that cannot be created leaves the file out (the reason goes to stderr
    through logging's last-resort handler).
    """
    global _file_handler
    logger = logging.getLogger("tuner")
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    with _lock:
        if _file_handler is None or Path(getattr(_file_handler, "baseFilename", "")) != log_path():
            if _file_handler is not None:
                logger.removeHandler(_file_handler)
                _file_handler.close()
                _file_handler = None
            try:
                folder = paths.ensure_private_dir(paths.log_dir())
                handler = _PrivateRotatingFileHandler(
                    folder / LOG_FILE_NAME, maxBytes=MAX_LOG_BYTES, backupCount=BACKUP_COUNT, encoding="utf-8",
                    errors="backslashreplace")
                _tighten_rotated(folder / LOG_FILE_NAME)
                handler.setFormatter(_RedactFormatter(_FORMAT))
                handler.addFilter(_RedactFilter())
                logger.addHandler(handler)
                _file_handler = handler
            except OSError as exc:  # no handler yet: logging's last resort prints this on stderr
                logger.warning("cannot write the log file under %s: %s", paths.log_dir(), exc)
        if (verbose if stderr is None else stderr) and not any(
                getattr(h, "_draftwise_stderr", False) for h in logger.handlers):
            console = logging.StreamHandler(sys.stderr)
            console.setFormatter(_ConsoleFormatter("draftwise: %(levelname)s %(name)s: %(message)s"))
            console._draftwise_stderr = True  # type: ignore[attr-defined]
            logger.addHandler(console)
    _install_hooks()
    return log_path()


def _install_hooks() -> None:
    """Uncaught exceptions (main thread and worker threads) are logged, then handled as before."""
    if getattr(sys.excepthook, "_draftwise", False):
        return
    previous_sys, previous_thread = sys.excepthook, threading.excepthook

    def sys_hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            logging.getLogger("tuner").critical("uncaught exception", exc_info=(exc_type, exc, tb))
        previous_sys(exc_type, exc, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit and args.exc_value is not None:
            name = args.thread.name if args.thread is not None else "?"
            logging.getLogger("tuner").critical(
                "uncaught exception in thread %s", name, exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        previous_thread(args)

    sys_hook._draftwise = True  # type: ignore[attr-defined]
    sys.excepthook = sys_hook
    threading.excepthook = thread_hook


__all__ = ["LOG_FILE_NAME", "log_path", "redact", "setup_logging"]
