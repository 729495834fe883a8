"""The budget holds when the estimates are wrong, the first ETA is the planned protocol's, and a disturbed
baseline launch is measured again (issue 10, the gaps left at stop 11).

Scripted servers stand in for the machine's faults a real llama-server does not produce on demand: a
model whose speed collapses after the baseline launch (a 2-thread server on a 2-core box while another
program takes one core ran 30x slower than in the pause before it), and a baseline launch that ran
during such a collapse while a later run of the same model alone did not.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.scripted_server import ScriptedLaunch, SimClock, never_drafts, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.search import HARD_LIMIT, SearchSettings
from tuner.calibration.wording import words

from .test_budget import DRAFT, PROMPTS, slow_launch_fn


def collapsing_launch_fn(collapse_after: int, fast_s: float = 0.02, slow_s: float = 4.0) -> ScriptedLaunch:
    """Real time: the first ``collapse_after`` launches answer each request in ``fast_s`` seconds, every
    later one in ``slow_s`` (honouring the request's timeout like an HTTP client: it gives up at it)."""
    return ScriptedLaunch(lambda c: 0.0, per_launch=lambda c, n: {"sleep_s": slow_s if n > collapse_after else fast_s})


def test_the_sweep_ends_at_its_time_limit_when_the_model_slows_down_after_the_baseline():
    """The baseline's warm-up says 3,200 tokens/s, then every request takes 4 s: the plan's estimates are
    100x too short. The sweep still ends within 15 % of its 6 s budget, keeps what it measured, and the
    decision says the time limit cut it."""
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(Candidate(spec_type="ngram-mod"),),
                         mtp=None, dropped=())
    events: list[tuple[str, str]] = []
    search = scripted_search(collapsing_launch_fn(collapse_after=1), plan, PROMPTS[:3],
                             SearchSettings(n_predict=64, side_by_side=True), 6.0,
                             emit=lambda kind, message, **kw: events.append((kind, message)))
    t0 = time.monotonic()
    outcome = search.run()
    ms = list(outcome.measurements)
    took = time.monotonic() - t0
    assert took <= 1.15 * 6.0, (took, events)
    assert took >= 6.0 * HARD_LIMIT - 0.5  # it ran to the limit, not one step past it
    assert search.record.cut_by_budget, events
    cut = [m for m in ms if m.cut_short]
    assert all(m.error is None for m in cut)  # cut by the clock: not a failure of the candidate
    d = decide(SearchOutcome.of(ms, unmeasured=outcome.unmeasured))
    assert d.no_speculation, d.reason  # nothing was confirmed in pairs
    notes = " ".join(words(s) for s in outcome.notes)
    assert "time limit" in notes and "6 s budget" in notes, notes


def test_a_user_cancel_is_still_a_cancel_after_the_time_limit_is_armed():
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    cancel = threading.Event()

    def emit(kind: str, message: str, **kw: object) -> None:
        if kind == "measured" and "no speculation" in message:
            cancel.set()

    search = scripted_search(collapsing_launch_fn(collapse_after=99), plan, PROMPTS[:2], SearchSettings(n_predict=16),
                             60.0, cancel=cancel, emit=emit)
    outcome = search.run()
    assert outcome.cancelled  # not a launch that "did not start: the time budget ran out"
    assert [m.candidate for m in outcome.measurements] == [Candidate()]


def budget_event(budget_s: float) -> dict:
    clock = SimClock()
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    ngram = tuple(Candidate(spec_type=t) for t in ("ngram-mod", "ngram-simple"))
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=ngram, mtp=None, dropped=())
    events: list[dict] = []

    def emit(kind: str, message: str, **kw: object) -> None:
        events.append({"kind": kind, "eta_s": kw.get("eta_s"), "elapsed_s": kw.get("elapsed_s")})

    # a fast tiny model (the demo model: ~700 tokens/s, loads in ~1 s) and the default protocol
    search = scripted_search(slow_launch_fn(clock, load_s=1.0, base_tps=700.0), plan, PROMPTS,
                             SearchSettings(n_predict=256, side_by_side=True), budget_s, emit=emit,
                             clock=clock)
    search.run()
    return next(e for e in events if e["kind"] == "budget") | {"took": clock.t - 1000.0}


