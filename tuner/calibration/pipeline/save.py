"""What the tune hands back: the winner saved as a profile (its server configuration and the exact
llama-server argv), or, after a cancel, what ran and nothing saved."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.profiles import Profile, ProfileStore, StalenessKeys

from ..advice import FACTS_KEY, live_facts_json
from ..candidates import Candidate
from ..decide import Decision
from ..outcome import SearchOutcome
from ..prompts import SERVED_SOURCE_PREFIX
from ..request import TuneResult
from ..serving import candidate_config, config_to_json
from ..verifycost import CURVES_KEY
from .events import Events
from .inputs import TuneInputs
from .placement import SweepPlan

log = logging.getLogger(__name__)


def save_result(store: ProfileStore, inputs: TuneInputs, keys: StalenessKeys, plan: SweepPlan,
                outcome: SearchOutcome, decision: Decision, events: Events) -> TuneResult:
    """Save the profile of ``decision`` (``keys``, the winner's server configuration and its argv, the
    decision with the budget and what it left unmeasured, every measurement as evidence) and return the
    tune's result; emits ``"saved"``. An argv that cannot be built is a note (the profile keeps an empty one).

    Raises:
        OSError: the profile cannot be written.
    """
    request = inputs.request
    winner_cfg = candidate_config(served_candidate(decision, outcome), inputs.target_path, n_ctx=inputs.n_ctx,
                                  threads=request.threads, server_args=keys.server_args)
    try:
        from tuner.server.argv import tuned_argv

        argv = tuple(tuned_argv(inputs.binary.path, winner_cfg, inputs.dialect))  # where to listen is the server's
    except Exception as exc:  # noqa: BLE001
        log.warning("could not build the winner's argv", exc_info=True)
        argv = ()
        events.note(f"could not build the winner's argv: {exc}")
    profile = Profile(
        target_path=str(inputs.target_path),
        keys=keys,
        winner=decision.winner.to_json(),
        server_config=config_to_json(winner_cfg),
        argv=argv,
        decision={**decision.to_json(), "budget_s": plan.budget_s,
                  "budget_spent_before": [c.label for c in outcome.unmeasured],
                  "prompt_source": prompt_source(inputs),
                  **({"threads": outcome.threads.detail()} if outcome.threads is not None else {}),
                  **_live_facts(decision, outcome),
                  **({CURVES_KEY: [c.to_json() for c in outcome.verify_curves.values()]}
                     if outcome.verify_curves else {})},
        evidence=tuple(m.to_json() for m in outcome.measurements),
    )
    path = store.save(profile)
    events("saved", f"profile saved to {path}", detail={"profile_path": str(path)})
    return TuneResult(request=request, target_path=inputs.target_path, decision=decision,
                      measurements=tuple(outcome.measurements), profile=store.load(inputs.target_path),
                      profile_path=path, dropped=plan.dropped, elapsed_s=events.elapsed_s())


def _live_facts(decision: Decision, outcome: SearchOutcome) -> dict[str, Any]:
    """The decision's ``live_prediction`` entry (:func:`tuner.calibration.advice.live_facts_json`): what the
    Monitor's live prediction needs; empty when the winner has none (no speculation, a chain, no counters)."""
    facts = live_facts_json(decision.winner, outcome.measurements, decision.speedup,
                            decision.baseline_gen_tokens_per_s, outcome.verify_curves)
    return {FACTS_KEY: facts} if facts is not None else {}


def prompt_source(inputs: TuneInputs) -> dict[str, Any]:
    """Where the sweep's prompts came from, as the profile records it (never their text): ``{"kind":
    "built-in"}``, ``{"kind": "file", "path"}``, ``{"kind": "given", "source"}`` (a set given in code), or
    ``{"kind": "served", "model_id", "requests", "first_unix_s", "last_unix_s"}`` (the captured requests
    chosen, sampled over time)."""
    ps, request = inputs.prompts.set, inputs.request
    if ps.captured:
        times = [p.captured_unix_s for _, p in inputs.prompts.chosen if p.captured_unix_s is not None]
        return {"kind": "served", "model_id": ps.source.removeprefix(SERVED_SOURCE_PREFIX), "requests": len(times),
                "first_unix_s": min(times, default=None), "last_unix_s": max(times, default=None)}
    if request.prompts is None:
        return {"kind": "built-in"}
    if isinstance(request.prompts, Path):
        return {"kind": "file", "path": str(request.prompts)}
    return {"kind": "given", "source": ps.source}


def served_candidate(decision: Decision, outcome: SearchOutcome) -> Candidate:
    """The decision's winner with the thread stage's setting (``tuner.calibration.threads.ThreadChoice``) when
    the stage measured that candidate; the winner as it is otherwise."""
    choice = outcome.threads
    if choice is None or choice.served_label != decision.winner.label:
        return decision.winner
    st = choice.chosen
    return replace(decision.winner, threads=st.threads, omp_passive=st.omp_passive, poll=st.poll)


def cancelled_result(inputs: TuneInputs, plan: SweepPlan, outcome: SearchOutcome, events: Events) -> TuneResult:
    """The result of a cancelled sweep: what ran before, nothing decided, nothing saved."""
    return TuneResult(target_path=inputs.target_path, request=inputs.request, decision=None,
                      measurements=outcome.measurements, cancelled=True, dropped=plan.dropped,
                      elapsed_s=events.elapsed_s())
