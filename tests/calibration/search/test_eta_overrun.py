"""The ETA follows a launch that runs longer than planned (issue 25 item 5: it read "9 s" at 120 s into a sweep
whose launches ran far longer than the warm-up planned).

tests/data/overrun_sweep_events.json is the event stream of one real ``tune`` (bench/slow_target.py on the
generated family, ``--threads 2``, a CPU burner started 40 s into the sweep with ``--burn-after 40``: from then on
the 2-thread servers ran several times slower than the warm-up had said, and the paired rounds' launch overran its
estimate). Its requests' speeds and its load times are replayed here into a scripted sweep on a simulated clock —
the baseline's screening requests at the recorded baseline speeds, the probe's at the probe's, the paired
requests at the recorded pairs' — so the search's own ETA code meets the same overrun; checked at every event:

* from the first ETA on, it is within a factor of 2 (± 20 s) of the time really left in the replay;
* inside the overrunning launch it grows beyond its own countdown (the launch's requests come later than
  planned), and at every paired request it is at least half of what that launch really still had to run.
"""

from __future__ import annotations

import json
import re
import threading
from itertools import pairwise
from pathlib import Path

from tests.fakes.scripted_server import ScriptedLaunch, SimClock, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.measure import WARMUP_PROMPT
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings

RECORDING = Path(__file__).resolve().parents[2] / "data" / "overrun_sweep_events.json"
DRAFT = "/m/draft-good.gguf"
PAIR = re.compile(r"pair \d+: .* ([\d.]+) vs no speculation ([\d.]+) tokens/s")
REQUEST = re.compile(r"request \d+ of \d+, ([\d.]+) tokens/s")
READY = re.compile(r"ready in ([\d.]+) s")


def recorded() -> dict:
    """The recording's speeds by role (``baseline`` and ``probe`` screening requests, ``pairs`` as
    (candidate, baseline) tokens/s), load times by role, its warm-up speed and its plan."""
    rec = json.loads(RECORDING.read_text(encoding="utf-8"))
    out: dict = {"baseline": [], "probe": [], "pairs": [], "load": {"baseline": [], "probe": [], "confirm": []},
                 "budget_s": rec["budget_s"], "warmup": rec["warmup_gen_tokens_per_s"]}
    confirm = False
    for e in rec["events"]:
        msg, cand = e["message"], e.get("candidate") or ""
        if e["kind"] == "launch" and msg.startswith("confirm:"):
            confirm = True
        if e["kind"] == "budget":
            out["plan"] = e["detail"]
        if e["kind"] == "ready" and (m := READY.search(msg)):
            role = "confirm" if confirm else "baseline" if cand == "no speculation" else "probe"
            out["load"][role].append(float(m.group(1)))
        if e["kind"] != "progress":
            continue
        if m := PAIR.search(msg):
            out["pairs"].append((float(m.group(1)), float(m.group(2))))
        elif (m := REQUEST.search(msg)) and not confirm:
            out["baseline" if cand == "no speculation" else "probe"].append(float(m.group(1)))
    return out


