"""The ``draftwise`` command: headless front end over the same core as the GUI.

With no sub-command it starts the tray app (``tuner.app.main``). Each core package
contributes its sub-commands through a ``command.py`` module exposing
``register(subparsers) -> None``; each registered parser sets ``func`` to a callable
``func(args) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tuner import __version__

# Modules that contribute sub-commands, in help order. A module that is missing
# (e.g. a package not built yet) is skipped so the rest of the CLI keeps working.
COMMAND_MODULES = (
    "tuner.catalog.command",     # scan, compat
    "tuner.hardware.command",    # devices, plan
    "tuner.server.command",      # serve, doctor
    "tuner.calibration.command", # tune
    "tuner.packaging_command",   # install-desktop-entry, autostart
)

# Which module registers which sub-command. When the first argument names one of these,
# only that module is imported: `draftwise scan` must not pay for httpx, psutil or the
# calibration code at start-up (bench/scan_speed.py measures the whole command).
COMMAND_OWNERS = {
    "scan": "tuner.catalog.command",
    "compat": "tuner.catalog.command",
    "devices": "tuner.hardware.command",
    "plan": "tuner.hardware.command",
    "rpc-host": "tuner.hardware.command",
    "serve": "tuner.server.command",
    "doctor": "tuner.server.command",
    "tune": "tuner.calibration.command",
    "install-desktop-entry": "tuner.packaging_command",
    "autostart": "tuner.packaging_command",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser.

    Args:
        only: a sub-command name from ``COMMAND_OWNERS``; then only the module that owns it
            is imported and registered. ``None`` registers every sub-command (for ``--help``).
    """
    parser = argparse.ArgumentParser(
        prog="draftwise",
        description="Auto-tune speculative decoding for llama.cpp's llama-server. "
        "Run without a command to start the tray app.",
    )
    parser.add_argument("--version", action="version", version=f"draftwise {__version__}")
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
    parser = build_parser(only=argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        from tuner import app

        return app.main([])
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader went away (e.g. `draftwise scan DIR | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
