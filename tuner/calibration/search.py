"""The search: predict before measuring, measure only promising candidates, drop losers early.

DESIGN.md "Calibration method" step 5. Stages, each candidate one server launch:

1. ``baseline``: the target alone (``baseline_repetitions`` repetitions): the screening reference.
   Its outputs are the reference for the lossless check.
2. ``probe``: per draft model one run at a long draft (``n_max`` 16, ``p_min`` 0): its per-position
   acceptance counters predict accepted tokens per verification for every shorter draft, and its
   measured step cost fits a :class:`~tuner.calibration.predict.CostModel`; together they predict
   tokens/s for every ``n_max`` (event ``"predicted"``). n-gram types and ``draft-mtp`` get one run.
3. ``refine``: the draft lengths predicted fastest (and predicted to beat the baseline) are measured,
   best prediction first; after each, the cost model is refitted on every measured length of that draft
   and the curve re-predicted, so a better length found by the refit is measured too.
   While more than half the budget is left, the neighbours (±1) of every length within 5 % of the
   draft's best are measured as well (``SearchSettings.explore_per_draft``): on a noisy machine one
   unlucky run can otherwise end the refit on a local maximum.
   Then the best measured length of each draft is measured once more with ``p_min`` > 0
   (``SearchSettings.p_min_variant``).
4. ``confirm`` (paired rounds, ``tuner.calibration.pairing``): the screened candidates are ranked on
   their ratio over the same requests as the baseline (stopped-early losers and those slower than the
   baseline are dropped); the top half (at most ``finalists``) is confirmed one after another in
   alternating launches ``A B B A A B B A …`` (baseline A, finalist B, two repetitions per launch, n-gram
   types one launch per repetition), so each finalist repetition is paired with the baseline repetition
   next to it in time. With ``SearchSettings.side_by_side`` (CPU: the weights are mmapped, so two
   servers on one GGUF share the page cache) the baseline's server instead stays up next to the
   finalist's and every request is sent to the finalist and then to the baseline: the two sides of a
   pair are one request apart. After every pair the sequential test looks; rounds go on while it is
   inconclusive, fewer than ``max_pairs`` pairs ran and the budget allows — on a busy machine the
   noise is larger and the same rule spends more of the budget on pairs.

Protocol and budget: the first launch's warm-up request gives the model's speed and the load time;
:meth:`Search.plan_protocol` then fits prompts × ``n_predict`` × launches into the budget (a slow
target gets fewer and shorter requests; when even the smallest protocol does not fit, event
``"budget"`` says so up front, with the budget that would). Screening stages leave enough of the
budget for ``MIN_PAIRS + 1`` pairs of the leader; every step runs only when its estimated time fits
(event ``"skipped"`` otherwise). Progress events never report 100 % while work remains, and the ETA
is unknown (``None``) until the first warm-up has been timed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tuner.errors import DraftwiseError

from .candidates import DRAFT_LENGTHS, Candidate, CandidatePlan
from .decide import MIN_GAIN
from .measure import (
    WARMUP_PROMPT,
    Cancelled,
    Launch,
    LaunchError,
    LaunchFn,
    RequestError,
    bounded_timeout,
    first_divergence,
    measure_candidate,
    measure_repetitions,
    measure_request,
    needs_fresh_launch_per_repetition,
)
from .outcome import SearchOutcome
from .pairing import (
    ALPHA,
    MAX_PAIRS,
    MIN_PAIRS,
    Look,
    Mix,
    adjacent_pairs,
    compare,
    pooled_tokens_per_s,
    sequential_looks,
)
from .predict import CostModel, fit_cost_model, predict_curve
from .prompts import Prompt
from .request import DEFAULT_BUDGET_S
from .results import Divergence, Measurement, Sample
from .sentences import Sentence, Slot
from .workload import Workload

HARD_LIMIT = 1.08
"""The sweep's hard time limit, as a fraction of the budget (issue 10: first launch to decision within
15 % of it). The stages plan from estimates (the warm-up's speed, the mean load time); on a busy machine
those can be wrong by a factor (a 2-thread server on a 2-core box with one core taken by another program
ran 30× slower than in the pause before), so from the end of the baseline launch on, a launch that has
not become ready, a request in flight and every later step end at ``HARD_LIMIT × budget``: the requests
completed so far are kept (``Measurement.cut_short``), the rest of the plan is reported as not measured,
and the decision is made from what was measured. The margin to 15 % is for stopping the server and
deciding."""

BASELINE_DISAGREES = 1.5
"""A run that drafted nothing is the model alone (plus a lookup that found nothing); when its tokens/s on
the same requests differ from the baseline launch's by more than this factor either way, one of the two
ran while something else had the machine, and the baseline is measured once more
(:meth:`Search._recheck_baseline`). Seen on a busy 2-core box: the baseline's only launch at 22.8 tokens/s,
an n-gram probe that never drafted at 741.7, the model's real speed ~700."""

NGRAM_MOD_N_MIN = 48
"""llama-server's default ``--spec-ngram-mod-n-min`` (common/common.h ``common_params_speculative_ngram_mod``)."""


@dataclass(frozen=True)
class SearchSettings:
    """Knobs of :class:`Search`.

    Attributes:
        n_predict: generated tokens per request.
        baseline_repetitions: repetitions of the first baseline launch (screening reference).
        probe_repetitions: repetitions of probe and refine launches.
        max_pairs: at most this many adjacent pairs per finalist (the sequential test's looks).
        alpha: total error of the sequential test (``tuner.calibration.pairing``).
        budget_s: time budget in seconds (first launch to decision).
        plan: plan prompts and ``n_predict`` from the first warm-up (:meth:`Search.plan_protocol`).
        min_n_predict: the plan never goes below this many generated tokens per request.
        confirm_within, confirm_within_busy: when no screened candidate beat the baseline, the best
            one at least this fraction of its speed (on a busy machine: the second) is still confirmed
            in paired rounds (:meth:`Search._contenders`).
        min_n_predict_ngram: nor below this many when the plan has n-gram types (fewer prompts
            first): an n-gram type drafts only once the last ``size_n`` generated tokens (12 by default
            for ngram-simple and map-k, 24 for ngram-mod: common/arg.cpp ``--spec-ngram-*``) repeat the
            text so far, so the first dozen tokens of every request never draft. Measured on Gemma 3
            270M with prompts that copy a span: ngram-simple drafted 60 of 96 tokens on a code prompt,
            0 of 32; the planner had cut a busy sweep to 32 tokens, and the n-gram types lost.
        min_prompts: nor below this many prompts.
        side_by_side: paired rounds with the baseline's server and the finalist's server running at
            the same time, the same request sent to one and then the other (module docstring); for
            weights mmapped in host memory (CPU), where two servers on one GGUF share the page cache.
            False: alternating launches.
        min_gain: see :func:`tuner.calibration.decide.decide`.
        draft_lengths: ``n_max`` values the prediction covers.
        refine_per_draft: draft lengths measured per draft after the probe (more when a refit asks).
        finalists: at most this many candidates are confirmed.
        request_timeout_s: per-request HTTP timeout.
        loser_ratio: a probe/refine run is stopped early once its tokens/s so far fall below this
            fraction of the baseline (a clear loser; its per-position counters still feed the prediction).
        p_min_variant: after the refine stage, the best measured draft length of each draft model is
            measured once more with this ``--spec-draft-p-min`` (the draft stops drafting once its own
            probability of the next token falls below it: common/speculative.cpp), which cuts wasted draft
            tokens where acceptance falls off; ``None`` turns the variant off.
        explore_per_draft: extra draft lengths measured per draft after the refine stage while more
            than ``explore_spare`` of the budget is left: unmeasured neighbours (±1) of every measured
            length within ``explore_within`` of the draft's best measured tokens/s. The cost model's
            curve and one noisy run can stop the refine stage on a local maximum (measured on the CPU
            here: n_max 2 picked at 108 tokens/s, n_max 5 ran at 118, with two thirds of the budget
            unspent); 0 turns this off.
        explore_spare: fraction of ``budget_s`` that must still be left to explore (the rest is kept
            for the confirmation rounds).
        explore_within: a measured length at least this fraction of the best one's tokens/s has its
            neighbours explored.
        rescreen_within: on a busy machine, draft-model configurations screened within this fraction of
            the best one's ratio are measured once more before the finalists are chosen
            (:meth:`Search._rescreen_near_ties`); 0 turns it off.
        long_share: fraction (0..1) of served requests that are long-context ones; the ratios that rank
            and confirm candidates are weighted to that mix (:class:`~tuner.calibration.pairing.Mix`).
            ``None`` = the prompt set's own share (every request weighs the same).
    """

    n_predict: int = 128
    baseline_repetitions: int = 1
    probe_repetitions: int = 1
    max_pairs: int = MAX_PAIRS
    alpha: float = ALPHA
    budget_s: float = DEFAULT_BUDGET_S
    plan: bool = True
    min_n_predict: int = 32
    min_n_predict_ngram: int = 64
    confirm_within: float = 0.9
    confirm_within_busy: float = 0.8
    min_prompts: int = 2
    side_by_side: bool = False
    min_gain: float = MIN_GAIN
    draft_lengths: tuple[int, ...] = DRAFT_LENGTHS
    refine_per_draft: int = 2
    finalists: int = 2
    request_timeout_s: float = 300.0
    loser_ratio: float = 0.5
    p_min_variant: float | None = 0.75
    explore_per_draft: int = 3
    explore_spare: float = 0.5
    explore_within: float = 0.95
    rescreen_within: float = 0.88
    long_share: float | None = None


Emit = Callable[..., None]
"""``emit(kind, message, candidate=None, measurement=None, detail=None)``."""


class BaselineFailed(DraftwiseError, RuntimeError):
    """The target alone could not be measured; ``measurement.error`` says why."""

    def __init__(self, measurement: Measurement) -> None:
        self.measurement = measurement
        super().__init__(f"the baseline (target alone) failed: {measurement.error}")


class _UntilDeadline(threading.Event):
    """A cancel event for one launch's start-up wait: reads as set once ``cancel`` is set or
    ``time.monotonic()`` passes ``deadline()`` (``None`` = no deadline yet). Only ``is_set`` is meaningful
    (the supervisor's ready wait polls it)."""

    def __init__(self, cancel: threading.Event, deadline: Callable[[], float | None]) -> None:
        super().__init__()
        self._cancel = cancel
        self._deadline = deadline

    def is_set(self) -> bool:
        d = self._deadline()
        return self._cancel.is_set() or (d is not None and time.monotonic() >= d)


class Search:
    """One sweep over a :class:`CandidatePlan`.

    Args:
        launch_fn: starts a server per candidate.
        plan: the candidates.
        prompts: ``(index, prompt)`` pairs used for every candidate.
        settings: :class:`SearchSettings`.
        cancel: set to stop (raises :class:`~tuner.calibration.measure.Cancelled` out of :meth:`run`).
        emit: event sink (see :data:`Emit`).
        clock: ``time.monotonic`` (replaceable in tests).
        busy: ``busy() -> bool``, the load watcher's "other programs are using the CPU" so far; while
            True the optional stages (exploration, refine lengths after the first; the ``p_min``
            variant is skipped) keep twice the paired rounds' reserve, so the remaining budget goes
            to more pairs; the probes and the first refine length keep the plain reserve
            (:meth:`confirm_reserve_s`).
    """

    def __init__(
        self,
        launch_fn: LaunchFn,
        plan: CandidatePlan,
        prompts: Sequence[tuple[int, Prompt]],
        settings: SearchSettings,
        cancel: threading.Event,
        emit: Emit,
        clock: Callable[[], float] = time.monotonic,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.launch_fn = self._bounded(launch_fn)
        self.plan = plan
        self.prompts = list(prompts)
        self.s = settings
        self.cancel = cancel
        self._emit = emit
        self.clock = clock
        self.t0 = clock()
        self.measurements: list[Measurement] = []
        self.unmeasured: list[Candidate] = []
        """Candidates skipped because the time budget was spent (probe and refine stages)."""
        self.baseline_outputs: dict[tuple[int, int], str] = {}
        self.base_tps: float | None = None
        self.curves: dict[str, list[tuple[int, float, float]]] = {}
        self._load_s: list[float] = []
        self._pending_s = 0.0
        self._launch_est: tuple[float, float | None, int] = (0.0, None, 0)
        """The launch under way: ``(its estimate in _pending_s, predicted tokens/s, repetitions)``."""
        self._queued_probes: tuple[int, int] = (0, 0)
        """``(probes not yet started, repetitions each)``: their estimate counts in the ETA from the
        first warm-up on (before, the ETA during the baseline left them out and then jumped up)."""
        self.n_predict = settings.n_predict
        """Generated tokens per request (the plan may lower it after the first warm-up)."""
        self.warmup_tps: float | None = None
        """The first launch's warm-up speed (tokens/s); ``None`` until timed."""
        self.planned: dict[str, object] = {}
        """What :meth:`plan_protocol` chose (also sent as event ``"budget"``)."""
        self._next_rep = max(settings.baseline_repetitions, settings.probe_repetitions)
        self._finished = False
        self._confirming = False
        self._confirm_left: list[Candidate] = []
        """Finalists whose paired rounds have not ended (the current one first), for the ETA."""
        self._look_now: Look | None = None
        """The sequential test's latest look at the current finalist (``None`` before its first pair)."""
        self._pair_t0: float | None = None
        """Clock reading when the current pair (side by side) or round (alternating) began."""
        self._shown_progress = 0.0
        self.finalists_selected = settings.finalists
        """Finalists the paired rounds were planned for (the sequential test's error is split over them)."""
        self.busy = busy or (lambda: False)
        self.mix = Mix.of(self.prompts, settings.long_share)
        """The served mix every ratio of the search is weighted by."""
        self.hard_deadline_s: float | None = None
        """``time.monotonic()`` value of the hard time limit (:data:`HARD_LIMIT`), set once the baseline
        was measured; ``None`` before."""
        self.cut_by_budget: list[str] = []
        """Labels of the launches the hard time limit cut short or kept from starting."""
        self.notes: list[str] = []
        """Sentences about the sweep itself for the decision (a re-measured baseline, a time-limit cut)."""
        self._baseline_rechecked = False
        self.baseline_unsteady = False
        """True when the model alone measured inconsistently across launches and no re-measurement settled
        it (:meth:`_recheck_baseline`): screening comparisons are then not evidence either way."""
        self.max_pairs = settings.max_pairs
        """Looks per finalist of the sequential test (``max_pairs``); the decision must use the same.
        (More looks when busy were tried: each look then gets a smaller share of the error, and short
        busy sweeps ended inconclusive after 2 pairs where 3 would have decided.)"""

    # ---- time accounting -------------------------------------------------------------------
    def _bounded(self, launch_fn: LaunchFn) -> LaunchFn:
        """``launch_fn`` whose start-up wait also ends at the hard time limit (then :class:`LaunchError`
        "not started: the time budget ran out"; a user's cancel still raises ``Cancelled``)."""

        def launch(c: Candidate, cancel: threading.Event) -> Launch:
            try:
                return launch_fn(c, _UntilDeadline(cancel, lambda: self.hard_deadline_s))
            except Cancelled:
                if cancel.is_set():
                    raise
                raise LaunchError("not started: the time budget ran out") from None

        return launch

    def _arm_hard_limit(self) -> None:
        """Start the hard time limit (:data:`HARD_LIMIT` × budget from the sweep's start)."""
        self.hard_deadline_s = time.monotonic() + (HARD_LIMIT * self.s.budget_s - self.elapsed_s())

    def past_hard_limit(self) -> bool:
        """True once the hard time limit has passed."""
        return self.hard_deadline_s is not None and time.monotonic() >= self.hard_deadline_s

    def elapsed_s(self) -> float:
        """Seconds since the search started."""
        return self.clock() - self.t0

    def remaining_s(self) -> float:
        """Budget left (may be negative)."""
        return self.s.budget_s - self.elapsed_s()

    def _tps(self) -> float | None:
        return self.base_tps or self.warmup_tps

    def _load(self) -> float:
        return sum(self._load_s) / len(self._load_s) if self._load_s else 5.0

    def rep_s(self, gen_tokens_per_s: float | None = None, n_prompts: int | None = None,
              n_predict: int | None = None) -> float:
        """Estimated seconds of one repetition (every prompt once) at ``gen_tokens_per_s``."""
        tps = gen_tokens_per_s or self._tps() or 20.0
        n_p = len(self.prompts) if n_prompts is None else n_prompts
        return n_p * ((n_predict or self.n_predict) / max(tps, 1e-3) + 0.05)

    def estimate_s(self, gen_tokens_per_s: float | None, repetitions: int) -> float:
        """Estimated seconds of one launch: mean load time + warm-up + requests at ``gen_tokens_per_s``."""
        tps = gen_tokens_per_s or self._tps() or 20.0
        return self._load() + 16 / max(tps, 1e-3) + self.rep_s(tps) * repetitions

    def _ngram_only(self) -> bool:
        """True when the plan has n-gram types and no draft model or MTP: the leader is an n-gram type,
        and its paired rounds need a fresh launch per pair (its pool must not carry over)."""
        return bool(self.plan.ngram) and not self.plan.drafts and self.plan.mtp is None

    def pair_s(self) -> float:
        """Estimated seconds of one more adjacent pair: a repetition on each side, plus one launch when
        launches alternate (each of them holds two repetitions) or the leader is an n-gram type (one
        launch per pair); side by side with a draft model, no launch per pair."""
        launch = self._load() + 16 / max(self._tps() or 20.0, 1e-3)
        per_pair_launch = not self.s.side_by_side or self._ngram_only()
        return 2 * self.rep_s() + (launch if per_pair_launch else 0.0)

    def confirm_reserve_s(self, optional: bool = False) -> float:
        """Budget the screening stages leave for the paired rounds: ``MIN_PAIRS + 1`` pairs of the
        leader (side by side: ``MIN_PAIRS``, each one repetition) and the launches that open them.

        ``optional``: the reserve of the optional stages (exploration, the ``p_min`` variant): twice
        the pairs while the machine is busy (noisier pairs: more of them are needed); the refine
        stage after its first length counts as optional. The probes and the first refine length keep
        the plain reserve (one spare pair while busy): the length the probe's curve predicts fastest
        is what the pairs then confirm. (Doubling it for them too left a busy 90 s sweep with
        only the ``n_max`` 16 probe to confirm — every predicted-better length skipped at 34 s with
        56 s left — and it ended inconclusive on that probe: "no speculation", 0.83 of the best.)"""
        launch = self._load() + 16 / max(self._tps() or 20.0, 1e-3)
        busy = self.busy()
        # busy: optional steps keep twice the pairs; the others one spare pair (the estimates made from
        # screening speeds run short under load: a busy 60 s sweep got 2 of its 3 reserved pairs)
        extra = (MIN_PAIRS if optional else 1) if busy else 0
        if self.s.side_by_side:
            return (MIN_PAIRS + extra) * self.pair_s() + 2 * launch
        return (MIN_PAIRS + 1 + extra) * self.pair_s() + self.estimate_s(None, 1)

    def _planned_remaining_s(self) -> float | None:
        """Estimated seconds until the decision: the current step, then the rest of the budget (the
        paired rounds use what is left while the test is inconclusive), or less when little is
        planned. ``None`` before the first warm-up was timed."""
        if self._tps() is None:
            return None
        pending = max(0.0, self._pending_s)
        if self._finished:
            return pending
        left = max(0.0, self.remaining_s())
        if self._confirming:
            # the current pair's own estimate is inside (less what it has run): no pending on top
            return min(left, self._confirm_estimate_s())
        n_q, reps_q = self._queued_probes
        queued = n_q * self.estimate_s(None, reps_q)  # probes beyond the budget are skipped: capped below
        return max(pending, min(left, pending + queued + self.confirm_reserve_s()))

    def _confirm_estimate_s(self) -> float:
        """Expected seconds of the paired rounds still to run (the ETA while confirming).

        For the current finalist: the pairs its sequential test is expected to need — ``pairs_needed``
        of the latest look (at the current mean and spread), at least ``MIN_PAIRS``, at most
        ``max_pairs``; ``max_pairs`` when its mean gain is not above the bar (it runs on until a
        futility verdict or the last look); ``MIN_PAIRS`` before two pairs give a spread — less the
        time the current pair has already run. Each later finalist: ``MIN_PAIRS`` pairs and its
        launches. The caller caps this at the budget left. Before: the whole budget left, so the bar
        jumped to the end whenever the test concluded early."""
        if not self._confirm_left:
            return 0.0
        per_pair = self.pair_s()
        launch = self._load() + 16 / max(self._tps() or 20.0, 1e-3)
        look = self._look_now
        n = look.n if look is not None else 0
        if look is None or n < 2:
            want = MIN_PAIRS
        elif look.verdict != "inconclusive":
            want = self.max_pairs if self._more_pairs_while_busy(look) else n
        else:
            want = look.pairs_needed if look.pairs_needed is not None else self.max_pairs
            want = max(MIN_PAIRS, min(self.max_pairs, want))
        ran = (self.clock() - self._pair_t0) if self._pair_t0 is not None else 0.0
        # the pair under way (less what it has run; an overrun one is still under way: not below 0),
        # then the rest, as far as the budget left affords them (a pair that does not fit is not run)
        if want > n:
            now = max(0.0, per_pair - ran)
            fit = int(max(0.0, self.remaining_s() - now) // per_pair)
            current = now + min(want - n - 1, fit) * per_pair
        else:
            current = 0.0
        if look is None:
            current += launch  # the finalist's (and, side by side, the baseline's) server still to start
        later = (len(self._confirm_left) - 1) * (MIN_PAIRS * per_pair + launch)
        return current + later

    def emit(self, kind: str, message: str, **kw: object) -> None:
        """Send an event with progress and ETA (see the module docstring: never 100 % while work
        remains, ETA ``None`` until the first warm-up is timed)."""
        elapsed = self.elapsed_s()
        eta = self._planned_remaining_s()
        if eta is None:
            progress = 0.0
        else:
            progress = elapsed / (elapsed + eta) if (elapsed + eta) > 0 else 0.0
            if kind != "finished":
                progress = min(progress, 0.99)
        progress = max(progress, self._shown_progress)  # never moves back
        self._shown_progress = progress
        self._emit(kind, message, progress=min(1.0, progress), elapsed_s=elapsed, eta_s=eta, **kw)

    # ---- the protocol ---------------------------------------------------------------------------
    def plan_protocol(self, load_s: float, warmup_tps: float | None) -> tuple[list[tuple[int, Prompt]], int] | None:
        """Fit the protocol into the budget from the first launch's load time and warm-up speed.

        The sweep's cost in repetitions (``R`` = every prompt once at ``n_predict``) and launches (``L``
        = a load and a warm-up): the baseline's screening launch, one probe per planned candidate, and
        ``refine_per_draft`` refine launches per draft model (the lengths its probe predicts fastest:
        without them the pairs could only confirm the ``n_max`` 16 probe), and the leader's pairs (side
        by side ``MIN_PAIRS + 1``, or ``max_pairs`` while the load watcher says the machine is busy: two
        repetitions each and two launches in all; alternating: ``MIN_PAIRS + 1`` pairs, one launch
        each) — for ``P`` probes, ``F`` refine launches and ``N`` pairs side by side about
        ``(1 + P + F + 2·N) · R + (3 + P + F) · L`` seconds. When that
        exceeds 85 % of the budget, ``n_predict`` is lowered first (to ``min_n_predict``; with n-gram
        types in the plan first to ``min_n_predict_ngram``, then the prompts, then further), then the
        prompts (to ``min_prompts``); when even that does not fit, event ``"budget"`` says the budget is
        too small for one meaningful comparison and which budget would do.

        Returns:
            ``(prompts, n_predict)`` to use from now on, or ``None`` to keep them.
        """
        self.warmup_tps = warmup_tps
        self._load_s.append(load_s)
        if not self.s.plan or not warmup_tps:
            return None
        n_probes = len(self.plan.drafts) + len(self.plan.ngram) + (1 if self.plan.mtp else 0)
        launch = load_s + 16 / warmup_tps
        # the pairs to plan for: MIN_PAIRS is the least that can decide; on a busy machine the pairs are
        # noisier, and a t test on 3 pairs has 2 degrees of freedom, so plan for the most pairs instead
        # (shorter requests, more of them): a few more pairs decide far more often than longer ones
        busy = self.busy()
        pairs = (self.s.max_pairs if busy else MIN_PAIRS + 1) if self.s.side_by_side else MIN_PAIRS + 1
        n_refine = self.s.refine_per_draft * (len(self.plan.drafts) + (1 if self.plan.mtp else 0))
        reps = 1 + n_probes + n_refine + 2 * pairs
        pair_launches = (pairs if self._ngram_only() else 2) if self.s.side_by_side else 1 + MIN_PAIRS
        launches = 1 + n_probes + n_refine + pair_launches

        def cost(n_prompts: int, n_predict: int) -> float:
            return reps * self.rep_s(warmup_tps, n_prompts, n_predict) + launches * launch

        target = 0.85 * self.s.budget_s
        n_prompts, n_predict = len(self.prompts), self.n_predict
        # n-gram types in the plan: requests stay long enough for them to draft while fewer prompts
        # can make it fit; only then are they shortened further (a draft model drafts from the start)
        floors = [self.s.min_n_predict]
        if self.plan.ngram:
            floors.insert(0, max(self.s.min_n_predict, min(self.s.min_n_predict_ngram, n_predict)))
        for floor in floors:
            while cost(n_prompts, n_predict) > target and n_predict > floor:
                n_predict = max(floor, int(n_predict * 0.75))
            while cost(n_prompts, n_predict) > target and n_prompts > min(self.s.min_prompts, len(self.prompts)):
                n_prompts -= 1
        # the smallest comparison: the baseline, the first probe and the leader's pairs
        least = MIN_PAIRS if self.s.side_by_side else MIN_PAIRS + 1
        smallest = ((2 + 2 * least) * self.rep_s(warmup_tps, n_prompts, n_predict)
                    + (2 + (2 if self.s.side_by_side else 1 + MIN_PAIRS)) * launch)
        self.planned = {"n_predict": n_predict, "prompts": n_prompts, "load_s": load_s, "pairs": pairs, "busy": busy,
                        "warmup_gen_tokens_per_s": warmup_tps, "planned_s": cost(n_prompts, n_predict),
                        "smallest_s": smallest}
        msg = (f"protocol planned from the warm-up ({warmup_tps:.1f} tokens/s, load {load_s:.1f} s): "
               f"{n_prompts} prompt{'s' if n_prompts != 1 else ''} × {n_predict} tokens per repetition, room for "
               f"{pairs} pairs" + (" (the machine is busy: more, shorter pairs)" if busy else ""))
        if smallest > self.s.budget_s:
            need = math.ceil(smallest / 0.85 / 30) * 30
            msg += (f"; the budget of {self.s.budget_s:.0f} s is too small for one meaningful comparison at "
                    f"this speed (the smallest takes about {smallest:.0f} s): a budget of about {need} s would do")
            self.planned["budget_too_small"] = True
            self.planned["suggested_budget_s"] = need
        changed = (n_prompts, n_predict) != (len(self.prompts), self.n_predict)
        if changed:  # before the event, so that its ETA is the planned protocol's
            self.prompts = self.prompts[:n_prompts]
            self.n_predict = n_predict
        # the launch under way was estimated before any speed was known (20 tokens/s, the default
        # protocol): re-estimate its requests at the warm-up's speed and the planned protocol (its load
        # and warm-up are done), so the first ETA is not the default guess (it read 96 s for any budget)
        old_est, predicted, n_reps = self._launch_est
        new_est = self.rep_s(predicted or warmup_tps) * n_reps
        self._pending_s += new_est - old_est
        self._launch_est = (new_est, predicted, n_reps)
        self.emit("budget", msg, detail=dict(self.planned))
        return (self.prompts, n_predict) if changed else None

    # ---- one launch ----------------------------------------------------------------------------
    def _measure(
        self, c: Candidate, reps: Sequence[int], stage: str, predicted: float | None = None,
        single_launch: bool = False,
    ) -> Measurement:
        est = self.estimate_s(predicted, len(reps))
        self._pending_s += est
        self._launch_est = (est, predicted, len(reps))
        self.emit("launch", f"{stage}: starting {c.label}", candidate=c)

        done = [0]

        def on_request(sample: Sample) -> None:
            # a running figure of one request: the chart waits for the whole launch ("measured")
            done[0] += 1
            total = len(self.prompts) * len(reps)
            self.emit("progress", f"{c.label}: request {done[0]} of {total}, {sample.gen_tokens_per_s:.1f} tokens/s",
                      candidate=c)

        first = not self.measurements and self.warmup_tps is None
        measure = measure_candidate if single_launch else measure_repetitions
        try:
            m = measure(
                self.launch_fn, c, self.prompts, reps, self.n_predict, self.cancel,
                baseline_outputs=None if c.is_baseline else self.baseline_outputs,
                on_request=on_request, request_timeout_s=self.s.request_timeout_s, stage=stage,
                predicted_gen_tokens_per_s=predicted,
                stop_if=None if (c.is_baseline or stage == "confirm") else self._clear_loser,
                after_warmup=self.plan_protocol if first else None,
                hard_deadline_s=self.hard_deadline_s,
            )
        finally:
            self._pending_s -= self._launch_est[0]
        if not m.samples and (m.cut_short or self.past_hard_limit()):
            self._cut(c, measured=False)
            return m
        if m.load_s is not None and not first:
            self._load_s.append(m.load_s)
        self.measurements.append(m)
        if m.ok:
            acc = f", acceptance {100 * m.acceptance:.0f} %" if m.acceptance is not None else ""
            msg = f"{c.label}: {m.gen_tokens_per_s:.1f} tokens/s{acc}"
            if m.stopped_early:
                msg += f" (stopped early after {len(m.samples)} of {len(self.prompts) * len(reps)} requests: " \
                       f"below {self.s.loser_ratio:.0%} of the baseline; never served unless re-measured)"
            if m.cut_short:
                self._cut(c, measured=True)
                msg += f" (cut short by the time limit after {len(m.samples)} requests)"
        else:
            msg = f"{c.label} failed: {m.error}"
        self.emit("measured", msg, candidate=c, measurement=m)
        return m

    def _cut(self, c: Candidate, measured: bool) -> None:
        """Book a launch the hard time limit ended (``measured``: it kept some requests)."""
        self.cut_by_budget.append(c.label)
        if not measured and not c.is_baseline and c not in self.unmeasured \
                and not any(m.candidate == c for m in self.measurements):
            self.unmeasured.append(c)
        if not measured:
            self.emit("skipped", f"{c.label}: not measured, the time limit ({HARD_LIMIT:.2f} × the "
                      f"{self.s.budget_s:.0f} s budget) was reached", candidate=c)

    def sweep_notes(self) -> list[str]:
        """Sentences about the sweep for the decision's reason: :attr:`notes`, and which launches the hard
        time limit cut short or kept from starting (``[]`` when none)."""
        out = list(self.notes)
        if self.cut_by_budget:
            names = ", ".join(dict.fromkeys(self.cut_by_budget))
            lim = HARD_LIMIT * self.s.budget_s
            lim_text = f"{lim:.0f}" if lim >= 20 else f"{lim:.1f}"
            out.append(f"The sweep stopped at its time limit ({lim_text} s for a {self.s.budget_s:.0f} s budget: the "
                       f"estimates from the warm-up ran short); cut short or kept from starting by it: {names}.")
        return out

    def _clear_loser(self, samples: Sequence[Sample]) -> bool:
        """True when the requests so far run below ``loser_ratio`` × the baseline's tokens/s on the
        same requests (Σ tokens ÷ Σ time on each side)."""
        if self.base_tps is None or not samples:
            return False
        toks = sum(max(1, (s.predicted_n or 1) - 1) for s in samples)
        secs = sum((s.predicted_ms or 0.0) for s in samples) / 1000.0
        tps = toks / secs if secs > 0 else min(s.gen_tokens_per_s for s in samples)
        ref = self._baseline_tps_on(samples) or self.base_tps
        return tps < self.s.loser_ratio * ref

    def _baseline_tps_on(self, samples: Sequence[Sample]) -> float | None:
        """The baseline's pooled tokens/s on the same (prompt, repetition) keys, ``None`` if it ran none."""
        base = {(s.prompt_index, s.repetition): s for m in self.measurements
                if m.candidate.is_baseline and m.ok and m.superseded is None for s in m.samples}
        same = [base[k] for k in ((s.prompt_index, s.repetition) for s in samples) if k in base]
        return pooled_tokens_per_s(same) if len(same) == len(samples) else None

    def _contender_seen(self) -> bool:
        """True once a speculative run has beaten the baseline's screening speed. Only then do the probes
        keep :meth:`confirm_reserve_s` for the paired rounds: with no contender the reserve would be kept
        for nobody while candidates went unmeasured (a new user's sweep skipped three n-gram probes at
        53 s of a 180 s budget, then ended with nothing to confirm)."""
        return any(m.ok and not m.candidate.is_baseline and (m.gen_tokens_per_s or 0.0) > (self.base_tps or 0.0)
                   for m in self.measurements)

    def _fits(self, est_s: float, reserve: bool = True, optional: bool = False) -> bool:
        """True when ``est_s`` fits the budget left (screening steps keep :meth:`confirm_reserve_s`;
        ``optional`` steps its busy-machine reserve)."""
        return self.remaining_s() - (self.confirm_reserve_s(optional) if reserve else 0.0) >= est_s

    # ---- stages --------------------------------------------------------------------------------
    def run(self) -> list[Measurement]:
        """Run all stages; returns every measurement (in order).

        Raises:
            BaselineFailed: the baseline could not be measured.
            Cancelled: the cancel event was set.
        """
        s = self.s
        probe_reps = list(range(s.probe_repetitions))
        # Probes: drafts first (the first one always), then MTP, then n-gram types.
        probes: list[Candidate] = list(self.plan.drafts)
        if self.plan.mtp is not None:
            probes.append(self.plan.mtp)
        probes.extend(self.plan.ngram)
        self._queued_probes = (len(probes), len(probe_reps))
        base = self._measure(self.plan.baseline, list(range(s.baseline_repetitions)), "baseline")
        if not base.ok or not base.gen_tokens_per_s:
            raise BaselineFailed(base)
        self.base_tps = float(base.gen_tokens_per_s)
        self._arm_hard_limit()
        for smp in base.samples:
            if smp.content is not None:
                self.baseline_outputs[(smp.prompt_index, smp.repetition)] = smp.content

        for i, c in enumerate(probes):
            est = self.estimate_s(None, len(probe_reps))
            self._queued_probes = (len(probes) - i - 1, len(probe_reps))
            if c is not probes[0] and not self._fits(est, reserve=self._contender_seen()):
                self.emit("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.unmeasured.append(c)
                continue
            never = self._never_drafted_type(c)
            if never is not None:
                self.emit("skipped", f"{c.label}: not measured, {never.candidate.label} never drafted on these "
                          "prompts and this draft length cannot change that", candidate=c)
                continue
            useless = self._chain_member_never_drafted(c)
            if useless is not None:
                self.emit("skipped", f"{c.label}: not measured, {useless.candidate.label} never drafted on these "
                          "prompts, so the chain would be its other member alone", candidate=c)
                continue
            m = self._measure(c, probe_reps, "probe")
            if m.no_drafts_at and m.samples:
                self._recheck_baseline(m)
            if m.ok and c.spec_type.startswith("draft"):
                self._predict(c)
        self._pending_s = 0.0

        self._refine(probe_reps)
        self._explore(probe_reps)
        self._rescreen_near_ties(probe_reps)
        self._p_min_variants(probe_reps)
        self._confirming = True
        self._confirm()
        self._finished = True
        return list(self.measurements)

    def _screening_baseline(self) -> tuple[int, Measurement] | None:
        """``(position, measurement)`` of the baseline launch in use for screening (not superseded)."""
        for i, m in enumerate(self.measurements):
            if m.candidate.is_baseline and m.stage == "baseline" and m.ok and m.superseded is None:
                return i, m
        return None

    def _recheck_baseline(self, idle_run: Measurement) -> None:
        """Measure the baseline once more when ``idle_run`` — a speculative launch that drafted nothing,
        so the model alone — ran more than :data:`BASELINE_DISAGREES` × faster or slower than the
        baseline's launch on the same requests (at most once per sweep, when it fits the budget).

        When the re-measurement agrees with ``idle_run`` (within the same factor) and not with the first
        launch, the first is marked ``superseded`` (kept in the record, never quoted as the model's speed
        nor used for screening) and the re-measurement becomes the baseline; otherwise both are kept and
        a note says the model's own speed varied. Either way a sentence goes to :attr:`notes`."""
        if self._baseline_rechecked:
            return
        found = self._screening_baseline()
        if found is None:
            return
        pos, first = found
        keys = {(x.prompt_index, x.repetition) for x in idle_run.samples}
        base_same = [x for x in first.samples if (x.prompt_index, x.repetition) in keys]
        b1, n1 = pooled_tokens_per_s(base_same), pooled_tokens_per_s(idle_run.samples)
        if not b1 or not n1 or 1 / BASELINE_DISAGREES <= n1 / b1 <= BASELINE_DISAGREES:
            return
        self._baseline_rechecked = True
        # the sentences quote each launch's own figure, as the launch table does (the check above compares
        # the same requests)
        f1, fn = first.gen_tokens_per_s or b1, idle_run.gen_tokens_per_s or n1
        reps = sorted({x.repetition for x in first.samples})
        est = self.estimate_s(n1, len(reps))
        if not self._fits(est, reserve=False):
            self.notes.append(f"The model alone measured {f1:.1f} tokens/s in the baseline launch but {fn:.1f} in "
                              f"{idle_run.candidate.label}, which drafted nothing; the budget left no time to measure "
                              "it again, so figures against the baseline are uncertain.")
            self.baseline_unsteady = True
            return
        self.emit("error", f"no speculation: measured again — {f1:.1f} tokens/s in its launch, {fn:.1f} in "
                  f"{idle_run.candidate.label}, which drafted nothing (the same model alone)")
        again = self._measure(self.plan.baseline, reps, "baseline")
        b2 = pooled_tokens_per_s([x for x in again.samples if (x.prompt_index, x.repetition) in keys]) \
            if again.ok else None
        if not b2:
            return
        f2 = again.gen_tokens_per_s or b2
        agrees_idle = 1 / BASELINE_DISAGREES <= b2 / n1 <= BASELINE_DISAGREES
        agrees_first = 1 / BASELINE_DISAGREES <= b2 / b1 <= BASELINE_DISAGREES
        if agrees_idle and not agrees_first:
            why = (f"disturbed: {f1:.1f} tokens/s, while {idle_run.candidate.label} (which drafted nothing) ran "
                   f"{fn:.1f} and a second baseline launch {f2:.1f}")
            self.measurements[pos] = replace(first, superseded=why)
            self.base_tps = float(again.gen_tokens_per_s or b2)
            for smp in again.samples:
                if smp.content is not None:
                    self.baseline_outputs[(smp.prompt_index, smp.repetition)] = smp.content
            self.notes.append(f"The first launch of the model alone was disturbed ({f1:.1f} tokens/s; "
                              f"{idle_run.candidate.label}, which drafted nothing, ran {fn:.1f}); it was measured "
                              f"again at {f2:.1f} tokens/s, and that launch is the reference.")
        elif not agrees_first:
            self.notes.append(f"The model alone ran at {f1:.1f}, {fn:.1f} ({idle_run.candidate.label}, which drafted "
                              f"nothing) and {f2:.1f} tokens/s in three launches: its speed varied with the "
                              "machine's load, so figures from launches minutes apart (screening) are not evidence "
                              "either way; only pairs measured next to each other in time can show a speedup.")
            self.baseline_unsteady = True

    def _never_drafted_type(self, c: Candidate) -> Measurement | None:
        """An earlier run of the same plain n-gram type as ``c`` (same placement) that never drafted at the
        served sampling, and whose lookups were no stricter than ``c``'s, else ``None``.

        Whether an n-gram type drafts depends on its lookup finding a match, not on its draft length
        (common/speculative.cpp ``common_speculative_impl_ngram_simple`` drafts the m-gram after a found
        n-gram; ngram-map likewise). ngram-mod is the exception: it drops a draft shorter than its
        ``n_min`` (``common_speculative_impl_ngram_mod::draft``), so a variant with a smaller
        ``ngram_n_min`` than the run that drafted nothing (default 48) is still measured. Chains and draft
        models never match."""
        if not c.spec_type.startswith("ngram") or "," in c.spec_type:
            return None
        return self._ngram_run_that_never_drafted(c.spec_type, c)

    def _ngram_run_that_never_drafted(self, spec_type: str, c: Candidate) -> Measurement | None:
        """An earlier run of the plain n-gram type ``spec_type`` at ``c``'s placement that never drafted, with
        lookups no stricter than ``c``'s (for ngram-mod: an ``n_min`` no larger than ``c``'s), else ``None``."""
        for m in self.measurements:
            if not (m.no_drafts_at and m.candidate.spec_type == spec_type and m.candidate.placement == c.placement):
                continue
            if spec_type == "ngram-mod" and (c.ngram_n_min or NGRAM_MOD_N_MIN) < (m.candidate.ngram_n_min
                                                                                 or NGRAM_MOD_N_MIN):
                continue
            return m
        return None

    def _chain_member_never_drafted(self, c: Candidate) -> Measurement | None:
        """For a chain (``c.spec_types`` with an n-gram type and a draft model, ``--spec-type a,b``): an earlier
        run of its n-gram member alone that never drafted on these prompts (same placement; for ngram-mod,
        at an ``n_min`` no larger than the chain's), else ``None``. The chain then drafts only through
        its other member, and serving it would add a lookup that finds nothing (measured on a slow target:
        a chain with an ngram-mod that never drafted won over 3 pairs while the plain draft went
        unconfirmed; the decision then named an n-gram lookup that contributed nothing)."""
        if len(c.spec_types) < 2:
            return None
        for t in c.spec_types:
            if t.startswith("ngram") and (m := self._ngram_run_that_never_drafted(t, c)) is not None:
                return m
        return None

    def _runs_of(self, probe: Candidate) -> list[Measurement]:
        """Successful measurements of the same draft/type/placement as ``probe`` (any n_max)."""
        return [
            m for m in self.measurements
            if m.ok and m.candidate.spec_type == probe.spec_type and m.candidate.draft_path == probe.draft_path
            and m.candidate.placement == probe.placement and m.candidate.p_min == probe.p_min
            and m.candidate.draft_sampling == probe.draft_sampling
        ]

    def _group(self, c: Candidate) -> str:
        return f"{c.spec_type}|{c.draft_path}|{c.placement}" + (f"|{c.draft_sampling}" if c.draft_sampling else "")

    def _predict(self, probe: Candidate) -> list[tuple[int, float, float]]:
        """(Re)fit the cost model of ``probe``'s draft and predict the curve; emits ``"predicted"``."""
        runs = self._runs_of(probe)
        long_run = next((m for m in runs if m.counts and m.counts.accepted_per_pos and m.counts.drafts_total), None)
        if long_run is None or long_run.counts is None or self.base_tps is None:
            self.curves[self._group(probe)] = []
            return []
        fit_pts = []
        for m in runs:
            if m.counts and m.counts.drafts_total and m.gen_tokens_per_s:
                a = m.counts.accepted_tokens_total / m.counts.drafts_total
                k_eff = m.counts.drafted_per_step or float(m.candidate.n_max or 1)
                fit_pts.append((k_eff, a, float(m.gen_tokens_per_s)))
        model: CostModel = fit_cost_model(self.base_tps, fit_pts)
        curve = predict_curve(long_run.counts, model, self.s.draft_lengths)
        self.curves[self._group(probe)] = curve
        self.emit(
            "predicted",
            f"{probe.label}: predicted best n_max "
            + (f"{max(curve, key=lambda t: t[2])[0]}" if curve else "unknown"),
            candidate=probe,
            detail={"curve": [list(t) for t in curve], "cost_per_draft_token": model.per_draft_token,
                    "cost_per_step": model.per_step},
        )
        return curve

    def _measured_n_max(self, probe: Candidate) -> set[int]:
        return {m.candidate.n_max for m in self.measurements if self._group(m.candidate) == self._group(probe)
                and m.candidate.n_max is not None}

    def _refine(self, reps: list[int]) -> None:
        assert self.base_tps is not None
        bar = self.base_tps * (1.0 + self.s.min_gain / 2)
        probes = [c for c in (*self.plan.drafts, *( [self.plan.mtp] if self.plan.mtp else [])) if self._runs_of(c)]
        queue: list[tuple[float, Candidate, Candidate]] = []
        for probe in probes:
            curve = self.curves.get(self._group(probe)) or []
            done = self._measured_n_max(probe)
            promising = sorted((t for t in curve if t[2] > bar and t[0] not in done), key=lambda t: -t[2])
            for k, _acc, tps in promising[: self.s.refine_per_draft]:
                queue.append((tps, probe, probe.with_n_max(k)))
            if not curve and not any(m.candidate.n_max != probe.n_max for m in self._runs_of(probe)):
                # No per-position counters (no /metrics): fall back to a few fixed lengths.
                for k in (4, 8):
                    if k not in done:
                        queue.append((0.0, probe, probe.with_n_max(k)))
        queue.sort(key=lambda t: -t[0])
        extra_budget = {self._group(p): 2 for p in probes}
        refined = 0
        self._pending_s = sum(self.estimate_s(t[0] or None, len(reps)) for t in queue)
        while queue:
            if self.cancel.is_set():
                raise Cancelled()
            predicted, probe, c = queue.pop(0)
            est = self.estimate_s(predicted or None, len(reps))
            self._pending_s = max(0.0, self._pending_s - est)
            if c.n_max in self._measured_n_max(probe):
                continue
            # the first length the curve points to keeps the plain reserve; the rest keep the busy one
            if not self._fits(est, optional=refined > 0):
                self.emit("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.unmeasured.append(c)
                continue
            self._measure(c, reps, "refine", predicted or None)
            refined += 1
            curve = self._predict(probe)
            done = self._measured_n_max(probe)
            best_measured = max((m.gen_tokens_per_s or 0.0) for m in self._runs_of(probe))
            better = [t for t in curve if t[0] not in done and t[2] > max(bar, best_measured * 1.02)]
            g = self._group(probe)
            if better and extra_budget[g] > 0 and not any(q[2].n_max == max(better, key=lambda t: t[2])[0]
                                                          and self._group(q[2]) == g for q in queue):
                k, _acc, tps = max(better, key=lambda t: t[2])
                extra_budget[g] -= 1
                queue.append((tps, probe, probe.with_n_max(k)))
                queue.sort(key=lambda t: -t[0])
                self._pending_s += self.estimate_s(tps, len(reps))
        self._pending_s = 0.0

    def _explore_next(self, probe: Candidate) -> tuple[int, float] | None:
        """The next draft length to explore for ``probe``'s draft: ``(n_max, predicted tokens/s or 0)``.

        Unmeasured lengths next to (±1) a measured one whose tokens/s is within ``explore_within`` of
        the best measured, and those the cost model's curve predicts within ``explore_within`` of it;
        the one the curve ranks highest first (then the longer one).
        None when there is none, or when the draft's best run does not beat the baseline (by half of
        ``min_gain``, the refine stage's bar)."""
        rated = [(n, tps) for m in self._runs_of(probe)
                 if (tps := m.gen_tokens_per_s) and (n := m.candidate.n_max) is not None]
        if not rated:
            return None
        best = max(tps for _, tps in rated)
        if self.base_tps is None or best <= self.base_tps * (1.0 + self.s.min_gain / 2):
            return None  # a draft that does not beat the baseline anywhere: nothing worth a closer look
        done = self._measured_n_max(probe)
        allowed = set(self.s.draft_lengths)
        near = {n for n, tps in rated if tps >= self.s.explore_within * best}
        predicted = {t[0]: t[2] for t in self.curves.get(self._group(probe)) or []}
        # the neighbours, and any length the refitted curve itself puts within reach of the best
        # (one unlucky run next to it must not hide it)
        likely = {n for n, tps in predicted.items() if tps >= self.s.explore_within * best}
        options = ({k + d for k in near for d in (-1, 1)} | likely) & allowed - done
        if not options:
            return None
        k = max(options, key=lambda n: (predicted.get(n, 0.0), n))
        return k, predicted.get(k, 0.0)

    def _explore(self, reps: list[int]) -> None:
        """Spare budget after the refine stage: measure neighbours of the best draft lengths, so a
        noisy run or an imperfect cost model does not leave the search on a local maximum (see
        :class:`SearchSettings` ``explore_per_draft``)."""
        if self.s.explore_per_draft <= 0:
            return
        # On a busy machine one unlucky screening run is likelier still, so the exploration runs there
        # too, but keeps the busy reserve (twice the pairs) for the paired rounds. (Skipping it while
        # busy ended a sweep on n_max 2, 0.885 of the best length: bench/tune_quality.py --busy.)
        busy = self.busy()
        probes = [c for c in self.plan.drafts if self._runs_of(c)]
        for probe in probes:
            for _ in range(self.s.explore_per_draft):
                if self.cancel.is_set():
                    raise Cancelled()
                if self.remaining_s() < self.s.explore_spare * self.s.budget_s:
                    return
                nxt = self._explore_next(probe)
                if nxt is None:
                    break
                k, predicted = nxt
                est = self.estimate_s(predicted or None, len(reps))
                if not self._fits(est, optional=True):
                    if busy:
                        self.emit("skipped", "the machine is busy: no further draft lengths explored, the budget "
                                  "left goes to more paired rounds")
                    return
                self._measure(probe.with_n_max(k), reps, "refine", predicted or None)
                self._predict(probe)

    def _rescreen_near_ties(self, reps: list[int]) -> None:
        """On a busy machine, measure the draft-model (and MTP) configurations whose screening ratio is
        within ``rescreen_within`` of the best one once more, the best included, on the same requests,
        best first, while the optional stages' reserve allows; their screening comparisons then pool both
        launches (:func:`tuner.calibration.pairing.compare`) before the finalists are chosen.

        Why: one screening launch under another program's load decides which lengths reach the paired
        rounds, and draft lengths next to each other differ by a few per cent. Measured with
        ``bench/tune_quality.py --busy``: n_max 4, 3 and 5 screened at 96.7, 87.8 and 86.4 tokens/s, n_max 5
        was dropped, and the referee then measured it 13 % faster than the n_max 4 served — with 60 s
        of the budget unspent. The leader is measured again too: a second chance for the runners-up alone
        would favour them. Screening data only: the paired test's error is unaffected. Only while more
        than ``explore_spare`` of the budget is left, as for the exploration."""
        if not self.busy() or self.s.rescreen_within <= 0:
            return
        if self.remaining_s() < self.s.explore_spare * self.s.budget_s:
            # a short sweep needs its budget for pairs: a re-screen in a 45 s busy sweep left 3 pairs for
            # the leader, the fewest the sequential test decides on
            return
        rated: list[tuple[float, Candidate]] = []
        for m in self.measurements:
            c = m.candidate
            if not m.ok or m.stopped_early or c.is_baseline or not (c.draft_path or "draft-mtp" in c.spec_types):
                continue
            if any(r[1] == c for r in rated):
                continue
            cmp_ = compare(self.measurements, c, self.s.min_gain, mix=self.mix)
            if cmp_ is not None and not cmp_.paired and cmp_.speedup and cmp_.speedup > 1.0:
                rated.append((cmp_.speedup, c))
        if len(rated) < 2:
            return
        rated.sort(key=lambda t: -t[0])
        best = rated[0][0]
        ties = [c for sp, c in rated if sp >= self.s.rescreen_within * best]
        if len(ties) < 2:
            return
        for c in ties:
            if self.cancel.is_set():
                raise Cancelled()
            runs = [m for m in self.measurements if m.candidate == c and m.ok and m.stage in ("probe", "refine")]
            if len(runs) >= 2:
                continue
            est = self.estimate_s(runs[0].gen_tokens_per_s if runs else None, len(reps))
            if not self._fits(est, optional=True):
                self.emit("skipped", f"{c.label}: not measured again, the budget left goes to the paired rounds",
                          candidate=c)
                return
            self._measure(c, reps, "refine", runs[0].gen_tokens_per_s if runs else None)

    def _p_min_variants(self, reps: list[int]) -> None:
        """Measure ``p_min_variant`` at the best measured draft length of each draft (budget permitting).

        Only where it can matter: a draft model (or MTP) whose best length is at least 4 and that is within
        reach of the baseline (at least ``loser_ratio`` of its tokens/s)."""
        assert self.base_tps is not None
        pv = self.s.p_min_variant
        if not pv or self.busy():
            return
        # not for DSpark heads: there p_min is a threshold on the head's confidence output, not on the
        # draft token's probability (common/speculative.cpp common_speculative_impl_draft_dflash::draft),
        # and a head without a trained confidence head then drafts nothing
        probes = [c for c in (*self.plan.drafts, *([self.plan.mtp] if self.plan.mtp else []))
                  if self._runs_of(c) and c.spec_type != "draft-dspark"]
        for probe in probes:
            if self.cancel.is_set():
                raise Cancelled()
            best = max(self._runs_of(probe), key=lambda m: m.gen_tokens_per_s or 0.0)
            n_max = best.candidate.n_max or 0
            if n_max < 4 or (best.gen_tokens_per_s or 0.0) < self.s.loser_ratio * self.base_tps:
                continue
            c = replace(best.candidate, p_min=pv)
            if any(m.candidate == c for m in self.measurements):
                continue
            est = self.estimate_s(best.gen_tokens_per_s, len(reps))
            if not self._fits(est, optional=True):
                self.emit("skipped", f"{c.label}: not measured, the time budget is spent", candidate=c)
                self.unmeasured.append(c)
                continue
            self._pending_s = est
            self._measure(c, reps, "refine", best.gen_tokens_per_s)
        self._pending_s = 0.0

    def _contenders(self) -> list[tuple[float, Candidate]]:
        """Screened candidates worth confirming: ``(ratio on the same requests as the baseline,
        candidate)``, fastest first; stopped-early losers, failures and those not faster than the
        baseline are left out — except that when none is faster, the best one within screening noise
        of the baseline (ratio ≥ ``confirm_within``, ``confirm_within_busy`` on a busy machine) is
        still confirmed: one screening run each, not adjacent in time, cannot tell 0.95× from 1.3×
        (measured on Gemma 3 270M under load: ngram-simple screened 0.95× with every draft accepted,
        and nothing was confirmed). The finalists are chosen from screening data only, so the paired
        test's error is unaffected; it alone decides."""
        out: dict[tuple, tuple[float, Candidate]] = {}
        near: dict[tuple, tuple[float, Candidate]] = {}
        for m in self.measurements:
            if not m.ok or m.candidate.is_baseline or m.stopped_early or m.candidate.key in out:
                continue
            cmp_ = compare(self.measurements, m.candidate, self.s.min_gain, mix=self.mix)
            if cmp_ is None or cmp_.stopped_early or not cmp_.speedup:
                continue
            (out if cmp_.speedup > 1.0 else near)[m.candidate.key] = (cmp_.speedup, m.candidate)
        if not out and near:
            within = self.s.confirm_within_busy if self.busy() else self.s.confirm_within
            best = max(near.values(), key=lambda t: t[0])
            if best[0] >= within:
                return [best]
        return sorted(out.values(), key=lambda t: -t[0])

    def _confirm(self) -> None:
        """Paired rounds ``A B B A A B B A …`` for each finalist in turn until its sequential test is
        conclusive, it reached ``max_pairs`` pairs, or the budget is spent (module docstring)."""
        assert self.base_tps is not None
        s = self.s
        contenders = self._contenders()
        if not contenders:
            self.emit("skipped", "no speculative configuration beat the baseline on the same requests: "
                      "nothing to confirm")
            return
        keep = max(1, min(s.finalists, math.ceil(len(contenders) / 2)))
        finalists = [c for _sp, c in contenders[:keep]]
        # the sequential test's error is shared by the finalists chosen here, from screening data only
        # (independent of the pairs to come): fewer finalists, more error per look
        self.finalists_selected = len(finalists)
        self._confirm_left = list(finalists)
        for _sp, c in contenders[keep:]:
            self.emit("skipped", f"{c.label}: dropped after screening (successive halving)", candidate=c)
        try:
            if s.side_by_side:
                self._confirm_side_by_side(finalists)
            else:
                self._confirm_alternating(finalists)
        finally:
            self._confirm_left = []

    def _more_pairs_while_busy(self, look: Look | None) -> bool:
        """True when a finalist's test has said "faster" but the machine is busy and the budget affords
        another pair (less ``MIN_PAIRS`` pairs and a launch for each later finalist): its rounds go on
        up to ``max_pairs``. The verdict is already sound (the error bound holds for any stopping rule,
        and the decision takes the last look); what the extra pairs buy is the estimate: a test that
        stops at its first conclusive look on 3 noisy pairs stops when they happen to read high, and
        under load a pair's ratio spreads wider than idle (issue 10: "spend the remaining budget on more
        paired rounds")."""
        if look is None or look.verdict != "faster" or look.n >= self.max_pairs or not self.busy():
            return False
        per_pair = self.pair_s()
        launch = self._load() + 16 / max(self._tps() or 20.0, 1e-3)
        later = max(0, len(self._confirm_left) - 1) * (MIN_PAIRS * per_pair + launch)
        return self.remaining_s() - later >= per_pair

    def _next_finalist(self, c: Candidate) -> None:
        """ETA bookkeeping: the paired rounds of the finalists before ``c`` have ended."""
        while self._confirm_left and self._confirm_left[0] != c:
            self._confirm_left.pop(0)
        self._look_now = None
        self._pair_t0 = self.clock()

    def _confirm_alternating(self, finalists: Sequence[Candidate]) -> None:
        """Alternating launches ``A B B A …`` for each finalist (:meth:`_confirm`)."""
        s = self.s
        open_rep: int | None = None  # a baseline repetition of the last launch still without a partner
        for n_f, c in enumerate(finalists):
            self._next_finalist(c)
            while True:
                if self.cancel.is_set():
                    raise Cancelled()
                cmp_ = compare(self.measurements, c, s.min_gain, s.alpha, self.max_pairs, self.finalists_selected,
                               mix=self.mix)
                n_pairs = len(cmp_.pairs) if cmp_ is not None and cmp_.paired else 0
                look = cmp_.look if cmp_ is not None and cmp_.paired else None
                if look is not None:
                    self._look_now, self._pair_t0 = look, self.clock()
                if (cmp_ is not None and look is not None and look.verdict != "inconclusive"
                        and not self._more_pairs_while_busy(look)):
                    self.emit("confirmed", f"{c.label}: {look.verdict} than no speculation after {n_pairs} "
                              f"adjacent pairs ({cmp_.speedup:.2f}×)", candidate=c,
                              detail={"verdict": look.verdict, "pairs": n_pairs, "speedup": cmp_.speedup})
                    break
                if n_pairs >= self.max_pairs:
                    self.emit("confirmed", f"{c.label}: still inconclusive after {n_pairs} adjacent pairs",
                              candidate=c, detail={"verdict": "inconclusive", "pairs": n_pairs})
                    break
                opening = 0.0 if open_rep is not None else self.estimate_s(None, 1)
                block = opening + self.estimate_s(self.base_tps, 2) + self.estimate_s(None, 2)
                if not self._fits(block, reserve=False):
                    self.emit("skipped", f"{c.label}: paired round {n_pairs // 2 + 1} not run, the time budget "
                              "is spent", candidate=c, detail={"pairs": n_pairs})
                    return
                self._pending_s = block
                if open_rep is None:
                    open_rep = self._take_rep()
                    if not self._run_baseline([open_rep]):
                        return
                r1 = open_rep
                r2 = self._take_rep()
                b_ok = self._run_candidate(c, [r1, r2])
                # hold the next pair's baseline repetition in the same launch when another block fits
                more = n_f + 1 < len(finalists) or n_pairs + 2 < self.max_pairs
                # (this launch with two repetitions, then the next block's B and A)
                hold = more and self._fits(self.estimate_s(None, 2) + self.estimate_s(self.base_tps, 2)
                                           + self.estimate_s(None, 1), reserve=False)
                r3 = self._take_rep() if hold else None
                if not self._run_baseline([r2] + ([r3] if r3 is not None else [])):
                    return
                open_rep = r3
                if not b_ok:
                    break
        self._pending_s = 0.0

    def _take_rep(self) -> int:
        r = self._next_rep
        self._next_rep += 1
        return r

    def _run_baseline(self, reps: list[int]) -> bool:
        m = self._measure(self.plan.baseline, reps, "confirm", single_launch=True)
        if m.ok:
            for smp in m.samples:
                if smp.content is not None:
                    self.baseline_outputs[(smp.prompt_index, smp.repetition)] = smp.content
        return m.ok

    def _run_candidate(self, c: Candidate, reps: list[int]) -> bool:
        """One launch of ``c`` for ``reps`` (n-gram types: one launch per repetition, so their n-gram
        pool never carries over; each launch stays its own measurement, adjacent to a baseline launch)."""
        if needs_fresh_launch_per_repetition(c):
            return all(self._measure(c, [r], "confirm", single_launch=True).ok for r in reps)
        return self._measure(c, reps, "confirm", single_launch=True).ok

    # ---- side by side: both servers up, each request sent to the finalist and then to the baseline ----
    def _look(self, c: Candidate, extra: Sequence[float] = ()):
        prior = [p.ratio for p in adjacent_pairs(self.measurements, c, self.mix) if p.ratio > 0]
        return sequential_looks([*prior, *extra], self.s.min_gain, self.s.alpha, self.max_pairs,
                                self.finalists_selected)

    def _open_baseline(self) -> Launch | None:
        """Start the baseline's server for the side-by-side rounds and warm it up; ``None`` on failure."""
        self.emit("launch", "confirm: starting no speculation (kept running for the paired rounds)",
                  candidate=self.plan.baseline)
        try:
            launch = self.launch_fn(self.plan.baseline, self.cancel)
        except LaunchError as exc:
            if self.past_hard_limit():
                self._cut(self.plan.baseline, measured=False)
                return None
            self.emit("error", f"the baseline's server for the paired rounds did not start: {exc}")
            return None
        try:
            measure_request(launch.client, 0, Prompt(WARMUP_PROMPT), -1, min(16, self.n_predict),
                            self._request_timeout(), workload=launch.workload, greedy=True)
        except RequestError as exc:
            launch.stop()
            if self.past_hard_limit():
                self._cut(self.plan.baseline, measured=False)
                return None
            self.emit("error", f"the baseline's server for the paired rounds failed its warm-up: {exc}")
            return None
        return launch

    def _request_timeout(self) -> float:
        """HTTP timeout of the next request: ``request_timeout_s``, never past the hard time limit."""
        return bounded_timeout(self.s.request_timeout_s, self.hard_deadline_s)

    def _confirm_side_by_side(self, finalists: Sequence[Candidate]) -> None:
        """Paired rounds with the baseline's server kept running: every request of a finalist's launch
        is sent to the baseline's server right after, so the two sides of a pair are one request apart
        in time, and drift of the machine's load cancels within each pair. One repetition = one pair;
        the sequential test looks after each one (draft models: one launch for all a finalist's pairs,
        n-gram types: one launch per pair, so their n-gram pool never carries over)."""
        base_launch: Launch | None = None
        try:
            for c in finalists:
                self._next_finalist(c)
                while True:
                    if self.cancel.is_set():
                        raise Cancelled()
                    look = self._look(c)
                    if look.n:
                        self._look_now, self._pair_t0 = look, self.clock()
                    n_pairs = look.n
                    if (look.verdict != "inconclusive" and not self._more_pairs_while_busy(look)) \
                            or n_pairs >= self.max_pairs:
                        self.emit("confirmed", f"{c.label}: {look.verdict} than no speculation after {n_pairs} "
                                  "pairs" if look.verdict != "inconclusive" else
                                  f"{c.label}: still inconclusive after {n_pairs} pairs", candidate=c,
                                  detail={"verdict": look.verdict, "pairs": n_pairs})
                        break
                    est = self.estimate_s(self.base_tps, 1) + self.rep_s(self.base_tps) \
                        + (self.estimate_s(None, 0) if base_launch is None else 0.0)
                    if not self._fits(est, reserve=False):
                        self.emit("skipped", f"{c.label}: no further pair, the time budget is spent", candidate=c,
                                  detail={"pairs": n_pairs})
                        return
                    if base_launch is None:
                        base_launch = self._open_baseline()
                        if base_launch is None:
                            return
                    left = self.max_pairs - n_pairs
                    reps = [self._take_rep() for _ in range(1 if needs_fresh_launch_per_repetition(c) else left)]
                    self._pending_s = est
                    if not self._side_by_side_launch(c, base_launch, reps):
                        break
        finally:
            self._pending_s = 0.0
            if base_launch is not None:
                base_launch.stop()

    def _side_by_side_launch(self, c: Candidate, base: Launch, reps: list[int]) -> bool:
        """One launch of ``c`` whose every request is repeated on the baseline's server ``base``; appends
        the baseline's and the finalist's measurements (adjacent). False when the finalist failed."""
        n_pr = len(self.prompts)
        prompt_of = dict(self.prompts)
        a_samples: list[Sample] = []
        a_error: list[str] = []
        b_count = [0]
        base_sized: dict[int, str] = {}

        def on_request(sample: Sample) -> None:
            b_count[0] += 1
            if self.past_hard_limit():
                return  # this repetition stays incomplete on the baseline's side: it pairs with nothing
            try:
                # the same request in the same shape (endpoint, sampling seed, sized long-context text)
                a = measure_request(base.client, sample.prompt_index, prompt_of[sample.prompt_index],
                                    sample.repetition, self.n_predict, self._request_timeout(),
                                    workload=base.workload, sized=base_sized)
            except RequestError as exc:
                if not self.past_hard_limit():
                    a_error.append(str(exc))
                return
            a_samples.append(a)
            self.emit("progress", f"pair {sample.repetition}: {c.label} {sample.gen_tokens_per_s:.1f} vs no "
                      f"speculation {a.gen_tokens_per_s:.1f} tokens/s on the same request", candidate=c)

        def ratios_so_far(samples: Sequence[Sample]) -> list[float]:
            out = []
            for r in sorted({x.repetition for x in samples}):
                bs = [x for x in samples if x.repetition == r]
                as_ = [x for x in a_samples if x.repetition == r]
                if len(bs) == n_pr and len(as_) == n_pr:
                    cb, ca = pooled_tokens_per_s(bs, self.mix), pooled_tokens_per_s(as_, self.mix)
                    if cb and ca:
                        out.append(cb / ca)
            return out

        def stop_if(samples: Sequence[Sample]) -> bool:
            if a_error or self.past_hard_limit():
                return True
            if len(samples) % n_pr:
                return False
            look = self._look(c, ratios_so_far(samples))
            self._look_now, self._pair_t0 = look, self.clock()
            if (look.verdict != "inconclusive" and not self._more_pairs_while_busy(look)) or look.n >= self.max_pairs:
                return True
            return not self._fits(2 * self.rep_s(self.base_tps), reserve=False)

        self.emit("launch", f"confirm: starting {c.label} next to the running baseline", candidate=c)
        m = measure_candidate(self.launch_fn, c, self.prompts, reps, self.n_predict, self.cancel,
                              on_request=on_request, request_timeout_s=self.s.request_timeout_s, stage="confirm",
                              stop_if=stop_if, hard_deadline_s=self.hard_deadline_s)
        if self.past_hard_limit():
            m = replace(m, cut_short=True)
            if not m.samples:
                self._cut(c, measured=False)
                return False
        # stop_if ends a launch only at a repetition boundary (or on a baseline error): not a loser stop
        m = replace(m, stopped_early=False)
        by_key = {(x.prompt_index, x.repetition): x for x in a_samples}
        divs = [Divergence(x.prompt_index, x.repetition, off) for x in m.samples
                if x.content is not None and (a := by_key.get((x.prompt_index, x.repetition))) is not None
                and a.content is not None and (off := first_divergence(a.content, x.content)) is not None]
        compared = sum(1 for x in m.samples if x.content is not None and (x.prompt_index, x.repetition) in by_key)
        if m.ok:
            m = replace(m, divergences=tuple(divs), lossless=(not divs) if compared else None)
        m_a = Measurement(self.plan.baseline, samples=tuple(a_samples), stage="confirm", load_s=base.load_s,
                          error=a_error[0] if a_error and not a_samples else None)
        for x in a_samples:
            if x.content is not None:
                self.baseline_outputs[(x.prompt_index, x.repetition)] = x.content
        self.measurements.append(m_a)
        self.measurements.append(m)
        if m.load_s is not None:
            self._load_s.append(m.load_s)
        self.emit("measured", f"no speculation (paired): {m_a.gen_tokens_per_s or 0:.1f} tokens/s",
                  candidate=self.plan.baseline, measurement=m_a)
        msg = f"{c.label} (paired): {m.gen_tokens_per_s or 0:.1f} tokens/s" if m.ok else f"{c.label} failed: {m.error}"
        self.emit("measured", msg, candidate=c, measurement=m)
        return m.ok and not a_error


def run_search(
    plan: CandidatePlan,
    prompts: Sequence[tuple[int, Prompt]],
    settings: SearchSettings,
    workload: Workload,
    launch_fn: LaunchFn,
    cancel: threading.Event,
    emit: Emit,
    busy: Callable[[], bool] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchOutcome:
    """Run one sweep (:class:`Search`) and hand back what it found as a
    :class:`~tuner.calibration.outcome.SearchOutcome`; a cancel returns the measurements so far with
    ``cancelled`` set. ``workload`` is the one ``launch_fn``'s launches carry (the server's sampling
    defaults and the long-context verdict it collects are part of the outcome); ``clock``: tests.

    Raises:
        BaselineFailed: the baseline could not be measured.
    """
    search = Search(launch_fn, plan, prompts, settings, cancel, emit, clock=clock, busy=busy)
    try:
        measurements = search.run()
    except Cancelled:
        return SearchOutcome(measurements=tuple(search.measurements), unmeasured=tuple(search.unmeasured),
                             cancelled=True)
    reason = workload.long_plan.reason
    return SearchOutcome(
        measurements=tuple(measurements),
        unmeasured=tuple(search.unmeasured),
        min_gain=settings.min_gain,
        alpha=settings.alpha,
        max_pairs=search.max_pairs,
        finalists=search.finalists_selected,
        mix=search.mix,
        baseline_unsteady=search.baseline_unsteady,
        notes=tuple(Sentence.text(Slot.SWEEP, note) for note in search.sweep_notes()),
        protocol=dict(search.planned),
        server_sampling=dict(workload.server_sampling),
        long_context=Sentence.text(Slot.SWEEP, reason) if reason else None,
    )
