"""The search's stages on a scripted launch (no server): which candidates it measures, in what order.

A scripted server is used here only to pin the plan logic (what gets launched); the measurement
protocol itself is tested against the real llama-server in test_measure.py / test_tune_e2e.py.
"""

from __future__ import annotations

from tests.fakes.scripted_server import ScriptedLaunch, TpsOf, half_accepted, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pairing import MIN_PAIRS, adjacent_pairs
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings

DRAFT = "/m/good.gguf"


def _tps(c: Candidate) -> float:
    """A candidate whose speed depends on n_max and p_min (no /metrics per-position counters: the
    search falls back to fixed lengths, 4 and 8)."""
    if c.is_baseline:
        return 100.0
    n = c.n_max or 16
    gain = {4: 1.30, 8: 1.45, 16: 1.20}.get(n, 1.25)
    return 100.0 * gain * (1.05 if c.p_min else 1.0)


def test_refine_measures_a_p_min_variant_of_the_best_length():
    launch = ScriptedLaunch(_tps, content="same text")
    launched = launch.launched

    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    events: list[str] = []
    search = scripted_search(launch, plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16), 600,
                             emit=lambda kind, msg, **kw: events.append(f"{kind}: {msg}"))
    ms = search.run().measurements
    labels = [c.label for c in launched]
    variant = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=8, p_min=0.75)
    assert variant in launched, labels
    # Measured after the plain lengths, and only once before confirmation.
    assert launched.index(variant) > launched.index(probe.with_n_max(8))
    assert [m.stage for m in ms if m.candidate == variant][0] == "refine"
    d = decide(SearchOutcome.of(ms))
    assert d.winner == variant and "p_min 0.75" in d.reason

    # Off switch: no p_min variant at all.
    launched.clear()
    scripted_search(launch, plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16, p_min_variant=None),
                    600).run()
    assert not any(c.p_min for c in launched)


def test_no_p_min_variant_for_a_dspark_head():
    """DSpark's p_min is a threshold on its confidence head (common/speculative.cpp), not on the draft
    token's probability: the search does not spend a launch on a p_min variant of such a head."""
    launch = ScriptedLaunch(_tps, content="same text")
    launched = launch.launched
    probe = Candidate(spec_type="draft-dspark", draft_path="/m/dspark.gguf", n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    scripted_search(launch, plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16), 600).run()
    assert any(c.spec_type == "draft-dspark" and c.n_max == 8 for c in launched)  # refined as usual
    assert not any(c.p_min for c in launched), [c.label for c in launched]


def _scripted_search(tps_of: TpsOf, **settings) -> tuple[list[Candidate], list]:
    """One search over the baseline and one draft (probe at n_max 16) at the speeds of ``tps_of``;
    ``SearchSettings`` overrides in ``settings`` (no p_min variant unless asked). Returns
    ``(launched candidates in order, measurements)``."""
    launch = ScriptedLaunch(tps_of, content="same text")
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    ms = scripted_search(launch, plan, [(0, Prompt("p", "code"))],
                         SearchSettings(**{"n_predict": 16, "p_min_variant": None, **settings}), 600).run().measurements
    return launch.launched, list(ms)


def test_confirm_rounds_alternate_abba_and_stop_when_the_test_is_conclusive():
    """The paired rounds run A B B A A B B A …: each finalist repetition is measured right next to the
    baseline repetition with the same id; fresh ids after the screening ones; the rounds stop as soon
    as the sequential test is conclusive (a steady 1.45x: at MIN_PAIRS pairs)."""
    _launched, ms = _scripted_search(_tps, probe_repetitions=3)
    confirm = [(i, m) for i, m in enumerate(ms) if m.stage == "confirm"]
    assert confirm, [m.stage for m in ms]
    kinds = ["A" if m.candidate.is_baseline else "B" for _i, m in confirm]
    assert "".join(kinds).startswith("ABA") and all(x != y for x, y in zip(kinds, kinds[1:])), kinds
    screening_ids = {s.repetition for m in ms if m.stage != "confirm" for s in m.samples}
    confirm_ids = {s.repetition for _i, m in confirm for s in m.samples}
    assert screening_ids == {0, 1, 2} and not (screening_ids & confirm_ids)
    finalist = next(m.candidate for _i, m in confirm if not m.candidate.is_baseline)
    pairs = adjacent_pairs(ms, finalist)
    # two repetitions per launch: the first look with MIN_PAIRS pairs comes at the end of a block
    assert MIN_PAIRS <= len(pairs) <= MIN_PAIRS + 1
    for p in pairs:
        assert abs(p.candidate_launch - p.baseline_launch) == 1
        assert [s.prompt_index for s in p.candidate_samples] == [s.prompt_index for s in p.baseline_samples]
    d = decide(SearchOutcome.of(ms))
    assert d.winner == finalist and d.pairs == len(pairs) and f"{len(pairs)} adjacent pairs" in d.reason


