"""The protocol's planning speed: a fresh server's first request can run far below its speed (fault injected: a
real server does not run its first request slowly on demand)."""

from __future__ import annotations

import threading

from tests.fakes.scripted_server import ScriptedLaunch
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import measure_candidate
from tuner.calibration.prompts import Prompt

PROMPTS = [(0, Prompt("Once upon a time", "creative"))]


def test_the_protocol_is_planned_from_the_faster_of_two_warm_up_requests() -> None:
    speeds = iter([98.8, 192.8, 190.0, 190.0])  # issue 28's idle quality run 20: warm-up 98.8, measured 192.8
    launch = ScriptedLaunch(lambda c: next(speeds))
    seen: list[tuple[float, float | None]] = []

    def plan(load_s: float, tps: float | None) -> None:
        seen.append((load_s, tps))

    m = measure_candidate(launch, Candidate(), PROMPTS, [0], 32, threading.Event(), after_warmup=plan)
    assert seen == [(launch.load_s, 192.8)]
    assert launch.clients[0].requests == 3  # two warm-up requests, then the prompt
    assert m.error is None and m.gen_tokens_per_s == 190.0


def test_without_a_plan_one_warm_up_request_is_sent() -> None:
    launch = ScriptedLaunch(lambda c: 150.0)
    m = measure_candidate(launch, Candidate(), PROMPTS, [0], 32, threading.Event())
    assert launch.clients[0].requests == 2 and m.error is None