def test_the_first_eta_is_the_planned_protocols_not_the_default_guess():
    """Before: the budget event's ETA still held the baseline launch's estimate made before any speed was
    known (20 tokens/s × 5 prompts × 256 tokens): 96 s at a 60 s and at a 30 s budget alike."""
    for budget_s in (30.0, 60.0):
        e = budget_event(budget_s)
        assert e["eta_s"] is not None and e["eta_s"] <= budget_s - e["elapsed_s"], (budget_s, e)
        assert 0.5 * (e["took"] - e["elapsed_s"]) <= e["eta_s"] <= 2.0 * (e["took"] - e["elapsed_s"]) + 5, e


def disturbed_baseline_launch_fn(clock: SimClock, fast: float = 700.0, slow: float = 22.8) -> ScriptedLaunch:
    """Simulated: the model alone runs at ``fast`` tokens/s, except its first launch, at ``slow``; n-gram
    types never draft on these prompts (they run as the model alone)."""
    def per_launch(c: Candidate, n: int) -> dict:
        first_baseline = c.is_baseline and not any(b.is_baseline for b in launch.launched[:n - 1])
        return {"tps_of": lambda _c: slow} if first_baseline else {}

    launch = ScriptedLaunch(lambda c: fast, clock=clock, load_s=1.0, overhead_s=0.01, drafts=never_drafts,
                            per_launch=per_launch)
    return launch


def test_a_disturbed_baseline_launch_is_measured_again_and_never_quoted():
    """The stop-11 trial: the baseline's only launch at 22.8 tokens/s, an n-gram probe that drafted nothing
    (so the same model alone) at 741.7. The baseline is measured again; the first launch is kept in the
    record as superseded, and the decision quotes the re-measured speed."""
    clock = SimClock()
    ngram = tuple(Candidate(spec_type=t) for t in ("ngram-mod", "ngram-simple"))
    plan = CandidatePlan(baseline=Candidate(), drafts=(), ngram=ngram, mtp=None, dropped=())
    search = scripted_search(disturbed_baseline_launch_fn(clock), plan, PROMPTS[:3],
                             SearchSettings(n_predict=64, side_by_side=True), 60.0,
                             clock=clock)
    outcome = search.run()
    ms = list(outcome.measurements)
    bases = [m for m in ms if m.candidate.is_baseline and m.stage == "baseline"]
    assert len(bases) == 2 and bases[0].superseded and bases[1].superseded is None, bases
    assert "disturbed" in bases[0].superseded and "22.8" in bases[0].superseded
    d = decide(SearchOutcome.of(ms, unmeasured=outcome.unmeasured))
    assert d.no_speculation
    assert abs(d.baseline_gen_tokens_per_s - 700.0) < 1.0, d.baseline_gen_tokens_per_s
    assert "22.8" not in d.reason  # the disturbed figure is never the model's speed
    assert [s.kind for s in outcome.notes] == ["sweep.baseline_superseded"]
    notes = " ".join(words(s) for s in outcome.notes)
    assert "disturbed" in notes and "measured again at 700.0" in notes, notes
    # the superseded launch survives a profile round trip as superseded, and the launch table says so
    import io
    from pathlib import Path

    from tuner.calibration.request import TuneResult
    from tuner.calibration.results import Measurement
    from tuner.cli.tune import print_table

    assert Measurement.from_json(bases[0].to_json()).superseded == bases[0].superseded
    out = io.StringIO()
    print_table(TuneResult(target_path=Path("/m/t.gguf"), decision=d, measurements=tuple(ms)), out)
    first_row = next(line for line in out.getvalue().splitlines() if line.startswith("no speculation"))
    assert "22.8" in first_row and "not used (disturbed" in first_row, out.getvalue()


def test_a_baseline_that_agrees_with_the_idle_run_is_not_measured_again():
    clock = SimClock()
    ngram = (Candidate(spec_type="ngram-simple"),)
    plan = CandidatePlan(baseline=Candidate(), drafts=(), ngram=ngram, mtp=None, dropped=())
    search = scripted_search(disturbed_baseline_launch_fn(clock, slow=650.0), plan, PROMPTS[:3],
                             SearchSettings(n_predict=64, side_by_side=True), 60.0,
                             clock=clock)
    outcome = search.run()
    ms = list(outcome.measurements)
    assert [m.stage for m in ms if m.candidate.is_baseline] == ["baseline"]
    assert not outcome.notes