def _dip_tps(c: Candidate) -> float:
    """A speed curve with its peak at n_max 5, between the fallback lengths 4 and 8."""
    if c.is_baseline:
        return 100.0
    return 100.0 * {16: 1.10, 4: 1.30, 5: 1.40, 8: 1.20, 3: 1.05}.get(c.n_max or 16, 1.25)


def _dip_search(**settings):
    launched, ms = _scripted_search(_dip_tps, **settings)
    return launched, decide(SearchOutcome.of(ms))


def test_spare_budget_explores_the_neighbours_of_the_best_length():
    launched, d = _dip_search()
    lengths = [c.n_max for c in launched if not c.is_baseline]
    # probe 16, refine's fallback 4 and 8, then the neighbours of the best (4): 5 wins, then 6
    assert lengths[:3] == [16, 4, 8] and 5 in lengths and 6 in lengths, lengths
    assert lengths.index(5) < lengths.index(6)
    assert d.winner.n_max == 5, d.reason
    # 3 (below 4) is a neighbour too, but 4 is no longer within 5 % of the best once 5 ran at 1.40x
    assert 3 not in lengths

    launched, d = _dip_search(explore_per_draft=0)  # off: the refine stage's local maximum stands
    assert d.winner.n_max == 4 and 5 not in [c.n_max for c in launched]


def test_no_exploration_without_spare_budget():
    # a budget already more than half spent after the refine stage (the clock says so) explores nothing
    launched, d = _dip_search(explore_spare=1.01)
    assert 5 not in [c.n_max for c in launched] and d.winner.n_max == 4


def _slow_draft_tps(c: Candidate) -> float:
    """A draft that never beats the baseline (an unrelated draft: every length is slower)."""
    return 100.0 if c.is_baseline else 60.0


def test_a_draft_that_never_beats_the_baseline_is_not_explored():
    launched, _ms = _scripted_search(_slow_draft_tps)
    lengths = sorted(c.n_max for c in launched if not c.is_baseline)
    assert lengths == [4, 8, 16], lengths  # the probe and the refine stage's fallback lengths, nothing more


def test_explore_follows_the_curve_past_an_unlucky_neighbour():
    """Measured: n_max 2 at 94 tokens/s, n_max 3 at 80 (one unlucky run). The refitted curve still
    puts n_max 4 within 5 % of the best: it is explored before the far side (n_max 1)."""
    from tuner.calibration.results import Measurement, Sample

    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    search = scripted_search(ScriptedLaunch(_tps), plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16),
                             300)
    record = search.record
    record.base_tps = 75.0

    def run(n_max, tps):
        return Measurement(candidate=probe.with_n_max(n_max), samples=(Sample(0, "code", 0, tps, 16, 15_000 / tps),))

    record.measurements = [run(16, 74.0), run(2, 94.0), run(3, 80.0)]
    record.curves[record.group(probe)] = [(1, 0.83, 80.0), (2, 0.8, 92.0), (3, 0.75, 93.0), (4, 0.7, 93.5),
                                          (5, 0.66, 91.0), (8, 0.55, 85.0)]
    assert search.screening.explore_next(probe) == (4, 93.5)
    record.measurements.append(run(4, 99.0))
    assert search.screening.explore_next(probe) == (5, 91.0)  # now next to the new best, and predicted close
    # without a curve: only the neighbours of lengths within 5 % of the best (4 → 5; 3 is measured)
    record.curves.clear()
    assert search.screening.explore_next(probe) == (5, 0.0)


def _drift_tps_of() -> TpsOf:
    """The machine's speed drifts between 1x and 3x slower over every 20 requests (another program
    comes and goes): both servers slow down together. The draft is 1.2–1.45x of the baseline at any
    one moment (n_max dependent)."""
    requests = [0]

    def tps_of(c: Candidate) -> float:
        requests[0] += 1
        slow = 1.0 + 2.0 * abs((requests[0] / 10.0) % 2.0 - 1.0)  # a triangle wave, 1x..3x
        return _tps(c) / slow

    return tps_of


