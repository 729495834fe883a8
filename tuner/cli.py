"""The ``draftwise`` command: headless front end over the same core as the GUI.

With no sub-command it starts the tray app (``tuner.app.main``). Each core package
contributes its sub-commands through a ``command.py`` module exposing
``register(subparsers) -> None``; each registered parser sets ``func`` to a callable
``func(args) -> int`` (the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tuner import __version__

# Modules that contribute sub-commands, in help order. A module that is missing
# (e.g. a package not built yet) is skipped so the rest of the CLI keeps working.
COMMAND_MODULES = (
    "tuner.catalog.command",     # scan, compat
    "tuner.hardware.command",    # devices, plan
    "tuner.server.command",      # serve, doctor
    "tuner.calibration.command", # tune
    "tuner.packaging_command",   # install-desktop-entry
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser (all sub-commands registered)."""
    parser = argparse.ArgumentParser(
        prog="draftwise",
        description="Auto-tune speculative decoding for llama.cpp's llama-server. "
        "Run without a command to start the tray app.",
    )
    parser.add_argument("--version", action="version", version=f"draftwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        from tuner import app

        return app.main([])
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
