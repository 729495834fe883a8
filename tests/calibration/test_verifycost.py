"""The measured verify-cost curve: from synthetic-acceptance launches to the step cost at each draft length,
its cache, and the search predicting and pruning with it instead of the fit to its own runs."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from tests.fakes.scripted_server import ScriptedLaunch, ScriptedSynthLaunch, SimClock, scripted_search, spec_metrics
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.measure import LaunchError
from tuner.calibration.predict import CostModel
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings
from tuner.calibration.verifycost import (
    SYNTH_FLAG,
    CurveSource,
    VerifyCostCurve,
    curve_key,
    known_curve,
    measure_curve,
    store_curve,
    synth_args,
)
from tuner.calibration.wording import words

DRAFT = Candidate(spec_type="draft-simple", draft_path="/m/draft.gguf", n_max=16, p_min=0.0)


def _cost(k: int) -> float:
    """The script's true cost of a step drafting k tokens and accepting none: 1.2 + 0.15·k plain steps."""
    return 1.2 + 0.15 * k


def test_the_curve_from_a_scripted_server_recovers_the_known_cost() -> None:
    launch = ScriptedSynthLaunch(_cost, per_accepted=0.05, base_tps=80.0)
    curve = measure_curve(launch, DRAFT, threading.Event())
    # the target alone, each length at rate 0, the longest at rate 1: rates always n_max long
    assert [(c.n_max if c.spec_type != "none" else None, e) for c, e in launch.launched] == [
        (None, ()), (1, synth_args(1, 0.0)), (4, synth_args(4, 0.0)), (12, synth_args(12, 0.0)),
        (12, synth_args(12, 1.0))]
    assert launch.launched[0][0].is_baseline and all(c.p_min == 0.0 for c, _ in launch.launched[1:])
    assert curve.lengths == (1.0, 4.0, 12.0)
    assert curve.costs == pytest.approx([_cost(1), _cost(4), _cost(12)], rel=1e-6)
    assert curve.per_accepted_token == pytest.approx(0.05, rel=1e-6)
    assert curve.baseline_gen_tokens_per_s == pytest.approx(80.0)
    assert curve.step_cost(8) == pytest.approx(_cost(8), rel=1e-6)  # interpolated
    assert curve.step_cost(16) == pytest.approx(_cost(16), rel=1e-6)  # extrapolated
    assert VerifyCostCurve.from_json(curve.to_json()) == curve


def test_an_ngram_type_and_a_clamping_head_are_never_measured_with_synthetic_acceptance() -> None:
    launch = ScriptedSynthLaunch(_cost)
    with pytest.raises(ValueError, match="only a draft model or head"):
        measure_curve(launch, Candidate(spec_type="ngram-mod"), threading.Event())
    # a DFlash head clamps n_max to its block: n_max rates would not match the effective length, the server exits
    with pytest.raises(ValueError, match="only a draft model or head"):
        measure_curve(launch, Candidate(spec_type="draft-dflash", draft_path="/m/h.gguf", n_max=16), threading.Event())
    assert launch.launched == []


def test_the_synthetic_flag_is_refused_in_a_profile_and_in_the_user_s_server_args() -> None:
    """The synthetic rates make the output invalid: they reach only the measurement launches, never a served
    server (a profile's extra args and the user's server_args refuse them)."""
    from tuner.calibration.serving import check_profile_extra_args
    from tuner.errors import DraftwiseError
    from tuner.serverargs import refusal

    assert refusal(SYNTH_FLAG) is not None
    with pytest.raises(DraftwiseError):
        check_profile_extra_args([SYNTH_FLAG, "1,1"], "profile.json")


def _files(tmp_path: Path) -> tuple[Path, Path]:
    binary, target = tmp_path / "llama-server", tmp_path / "target.gguf"
    binary.write_bytes(b"bin")
    target.write_bytes(b"gguf")
    return binary, target


def _plan() -> CandidatePlan:
    return CandidatePlan(baseline=Candidate(), drafts=(DRAFT,), ngram=(), mtp=None, dropped=())


def _drafting(client) -> str:
    """The draft's /metrics: per request 10 steps of 16 drafted tokens, 8 accepted at the first position."""
    n = client.requests
    return spec_metrics(10 * n, 160 * n, [8 * n] + [0] * 15) if not client.candidate.is_baseline else ""