def test_side_by_side_rounds_pair_each_request_with_the_baseline_right_after_it():
    launch = ScriptedLaunch(_drift_tps_of(), content="same text")
    live = launch.live
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    prompts = [(0, Prompt("p", "code")), (1, Prompt("q", "creative"))]
    events: list[str] = []
    ms = scripted_search(launch, plan, prompts, SearchSettings(n_predict=16, p_min_variant=None, side_by_side=True),
                         600, emit=lambda kind, msg, **kw: events.append(kind)).run().measurements
    assert not live  # every server stopped, the baseline's kept-running one included
    confirm = [m for m in ms if m.stage == "confirm"]
    assert confirm and [m.candidate.is_baseline for m in confirm[:2]] == [True, False]
    d = decide(SearchOutcome.of(ms))
    pairs = adjacent_pairs(ms, d.winner)
    assert len(pairs) >= MIN_PAIRS and d.pairs == len(pairs)
    # 3x drift over the sweep, yet each pair sees the gain (its two sides are one request apart)
    assert d.winner.draft_path == DRAFT and 1.3 < d.speedup < 1.6, d.reason
    for p in pairs:
        assert 1.1 < p.ratio < 1.7
    assert "confirmed" in events


def _ngram_tps(c: Candidate) -> float:
    """No draft model; ngram-mod is a steady 1.3x."""
    return 100.0 if c.is_baseline else 130.0


def test_side_by_side_ngram_pairs_get_a_fresh_launch_each_while_the_baseline_stays_up():
    launch = ScriptedLaunch(_ngram_tps, content="same text")
    launches, live = launch.launched, launch.live
    ngram = Candidate(spec_type="ngram-mod")
    plan = CandidatePlan(baseline=Candidate(), drafts=(), ngram=(ngram,), mtp=None, dropped=())
    ms = scripted_search(launch, plan, [(0, Prompt("p", "code")), (1, Prompt("q", "math"))],
                         SearchSettings(n_predict=16, side_by_side=True), 600).run().measurements
    assert not live
    confirm = [m for m in ms if m.stage == "confirm"]
    cand_runs = [m for m in confirm if not m.candidate.is_baseline]
    # one repetition per n-gram launch (its pool must not carry over), one baseline launch for all pairs
    assert all(m.repetitions == 1 for m in cand_runs) and len(cand_runs) >= MIN_PAIRS
    first_confirm = len(launches) - len(cand_runs) - 1
    assert [c.is_baseline for c in launches[first_confirm:]] == [True] + [False] * len(cand_runs)
    d = decide(SearchOutcome.of(ms))
    assert d.winner == ngram and abs(d.speedup - 1.3) < 0.01 and d.pairs == len(cand_runs)


def _no_ngram_drafts(c: Candidate, n_predict: int) -> tuple[int, int] | None:
    """n-gram types run but never draft (prompts that repeat no n-gram); the draft model does."""
    if c.spec_type.startswith("ngram"):
        return (0, 0)
    return half_accepted(c, n_predict)


def test_another_length_of_an_ngram_type_that_never_drafted_is_not_launched():
    """ngram-simple drafts after a found lookup whatever its draft length: once it drafted nothing, its
    other length is skipped (a launch saved). Each type's shortest variant runs first; for ngram-mod that is
    also the one with the smallest n_min (it drops drafts shorter than n_min): where it drafted nothing, the
    default (n_min 48) cannot draft either and is skipped; the other way round it could not be (see below)."""
    launch = ScriptedLaunch(_tps, content="same text", drafts=_no_ngram_drafts)
    launched = launch.launched
    events: list[str] = []

    simple, simple16 = Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-simple", ngram_n_max=16)
    mod, mod16 = Candidate(spec_type="ngram-mod"), Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12)
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(simple, simple16, mod, mod16), mtp=None,
                         dropped=())
    scripted_search(launch, plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16, p_min_variant=None), 600,
                    emit=lambda kind, msg, **kw: events.append(f"{kind}: {msg}")).run()
    assert simple16 in launched and mod16 in launched
    assert simple not in launched and mod not in launched, [c.label for c in launched]
    assert launched.index(simple16) < launched.index(mod16)  # the plan's order of the types stands
    assert any(e.startswith(f"skipped: {simple.label}: not measured, ngram-simple ngram n_max 16 never drafted")
               for e in events), events
    assert any(e.startswith(f"skipped: {mod.label}: not measured") for e in events)

    # a larger n_min (the default's 48) cannot rule out the smaller one: measured the other way round
    # (the default alone in the plan first, then the short variant), both run
    from tuner.calibration.results import Measurement, Sample
    from tuner.calibration.search.record import Record
    from tuner.calibration.search.rules import never_drafted_type

    rec = Record(measurements=[Measurement(mod, samples=(Sample(0, "code", 0, 100.0),), no_drafts_at="greedy")])
    assert never_drafted_type(rec, mod16) is None


