"""The ``draftwise`` command: headless front end over the same core as the GUI.

With no sub-command it starts the tray app (``tuner.app.main``). The command-line glue lives in this
package, above the core: one module per command group (``catalog``, ``hardware``, ``serve``, ``tune``,
``packaging``, ``demo``), each exposing ``register(subparsers) -> None``; each registered parser sets ``func`` to a
callable ``func(args) -> int`` (the exit status). Only this package and ``tuner.ui`` parse arguments or
print to the terminal; the core packages below never import from here (import-linter contracts in
``pyproject.toml``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
import traceback
from typing import NoReturn, TextIO, cast

from tuner import __version__
from tuner.errors import DraftwiseError
from tuner.safetext import SafeStream, error_text, safe_text

# Modules that contribute sub-commands, in help order. A module that is missing
# (e.g. a package not built yet) is skipped so the rest of the CLI keeps working.
COMMAND_MODULES = (
    "tuner.cli.catalog",    # scan, compat
    "tuner.cli.hardware",   # devices, plan
    "tuner.cli.serve",      # serve, doctor
    "tuner.cli.tune",       # tune
    "tuner.cli.packaging",  # install-desktop-entry, autostart
    "tuner.cli.demo",       # demo
)

# Which module registers which sub-command. When the first argument names one of these,
# only that module is imported: `draftwise scan` must not pay for httpx, psutil or the
# calibration code at start-up (bench/scan_speed.py measures the whole command).
COMMAND_OWNERS = {
    "scan": "tuner.cli.catalog",
    "compat": "tuner.cli.catalog",
    "devices": "tuner.cli.hardware",
    "plan": "tuner.cli.hardware",
    "rpc-host": "tuner.cli.hardware",
    "serve": "tuner.cli.serve",
    "doctor": "tuner.cli.serve",
    "tune": "tuner.cli.tune",
    "install-desktop-entry": "tuner.cli.packaging",
    "autostart": "tuner.cli.packaging",
    "demo": "tuner.cli.demo",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors for a bad value (``draftwise tune: error: argument --budget: invalid float
    value: 'abc'``); an unknown flag or a missing required one still shows the command's usage, which lists the
    flags it takes. Sub-command parsers are of this class too (``add_subparsers`` uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith(("unrecognized arguments", "the following arguments are required")):
            super().error(message)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser.

    Args:
        only: a sub-command name from ``COMMAND_OWNERS``; then only the module that owns it
            is imported and registered. ``None`` registers every sub-command (for ``--help``).
    """
    parser = _Parser(
        prog="draftwise",
        description="Auto-tune speculative decoding for llama.cpp's llama-server. "
        "Run without a command to start the tray app.",
    )
    parser.add_argument("--version", action="version", version=f"draftwise {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="debug lines on stderr and in the log file (accepted anywhere on the line)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = (COMMAND_OWNERS[only],) if only in COMMAND_OWNERS else COMMAND_MODULES
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The sub-command's own parser (``parser`` itself without one)."""
    for action in parser._actions:  # argparse has no public accessor for its sub-parsers
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``draftwise`` console script; returns the exit status."""
    if argv is None:
        argv = sys.argv[1:]
    for stream in (sys.stdout, sys.stderr):
        # a file name that is not valid UTF-8 (kept as surrogates by the file system encoding) is
        # printed escaped instead of raising UnicodeEncodeError in the middle of a table
        if hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    verbose = "--verbose" in argv
    argv = [a for a in argv if a != "--verbose"]  # a global flag, accepted after the sub-command too
    parser = build_parser(only=argv[0] if argv else None)
    wants_json = "--json" in argv
    raw_stderr = sys.stderr
    watch = _ErrorLineTee(cast(TextIO, SafeStream(raw_stderr)), None)
    sys.stderr = watch
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the sub-command's parser, so its usage is shown, not the top-level one
            _command_parser(parser, getattr(args, "command", None)).error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse: --help / --version (0) or a usage error (2, its line on stderr)
        code = exc.code if isinstance(exc.code, int) else 2
        if wants_json and code != 0:
            _json_error(watch.last_error(argv[0] if argv else ""), code)
        raise
    finally:
        if sys.stderr is watch:
            sys.stderr = raw_stderr
    from tuner.logs import setup_logging

    log_file = setup_logging(verbose=verbose)
    log = logging.getLogger("tuner.cli")
    log.info("draftwise %s %s", __version__, " ".join(argv[:1]))
    if not getattr(args, "command", None):
        from tuner import app

        return app.main([])
    tee = _ErrorLineTee(watch.stream, log)  # the terminal's stderr, escaping (tuner.safetext.SafeStream)
    sys.stderr = tee
    # stdout for people escapes what a writer left unescaped; --json stays exact JSON (its own escapes)
    raw_stdout = sys.stdout
    out = _StdoutWatch(raw_stdout) if getattr(args, "json", False) else None
    sys.stdout = cast(TextIO, out or SafeStream(raw_stdout))
    rc = 1
    message: str | None = None
    try:
        rc = int(args.func(args) or 0)
        if rc not in (0, 130):
            log.warning("%s exited with status %d", args.command, rc)
        return rc
    except DraftwiseError as exc:
        # an expected failure (a bad file, flag or binary): one line naming it, no traceback
        log.info("%s failed: %s", args.command, exc, exc_info=True)
        sys.stderr.write(f"draftwise {args.command}: {safe_text(exc)}\n")
        for line in tuple(getattr(exc, "evidence", ()))[-10:]:
            sys.stderr.write(f"    {safe_text(line)}\n")
        rc = 2 if getattr(exc, "bad_input", False) else 1
        return rc
    except BrokenPipeError:
        # The reader went away (e.g. `draftwise scan DIR | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        rc = 141
        return rc
    except KeyboardInterrupt:
        rc, message = 130, "interrupted"
        return rc
    except Exception as exc:
        if isinstance(exc, OSError) and exc.filename is not None:
            # a file the command was given or reached cannot be used (a name longer than the system allows,
            # a folder it may not read, ...): one line naming it; a bad path given is bad input
            log.info("%s failed: %s", args.command, exc, exc_info=True)
            sys.stderr.write(f"draftwise {args.command}: {error_text(exc)}\n")
            rc = 2 if exc.errno in PATH_INPUT_ERRNOS else 1
            return rc
        # a bug of ours: the traceback, and where the log (which has it too) is for a bug report
        log.exception("%s crashed", args.command)
        traceback.print_exc()
        sys.stderr.write(f"draftwise {args.command}: this is a bug; the log is {log_file}\n")
        rc = 1
        return rc
    finally:
        if sys.stderr is tee:
            sys.stderr = raw_stderr
        sys.stdout = raw_stdout
        if out is not None and rc not in (0, 141) and not out.written:
            _json_error(message or tee.last_error(args.command), rc)


PATH_INPUT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES,
                               errno.EISDIR, errno.EPERM})
"""The ``OSError`` numbers that mean the path itself is unusable (missing, too long, a link loop, not
permitted): exit status 2 (bad input) when a command stops on one; any other ``OSError`` is exit 1."""


def _json_error(message: str | None, status: int) -> None:
    """With ``--json``, a failed command that printed nothing on stdout prints one JSON object there::

        {"error": "<the one-line error, without the 'draftwise CMD: ' prefix>",
         "code": "bad_input" (exit status 2) | "failed" (1) | "interrupted" (130) | "error" (other),
         "exit_status": <int>}

    The same line still goes to stderr (and the log)."""
    import json

    code = {2: "bad_input", 1: "failed", 130: "interrupted"}.get(status, "error")
    sys.stdout.write(json.dumps({"error": message or f"exit status {status}", "code": code,
                                 "exit_status": status}) + "\n")
    sys.stdout.flush()


class _StdoutWatch:
    """stdout for a ``--json`` command: passes everything through and remembers whether anything was written."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.written = False

    def write(self, text: str) -> int:
        if text:
            self.written = True
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


class _ErrorLineTee:
    """stderr for the duration of a command: everything goes to the terminal as before, and each complete
    line that starts with ``draftwise`` (the commands' one-line errors and warnings, e.g. ``draftwise tune:
    --models /nope: no such folder``) is also written to the log (``log``; ``None``: not logged), so a bug
    report carries it; the last such line is kept for a ``--json`` error object (:meth:`last_error`)."""

    def __init__(self, stream: TextIO, log: logging.Logger | None) -> None:
        self.stream = stream
        self._log = log
        self._partial = ""
        self._last: str | None = None

    def write(self, text: str) -> int:
        n = self.stream.write(text)
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if line.startswith("draftwise"):
                self._last = line
                if self._log is not None:
                    self._log.warning("%s", line)
        self._partial = self._partial[-4096:]
        return n

    def last_error(self, command: str) -> str | None:
        """The last ``draftwise …`` line written, without its ``draftwise COMMAND:`` prefix (and argparse's
        ``error:``); None if none."""
        if self._last is None:
            return None
        line = self._last
        for prefix in ((f"draftwise {command}:",) if command else ()) + ("draftwise:",):
            if line.startswith(prefix):
                line = line[len(prefix):]
                break
        line = line.strip()
        return line.removeprefix("error:").strip()

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding, …: the real stream's
        return getattr(self.stream, name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
