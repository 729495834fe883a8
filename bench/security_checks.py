"""Security checks too slow for the suite, on the real llama-server and stories260K.

1. ``draftwise serve --api-key-file F`` stopped during start-up, ``--trials`` times with SIGTERM
   and as many with SIGINT, at a random moment in the first 2 s: counts key files left behind
   (``/tmp/draftwise-api-key-*``, ``data_dir()/run``) and children left alive (the issue measured 7
   files in 15 trials before the memfd hand-off).
2. The same with SIGKILL, then one normal ``serve`` start: files left after the next start.
3. The same SIGTERM trials with the memfd disabled (``DRAFTWISE_TEST_NO_MEMFD=1`` makes a child
   use the fallback file): the file path of the hand-off, for comparison.

Exit 1 when a key file or a child process is left after any SIGTERM/SIGINT trial or after the
start that follows the kill -9 trials.

Usage: ``python -m bench.security_checks [--trials 15] [--server PATH]``
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, add_server_arg, note_machine, server_binary, stories_model

# Run as a child with the memfd disabled (check 3): ``python -m bench.security_checks --child-no-memfd ARGS``.
if len(sys.argv) > 1 and sys.argv[1] == "--child-no-memfd":
    if hasattr(os, "memfd_create"):
        del os.memfd_create
    from tuner.cli import main as _cli_main

    sys.exit(_cli_main(sys.argv[2:]))


def _key_files(home: Path) -> list[Path]:
    out = list(Path(tempfile.gettempdir()).glob("draftwise-api-key-*"))
    run = home / "data" / "run"
    if run.is_dir():
        out += list(run.glob("draftwise-api-key-*"))
    return out


def _trial(cmd: list[str], env: dict, sig: int, delay_s: float) -> tuple[set[int], int | None]:
    import psutil

    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    kids: set[int] = set()
    t_end = time.monotonic() + delay_s
    while time.monotonic() < t_end:
        try:
            kids |= {c.pid for c in psutil.Process(p.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        time.sleep(0.03)
    p.send_signal(sig)
    try:
        rc = p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    time.sleep(0.3)
    alive = {k for k in kids if psutil.pid_exists(k) and psutil.Process(k).status() != psutil.STATUS_ZOMBIE}
    return alive, rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=15)
    add_server_arg(ap)
    args = ap.parse_args(argv)
    server = server_binary(args).path
    stories = stories_model()
    note_machine("before")
    rng = random.Random(16)
    failed = False
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        model = tmp / "stories260K.gguf"
        shutil.copyfile(stories, model)
        key = tmp / "key.txt"
        key.write_text("dw-" + os.urandom(8).hex() + "\n")
        key.chmod(0o600)
        home = tmp / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        env.update(DRAFTWISE_HOME=str(home), PYTHONPATH=str(REPO))
        serve = ["serve", "--target", str(model), "--ctx", "256", "--api-key-file", str(key), "--server", str(server)]
        before = set(_key_files(home))
        for label, prefix in (("memfd hand-off", [sys.executable, "-m", "tuner"]),
                              ("fallback file (no memfd)", [sys.executable, "-m", "bench.security_checks",
                                                            "--child-no-memfd"])):
            for sig in (signal.SIGTERM, signal.SIGINT):
                left_files = left_kids = 0
                t0 = time.monotonic()
                for _ in range(args.trials):
                    alive, _rc = _trial(prefix + serve, env, sig, rng.uniform(0.2, 2.0))
                    left = set(_key_files(home)) - before
                    left_files += len(left)
                    left_kids += len(alive)
                    for f in left:
                        f.unlink(missing_ok=True)
                bad = left_files or left_kids
                failed |= bool(bad)
                print(f"{label:26s} {signal.Signals(sig).name:7s} x{args.trials}: {left_files} key files left, "
                      f"{left_kids} children left ({time.monotonic() - t0:.0f} s){'  FAIL' if bad else ''}")
            # kill -9 during start-up, then one normal start: what is left after that start
            left_after_kill: set[Path] = set()
            for _ in range(max(3, args.trials // 3)):
                _trial(prefix + serve, env, signal.SIGKILL, rng.uniform(0.2, 2.0))
                left_after_kill |= set(_key_files(home)) - before
            alive, _rc = _trial(prefix + serve, env, signal.SIGTERM, 3.0)  # the next start sweeps
            left_next = set(_key_files(home)) - before
            failed |= bool(left_next)
            print(f"{label:26s} SIGKILL x{max(3, args.trials // 3)}: {len(left_after_kill)} key files right after "
                  f"the kills; {len(left_next)} left after the next start{'  FAIL' if left_next else ''}")
            for f in left_next:
                f.unlink(missing_ok=True)
    note_machine("after")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