def test_the_workload_is_the_sweeps_and_what_its_launches_learn_is_the_outcomes():
    """A sampled workload reaches every launch as the search's parameter (no launch carries it): the first
    launch reads the server's own sampling defaults (/props) into the sweep's memory, each candidate's
    first launch runs the greedy lossless pass, and an n-gram type that never drafted is recorded as facts
    (``Measurement.no_drafts``) beside the words the decision quotes."""
    from tuner.calibration.results import NoDrafts
    from tuner.calibration.sampling import Sampling
    from tuner.calibration.wording import no_drafts_error
    from tuner.calibration.workload import Workload

    defaults = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
    launch = ScriptedLaunch(_tps, content="same text", drafts=_no_ngram_drafts, server_sampling=defaults)
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    ngram = Candidate(spec_type="ngram-simple")
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(ngram,), mtp=None, dropped=())
    served = Workload(sampling=Sampling())  # llama-server's own defaults
    outcome = scripted_search(launch, plan, [(0, Prompt("p", "code"))], SearchSettings(n_predict=16, p_min_variant=None),
                              600, workload=served).run()
    assert outcome.server_sampling == defaults
    sampling_words = served.sampling.describe(defaults)
    assert "(llama-server's defaults)" in sampling_words
    first = {m.candidate: m for m in reversed(outcome.measurements)}  # each candidate's first launch
    assert first[probe].greedy_draft_n and first[probe].lossless is True  # the greedy pass ran and compared
    never = first[ngram]
    assert never.no_drafts == NoDrafts(sampling_words, sampled=True, greedy_draft_n=0)
    assert never.no_drafts_at == sampling_words and never.error == no_drafts_error("ngram-simple", never.no_drafts)
    # what was measured, never a general claim about the prompts (issue 26)
    assert never.error.endswith(", nor in the short greedy check (temperature 0)"), never.error
    assert "repeat no n-gram" not in never.error and "no speedup is possible" not in never.error


def test_side_by_side_alternates_which_side_goes_first_and_relaunches_every_two_pairs():
    """Side by side, the finalist and the baseline take turns going first (under a fixed order a load that
    grows within a launch favours one side in every pair), and a draft model's server is started afresh
    every LOOK_STEP pairs (a launch's own speed offset is then not shared by all its pairs)."""
    from tuner.calibration.measure import WARMUP_PROMPT
    from tuner.calibration.pairing import LOOK_STEP

    order: list[tuple[str, str]] = []  # (side, prompt) of every measured request, in time order
    n = [0]

    def tps_of(c: Candidate) -> float:
        n[0] += 1
        return 100.0 if c.is_baseline else 100.0 * (1.3 + 0.4 * (n[0] % 3) / 3)  # a noisy 1.3-1.7x

    scripted = ScriptedLaunch(tps_of, content="same text")

    def launch(c, cancel):
        ln = scripted(c, cancel)
        inner = ln.client.completion

        def completion(prompt, n_predict, timeout_s=120.0, **params):
            if WARMUP_PROMPT not in prompt:
                order.append(("b" if c.is_baseline else "c", prompt))
            return inner(prompt, n_predict, timeout_s, **params)

        ln.client.completion = completion
        return ln

    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(), mtp=None, dropped=())
    prompts = [(0, Prompt("p", "code")), (1, Prompt("q", "creative")), (2, Prompt("r", "math"))]
    search = scripted_search(launch, plan, prompts, SearchSettings(n_predict=16, p_min_variant=None, side_by_side=True,
                                                                  explore_per_draft=0), 600)
    ms = search.run().measurements
    cand = [m for m in ms if m.stage == "confirm" and not m.candidate.is_baseline]
    assert len(cand) >= 2 and all(m.repetitions <= LOOK_STEP for m in cand), [m.repetitions for m in cand]
    # the confirm stage's requests in time order: (c b) and (b c) take turns, each turn the same request
    paired = order[-2 * sum(len(m.samples) for m in cand):]
    turns = [paired[i:i + 2] for i in range(0, len(paired), 2)]
    assert all(a[1] == b[1] and {a[0], b[0]} == {"b", "c"} for a, b in turns), turns
    firsts = [a[0] for a, _b in turns]
    assert firsts[:4] == ["c", "b", "c", "b"], firsts
    d = decide(SearchOutcome.of(ms))
    assert d.winner.draft_path == DRAFT and d.pairs == len(adjacent_pairs(ms, d.winner))