def _sweep(synth: ScriptedSynthLaunch, key_of, clock: SimClock) -> tuple[CurveSource, object]:
    source = CurveSource(synth, key_of, measured=[])
    launch = ScriptedLaunch(lambda c: 100.0 if c.is_baseline else 130.0, clock=clock, content="same",
                            metrics=_drafting)
    search = scripted_search(launch, _plan(), [(0, Prompt("p", "code"))], SearchSettings(n_predict=16), 600,
                             clock=clock, verify_cost=source)
    search.run()
    return source, search


def test_the_curve_is_cached_per_threads_and_reused_without_a_launch(tmp_path: Path) -> None:
    binary, target = _files(tmp_path)
    clock = SimClock()
    synth = ScriptedSynthLaunch(_cost, clock=clock)

    def key(threads: int | None):
        return lambda c: curve_key(binary, c, target, threads)

    source, search = _sweep(synth, key(2), clock)
    assert source.measured == [DRAFT] and len(synth.launched) == 5
    group = search.record.group(DRAFT)
    assert search.record.verify_costs[group].costs == pytest.approx([_cost(1), _cost(4), _cost(12)], rel=1e-6)

    outcome = search.outcome()
    assert outcome.verify_costs[group] == search.record.verify_costs[group].to_json()  # the profile keeps it
    said = [words(n) for n in outcome.notes if n.kind == "sweep.verify_cost"]
    costs = ", ".join(f"{_cost(k):.1f}" for k in (1, 4, 12))
    assert said == [f"Verification cost measured for draft.gguf: a step drafting 1, 4, 12 tokens costs {costs} "
                    "plain steps."], said

    source, search = _sweep(synth, key(2), clock)  # the same key: reused, no launch
    assert source.measured == [] and len(synth.launched) == 5
    assert search.record.verify_costs[search.record.group(DRAFT)] == known_curve(key(2)(DRAFT))

    source, _ = _sweep(synth, key(3), clock)  # another threads value: measured again
    assert source.measured == [DRAFT] and len(synth.launched) == 10
    assert curve_key(binary, DRAFT, target, 2) != curve_key(binary, DRAFT, target, 3)


def test_the_curve_s_launches_are_paid_from_the_budget() -> None:
    """Curves whose launches exceed the stage's share of the budget are not measured: the fit stays."""
    clock = SimClock()
    synth = ScriptedSynthLaunch(_cost, clock=clock, load_s=60.0)
    source = CurveSource(synth, lambda c: f"budget|{uuid.uuid4()}", measured=[])
    launch = ScriptedLaunch(lambda c: 100.0 if c.is_baseline else 130.0, clock=clock, load_s=60.0, content="same",
                            metrics=_drafting)
    events: list[str] = []
    search = scripted_search(launch, _plan(), [(0, Prompt("p", "code"))], SearchSettings(n_predict=16), 300,
                             clock=clock, verify_cost=source, emit=lambda kind, msg, **kw: events.append(msg))
    search.run()
    assert source.measured == [] and synth.launched == []
    assert any("verification cost not measured, the time budget is spent" in e for e in events), events


