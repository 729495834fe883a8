"""The thread stage: the CPU thread setting of the sweep and of the served configuration.

Two steps share :data:`tuner.calibration.threads.SHARE` of the budget (kept back from the other stages:
``Budget.held_s``; a setting that does not fit is skipped, never measured past the share):

- :meth:`ThreadStage.before`, the sweep's first step: the model alone is launched once per thread setting
  (``tuner.calibration.threads.settings_for``: one core fewer, all cores waiting politely, then the default:
  on a machine that is busy already the default is the slow one) and measured idle, then with one other busy
  program — a bounded burner this stage starts itself for a few seconds (``tuner.hardware.burner.BoundedBurner``;
  the event says so). ``tuner.calibration.threads.choose`` picks the setting, and every launch of the sweep runs
  at it (``Measurer.thread_setting``): on a 2-core OpenMP build under one busy program the default collapses
  (99 → 1.5 tokens/s was measured), and a sweep measured at the default read collapsed speeds (16.4 against
  9.1 tokens/s for a configuration that ran at 120 once served at ``-t 1``) and ran out of budget.
- :meth:`ThreadStage.run`, after the paired rounds: when the candidate the decision serves
  (``tuner.calibration.decide.decide`` on the sweep so far) is speculative, it is measured the same way (the
  sweep's setting first, the default last) and the setting with the best mean of its two speeds is served;
  without time left for it, the model alone's choice is served and the sentence says it was measured there.

Neither step's launches are measurements of the sweep: the decision's statistics never see them. Each
request is sized to take about :data:`REQUEST_S` at the launch's warm-up speed and stopped after 3× that (at
least :data:`MIN_LIMIT_S`): a collapsed server then counts as the tokens asked for over that limit, an upper
bound ("at most"), so one slow setting costs seconds, not minutes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from statistics import mean

from tuner.errors import Cancelled
from tuner.hardware.burner import MAX_S, BoundedBurner

from ..candidates import Candidate
from ..measure import (
    Launch,
    LaunchError,
    LaunchFn,
    RequestError,
    measure_request,
    needs_fresh_launch_per_repetition,
    warm_up,
)
from ..outcome import SearchOutcome
from ..prompts import Prompt
from ..threads import LOADING_MESSAGE, SHARE, ThreadChoice, ThreadFigures, ThreadSetting, choose, settings_for
from ..workload import Workload
from .protocol import Requests
from .stage import Stage, SweepState

PROMPTS = 2
"""Requests per setting idle, and as many with the burner running."""

REQUEST_S = 0.5
"""Each request asks for the tokens this launch's warm-up speed makes in about this many seconds (4 to 48)."""

MIN_LIMIT_S = 2.0
"""A request stops after 3× its expected time, and never before this many seconds: a collapsed server
(66× slower was measured) then counts as the tokens asked for over that limit, an upper bound."""

MIN_CAP_S = 0.5
"""The shortest time limit :meth:`ThreadStage._capped` gives a request."""
WARM_UP_TOKENS = 4

BEFORE_SHARE = 2 / 3
"""The share of the stage's time (:data:`~tuner.calibration.threads.SHARE` of the budget) :meth:`ThreadStage.before`
may use on the model alone; the rest is left for the served configuration after the paired rounds."""