def test_an_ngram_variant_that_cannot_beat_the_leader_is_not_launched_and_the_decision_says_so():
    """The draft leads at 1.4x; ngram-simple at n_max 16 ran first and accepted a few tokens (1.04x), none at
    its 16th position: at the server's default 48 it cannot do better, so that variant is not launched (a launch
    saved), and the decision's sweep sentences say what was skipped and why."""
    from tests.fakes.scripted_server import spec_metrics
    from tuner.calibration.wording import words

    def tps_of(c: Candidate) -> float:
        return 100.0 if c.is_baseline else 104.0 if c.spec_type.startswith("ngram") else 140.0

    def metrics(client) -> str:
        if not client.candidate.spec_type.startswith("ngram"):
            return ""
        n = client.requests  # per request: 2 draft steps of 8 tokens, 3 accepted
        return spec_metrics(2 * n, 16 * n, [2 * n, n] + [0] * 14)

    launch = ScriptedLaunch(tps_of, content="same text", metrics=metrics)
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    simple, simple16 = Candidate(spec_type="ngram-simple"), Candidate(spec_type="ngram-simple", ngram_n_max=16)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,), ngram=(simple, simple16), mtp=None, dropped=())
    events: list[str] = []
    outcome = scripted_search(launch, plan, [(0, Prompt("p", "code")), (1, Prompt("q", "chat"))],
                              SearchSettings(n_predict=16, p_min_variant=None), 600,
                              emit=lambda kind, msg, **kw: events.append(f"{kind}: {msg}")).run()
    assert simple16 in launch.launched and simple not in launch.launched, [c.label for c in launch.launched]
    assert any(e.startswith(f"skipped: {simple.label}: not launched, it cannot beat {probe.label}") for e in events)
    said = [words(s) for s in outcome.notes if s.kind == "sweep.pruned"]
    assert len(said) == 1 and said[0].startswith("Not launched, because on these prompts they could not beat"), said
    assert f"{simple.label} (at most 1.0" in said[0] and f"by {simple16.label}'s acceptance" in said[0]
    assert decide(outcome).winner.draft_path == DRAFT


def test_a_draft_length_that_cannot_beat_the_leader_is_not_refined():
    """Two drafts: the good one leads at 1.4x; the other's probe (1.05x, acceptance 6 %) predicts its best
    lengths at about 1.1x — above the baseline, so the refine stage used to measure them, but below the leader
    even with the pruning slack: not launched."""
    from tests.fakes.scripted_server import spec_metrics

    other = Candidate(spec_type="draft-simple", draft_path="/m/other.gguf", n_max=16, p_min=0.0)

    def tps_of(c: Candidate) -> float:
        return 100.0 if c.is_baseline else 105.0 if c.draft_path == other.draft_path else 140.0

    def metrics(client) -> str:
        if client.candidate.draft_path != other.draft_path:
            return ""
        n = client.requests  # per request: 10 draft steps of 16 tokens, 1 accepted (at the first position)
        return spec_metrics(10 * n, 160 * n, [n] + [0] * 15)

    launch = ScriptedLaunch(tps_of, content="same text", metrics=metrics)
    good = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(good, other), ngram=(), mtp=None, dropped=())
    events: list[str] = []
    search = scripted_search(launch, plan, [(0, Prompt("p", "code")), (1, Prompt("q", "chat"))],
                             SearchSettings(n_predict=16, p_min_variant=None), 600,
                             emit=lambda kind, msg, **kw: events.append(f"{kind}: {msg}"))
    outcome = search.run()
    other_lengths = [c.n_max for c in launch.launched if c.draft_path == other.draft_path]
    assert other_lengths == [16], other_lengths  # its probe only
    pruned = [p for p in search.record.pruned if p["basis"] == other.label]
    assert pruned and all(p["leader"].startswith("draft-simple good.gguf") for p in pruned), search.record.pruned
    assert all(float(p["at_most"]) * 1.1 < float(p["leader_ratio"]) for p in pruned)
    assert decide(outcome).winner.draft_path == DRAFT
