"""CLI: ``draftwise demo DIR [--json]``: write the demo folder for a first headless session.

The folder holds the bundled stories260K (a real tiny model) and a generated target + draft pair
(:mod:`tuner.catalog.demo`: "generated demo models: their text is noise, their speedup is real") on which
``draftwise tune --models DIR`` finds a draft faster than the model alone. Progress goes to stderr; the
report (or with ``--json`` one object) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.cli.options import folder_problem
from tuner.units import format_bytes


def register(subparsers) -> None:
    """Add the ``demo`` sub-command to the ``draftwise`` parser."""
    p = subparsers.add_parser(
        "demo",
        help="write the demo models (stories260K and a generated target + draft pair) into a folder",
        description="Write DIR/stories260K.gguf (the bundled tiny model) and a generated target + draft pair "
        "(about 200 MB; generated demo models: their text is noise, their speedup is real), then try "
        "'draftwise scan DIR' and 'draftwise tune --models DIR'. Files already there and up to date are kept.",
    )
    p.add_argument("dir", metavar="DIR", help="folder to write (created when missing)")
    p.add_argument("--json", action="store_true", help='print {"folder", "bundled", "target", "draft", "generated"}')
    p.set_defaults(func=run_demo)


class _ProgressLine:
    """Prints ``generating …  NN %`` on stderr, one line per 10 %, or a carriage-return line on a terminal."""

    def __init__(self) -> None:
        self.last = -1
        self.tty = sys.stderr.isatty()

    def __call__(self, p) -> None:
        pct = int(100 * p.fraction)
        step = pct if self.tty else pct // 10 * 10
        if step == self.last:
            return
        self.last = step
        text = f"generating {p.file_name}: {pct:3d} % of {format_bytes(p.total_bytes)}"
        if self.tty:
            sys.stderr.write("\r" + text + ("\n" if pct >= 100 else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def run_demo(args: argparse.Namespace) -> int:
    """Write the demo folder. Exit status 0; 2 for an empty DIR or one that is a file; a
    :class:`tuner.catalog.demo.DemoError` is one line on stderr (status 1, 2 for a bad DIR)."""
    from tuner.catalog import demo

    problem = folder_problem(args.dir, "DIR")
    if problem:
        print(f"draftwise demo: {problem}", file=sys.stderr)
        return 2
    result = demo.write_demo_folder(Path(args.dir).expanduser(), progress=_ProgressLine())
    if args.json:
        print(json.dumps({"folder": str(result.folder), "bundled": str(result.bundled), "target": str(result.target),
                          "draft": str(result.draft), "generated": result.generated}))
        return 0
    kept = "" if result.generated else " (the generated pair was already there and up to date)"
    print(f"Demo folder {result.folder}{kept}:")
    print(f"  {result.bundled.name:<28} the bundled model: real (a tiny story writer), with no draft of its own")
    print(f"  {result.target.name:<28} target: {demo.DEMO_LABEL}")
    print(f"  {result.draft.name:<28} its draft: the target's first blocks, so it often predicts the target")
    print("Next:")
    print(f"  draftwise scan {result.folder}")
    print(f"  draftwise tune --models {result.folder}")
    print(f"  draftwise serve --models {result.folder}")
    return 0
