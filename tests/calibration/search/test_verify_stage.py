"""The verify-cost stage (issue 28 item 3): after the probes, the fastest draft's cost of one verification step at
each draft length, measured with synthetic acceptance 0, replaces the cost model fitted to the sweep's own runs.
Scripted servers (``tests.fakes.scripted_server``) whose step cost is not smooth in the draft length (as on the
CPU: a step of 6 drafted tokens costs a whole target token more than one of 5), simulated time."""

from __future__ import annotations

from tests.fakes.scripted_server import ScriptedLaunch, SimClock, scripted_search, spec_metrics
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings
from tuner.calibration.verifycost import LENGTHS, PricedCurve, VerifyCurve, curve_key

DRAFT = "/m/good.gguf"
PROBE = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
IDENTITY = "llama-server|11434|target.gguf:1|threads None"
Q = 0.85  # a step accepts at least i + 1 drafted tokens with probability Q ** (i + 1)
STEPS = 10  # verification steps per request


def cost(k: int) -> float:
    """The scripted step cost in target-token times: +0.15 a drafted token, and a whole token more from 6 on."""
    return 1.15 + 0.15 * k + (0.9 if k >= 6 else 0.0)


def accepted(k: int) -> float:
    return sum(Q ** (i + 1) for i in range(k))


def tps_of(c: Candidate) -> float:
    if c.is_baseline:
        return 100.0
    k = c.n_max or 1
    if c.synth_rates:
        return 100.0 / cost(k)  # every drafted token rejected: one token per step
    return 100.0 * (1.0 + accepted(k)) / cost(k)


def metrics(client) -> str:
    c, n = client.candidate, client.requests
    if c.is_baseline:
        return ""
    k = c.n_max or 1
    per_pos = [0] * k if c.synth_rates else [round(STEPS * n * Q ** (i + 1)) for i in range(k)]
    return spec_metrics(STEPS * n, STEPS * n * k, per_pos)


def _run(settings: SearchSettings, budget_s: float = 600):
    clock = SimClock()
    launch = ScriptedLaunch(tps_of, content="same text", clock=clock, load_s=1.0, metrics=metrics)
    events: list[tuple[str, str, dict]] = []
    search = scripted_search(launch, CandidatePlan(baseline=Candidate(), drafts=(PROBE,)),
                             [(i, Prompt(f"p{i}", "code")) for i in range(3)], settings, budget_s, clock=clock,
                             emit=lambda kind, msg, **kw: events.append((kind, msg, kw.get("detail") or {})))
    return search, search.run(), launch, events


def _synthetic(launch: ScriptedLaunch) -> list[Candidate]:
    return [c for c in launch.launched if c.synth_rates]


def test_the_curve_is_measured_at_each_length_and_prices_the_draft_lengths() -> None:
    search, outcome, launch, events = _run(SearchSettings(n_predict=16, p_min_variant=None, verify_identity=IDENTITY))
    synth = _synthetic(launch)
    assert [c.n_max for c in synth] == list(LENGTHS)
    assert all(c.synth_rates == (0.0,) * (c.n_max or 0) and c.p_min == 0.0 for c in synth)
    curve = search.record.verify_curves[search.record.group(PROBE)]
    assert curve.key == curve_key(IDENTITY, DRAFT, "default ngl None", "")
    for k, c in curve.points:
        assert abs(c / cost(int(k)) - 1) < 0.01, (k, c)
    assert isinstance(search.record.cost_models[search.record.group(PROBE)], PricedCurve)
    predicted = [d for kind, _, d in events if kind == "predicted"]
    assert "verify_cost" in predicted[-1] and "cost_per_draft_token" in predicted[0]
    # the curve's best lengths are 5 then 4 (true 2.18x, 2.12x); the line fitted to the n_max 16 probe alone
    # prices 5 and 6 alike (1.99x, 1.97x) although 6 runs at 1.53x
    refined = [m.candidate.n_max for m in outcome.measurements if m.stage == "refine"]
    assert refined[:2] == [5, 4], refined
    assert not any(m.candidate.synth_rates for m in outcome.measurements)  # never a measurement
    d = decide(outcome)
    assert not d.winner.synth_rates and d.winner.draft_path == DRAFT
    assert dict(outcome.verify_curves) == {search.record.group(PROBE): curve}


def test_a_curve_measured_before_for_the_same_key_is_reused_with_no_launch() -> None:
    key = curve_key(IDENTITY, DRAFT, "default ngl None", "")
    known = VerifyCurve(tuple((float(k), cost(k)) for k in sorted(LENGTHS)), key, 100.0)
    other = VerifyCurve(((1.0, 5.0), (16.0, 9.0)), "another key", 100.0)
    search, _, launch, events = _run(SearchSettings(n_predict=16, p_min_variant=None, verify_identity=IDENTITY,
                                                    known_curves=(other, known)))
    assert _synthetic(launch) == []
    assert search.record.verify_curves[search.record.group(PROBE)] is known
    assert any(kind == "verify_cost" and "measured before" in msg and d.get("reused") for kind, msg, d in events)


