"""What a sweep is told before it starts: its settings, its event sink, and the one error it raises.

The time budget is not a setting: :class:`~tuner.calibration.search.budget.Budget` holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.errors import DraftwiseError

from ..candidates import DRAFT_LENGTHS
from ..pairing import ALPHA, ALTERNATING, BUSY_EXTRA_PAIRS, MAX_PAIRS, MIN_GAIN, SIDE_BY_SIDE
from ..results import Measurement
from ..verifycost import VerifyCurve


@dataclass(frozen=True)
class SearchSettings:
    """Knobs of :class:`Search`.

    Attributes:
        n_predict: generated tokens per request.
        baseline_repetitions: repetitions of the first baseline launch (screening reference).
        probe_repetitions: repetitions of probe and refine launches.
        max_pairs: at most this many adjacent pairs per finalist (the sequential test's looks).
        busy_extra_pairs: side by side on a machine that is busy when the paired rounds begin, the last look is
            this many pairs after ``max_pairs`` (``tuner.calibration.sequential.BUSY_EXTRA_PAIRS``: looks at 2, 4,
            8), reached only while the budget pays for the pairs; 0: none.
        alpha: total error of the sequential test (``tuner.calibration.pairing``).
        plan: plan prompts and ``n_predict`` from the first warm-up
            (:func:`tuner.calibration.search.protocol.plan_protocol`).
        min_n_predict: the plan never goes below this many generated tokens per request.
        confirm_within, confirm_within_busy: when no screened candidate beat the baseline, those at
            least this fraction of its speed (on a busy machine: the second) are still confirmed in paired
            rounds, one per draft group first (:meth:`~tuner.calibration.search.screening.Screening.contenders`).
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
        explore_spare: fraction of the time budget (:class:`~tuner.calibration.search.budget.Budget`) that
            must still be left to explore (the rest is kept for the confirmation rounds).
        explore_within: a measured length at least this fraction of the best one's tokens/s has its
            neighbours explored.
        rescreen_within: on a busy machine, draft-model configurations screened within this fraction of
            the best one's ratio are measured once more before the finalists are chosen
            (:meth:`~tuner.calibration.search.screening.Screening.rescreen_near_ties`); 0 turns it off.
        long_share: fraction (0..1) of served requests that are long-context ones; the ratios that rank
            and confirm candidates are weighted to that mix (:class:`~tuner.calibration.pairing.Mix`).
            ``None`` = the prompt set's own share (every request weighs the same).
        thread_cores: the physical cores the thread stage (``tuner.calibration.search.threads``) builds its
            settings for; None = no thread stage (the user chose the threads, or the host's cores are unknown).
        thread_openmp: the build's CPU backend uses OpenMP (``tuner.hardware.buffers.CpuBuffers.openmp``;
            None = unknown): which setting lets the threads sleep while they wait.
        verify_identity: :func:`tuner.calibration.verifycost.sweep_identity` of this tune; empty = no verify-cost
            stage (``tuner.calibration.search.verify``).
        known_curves: verify-cost curves measured before (a profile of this target keeps them); one whose key
            matches is used with no launch.
    """

    n_predict: int = 128
    baseline_repetitions: int = 1
    probe_repetitions: int = 1
    max_pairs: int = MAX_PAIRS
    busy_extra_pairs: int = BUSY_EXTRA_PAIRS
    alpha: float = ALPHA
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
    thread_cores: int | None = None
    thread_openmp: bool | None = None
    verify_identity: str = ""
    known_curves: tuple[VerifyCurve, ...] = ()

    @property
    def layout(self) -> str:
        """How the paired rounds run, as the sequential test's drift prior needs it
        (``tuner.calibration.sequential``): side by side or alternating launches."""
        return SIDE_BY_SIDE if self.side_by_side else ALTERNATING


Emit = Callable[..., None]
"""``emit(kind, message, candidate=None, measurement=None, detail=None)``."""


class BaselineFailed(DraftwiseError, RuntimeError):
    """The target alone could not be measured; ``measurement.error`` says why."""

    def __init__(self, measurement: Measurement) -> None:
        self.measurement = measurement
        super().__init__(f"the baseline (target alone) failed: {measurement.error}")


__all__ = ["BaselineFailed", "Emit", "SearchSettings"]
