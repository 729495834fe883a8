"""A wrapper llama-server that crashes like a CPU whose AMX kernels trap, unless ``--no-repack`` is given.

Usage (tests make an executable shell script around it, :func:`make_trap_server`)::

    amx_trap_server.py REAL_LLAMA_SERVER MODE STATE_DIR -- llama-server arguments...

``--help``, ``--version`` and ``--list-devices`` always run the real server (so the flag dialect is the
real one). Otherwise, by MODE:

    sigill          --no-repack: exec the real server; else print the recorded trap log and die by SIGILL
    sigsegv         the same with SIGSEGV (a retry unchanged crashes the same way)
    sigbus          the same with SIGBUS
    sigsegv-once    SIGSEGV on the first launch only (STATE_DIR counts launches), then the real server
    sigill-always   SIGILL also with --no-repack (a build that uses instructions the CPU lacks)
    sigsegv-always  SIGSEGV also with --no-repack (a damaged file or a llama.cpp bug)

The trap log is the real recording in tests/server/data/amx-trap/trap-llama-server.txt. Every launch
appends its argv to STATE_DIR/launches.txt (one line, tab-separated), so tests can read what ran.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

TRAP_LOG = Path(__file__).resolve().parent.parent / "server" / "data" / "amx-trap" / "trap-llama-server.txt"
SIGNALS = {"sigill": signal.SIGILL, "sigsegv": signal.SIGSEGV, "sigbus": signal.SIGBUS,
           "sigsegv-once": signal.SIGSEGV, "sigill-always": signal.SIGILL, "sigsegv-always": signal.SIGSEGV}
PASS_THROUGH = {"-h", "--help", "--usage", "--version", "--list-devices"}


def make_trap_server(folder: Path, real_server: Path, mode: str) -> Path:
    """Write ``folder/llama-server``, an executable that runs this wrapper in ``mode`` around
    ``real_server`` (its state goes to ``folder/state``); returns its path."""
    if mode not in SIGNALS:
        raise ValueError(f"unknown mode {mode!r}: one of {', '.join(SIGNALS)}")
    state = folder / "state"
    state.mkdir(parents=True, exist_ok=True)
    exe = folder / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "{real_server}" {mode} '
                   f'"{state}" -- "$@"\n', encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def launches(folder: Path) -> list[list[str]]:
    """The argv of every launch (not ``--help`` probes) the wrapper in ``folder`` saw, oldest first."""
    f = folder / "state" / "launches.txt"
    if not f.is_file():
        return []
    return [line.split("\t") for line in f.read_text(encoding="utf-8").splitlines() if line]


def _die(sig: int) -> None:
    """Print the recorded log, then die by ``sig`` without leaving a core file."""
    for line in TRAP_LOG.read_text(encoding="utf-8").splitlines():
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:  # a non-dumpable process writes no core, whatever core_pattern says
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


def main(argv: list[str]) -> int:
    real, mode, state = argv[0], argv[1], Path(argv[2])
    args = argv[argv.index("--") + 1:]
    if PASS_THROUGH & set(args):
        os.execv(real, [real, *args])
    with open(state / "launches.txt", "a", encoding="utf-8") as fh:
        fh.write("\t".join(args) + "\n")
    n = len(launches(state.parent))
    cured = "--no-repack" in args or "-nr" in args
    crash = (mode.endswith("-always") or (mode == "sigsegv-once" and n == 1)
             or (mode in ("sigill", "sigsegv", "sigbus") and not cured))
    if crash:
        _die(SIGNALS[mode])
        return 1  # not reached
    os.execv(real, [real, *args])
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