def test_the_budget_for_a_slow_target_still_holds_with_the_new_limit():
    """The simulated 3 tokens/s sweep (test_budget.py) is untouched by the hard limit: it plans within it."""
    clock = SimClock()
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    search = scripted_search(slow_launch_fn(clock, base_tps=3.0), plan, PROMPTS,
                             SearchSettings(n_predict=128, side_by_side=True), 240.0,
                             clock=clock)
    outcome = search.run()
    ms = list(outcome.measurements)
    assert not search.record.cut_by_budget
    assert decide(SearchOutcome.of(ms, max_pairs=outcome.max_pairs)).winner.draft_path == DRAFT


def test_a_chain_whose_ngram_member_never_drafted_is_not_measured():
    """A chain ``ngram-mod,draft-simple`` whose ngram-mod drafted nothing alone on these prompts is the draft
    alone plus a lookup that finds nothing: it is not launched, and the plain draft is what gets confirmed
    (bench/slow_target.py served such a chain, "with n-gram lookup (ngram-mod)", over 3 pairs)."""
    clock = SimClock()
    # only a draft model drafts (1.5x, 80 % accepted); ngram-mod alone finds nothing to look up
    launch = ScriptedLaunch(lambda c: 30.0 if c.draft_path is not None else 20.0, clock=clock, load_s=1.0,
                            overhead_s=0.0,
                            drafts=lambda c, n: (n, int(0.8 * n)) if c.draft_path is not None else None)
    draft = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=4, p_min=0.0)
    chain = Candidate(spec_type="ngram-mod,draft-simple", draft_path=DRAFT, n_max=4, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(draft,), ngram=(Candidate(spec_type="ngram-mod"), chain),
                         mtp=None, dropped=())
    events: list[str] = []
    search = scripted_search(launch, plan, PROMPTS[:3], SearchSettings(n_predict=64, side_by_side=True), 120.0,
                             emit=lambda kind, message, **kw: events.append(message), clock=clock)
    outcome = search.run()
    ms = list(outcome.measurements)
    assert not any(m.candidate == chain for m in ms), [m.candidate.label for m in ms]
    assert any("ngram-mod never drafted on these prompts, so the chain would be" in e for e in events), events
    d = decide(SearchOutcome.of(ms, max_pairs=outcome.max_pairs))
    assert d.winner.spec_type == "draft-simple" and d.winner.draft_path == DRAFT, d.reason


def test_a_busy_sweep_measures_near_tied_draft_lengths_again_before_choosing_finalists():
    """Busy: the draft lengths screened within 12 % of the best one (the best included) get a second
    screening launch on the same requests, and their screening comparison pools both launches."""
    from tuner.calibration.pairing import compare

    clock = SimClock()
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    search = scripted_search(slow_launch_fn(clock, load_s=1.0, base_tps=16.0), plan, PROMPTS[:3],
                             SearchSettings(n_predict=64, side_by_side=True), 240.0,
                             clock=clock, busy=lambda: True)
    ms = list(search.run().measurements)
    screened: dict[Candidate, int] = {}
    for m in ms:
        if m.stage in ("probe", "refine") and m.ok:
            screened[m.candidate] = screened.get(m.candidate, 0) + 1
    twice = [c for c, n in screened.items() if n == 2]
    assert len(twice) >= 2, screened  # the leader and at least one near tie (8: 1.5x, 4: 1.45x here)
    c = twice[0]
    cmp_ = compare([m for m in ms if m.stage != "confirm"], c, 0.05)
    assert cmp_ is not None and cmp_.requests == 2 * 3  # both launches, 3 prompts each
    # idle, nothing is measured twice
    clock2 = SimClock()
    search2 = scripted_search(slow_launch_fn(clock2, load_s=1.0, base_tps=16.0), plan, PROMPTS[:3],
                              SearchSettings(n_predict=64, side_by_side=True), 240.0,
                              clock=clock2)
    ms2 = search2.run().measurements
    seen: set[Candidate] = set()
    for m in ms2:
        if m.stage in ("probe", "refine") and m.ok:
            assert m.candidate not in seen, m.candidate.label
            seen.add(m.candidate)


