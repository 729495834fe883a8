"""The protocol a sweep sends (prompts × ``n_predict`` per repetition), planned from the first warm-up.

The first launch's warm-up request gives the model's speed and the load time; :func:`plan_protocol` then
fits prompts × ``n_predict`` × launches into the budget (a slow target gets fewer and shorter requests;
when even the smallest protocol does not fit, the plan says so, with the budget that would). It is a
pure function: the measurer applies its answer to the sweep's :class:`Requests` and sends it as event
``"budget"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..candidates import CandidatePlan
from ..pairing import LOOK_STEP, MIN_PAIRS
from ..prompts import Prompt
from .settings import SearchSettings

PLAN_SHARE = 0.85
"""The planned protocol fills at most this share of the budget (the rest: estimates that run short)."""


@dataclass
class Requests:
    """What every launch of the sweep sends from now on (the plan may cut both after the first warm-up).

    Attributes:
        prompts: ``(index in the prompt set, prompt)`` pairs.
        n_predict: generated tokens per request.
    """

    prompts: list[tuple[int, Prompt]]
    n_predict: int


def rep_s(gen_tokens_per_s: float, n_prompts: int, n_predict: int) -> float:
    """Estimated seconds of one repetition (every prompt once, ``n_predict`` tokens each, 50 ms per request
    beyond generation) at ``gen_tokens_per_s``."""
    return n_prompts * (n_predict / max(gen_tokens_per_s, 1e-3) + 0.05)


def ngram_only(plan: CandidatePlan) -> bool:
    """True when the plan has n-gram types and no draft model or MTP: the leader is an n-gram type, and its
    paired rounds need a fresh launch per pair (its pool must not carry over)."""
    return bool(plan.ngram) and not plan.drafts and plan.mtp is None


@dataclass(frozen=True)
class ProtocolPlan:
    """What :func:`plan_protocol` chose.

    Attributes:
        prompts: prompts per repetition (the first ones of the set).
        n_predict: generated tokens per request.
        load_s: the first launch's load time (seconds).
        pairs: paired rounds planned for the leader.
        busy: the load watcher said the machine was busy when it was planned.
        warmup_tps: the first warm-up's generation speed (tokens/s).
        planned_s: the planned sweep's estimated seconds.
        smallest_s: the smallest meaningful comparison's estimated seconds (the baseline, one probe and
            the leader's pairs).
        budget_too_small: even that does not fit the budget.
        suggested_budget_s: the budget that would (seconds, a multiple of 30), when too small.
        message: the event's sentence.
    """

    prompts: int
    n_predict: int
    load_s: float
    pairs: int
    busy: bool
    warmup_tps: float
    planned_s: float
    smallest_s: float
    budget_too_small: bool = False
    suggested_budget_s: int | None = None
    message: str = ""

    def detail(self) -> dict[str, object]:
        """The ``"budget"`` event's detail and the outcome's ``protocol`` (the keys the tune and the Tune
        tab read: ``n_predict``, ``prompts``, ``load_s``, ``pairs``, ``busy``, ``warmup_gen_tokens_per_s``,
        ``planned_s``, ``smallest_s``, and ``budget_too_small`` / ``suggested_budget_s`` when too small)."""
        out: dict[str, object] = {
            "n_predict": self.n_predict, "prompts": self.prompts, "load_s": self.load_s, "pairs": self.pairs,
            "busy": self.busy, "warmup_gen_tokens_per_s": self.warmup_tps, "planned_s": self.planned_s,
            "smallest_s": self.smallest_s}
        if self.budget_too_small:
            out.update(budget_too_small=True, suggested_budget_s=self.suggested_budget_s)
        return out


def plan_protocol(plan: CandidatePlan, settings: SearchSettings, budget_s: float, prompts: Sequence[tuple[int, Prompt]],
                  n_predict: int, load_s: float, warmup_tps: float, busy: bool) -> ProtocolPlan:
    """Fit the protocol into the budget from the first launch's load time and warm-up speed.

    The sweep's cost in repetitions (``R`` = every prompt once at ``n_predict``) and launches (``L``
    = a load and a warm-up): the baseline's screening launch, one probe per planned candidate, and
    ``refine_per_draft`` refine launches per draft model (the lengths its probe predicts fastest:
    without them the pairs could only confirm the ``n_max`` 16 probe), and the leader's pairs (two looks
    of the sequential test, ``MIN_PAIRS + LOOK_STEP``, or ``max_pairs`` while the machine is busy side by
    side; two repetitions each; side by side the baseline's server and a candidate launch per ``LOOK_STEP``
    pairs, an n-gram leader one per pair; alternating one launch per pair and the first) — for ``P``
    probes, ``F`` refine launches and ``N`` pairs side by side about
    ``(1 + P + F + 2·N) · R + (2 + P + F + N/2) · L``
    seconds. When that exceeds :data:`PLAN_SHARE` of the budget, ``n_predict`` is lowered first (to
    ``min_n_predict``; with n-gram types in the plan first to ``min_n_predict_ngram``, then — only without a
    draft model or head — the prompts, then further; with one, only when even the whole budget is exceeded there:
    :func:`_fit`), then the prompts (to ``min_prompts``); when even that
    does not fit, the plan says the budget is too small for one meaningful comparison and which budget would do.

    Args:
        plan: the candidates (how many probes and refine launches).
        settings: the sweep's settings (floors, pairs, side by side).
        budget_s: the time budget (seconds).
        prompts: the prompts so far; n_predict: tokens per request so far.
        load_s: the first launch's load time (seconds); warmup_tps: its warm-up speed (tokens/s, > 0).
        busy: the load watcher says other programs use the CPU.
    """
    n_probes = len(plan.drafts) + len(plan.ngram) + (1 if plan.mtp else 0)
    launch = load_s + 16 / warmup_tps
    # the pairs to plan for: two looks of the sequential test; on a busy machine the pairs are noisier, so
    # side by side plan for the most pairs instead (shorter requests, more of them): a few more pairs
    # decide far more often than longer ones
    side = settings.side_by_side
    two_looks = MIN_PAIRS + LOOK_STEP
    pairs = (max(two_looks, settings.max_pairs) if busy else two_looks) if side else two_looks
    n_refine = settings.refine_per_draft * (len(plan.drafts) + (1 if plan.mtp else 0))
    reps = 1 + n_probes + n_refine + 2 * pairs
    pair_launches = (pairs if ngram_only(plan) else 1 + math.ceil(pairs / LOOK_STEP)) if side else 1 + pairs
    launches = 1 + n_probes + n_refine + pair_launches

    def cost(n_prompts: int, n_predict: int) -> float:
        return reps * rep_s(warmup_tps, n_prompts, n_predict) + launches * launch

    n_prompts, n_predict = _fit(cost, PLAN_SHARE * budget_s, budget_s, plan, settings, len(prompts), n_predict)
    # the smallest comparison: the baseline, the first probe and the leader's first look (MIN_PAIRS pairs)
    smallest = ((2 + 2 * MIN_PAIRS) * rep_s(warmup_tps, n_prompts, n_predict)
                + (2 + (2 if side else 1 + MIN_PAIRS)) * launch)
    msg = (f"protocol planned from the warm-up ({warmup_tps:.1f} tokens/s, load {load_s:.1f} s): "
           f"{n_prompts} prompt{'s' if n_prompts != 1 else ''} × {n_predict} tokens per repetition, room for "
           f"{pairs} pairs" + (" (the machine is busy: more, shorter pairs)" if busy else ""))
    need: int | None = None
    if smallest > budget_s:
        need = math.ceil(smallest / PLAN_SHARE / 30) * 30
        msg += (f"; the budget of {budget_s:.0f} s is too small for one meaningful comparison at "
                f"this speed (the smallest takes about {smallest:.0f} s): a budget of about {need} s would do")
    return ProtocolPlan(prompts=n_prompts, n_predict=n_predict, load_s=load_s, pairs=pairs, busy=busy,
                        warmup_tps=warmup_tps, planned_s=cost(n_prompts, n_predict), smallest_s=smallest,
                        budget_too_small=need is not None, suggested_budget_s=need, message=msg)


def _fit(cost: Callable[[int, int], float], share_s: float, whole_s: float, plan: CandidatePlan,
         settings: SearchSettings, n_prompts: int, n_predict: int) -> tuple[int, int]:
    """``(prompts, n_predict)`` that bring ``cost(prompts, n_predict)`` under ``share_s`` (the planned share
    of the budget): ``n_predict`` first, then the prompts. With n-gram types in the plan the requests stay at
    ``min_n_predict_ngram`` or longer: fewer prompts make it fit when the plan has only n-gram types; with a
    draft model or MTP head too (a chain) every prompt stays, and the requests are shortened below that floor only
    when even there the plan exceeds the whole budget ``whole_s`` — otherwise the sweep screens fewer draft
    lengths (the screening stages keep the paired rounds' reserve: ``Estimates.reserve_s``), whose speedups the
    per-position counters and the verify-cost curve predict anyway.

    Why (issue 28's quality family, greedy, 4 interleaved rounds, ``python -m bench.request_length``): at 48 tokens
    the chain ngram-mod + draft ``n_max`` 4 ran 1.39× and the best draft length 1.45×, at 64 and 96 tokens the chain
    1.69× and 1.72× against the best draft length's 1.44× and 1.37× — its n-gram part drafts only once the answer
    repeats what came before, so shortened requests hide it; a 35 s tune cut to 48 tokens served a draft length
    at 0.92 of the best on 96-token answers. Without n-gram types, every prompt stays until the requests are at
    ``min_n_predict``: a draft's acceptance depends on the prompts far more than on the request's length, and a
    sweep on part of the prompt set tunes for that part (the good draft's ``n_max``-16 acceptance 44–45 % on its three
    prompts at 64–72 tokens, 69 % on the first two at 48–64 — the tuner then served lengths 10–16 where the
    three prompts run fastest at 4–8)."""
    keep_prompts = bool(plan.drafts) or plan.mtp is not None
    fewest = min(settings.min_prompts, n_prompts)

    def shorten(floor: int) -> int:  # n_predict cut by a quarter at a time, never below floor
        n = n_predict
        while cost(n_prompts, n) > share_s and n > floor:
            n = max(floor, int(n * 0.75))
        return n

    def drop_prompts() -> int:
        n = n_prompts
        while cost(n, n_predict) > share_s and n > fewest:
            n -= 1
        return n

    if plan.ngram:
        n_predict = shorten(max(settings.min_n_predict, min(settings.min_n_predict_ngram, n_predict)))
        if keep_prompts and cost(n_prompts, n_predict) <= whole_s:
            return n_prompts, n_predict
        if not keep_prompts:
            n_prompts = drop_prompts()
    n_predict = shorten(settings.min_n_predict)
    return drop_prompts(), n_predict


__all__ = ["PLAN_SHARE", "ProtocolPlan", "Requests", "ngram_only", "plan_protocol", "rep_s"]
