"""How light is the tray app while it serves? (issue 6: < 1 % of one core, < 250 MB RSS)

Starts the real app in a child process (offscreen Qt, a private DRAFTWISE_HOME), lets it
"Tune & serve" the bundled stories260K demo model with the real llama-server, hides the window,
and keeps telemetry polling at 1 Hz (/metrics, psutil, NVML). Then it samples the *app* process
only (llama-server, its child, is excluded) once per second for ``--seconds`` (default 60):
CPU time used ÷ wall time (in % of one core) and resident memory.

Optionally ``--requests-every S`` sends one short completion every S seconds so the graphs have
data to draw (the server's CPU is not counted; the app's share of that work is).

Usage::

    python -m bench.app_overhead                 # 60 s, idle server
    python -m bench.app_overhead --seconds 60 --requests-every 5 [--server PATH]

Prints a JSON line with the figures and exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import REPO, add_server_arg, note_machine, server_binary, stories_model
from tuner.process import free_port

CPU_GOAL_PCT = 1.0
RSS_GOAL_MB = 250.0

DRIVER = r"""
import os, sys, time
from pathlib import Path
from tuner import app as app_mod
from tuner.settings import Settings
from tuner.ui.state import AppState
from PySide6.QtCore import QTimer

a = app_mod.build(single_instance=False)
c = a.controller
c.settings = Settings(models_dir=Path(os.environ["BENCH_MODELS"]), port=int(os.environ["BENCH_PORT"]), tune_budget_s=60,
                      server_binary=Path(os.environ["BENCH_SERVER"]))
c.tune_options = dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2)
c.poll_interval_s = 1.0
a.window.hide()

def on_state(st):
    if st is AppState.SERVING:
        a.window.hide()
        print("READY", c.serving.base_url, flush=True)
    elif st is AppState.ERROR:
        print("ERROR", c.last_error, flush=True)
        a.quit()

c.state_changed.connect(on_state)
QTimer.singleShot(100, c.tune_and_serve)
QTimer.singleShot(int(float(os.environ["BENCH_LIFETIME_S"]) * 1000), a.quit)
sys.exit(a.qapp.exec())
"""


def main(argv: list[str] | None = None) -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="sampling time (s)")
    ap.add_argument("--requests-every", type=float, default=0.0, help="send one completion every S seconds (0 = none)")
    add_server_arg(ap)
    args = ap.parse_args(argv)
    server = server_binary(args).path
    note_machine("before")

    home = Path(tempfile.mkdtemp(prefix="dw-bench-"))
    models = home / "models"
    models.mkdir()
    shutil.copyfile(stories_model(), models / "stories260K.gguf")
    env = dict(
        os.environ,
        DRAFTWISE_HOME=str(home / "home"),
        BENCH_SERVER=str(server),
        QT_QPA_PLATFORM="offscreen",
        BENCH_MODELS=str(models),
        BENCH_PORT=str(free_port()),
        BENCH_LIFETIME_S=str(args.seconds + 180),
    )
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        t_end = time.monotonic() + 170
        base_url = None
        while time.monotonic() < t_end:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("READY"):
                base_url = line.split()[1]
                break
            if line.startswith("ERROR"):
                print(line.strip(), file=sys.stderr)
                return 2
        if base_url is None:
            print("the app did not reach serving", file=sys.stderr)
            return 2
        print(f"serving at {base_url}; sampling the app process for {args.seconds:.0f} s", file=sys.stderr)
        stop = threading.Event()
        n_requests = [0]

        def load() -> None:
            from tuner.server.client import ServerClient

            with ServerClient(base_url) as client:
                while not stop.wait(args.requests_every):
                    client.completion("Once upon a time", n_predict=32, temperature=0, cache_prompt=False)
                    n_requests[0] += 1

        if args.requests_every > 0:
            threading.Thread(target=load, daemon=True).start()
        app = psutil.Process(proc.pid)
        time.sleep(3.0)  # let start-up work (first paints, first scrapes) settle
        t0 = time.monotonic()
        c0 = app.cpu_times()
        rss_max = 0
        rss_samples = []
        while time.monotonic() - t0 < args.seconds:
            time.sleep(1.0)
            rss = app.memory_info().rss
            rss_samples.append(rss)
            rss_max = max(rss_max, rss)
        c1 = app.cpu_times()
        wall = time.monotonic() - t0
        stop.set()
        cpu_s = (c1.user - c0.user) + (c1.system - c0.system)
        cpu_pct = cpu_s / wall * 100.0
        result = {
            "seconds": round(wall, 1),
            "app_cpu_percent_of_one_core": round(cpu_pct, 3),
            "app_rss_max_mb": round(rss_max / 2**20, 1),
            "app_rss_median_mb": round(sorted(rss_samples)[len(rss_samples) // 2] / 2**20, 1),
            "requests_sent": n_requests[0],
            "goals": {"cpu_percent_below": CPU_GOAL_PCT, "rss_mb_below": RSS_GOAL_MB},
        }
        result["pass"] = cpu_pct < CPU_GOAL_PCT and rss_max / 2**20 < RSS_GOAL_MB
        print(json.dumps(result))
        note_machine("after")
        return 0 if result["pass"] else 1
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
