"""``python -m tuner.catalog scan|compat ...``: the catalog commands alone.

Same handlers as ``draftwise scan`` / ``draftwise compat``, without importing the other
packages' sub-commands, for scripts that call the scanner often (the process starts faster).
"""

from __future__ import annotations

import argparse
import sys

from tuner.cli.catalog import register


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run ``scan`` or ``compat``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tuner.catalog")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
