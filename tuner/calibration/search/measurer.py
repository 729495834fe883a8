"""One launch of the sweep: measure a candidate, book it in the record, say so in the events.

Every stage measures through the :class:`Measurer`: it starts the server through the caller's launch
function (its start-up wait bounded by the hard time limit), sends the sweep's requests in the workload's
shape with the sweep's memory (``tuner.calibration.measure``), keeps the ETA's pending work up to date,
plans the protocol from the first launch's warm-up, and books launches the time limit cut.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from tuner.errors import Cancelled

from ..candidates import Candidate, CandidatePlan
from ..measure import (
    Launch,
    LaunchError,
    LaunchFn,
    RequestError,
    measure_candidate,
    measure_repetitions,
    warm_up,
)
from ..prompts import Prompt
from ..results import Measurement, Sample
from ..threads import ThreadSetting
from ..workload import Workload
from .budget import HARD_LIMIT, Budget
from .protocol import ProtocolPlan, Requests, plan_protocol
from .rules import clear_loser
from .stage import Stage, SweepState


class Measurer(Stage):
    """Measures the sweep's launches.

    Args:
        launch_fn: the caller's launch function (its start-up wait is bounded here by the hard time
            limit: :meth:`~tuner.calibration.search.budget.Budget.until_deadline`).
        plan: the sweep's candidates (its baseline is the model alone; the protocol is planned for them).
        workload: the requests' shape.
        requests: what every launch sends (the first warm-up's plan may cut it).
        state: the sweep's :class:`~tuner.calibration.search.stage.SweepState`.

    Attributes:
        thread_setting: the CPU thread setting every launch runs at (set by the thread stage's
            :meth:`~tuner.calibration.search.threads.ThreadStage.before`; None: the tune's threads or llama-server's
            default). A candidate with its own thread fields keeps them; measurements book the candidate as given.
        protocol: what the first warm-up planned (:func:`~tuner.calibration.search.protocol.plan_protocol`),
            ``None`` until then (or when planning is off).
    """

    def __init__(self, launch_fn: LaunchFn, plan: CandidatePlan, workload: Workload, requests: Requests,
                 state: SweepState) -> None:
        super().__init__(state)
        self.thread_setting: ThreadSetting | None = None
        self.launch_fn = self._bounded(launch_fn, state.budget)
        self.plan = plan
        self.baseline = plan.baseline
        self.workload = workload
        self.requests = requests
        self.protocol: ProtocolPlan | None = None

    def _bounded(self, launch_fn: LaunchFn, budget: Budget) -> LaunchFn:
        """``launch_fn`` at :attr:`thread_setting` whose start-up wait also ends at the hard time limit (then
        :class:`LaunchError` "not started: the time budget ran out"; a user's cancel still raises ``Cancelled``)."""

        def launch(c: Candidate, cancel: threading.Event) -> Launch:
            try:
                return launch_fn(self._at_threads(c), budget.until_deadline(cancel))
            except Cancelled:
                if cancel.is_set():
                    raise
                raise LaunchError("not started: the time budget ran out") from None

        return launch

    def _at_threads(self, c: Candidate) -> Candidate:
        st = self.thread_setting
        if st is None or c.threads is not None or c.omp_passive or c.poll is not None:
            return c
        return replace(c, threads=st.threads, omp_passive=st.omp_passive, poll=st.poll)

    def measure(self, c: Candidate, reps: Sequence[int], stage: str, predicted: float | None = None,
                single_launch: bool = False) -> Measurement:
        """Launch ``c`` for repetitions ``reps`` (n-gram types one launch per repetition unless
        ``single_launch``), book the measurement and send events ``"launch"``, ``"progress"`` per request
        and ``"measured"``. A screening run (not the baseline, not ``confirm``) is stopped early as a clear
        loser (:func:`~tuner.calibration.search.rules.clear_loser`). A launch the hard time limit kept
        from measuring anything is booked as cut and not recorded.

        Raises:
            Cancelled: the user cancelled.
        """
        est = self.estimates.estimate_s(predicted, len(reps))
        self.eta.pending_s += est
        self.eta.start_step(self.budget.clock(), est, self.estimates.launch_s(), len(self.requests.prompts) * len(reps),
                            predicted, len(reps))
        self.events("launch", f"{stage}: starting {c.label}", candidate=c)
        done = [0]

        def on_request(sample: Sample) -> None:
            # a running figure of one request: the chart waits for the whole launch ("measured")
            done[0] += 1
            self.eta.request_done(self.budget.clock())
            total = len(self.requests.prompts) * len(reps)
            self.events("progress", f"{c.label}: request {done[0]} of {total}, {sample.gen_tokens_per_s:.1f} "
                        "tokens/s", candidate=c)

        first = not self.record.measurements and self.estimates.warmup_tps is None
        measure = measure_candidate if single_launch else measure_repetitions
        try:
            m = measure(
                self.launch_fn, c, self.requests.prompts, reps, self.requests.n_predict, self.cancel,
                workload=self.workload, memory=self.record.memory,
                baseline_outputs=None if c.is_baseline else self.record.baseline_outputs,
                on_request=on_request, request_timeout_s=self.s.request_timeout_s, stage=stage,
                predicted_gen_tokens_per_s=predicted,
                stop_if=None if (c.is_baseline or stage == "confirm") else self._clear_loser,
                after_warmup=self._plan_protocol if first else None,
                hard_deadline_s=self.budget.hard_deadline_s,
            )
        finally:
            self.eta.pending_s -= self.eta.launch_est[0]
            self.eta.end_step()
        if not m.samples and (m.cut_short or self.budget.past_hard_limit()):
            self.cut(c, measured=False)
            return m
        if m.load_s is not None and not first:
            self.estimates.load_s.append(m.load_s)
        self.record.add(m)
        self.events("measured", self._measured_text(c, m, reps), candidate=c, measurement=m)
        return m

    def _measured_text(self, c: Candidate, m: Measurement, reps: Sequence[int]) -> str:
        """The ``"measured"`` event's sentence (books a launch the time limit cut short)."""
        if not m.ok:
            return f"{c.label} failed: {m.error}"
        acc = f", acceptance {100 * m.acceptance:.0f} %" if m.acceptance is not None else ""
        msg = f"{c.label}: {m.gen_tokens_per_s:.1f} tokens/s{acc}"
        if m.stopped_early:
            msg += (f" (stopped early after {len(m.samples)} of {len(self.requests.prompts) * len(reps)} requests: "
                    f"below {self.s.loser_ratio:.0%} of the baseline; never served unless re-measured)")
        if m.cut_short:
            self.cut(c, measured=True)
            msg += f" (cut short by the time limit after {len(m.samples)} requests)"
        return msg

    def _clear_loser(self, samples: Sequence[Sample]) -> bool:
        return clear_loser(self.record, samples, self.s.loser_ratio)

    def cut(self, c: Candidate, measured: bool) -> None:
        """Book a launch the hard time limit ended (``measured``: it kept some requests); one it kept from
        measuring anything is also an event ``"skipped"``."""
        self.record.book_cut(c, measured)
        if not measured:
            self.events("skipped", f"{c.label}: not measured, the time limit ({HARD_LIMIT:.2f} × the "
                        f"{self.budget.budget_s:.0f} s budget) was reached", candidate=c)

    def _plan_protocol(self, load_s: float, warmup_tps: float | None) -> tuple[list[tuple[int, Prompt]], int] | None:
        """After the first warm-up: keep its speed and load time, plan the protocol
        (:func:`~tuner.calibration.search.protocol.plan_protocol`), cut :attr:`requests` to it and send
        event ``"budget"``. Returns ``(prompts, n_predict)`` to use from now on, or ``None`` to keep them."""
        self.estimates.warmup_tps = warmup_tps
        self.estimates.load_s.append(load_s)
        if not self.s.plan or not warmup_tps:
            return None
        req = self.requests
        p = plan_protocol(self.plan, self.s, self.budget.budget_s, req.prompts, req.n_predict, load_s, warmup_tps,
                          self.busy())
        self.protocol = p
        changed = (p.prompts, p.n_predict) != (len(req.prompts), req.n_predict)
        if changed:  # before the event, so that its ETA is the planned protocol's
            req.prompts = req.prompts[:p.prompts]
            req.n_predict = p.n_predict
        # the launch under way was estimated before any speed was known (20 tokens/s, the default
        # protocol): re-estimate its requests at the warm-up's speed and the planned protocol (its load
        # and warm-up are done), so the first ETA is not the default guess (it read 96 s for any budget)
        old_est, predicted, n_reps = self.eta.launch_est
        new_est = self.estimates.rep_s(predicted or warmup_tps) * n_reps
        self.eta.pending_s += new_est - old_est
        # the launch's requests from now on (its load and warm-up are done)
        self.eta.start_step(self.budget.clock(), new_est, 0.0, len(req.prompts) * n_reps, predicted, n_reps)
        self.events("budget", p.message, detail=p.detail())
        return (req.prompts, p.n_predict) if changed else None

    def open_server(self, c: Candidate | None = None) -> Launch | None:
        """Start the baseline's server (``c``: that candidate's, for head-to-head rounds) for the side-by-side rounds
        and warm it up (event ``"launch"``); ``None`` on failure (an event ``"error"``, or the time limit booked as a
        cut)."""
        c = c or self.baseline
        whose = "the baseline's server" if c.is_baseline else f"{c.label}'s server"
        self.events("launch", f"confirm: starting {c.label} (kept running for the paired rounds)", candidate=c)
        try:
            launch = self.launch_fn(c, self.cancel)
        except LaunchError as exc:
            if self.budget.past_hard_limit():
                self.cut(c, measured=False)
                return None
            self.events("error", f"{whose} for the paired rounds did not start: {exc}")
            return None
        try:
            warm_up(launch.client, min(16, self.requests.n_predict),
                    self.budget.request_timeout(self.s.request_timeout_s), self.workload)
        except RequestError as exc:
            launch.stop()
            if self.budget.past_hard_limit():
                self.cut(c, measured=False)
                return None
            self.events("error", f"{whose} for the paired rounds failed its warm-up: {exc}")
            return None
        return launch

    def paired_launch(self, c: Candidate, reps: Sequence[int], on_request: Callable[[Sample], None],
                      stop_if: Callable[[Sequence[Sample]], bool],
                      before_request: Callable[[int, Prompt, int], None] | None = None) -> Measurement:
        """One confirm-stage launch of ``c`` whose requests the caller repeats on the baseline's running
        server (``before_request`` / ``on_request``: right before or right after each of ``c``'s); ends when
        ``stop_if`` says so at a repetition boundary, or at the hard time limit. Not booked: the side-by-side
        rounds book both sides together."""
        return measure_candidate(self.launch_fn, c, self.requests.prompts, reps, self.requests.n_predict, self.cancel,
                                 workload=self.workload, memory=self.record.memory, on_request=on_request,
                                 request_timeout_s=self.s.request_timeout_s, stage="confirm", stop_if=stop_if,
                                 hard_deadline_s=self.budget.hard_deadline_s, before_request=before_request)


__all__ = ["Measurer"]