@pytest.mark.server
def test_a_profile_whose_budget_ran_out_is_not_reused_by_a_larger_budget(tmp_path, stories260k, llama_server_bin):
    """A new user's `tune --budget 5` ended "the time budget was spent before … were measured (a larger budget
    measures them)"; the next `tune` with the default budget then reused that profile. Now the larger budget
    finds it stale and measures (cancelled here right after the staleness event, to keep the test short)."""
    from tuner.calibration.request import TuneRequest
    from tuner.calibration.tune import tune
    from tuner.profiles import ProfileStore

    models = tmp_path / "models"
    models.mkdir()
    (models / stories260k.name).symlink_to(stories260k)
    store = ProfileStore(tmp_path / "profiles")
    # a 0.6 s budget (said "1 s"), below the 10 s a user may give (tuner/options.py), so built without
    # TuneRequest.create: on the tiny model it stands for a budget that a slow machine runs out of (at 1 s a quiet
    # box measured every configuration in time)
    short = TuneRequest(models_dir=models, budget_s=0.6, server=llama_server_bin, threads=1)
    first = tune(short, store=store)
    assert first.decision is not None and first.profile is not None
    assert first.profile.decision.get("budget_spent_before"), first.decision.reason
    again = tune(short, store=store)
    assert again.reused  # the same budget: the same answer
    cancel = threading.Event()
    kinds: list[tuple[str, str]] = []

    def on_event(ev) -> None:
        kinds.append((ev.kind, ev.message))
        if ev.kind == "stale":
            cancel.set()

    larger = tune(models, budget_s=60, server=llama_server_bin, store=store, threads=1, on_event=on_event,
                  cancel=cancel)
    assert not larger.reused
    stale = [m for k, m in kinds if k == "stale"]
    assert stale and "1 s budget was spent before" in stale[0] and "this sweep has 60 s" in stale[0], kinds


def test_a_probe_from_the_disturbed_minutes_is_still_refined_after_the_baseline_is_measured_again():
    """The first baseline (22.8 tokens/s) and the draft's probe (30, 1.3× it) ran while the machine was slow;
    an n-gram probe that drafted nothing then ran at 700, and the baseline measured again agrees with it. The
    draft's curve is compared with the baseline it was predicted against (a ratio), not with the fast one
    measured minutes later: its promising lengths are still measured (before: none, every predicted figure was
    below 700 tokens/s)."""
    from tests.fakes.scripted_server import spec_metrics

    clock = SimClock()
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    slow = {1: 22.8, 2: 30.0}  # the first two launches: the baseline, then the draft's probe

    def per_launch(c: Candidate, n: int) -> dict:
        return {"tps_of": lambda _c: slow[n]} if n in slow else {}

    def metrics(client) -> str:  # 4 draft steps of 16 per request, half of the first tokens accepted
        r = client.requests
        return spec_metrics(4 * r, 64 * r, [4 * r, 3 * r, 2 * r, r]) if client.candidate.draft_path else ""

    def drafts(c: Candidate, n: int):
        return (n, n // 2) if c.draft_path else None

    launch = ScriptedLaunch(lambda c: 700.0 if not c.draft_path else 900.0, clock=clock, load_s=1.0,
                            overhead_s=0.01, drafts=drafts, metrics=metrics, per_launch=per_launch)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(Candidate(spec_type="ngram-mod"),), mtp=None,
                         dropped=())
    search = scripted_search(launch, plan, PROMPTS[:3], SearchSettings(n_predict=64, side_by_side=True), 120.0,
                             clock=clock)
    search.run()
    assert search.record.baseline_rechecked and abs((search.record.base_tps or 0) - 700.0) < 1.0
    refined = [m.candidate.n_max for m in search.record.measurements if m.stage == "refine"]
    assert refined, [(m.candidate.label, m.stage) for m in search.record.measurements]