def test_without_an_identity_there_is_no_stage() -> None:
    search, _, launch, _ = _run(SearchSettings(n_predict=16, p_min_variant=None))
    assert _synthetic(launch) == [] and search.record.verify_curves == {}


def test_the_stage_keeps_to_its_share_of_the_budget() -> None:
    search, _, launch, events = _run(SearchSettings(n_predict=16, p_min_variant=None, verify_identity=IDENTITY),
                                     budget_s=60)
    synth = _synthetic(launch)
    assert 2 <= len(synth) < len(LENGTHS), [c.n_max for c in synth]
    assert [c.n_max for c in synth] == list(LENGTHS[: len(synth)])  # 1 and 16 first: the curve spans them
    assert any(kind == "skipped" and "the cost of checking" in msg for kind, msg, _ in events)
    curve = search.record.verify_curves[search.record.group(PROBE)]
    assert curve.lengths[0] == 1.0 and curve.lengths[-1] == 16.0


def test_no_launch_when_the_share_cannot_hold_two_lengths() -> None:
    # a 20 s sweep: 12 % is 2.4 s, less than the lengths 1 and 16 take (about 3.6 s): a single length would be no
    # curve, so none is launched and the draft keeps its fitted cost
    search, _, launch, events = _run(SearchSettings(n_predict=16, p_min_variant=None, verify_identity=IDENTITY),
                                     budget_s=20)
    assert _synthetic(launch) == [] and search.record.verify_curves == {}
    assert any(kind == "skipped" and "too short for even two lengths" in msg for kind, msg, _ in events), events


def test_no_curve_is_measured_while_other_programs_use_the_cpu() -> None:
    clock = SimClock()
    launch = ScriptedLaunch(tps_of, content="same text", clock=clock, load_s=1.0, metrics=metrics)
    events: list[tuple[str, str]] = []
    search = scripted_search(launch, CandidatePlan(baseline=Candidate(), drafts=(PROBE,)),
                             [(i, Prompt(f"p{i}", "code")) for i in range(3)],
                             SearchSettings(n_predict=16, p_min_variant=None, verify_identity=IDENTITY), 600,
                             clock=clock, busy=lambda: True, emit=lambda kind, msg, **kw: events.append((kind, msg)))
    search.run()
    assert _synthetic(launch) == [] and search.record.verify_curves == {}
    assert any(kind == "skipped" and "other programs are using the CPU" in msg for kind, msg in events)


def _steep_tps(c: Candidate) -> float:
    """As :func:`tps_of`, at a CPU's step cost (``bench/n_max_prediction.py`` here: 2.2 target tokens for a
    1-token step, 7.2 for a 16-token one), well above the stage's old guess of ``1 + k ÷ 8``."""
    k = c.n_max or 1
    step = 1.9 + 0.33 * k
    if c.is_baseline:
        return 100.0
    return 100.0 / step if c.synth_rates else 100.0 * (1.0 + accepted(k)) / step


def test_the_stage_prices_its_launches_at_the_probes_own_step_cost() -> None:
    """Idle quality run 6 (stop 34): the stage priced lengths 1 and 16 at 1.1 and 3 target tokens a step, the CPU's
    cost 2.1 and 6.5; its two launches took 8.5 s of a 35 s sweep (24 %, its share is 12 %) and left the refine
    stage one launch: pick/best 0.869. At every budget here the synthetic launches now keep to the share (with
    the launch overhead's slack: the estimate of a load is the one measured so far) or are not started."""
    measured = []
    for budget_s in (30.0, 40.0, 50.0, 60.0, 80.0, 200.0):
        clock = SimClock()
        launch = ScriptedLaunch(_steep_tps, content="same text", clock=clock, load_s=0.3, metrics=metrics)
        events: list[tuple[float, str, str]] = []
        search = scripted_search(launch, CandidatePlan(baseline=Candidate(), drafts=(PROBE,)),
                                 [(i, Prompt(f"p{i}", "code")) for i in range(3)],
                                 SearchSettings(n_predict=48, p_min_variant=None, verify_identity=IDENTITY),
                                 budget_s, clock=clock,
                                 emit=lambda kind, msg, **kw: events.append((clock(), kind, msg)))
        search.run()
        starts = [t for t, kind, msg in events if kind == "launch" and msg.startswith("verify cost:")]
        if not starts:
            continue
        measured.append(budget_s)
        end = next(t for t, kind, _ in events if t >= starts[-1] and kind in ("verify_cost", "skipped"))
        assert end - starts[0] <= 0.12 * budget_s * 1.15, (budget_s, end - starts[0], events)
    assert measured == [80.0, 200.0]  # where two lengths fit in the share, the stage still runs
