"""The search: predict before measuring, measure only promising candidates, drop losers early, confirm the
rest in paired rounds — within a time budget.

DESIGN.md "Calibration method" step 5. :class:`Search` builds the sweep's state and lists its stages;
each stage is its own module, and the stages talk only through the state objects:

- ``budget.py``: :class:`Budget` (the one budget holder: elapsed and remaining time, the hard time
  limit :data:`HARD_LIMIT`) and ``Estimates`` (what a launch, a repetition, a pair costs; the reserve the
  screening stages leave for the paired rounds).
- ``protocol.py``: ``plan_protocol`` (pure): prompts × ``n_predict`` fitted into the budget from the first
  warm-up; ``Requests`` (what every launch sends).
- ``record.py``: ``Record``, every measurement in launch order and what the sweep learned (the baseline's
  speed, the draft curves, the sweep's own sentences, the ``SweepMemory`` its launches share).
- ``rules.py``: pure rules over the record (an n-gram type that never drafted, a clear loser, a disturbed
  baseline's verdict).
- ``eta.py``: ``Eta`` (the ETA and the progress, never back) and ``ConfirmTracker`` (the paired rounds'
  state the ETA reads). ``events.py``: ``SweepEvents``, each event with its progress and ETA.
- ``stage.py``: ``SweepState`` (what the stages share, built once here) and ``Stage`` (a stage's base: the
  state's parts as attributes).
- ``measurer.py``: ``Measurer``, one launch measured, booked and reported.
- ``screening.py``: ``Screening``: baseline, probes, refine, explore, re-screen near ties, the ``p_min``
  variant, and the contenders. ``confirm.py`` / ``side_by_side.py``: ``Confirmation``, the paired rounds
  (alternating launches, or both servers side by side on the CPU). ``threads.py``: ``ThreadStage``, the
  CPU thread setting, idle and with one other busy program: the model alone's first (the whole sweep runs at
  its choice), the served configuration's last; its share of the budget is kept back from the others.
  ``verify.py``: ``VerifyCostStage``, after the probes: the fastest draft's cost of a verification step at each
  draft length, measured with synthetic acceptance (or reused from a profile), which then predicts its lengths.

Progress events never report 100 % while work remains, and the ETA is unknown (``None``) until the first
warm-up has been timed. A new stage goes into :meth:`Search.run`'s list; a new estimate into ``Estimates``
or ``Eta``; a new pruning rule into ``rules.py`` and the screening stage that applies it; the paired
statistic itself lives in ``tuner.calibration.pairing``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from tuner.errors import Cancelled

from ..candidates import CandidatePlan
from ..measure import LaunchFn
from ..outcome import SearchOutcome
from ..pairing import Mix
from ..prompts import Prompt
from ..workload import LongContextPlan, SweepMemory, Workload, long_prompt_tokens
from .budget import HARD_LIMIT, Budget, Estimates
from .confirm import Confirmation
from .eta import ConfirmTracker, Eta
from .events import SweepEvents
from .measurer import Measurer
from .protocol import Requests, ngram_only
from .record import Record
from .screening import Screening
from .settings import BaselineFailed, Emit, SearchSettings
from .stage import SweepState
from .threads import ThreadStage
from .verify import VerifyCostStage


class Search:
    """One sweep over a :class:`~tuner.calibration.candidates.CandidatePlan`.

    Args:
        launch_fn: starts a server per candidate.
        plan: the candidates.
        prompts: ``(index, prompt)`` pairs used for every candidate.
        settings: :class:`SearchSettings`.
        workload: what every request looks like (endpoint, sampling, served context).
        budget: the sweep's time :class:`Budget` (started when built: build it right before the sweep).
        cancel: set to stop (:meth:`run` then returns what ran, ``cancelled``).
        emit: event sink (see :data:`Emit`).
        busy: ``busy() -> bool``, the load watcher's "other programs are using the CPU" so far; while
            True the optional stages (exploration, refine lengths after the first; the ``p_min``
            variant is skipped) keep twice the paired rounds' reserve, so the remaining budget goes
            to more pairs; the probes and the first refine length keep the plain reserve
            (``Estimates.reserve_s``).

    Attributes:
        record, budget, estimates, eta, tracker, events, measurer, screening, confirmation, threads: the sweep's
            state and stages (tests read them).
    """

    def __init__(self, launch_fn: LaunchFn, plan: CandidatePlan, prompts: Sequence[tuple[int, Prompt]],
                 settings: SearchSettings, workload: Workload, budget: Budget, cancel: threading.Event, emit: Emit,
                 busy: Callable[[], bool] | None = None) -> None:
        busy = busy or (lambda: False)
        self.s = settings
        requests = Requests(list(prompts), settings.n_predict)
        memory = SweepMemory(long_plan=LongContextPlan(budget_s=budget.budget_s))
        self.record = Record(mix=Mix.of(requests.prompts, settings.long_share, long_prompt_tokens(workload.n_ctx)),
                             memory=memory)
        self.budget = budget
        groups = len(plan.drafts) + (1 if plan.ngram else 0) + (1 if plan.mtp is not None else 0)
        self.estimates = Estimates(requests, self.record, settings.side_by_side, ngram_only(plan),
                                   finalists=max(1, min(settings.finalists, groups)))
        self.eta = Eta()
        self.tracker = ConfirmTracker(settings.max_pairs, settings.finalists,
                                      next_rep=max(settings.baseline_repetitions, settings.probe_repetitions))
        self.events = SweepEvents(emit, budget, self.estimates, self.eta, self.tracker, busy)
        state = SweepState(settings, self.record, budget, self.estimates, self.eta, self.tracker, self.events,
                           cancel, busy)
        self.measurer = Measurer(launch_fn, plan, workload, requests, state)
        self.screening = Screening(plan, self.measurer, state)
        self.confirmation = Confirmation(self.measurer, state)
        self.threads = ThreadStage(launch_fn, workload, requests, state)
        self.verify = VerifyCostStage(self.measurer.launch_fn, workload, requests, state)

    def _thread_words(self) -> str:
        """The sweep's thread setting in a verify-cost curve's key (empty: the tune's own threads or the default)."""
        st = self.measurer.thread_setting
        return "" if st is None else ",".join(f"{k}={v}" for k, v in sorted(st.to_json().items()))

    def run(self) -> SearchOutcome:
        """Run the stages in order; returns what the sweep found (``cancelled`` after a cancel, with the
        measurements so far).

        Raises:
            BaselineFailed: the baseline could not be measured.
        """
        try:
            self.measurer.thread_setting = self.threads.before(self.measurer.baseline)
            self.screening.baseline()
            self.screening.probes()
            self.verify.run(self.screening.draft_probes(), self._thread_words())
            self.screening.use_verify_curves()
            self.screening.refine()
            self.screening.explore()
            self.screening.rescreen_near_ties()
            self.screening.p_min_variants()
            self.eta.confirming = True
            self.confirmation.run(self.screening.contenders())
            self.threads.run(self.outcome())
            self.eta.finished = True
        except Cancelled:
            return SearchOutcome(measurements=tuple(self.record.measurements),
                                 unmeasured=tuple(self.record.unmeasured), cancelled=True)
        return self.outcome()

    def outcome(self) -> SearchOutcome:
        """What the sweep found so far, as the decision and the report read it."""
        r, s, protocol = self.record, self.s, self.measurer.protocol
        return SearchOutcome(
            measurements=tuple(r.measurements),
            unmeasured=tuple(r.unmeasured),
            min_gain=s.min_gain,
            alpha=s.alpha,
            max_pairs=self.tracker.max_pairs,
            finalists=self.tracker.finalists,
            layout=s.layout,
            mix=r.mix,
            baseline_unsteady=r.baseline_unsteady,
            notes=tuple(r.sweep_notes(self.budget.limit_s, self.budget.budget_s)),
            protocol=protocol.detail() if protocol is not None else {},
            server_sampling=dict(r.memory.server_sampling),
            long_context=r.memory.long_plan.left_out,
            threads=self.threads.choice,
            verify_curves=dict(r.verify_curves),
        )


def run_search(
    plan: CandidatePlan,
    prompts: Sequence[tuple[int, Prompt]],
    settings: SearchSettings,
    workload: Workload,
    budget_s: float,
    launch_fn: LaunchFn,
    cancel: threading.Event,
    emit: Emit,
    busy: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchOutcome:
    """Run one sweep (:class:`Search`) of ``budget_s`` seconds from now (its :class:`Budget`, on ``clock``:
    tests give a simulated one) and hand back what it found as a
    :class:`~tuner.calibration.outcome.SearchOutcome`; a cancel returns the measurements so far with
    ``cancelled`` set.

    Raises:
        BaselineFailed: the baseline could not be measured.
    """
    budget = Budget(budget_s, clock)
    return Search(launch_fn, plan, prompts, settings, workload, budget, cancel, emit, busy=busy).run()


__all__ = ["HARD_LIMIT", "BaselineFailed", "Budget", "Emit", "Search", "SearchSettings", "run_search"]