class Replay:
    """A scripted launch whose requests run at the recording's speeds (by role, in order, the last one kept
    once a role's run out) and whose loads take the recorded times."""

    def __init__(self, rec: dict, clock: SimClock) -> None:
        self.rec = rec
        self.clock = clock
        self.confirm = False
        self.warming = False
        self.used = {"baseline": 0, "probe": 0, "cand": 0, "base": 0, "load": 0}
        self.scripted = ScriptedLaunch(self.tps_of, clock=clock, load_s=0.0, content="same text")

    def _next(self, key: str, seq: list) -> float:
        i = min(self.used[key], len(seq) - 1)
        self.used[key] += 1
        return seq[i]

    def tps_of(self, c: Candidate) -> float:
        if self.warming:
            return self.rec["warmup"]
        if self.confirm:
            cand, base = self._next("base" if c.is_baseline else "cand", self.rec["pairs"])
            return base if c.is_baseline else cand
        return self._next("baseline" if c.is_baseline else "probe", self.rec["baseline" if c.is_baseline else "probe"])

    def __call__(self, c: Candidate, cancel: threading.Event):
        loads = self.rec["load"]["confirm" if self.confirm else "baseline" if c.is_baseline else "probe"]
        self.scripted.load_s = loads[min(len(loads) - 1, self.used["load"] % max(1, len(loads)))]
        self.used["load"] += 1
        launch = self.scripted(c, cancel)  # the clock moves by the load, and the launch reports it
        inner = launch.client.completion

        def completion(prompt: str, n_predict: int, timeout_s: float = 120.0, **params: object) -> dict:
            self.warming = WARMUP_PROMPT in prompt
            try:
                return inner(prompt, n_predict, timeout_s, **params)
            finally:
                self.warming = False

        launch.client.completion = completion  # type: ignore[method-assign]
        return launch


def test_the_recording_holds_an_overrunning_launch():
    rec = json.loads(RECORDING.read_text(encoding="utf-8"))
    assert rec["source"].startswith("bench/slow_target.py") and "--burn-after" in rec["source"]
    r = recorded()
    assert r["pairs"] and r["baseline"] and r["probe"]
    # the paired requests ran far slower than the warm-up the plan was made from
    assert min(b for _c, b in r["pairs"]) < r["warmup"] / 1.5 or min(r["baseline"]) < r["warmup"] / 1.5


def test_the_eta_grows_with_a_launch_that_overruns_and_stays_honest():
    rec = recorded()
    clock = SimClock()
    replay = Replay(rec, clock)
    events: list[dict] = []

    def emit(kind: str, message: str, **kw: object) -> None:
        if kind == "launch" and message.startswith("confirm:"):
            replay.confirm = True
        events.append({"kind": kind, "message": message, "elapsed_s": kw.get("elapsed_s"), "eta_s": kw.get("eta_s"),
                       "confirm": replay.confirm})

    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    prompts = [(0, Prompt("def fibonacci(n):", "code")), (1, Prompt("Once upon a time", "creative")),
               (2, Prompt("Question: what is 17 times 23?", "math"))]
    # the recorded protocol (the plan it made from its warm-up), side by side, on a busy machine
    settings = SearchSettings(n_predict=rec["plan"]["n_predict"], plan=False, side_by_side=True, explore_per_draft=0,
                              p_min_variant=None)
    scripted_search(replay, plan, prompts[:rec["plan"]["prompts"]], settings, rec["budget_s"], clock=clock, emit=emit,
                    busy=lambda: True).run()
    shown = [e for e in events if e["eta_s"] is not None]
    assert shown and replay.used["cand"] >= 2, replay.used  # the recorded pairs were replayed
    end = events[-1]["elapsed_s"]
    for e in shown:
        real = end - e["elapsed_s"]
        assert real / 2 - 20 <= e["eta_s"] <= 2 * real + 20, (e, real)
    # the paired launch: its requests came later than planned, and the ETA grew with them
    paired = [e for e in shown if e["confirm"] and e["kind"] == "progress"]
    assert paired, [e["message"] for e in shown]
    grew = [b for a, b in pairwise(shown) if b["confirm"] and b["kind"] == "progress"
            and b["eta_s"] > a["eta_s"] - (b["elapsed_s"] - a["elapsed_s"]) + 5.0]
    assert grew, [(e["elapsed_s"], e["eta_s"], e["message"][:40]) for e in shown if e["confirm"]]
    launch_end = next(e["elapsed_s"] for e in events if e["confirm"] and e["kind"] == "measured")
    for e in (x for x in paired if x["elapsed_s"] < launch_end):
        assert e["eta_s"] >= (launch_end - e["elapsed_s"]) / 2, (e, launch_end)
