"""The reuse-or-stale decision: a fresh saved profile answers the tune without measuring (unless
``force``); a stale one says why, and the sweep runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tuner.profiles import Profile, ProfileError, ProfileStore, StalenessKeys

from ..candidates import Candidate
from ..decide import BreakEven, CategoryResult, Decision
from ..report import reused_decision
from ..request import TuneResult
from .events import Events
from .inputs import TuneInputs
from .keys import keys_for_saved_source

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Reuse:
    """What the saved profile is worth to this tune.

    Attributes:
        profile: the saved profile of the target, ``None`` when there is none (or it was unreadable).
        fresh: True when it answers this tune: every staleness key matches and ``force`` is off.
        reasons: why it is stale, in words (empty when it is not).
    """

    profile: Profile | None
    fresh: bool = False
    reasons: tuple[str, ...] = ()


def check_saved(store: ProfileStore, inputs: TuneInputs, keys: StalenessKeys, events: Events) -> Reuse:
    """Load the target's saved profile and compare its keys with ``keys`` (as its own prompt source records them:
    a profile tuned on served requests answers a request that names no prompts, ``keys.keys_for_saved_source``); a profile whose sweep ran out of
    time before some candidates were measured is stale for a larger budget. Emits ``"stale"`` with the
    reasons; an unreadable profile (kept aside by the store) is a note. ``inputs.request.force`` re-tunes
    a fresh one. Raises nothing of its own."""
    try:
        saved = store.load(inputs.target_path)
    except ProfileError as exc:
        events.note(f"the saved profile was unreadable and has been kept aside: {exc}")
        return Reuse(None)
    if saved is None:
        return Reuse(None)
    reasons = store.stale_reasons(saved, keys_for_saved_source(saved, inputs.request, keys))
    spent = saved.decision.get("budget_spent_before") or []
    old_budget = saved.decision.get("budget_s")
    budget_s = inputs.request.budget_s
    if spent and isinstance(old_budget, (int, float)) and budget_s > old_budget:
        # a sweep that ran out of time is not an answer a larger budget should reuse
        reasons.append(f"its {old_budget:.0f} s budget was spent before {', '.join(map(str, spent[:3]))}"
                       f"{' and others' if len(spent) > 3 else ''} were measured; this sweep has {budget_s:.0f} s")
    if reasons:
        events("stale", "the saved profile is stale: " + "; ".join(reasons), detail={"reasons": reasons})
    return Reuse(saved, fresh=not reasons and not inputs.request.force, reasons=tuple(reasons))


def reused_result(store: ProfileStore, inputs: TuneInputs, profile: Profile, events: Events) -> TuneResult:
    """The tune's answer from a fresh saved ``profile``; emits ``"reused"``."""
    path = store.path_for(inputs.target_path)
    flags = inputs.request.server_args
    extra = f", tuned with the extra llama-server flags {' '.join(flags)}" if flags else ""
    events("reused", f"using the saved profile for {inputs.target_path.name} (still fresh{extra}; --force re-tunes)",
           detail={"profile_path": str(path)})
    return TuneResult(target_path=inputs.target_path, request=inputs.request, decision=decision_from_profile(profile),
                      profile=profile, profile_path=path, reused=True, elapsed_s=events.elapsed_s())


def decision_from_profile(p: Profile) -> Decision:
    """Rebuild the :class:`Decision` summary saved in a profile (its words as a reused profile shows them:
    :func:`tuner.calibration.report.reused_decision`), with its break-even and per-category lines. Its
    comparisons are not rebuilt (they hold the samples): the profile's ``decision["comparisons"]`` keeps
    their figures. An unreadable break-even or category entry is left out (logged at DEBUG).

    Raises:
        TypeError, ValueError: the profile's ``winner`` is not a candidate's JSON object (a profile read by
            ``Profile.from_json`` always has one).
    """
    d = p.decision

    def parsed(key: str, of: Callable[[dict[str, Any]], T]) -> tuple[T, ...]:
        out = []
        for obj in d.get(key) or []:
            try:
                out.append(of(obj))
            except (KeyError, TypeError, ValueError, AttributeError):
                log.debug("profile %s: unreadable %s entry %r", p.target_path, key, obj)
        return tuple(out)

    best = d.get("best_speculative")
    return reused_decision(Decision(
        winner=Candidate.from_json(p.winner),
        gen_tokens_per_s=d.get("gen_tokens_per_s"),
        baseline_gen_tokens_per_s=d.get("baseline_gen_tokens_per_s"),
        speedup=float(d.get("speedup") or 1.0),
        speedup_ci_low=d.get("speedup_ci_low"),
        speedup_ci_high=d.get("speedup_ci_high"),
        best_speculative=Candidate.from_json(best) if best else None,
        best_speculative_speedup=d.get("best_speculative_speedup"),
        lossless=d.get("lossless"),
        break_even=parsed("break_even", BreakEven.from_json),
        per_category=parsed("per_category", CategoryResult.from_json),
        pairs=int(d.get("pairs") or 0),
    ), d, p.created_unix_s)