class ThreadStage(Stage):
    """The thread stage of one sweep (module docstring).

    Args:
        launch_fn: the sweep's launch function (a candidate's thread fields set the launch's threads).
        workload, requests: the requests' shape and the sweep's prompts.
        state: the sweep's :class:`~tuner.calibration.search.stage.SweepState` (settings ``thread_cores`` None:
            no stage).

    Attributes:
        choice: what the stage found for the served configuration (None: it did not run, or measured nothing).
        sweep_setting: the setting :meth:`before` chose for the sweep (None: not run, nothing measured).
        base: the model alone's figures per setting (:meth:`before`).
    """

    def __init__(self, launch_fn: LaunchFn, workload: Workload, requests: Requests, state: SweepState,
                 burner: Callable[[float], BoundedBurner] = BoundedBurner) -> None:
        super().__init__(state)
        settings, budget = state.settings, state.budget
        self.launch_fn = launch_fn
        self.workload = workload
        self.requests = requests
        self.burner = burner
        self.choice: ThreadChoice | None = None
        self.sweep_setting: ThreadSetting | None = None
        self.base: tuple[ThreadFigures, ...] = ()
        self.end_s = math.inf
        """The current step's end (seconds into the sweep): no request's time limit runs past it."""
        if settings.thread_cores is not None:
            budget.held_s = SHARE * budget.budget_s

    def before(self, baseline: Candidate) -> ThreadSetting | None:
        """The model alone's thread settings, idle and loaded, before the sweep (module docstring); returns the
        setting every launch of the sweep should use (None: no stage, or nothing measured: the default).

        Raises:
            Cancelled: the user cancelled.
        """
        cores = self.s.thread_cores
        if cores is None:
            return None
        share_s, t0 = SHARE * self.budget.budget_s, self.budget.elapsed_s()
        settings = self._ordered(None)
        self.events("threads", f"{LOADING_MESSAGE} ({len(settings)} thread settings of {baseline.label}, before the "
                    "sweep)", detail={"settings": [st.to_json() for st in settings]})
        self.base = self._measure_all(baseline, settings, t0 + BEFORE_SHARE * share_s, first_always=True)
        self.budget.held_s = max(0.0, share_s - (self.budget.elapsed_s() - t0))
        self.sweep_setting = choose(self.base)
        if self.sweep_setting is not None:
            self.events("threads", f"the sweep measures every configuration at {self.sweep_setting.words(cores)}",
                        detail={"setting": self.sweep_setting.to_json(), "figures": [f.to_json() for f in self.base]})
        return self.sweep_setting

    def run(self, outcome: SearchOutcome) -> None:
        """Measure and choose for the served candidate, ``decide(outcome)``'s winner (module docstring).

        Raises:
            Cancelled: the user cancelled.
        """
        from ..decide import decide

        held, self.budget.held_s = self.budget.held_s, 0.0
        cores = self.s.thread_cores
        if cores is None or not outcome.measurements:
            return
        served = decide(outcome).winner
        baseline = next((m.candidate for m in outcome.measurements if m.candidate.is_baseline), served)
        if served.is_baseline and self.base:
            self._choose(served, self.base, (), outcome)
            return
        end_s = self.budget.elapsed_s() + min(held, max(0.0, self.budget.remaining_s()))
        settings = self._ordered(self.sweep_setting)
        self.events("threads", f"{LOADING_MESSAGE} ({len(settings)} thread settings of {served.label})",
                    detail={"settings": [st.to_json() for st in settings]})
        mine = self._measure_all(served, settings, end_s)
        base = self.base or (self._measure_all(baseline, settings, end_s) if not served.is_baseline else ())
        if choose(mine) is None and self.sweep_setting is not None:
            self._choose(served, base, base, outcome, of_baseline=True)
            return
        self._choose(served, mine, base, outcome)

    def _choose(self, served: Candidate, figures: tuple[ThreadFigures, ...], base: tuple[ThreadFigures, ...],
                outcome: SearchOutcome, of_baseline: bool = False) -> None:
        """Set :attr:`choice` from ``figures`` (the served candidate's, or with ``of_baseline`` the model alone's)."""
        chosen = choose(figures)
        cores = self.s.thread_cores or 1
        if chosen is None:
            self.events("threads", "no thread setting could be measured in the time left: serving llama-server's "
                        "default threads")
            return
        at_default = self.sweep_setting is None or self.sweep_setting.is_default
        swept = [m.gen_tokens_per_s for m in outcome.measurements
                 if m.candidate == served and m.ok and m.gen_tokens_per_s] if at_default else []
        self.choice = ThreadChoice(chosen, figures, cores, served.label, base,
                                   sweep_default_tps=mean(swept) if swept else None, of_baseline=of_baseline)
        self.events("threads", f"{served.label}: serving {chosen.words(cores)}", detail=self.choice.detail())

    def _ordered(self, first: ThreadSetting | None) -> tuple[ThreadSetting, ...]:
        """The settings to measure: ``first`` first, the default last (on a machine already busy it is the slow
        one)."""
        return tuple(sorted(settings_for(self.s.thread_cores or 1, self.s.thread_openmp),
                            key=lambda st: (st.is_default, st != first)))

    def _deadline(self, end_s: float, est_s: float, first: bool) -> float:
        """When a setting's launch of about ``est_s`` seconds must end (seconds into the sweep): ``end_s``, or for
        the ``first`` setting measured whatever the share, as late as the launch needs while the budget holds it."""
        now = self.budget.elapsed_s()
        return max(end_s, now + est_s) if first and now + est_s <= self.budget.budget_s else end_s

    def _measure_all(self, c: Candidate, settings: tuple[ThreadSetting, ...], end_s: float,
                     first_always: bool = False) -> tuple[ThreadFigures, ...]:
        """``c`` at each of ``settings`` that fits before ``end_s`` (seconds into the sweep). ``first_always``: the first
        setting (one core fewer) is measured whenever the budget holds it, past ``end_s`` too — without any figure the
        sweep runs at llama-server's default, which one busy program collapses (a 113 s sweep under tune_quality's
        burner skipped all three settings on the 5 s load guess before any load was timed, measured the model alone
        at 22.7 tokens/s against its warm-up's 194, and served it)."""
        self.end_s = end_s
        out: list[ThreadFigures] = []
        for st in settings:
            if self.cancel.is_set():
                raise Cancelled()
            est = self._estimate_s(c)
            self.end_s = self._deadline(end_s, est, first_always and not out)
            if self.budget.elapsed_s() + est > self.end_s:
                self.events("skipped", f"{c.label}: thread setting {st.words(self.s.thread_cores or 1)} not "
                            "measured, the thread stage's share of the budget is spent", candidate=c)
                continue
            out.append(self._measure(replace(c, threads=st.threads, omp_passive=st.omp_passive, poll=st.poll), st))
        return tuple(out)

    def _estimate_s(self, c: Candidate | None = None) -> float:
        """One setting of ``c``: a launch, a warm-up, the idle requests and the loaded ones at their time limit (and
        a second launch and warm-up for a candidate with an n-gram type: :meth:`_measure`)."""
        launches = 2 if c is not None and needs_fresh_launch_per_repetition(c) else 1
        return launches * (self.estimates.load() + 1.0) + PROMPTS * (REQUEST_S + MIN_LIMIT_S) + 0.3

    def _measure(self, cand: Candidate, st: ThreadSetting) -> ThreadFigures:
        """``cand``'s idle and loaded speed at ``st``: one launch, or for a candidate with an n-gram type one launch
        for each, so the loaded requests (the same prompts) do not draft from what the idle ones generated
        (ngram-mod's pool: the same prompts again read 383 tokens/s loaded against 153 idle in one launch)."""
        deadline = self.budget.until_deadline(self.cancel)
        try:
            if not needs_fresh_launch_per_repetition(cand):
                return self._in_launch(cand, st, deadline, idle=True, loaded=True)
            first = self._in_launch(cand, st, deadline, idle=True, loaded=False)
            if first.idle_tps is None:
                return first
            second = self._in_launch(cand, st, deadline, idle=False, loaded=True, idle_tps=first.idle_tps)
        except RequestError as exc:
            self.events("threads", f"{cand.label}: {exc}", candidate=cand)
            return ThreadFigures(st, None, None)
        if first.idle_at_most and second.loaded_tps is not None:
            return ThreadFigures(st, first.idle_tps, min(second.loaded_tps, first.idle_tps), True, idle_at_most=True)
        return ThreadFigures(st, first.idle_tps, second.loaded_tps, second.loaded_at_most)

    def _in_launch(self, cand: Candidate, st: ThreadSetting, deadline: threading.Event, *, idle: bool, loaded: bool,
                   idle_tps: float | None = None) -> ThreadFigures:
        """One launch of ``cand`` at ``st``: its idle requests, its loaded ones, or both (``idle_tps``: the idle speed
        of an earlier launch, for the loaded requests' time limit). Raises ``RequestError``."""
        try:
            launch = self.launch_fn(cand, deadline)
        except LaunchError as exc:
            self.events("threads", f"{cand.label}: could not start ({exc})", candidate=cand)
            return ThreadFigures(st, None, None)
        self.estimates.load_s.append(launch.load_s)  # the next setting's estimate: its load, timed, not the guess
        try:
            return self._idle_and_loaded(launch, st, idle=idle, loaded=loaded, idle_tps=idle_tps)
        finally:
            launch.stop()

    def _prompts(self) -> list[tuple[int, Prompt]]:
        """The first :data:`PROMPTS` of the set, for the idle and the loaded requests alike: their speeds are
        compared, so they must be the same requests (the next prompts, tried before, read "184 tokens/s idle,
        219 with another busy program" for the chain ngram-mod + draft: prompts differ in how much they let a
        draft guess). The loaded ones are sent as another repetition (another first line, so no prompt cache is
        shared), and a candidate with an n-gram type gets a fresh launch for them (:meth:`_measure`)."""
        return self.requests.prompts[:PROMPTS]

    def _timed(self, launch: Launch, n: int, limit_s: float, loaded: bool) -> tuple[float, bool]:
        """``(tokens/s, at most)`` of the requests of ``n`` tokens (:meth:`_prompts`; ``loaded``: repetition 1, else
        0), each stopped after ``limit_s`` seconds (then the tokens asked for over the limit, an upper bound, and no
        more requests)."""
        speeds: list[float] = []
        for i, p in self._prompts():
            t0 = time.monotonic()
            try:
                speeds.append(measure_request(launch.client, i, p, int(loaded), n, limit_s,
                                              self.workload).gen_tokens_per_s)
            except RequestError:
                if time.monotonic() - t0 < 0.9 * limit_s:
                    raise
                return n / limit_s, True
        return mean(speeds), False

    def _capped(self, limit_s: float, halves: int) -> float:
        """A request's time limit, never past :attr:`end_s`: at most the time left over the requests still to run
        (``halves`` × :data:`PROMPTS`), at least :data:`MIN_CAP_S`. A request cut there is an upper bound ("at
        most"). (A collapsed default's limit scaled with its 1.6 tokens/s warm-up: 15 s of idle requests took a
        180 s sweep to 192 s.)"""
        left = self.end_s - self.budget.elapsed_s()
        return max(MIN_CAP_S, min(limit_s, left / (halves * PROMPTS)))

    def _idle_and_loaded(self, launch: Launch, st: ThreadSetting, *, idle: bool = True, loaded: bool = True,
                         idle_tps: float | None = None) -> ThreadFigures:
        timeout = self.budget.request_timeout(self.s.request_timeout_s)
        warm = warm_up(launch.client, WARM_UP_TOKENS, timeout, self.workload)
        n = max(4, min(48, self.requests.n_predict, round(REQUEST_S * warm.gen_tokens_per_s)))
        limit = self._capped(max(MIN_LIMIT_S, 3 * n / max(warm.gen_tokens_per_s, 1e-3)), 2 if loaded else 1)
        idle_at_most = False
        if idle:
            idle_tps, idle_at_most = self._timed(launch, n, limit, loaded=False)
        if not loaded:
            return ThreadFigures(st, idle_tps, None, idle_at_most=idle_at_most)
        limit = self._capped(max(MIN_LIMIT_S, 3 * n / max(idle_tps or warm.gen_tokens_per_s, 1e-3)), 1)
        with self.burner(min(MAX_S, PROMPTS * limit + 2.0)):
            time.sleep(0.2)  # the burner is spinning before the first token
            loaded_tps, at_most = self._timed(launch, n, limit, loaded=True)
        if idle_at_most and idle_tps is not None:
            return ThreadFigures(st, idle_tps, min(loaded_tps, idle_tps), True, idle_at_most=True)
        return ThreadFigures(st, idle_tps, loaded_tps, at_most)


__all__ = ["BEFORE_SHARE", "MIN_LIMIT_S", "PROMPTS", "REQUEST_S", "ThreadStage"]