def test_the_search_predicts_and_prunes_with_the_curve_instead_of_its_fit() -> None:
    """Two drafts: the good one leads at 1.4×; the other's probe (1.05×) accepts 0.8 tokens per step at the
    first position and 0.6 at the second. Fitted to that probe, a verification step is cheap (u ≈ 0.08), so n_max
    2 is predicted at ≈2× and measured. Its measured curve says a step costs 1 + 0.5·k: n_max 1 and 2 predict
    1.2× — above the baseline, below the leader even with the slack — so the pruning rule, reading the same
    curve, does not launch them."""
    other = Candidate(spec_type="draft-simple", draft_path="/m/other.gguf", n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(DRAFT, other), ngram=(), mtp=None, dropped=())

    def tps_of(c: Candidate) -> float:
        return 100.0 if c.is_baseline else 105.0 if c.draft_path == other.draft_path else 140.0

    def metrics(client) -> str:
        if client.candidate.draft_path != other.draft_path:
            return ""
        n = client.requests  # per request: 10 draft steps of 16 tokens, 8 accepted at position 0, 6 at 1
        return spec_metrics(10 * n, 160 * n, [8 * n, 6 * n] + [0] * 14)

    key = f"prune|{uuid.uuid4()}"
    store_curve(key, VerifyCostCurve((1.0, 16.0), (1.5, 9.0), 0.0, 100.0))

    def run(source: CurveSource | None):
        launch = ScriptedLaunch(tps_of, content="same text", metrics=metrics)
        search = scripted_search(launch, plan, [(0, Prompt("p", "code")), (1, Prompt("q", "chat"))],
                                 SearchSettings(n_predict=16, p_min_variant=None), 600, verify_cost=source)
        search.run()
        return [c.n_max for c in launch.launched if c.draft_path == other.draft_path], search

    fitted, search = run(None)
    assert 2 in fitted, fitted
    assert isinstance(search.record.cost_models[search.record.group(other)], CostModel)

    tried: list[Candidate] = []

    def no_launch(c: Candidate, extra: tuple[str, ...], cancel: threading.Event):
        tried.append(c)
        raise LaunchError("not in this script")

    source = CurveSource(no_launch, lambda c: key if c.draft_path == other.draft_path else f"none|{uuid.uuid4()}")
    measured, search = run(source)
    assert tried == []  # the other's curve was cached; the good draft's probe has no counters (nothing to refine)
    assert measured == [16], measured
    assert isinstance(search.record.cost_models[search.record.group(other)], VerifyCostCurve)
    pruned = [p for p in search.record.pruned if p["basis"] == other.label]
    assert pruned and all(float(p["at_most"]) == pytest.approx(1.2, abs=0.01) for p in pruned), search.record.pruned


@pytest.mark.server
def test_the_real_server_s_curve_grows_with_the_draft_length(llama_server_bin: Path, wide_family) -> None:
    """The b11434 server starts with ``--spec-synth-rates`` (n_max entries) on the generated family: the step
    cost measured at acceptance 0 is at least one plain step and grows with the draft length (a 2-block draft
    drafting 12 tokens and the target verifying 13 cost far more than drafting 1)."""
    from tuner.calibration.pipeline.launchers import supervisor_launch_fn
    from tuner.server.dialect import probe_dialect
    from tuner.server.supervisor import Supervisor

    assert probe_dialect(llama_server_bin).has(SYNTH_FLAG)
    sup = Supervisor(llama_server_bin)
    argv: list[list[str]] = []

    def launch(c: Candidate, extra: tuple[str, ...], cancel: threading.Event):
        lch = supervisor_launch_fn(sup, wide_family.target, 512, 1, lambda *a, **k: None, 60.0, extra)(c, cancel)
        argv.append(list(sup.argv or []))
        return lch

    draft = Candidate(spec_type="draft-simple", draft_path=str(wide_family.good_draft), n_max=16, ngl=0)
    try:
        curve = measure_curve(launch, draft, threading.Event())
    finally:
        sup.stop()
    assert SYNTH_FLAG not in argv[0] and argv[-1][argv[-1].index(SYNTH_FLAG) + 1] == ",".join(["1"] * 12)
    # mean drafted tokens per step (p_min 0; a draft never runs past the tokens left to generate)
    assert curve.lengths[0] == 1.0 and 3.0 < curve.lengths[1] <= 4.0 and 8.0 < curve.lengths[2] <= 12.0, curve
    assert curve.costs[0] >= 1.0 and curve.costs[0] < curve.costs[1] < curve.costs[2], curve


def test_a_draft_that_lost_clearly_gets_no_curve() -> None:
    """A probe stopped early as a clear loser is never refined: no launch is spent on its curve."""
    clock = SimClock()
    synth = ScriptedSynthLaunch(_cost, clock=clock)
    source = CurveSource(synth, lambda c: f"loser|{uuid.uuid4()}", measured=[])
    launch = ScriptedLaunch(lambda c: 100.0 if c.is_baseline else 30.0, clock=clock, content="same",
                            metrics=_drafting)
    search = scripted_search(launch, _plan(), [(0, Prompt("p", "code")), (1, Prompt("q", "chat"))],
                             SearchSettings(n_predict=16), 600, clock=clock, verify_cost=source)
    search.run()
    assert any(m.stopped_early for m in search.record.measurements if m.candidate == DRAFT)
    assert source.measured == [] and synth.launched == []
