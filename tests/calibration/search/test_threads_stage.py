"""The thread stage on a scripted server: each thread setting's idle and loaded speed (the issue's figures on
a 2-core OpenMP build) → the setting the sweep runs at, the setting served and the sentence that says the
trade; its share of the budget."""

from __future__ import annotations

from tests.fakes.scripted_server import ScriptedLaunch, SimClock, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import SearchSettings
from tuner.calibration.threads import DEFAULT, LOADING_MESSAGE, SHARE, ThreadSetting
from tuner.calibration.wording import render

DRAFT = "/m/good.gguf"
PASSIVE = ThreadSetting(2, omp_passive=True)

# (idle, loaded) tokens/s per setting: measured on the 2-core machine of issue 25 (12-block target)
FIGURES = {DEFAULT: (99.0, 1.5), ThreadSetting(1): (51.0, 52.0), PASSIVE: (59.0, 50.0)}


class FakeBurner:
    """Stands for ``tuner.hardware.burner.BoundedBurner``: while it is entered, the script runs "loaded"
    (``busy_machine``: another program keeps a core busy all the time, burner or not)."""

    loaded = False
    busy_machine = False
    started: list[float] = []

    def __init__(self, seconds: float) -> None:
        FakeBurner.started.append(seconds)

    def __enter__(self) -> FakeBurner:
        FakeBurner.loaded = True
        return self

    def __exit__(self, *exc: object) -> None:
        FakeBurner.loaded = False


def _tps(c: Candidate) -> float:
    setting = ThreadSetting(c.threads, c.omp_passive, c.poll)
    idle, loaded = FIGURES[setting]
    gain = 1.0 if c.is_baseline else 1.4
    return gain * (loaded if FakeBurner.loaded or FakeBurner.busy_machine else idle)


def _search(draft: bool, budget_s: float = 600, **settings):
    FakeBurner.started = []
    launch = ScriptedLaunch(_tps, content="same text", clock=(clock := SimClock()), load_s=1.0)
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=8, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,) if draft else (), ngram=(), mtp=None, dropped=())
    events: list[tuple[str, str]] = []
    search = scripted_search(launch, plan, [(0, Prompt("p", "code")), (1, Prompt("q", "code"))],
                             SearchSettings(n_predict=32, **settings), budget_s, clock=clock,
                             emit=lambda kind, msg, **kw: events.append((kind, msg)))
    search.threads.burner = FakeBurner
    return search, launch, events


def test_the_model_alone_serves_passive_threads_and_says_the_trade() -> None:
    search, launch, events = _search(draft=False, thread_cores=2, thread_openmp=True)
    outcome = search.run()
    assert outcome.threads is not None
    assert outcome.threads.chosen == PASSIVE  # (59 + 50) / 2 over (51 + 52) / 2 and (99 + 1.5) / 2
    settings = [ThreadSetting(c.threads, c.omp_passive, c.poll) for c in launch.launched]
    assert settings[:3] == [ThreadSetting(1), PASSIVE, DEFAULT]  # the default last: on a busy machine it is the slow one
    assert set(settings[3:]) == {PASSIVE}  # the sweep ran at the model alone's choice, and nothing more was staged
    assert len(FakeBurner.started) == 3 and all(0 < s <= 120 for s in FakeBurner.started)
    assert any(kind == "threads" and LOADING_MESSAGE in msg for kind, msg in events)
    from tuner.calibration.threads import threads_sentence

    assert render([threads_sentence(outcome.threads)]).text == (
        "Threads: all 2 cores, waiting politely: 59 tokens/s idle, 50 with another busy program; "
        "the default would be 99 and 1.5.")
    # the stage's launches are not measurements the decision reads
    assert all(m.candidate.threads is None and not m.candidate.omp_passive for m in outcome.measurements)


def test_a_speculative_winner_is_measured_first_and_the_baseline_after() -> None:
    search, launch, _ = _search(draft=True, budget_s=1200, thread_cores=2, thread_openmp=True)
    outcome = search.run()
    assert outcome.threads is not None and outcome.threads.served_label.startswith("draft-simple")
    assert [c.is_baseline for c in launch.launched[:3]] == [True] * 3  # the model alone's, before the sweep
    staged = launch.launched[-3:]
    assert [c.is_baseline for c in staged] == [False] * 3
    # the winner's: the sweep's setting first, the default last
    assert [ThreadSetting(c.threads, c.omp_passive, c.poll) for c in staged] == [PASSIVE, ThreadSetting(1), DEFAULT]
    assert outcome.threads.chosen == PASSIVE and len(outcome.threads.baseline) == 3
    assert not outcome.threads.of_baseline


def test_on_a_busy_machine_the_sweep_measures_at_the_setting_that_does_not_collapse() -> None:
    FakeBurner.busy_machine = True
    try:
        search, launch, _ = _search(draft=True, budget_s=1200, thread_cores=2, thread_openmp=True)
        outcome = search.run()
    finally:
        FakeBurner.busy_machine = False
    assert search.threads.sweep_setting == ThreadSetting(1)  # 52 loaded and "idle", over 50 (passive) and 1.5
    base = [m for m in outcome.measurements if m.candidate.is_baseline and m.ok]
    assert base and all(m.gen_tokens_per_s and m.gen_tokens_per_s > 40 for m in base)  # not the collapsed 1.5
    assert outcome.threads is not None and outcome.threads.chosen == ThreadSetting(1)


def test_without_time_for_the_winner_it_is_served_at_the_model_alones_setting_and_says_so() -> None:
    search, _launch, _ = _search(draft=True, budget_s=1200, thread_cores=2, thread_openmp=True)
    stage, real_run = search.threads, search.threads.run

    def run_without_time(outcome) -> None:
        stage._estimate_s = lambda *_: 10_000.0  # type: ignore[method-assign]  # no setting fits after the sweep
        real_run(outcome)

    stage.run = run_without_time  # type: ignore[method-assign]
    outcome = search.run()
    assert outcome.threads is not None and outcome.threads.of_baseline and outcome.threads.chosen == PASSIVE
    from tuner.calibration.threads import threads_sentence

    assert render([threads_sentence(outcome.threads)]).text.startswith(
        "Threads (measured with the model alone): all 2 cores, waiting politely: 59 tokens/s idle")


def test_a_ggml_threadpool_build_tries_poll_0_instead() -> None:
    FIGURES[ThreadSetting(2, poll=0)] = (97.0, 2.0)
    try:
        search, launch, _ = _search(draft=False, thread_cores=2, thread_openmp=False)
        outcome = search.run()
    finally:
        del FIGURES[ThreadSetting(2, poll=0)]
    assert outcome.threads is not None and outcome.threads.chosen == ThreadSetting(1)
    assert not any(c.omp_passive for c in launch.launched)


def test_no_thread_stage_without_cores_and_none_past_its_share() -> None:
    search, launch, _ = _search(draft=False)
    assert search.budget.held_s == 0 and search.run().threads is None
    assert all(c.threads is None and not c.omp_passive for c in launch.launched)
    search, launch, events = _search(draft=False, budget_s=20, thread_cores=2, thread_openmp=True)
    assert search.budget.held_s == SHARE * 20
    search.run()
    # 3 s of a 20 s budget: the first setting (one core fewer) is measured whatever the share, the others are not
    assert [f.setting.threads for f in search.threads.base] == [1]
    assert sum(1 for kind, msg in events if kind == "skipped" and "thread setting" in msg) >= 2


def test_the_eta_counts_the_share_kept_for_the_stage() -> None:
    search, _launch, _ = _search(draft=False, thread_cores=2, thread_openmp=True)
    search.estimates.warmup_tps = 50.0
    search.eta.confirming = True

    def eta() -> float:
        v = search.eta.remaining_s(search.budget, search.estimates, search.tracker, lambda: False)
        assert v is not None
        return v

    with_share = eta()
    search.budget.held_s = 0.0
    assert with_share - eta() == SHARE * 600


def test_the_loaded_requests_are_the_idle_ones_as_another_repetition_and_the_warm_up_is_no_measured_prompt() -> None:
    """Idle and loaded speeds are compared, so they are the same prompts (the next prompts read "184 tokens/s
    idle, 219 with another busy program" for a chain: prompts differ in how much a draft guesses), sent as another
    repetition so no prompt cache is shared; the warm-up is not a measured prompt."""
    from tuner.calibration.measure import WARMUP_PROMPT

    FakeBurner.started = []
    launch = ScriptedLaunch(_tps, content="same text", clock=(clock := SimClock()), load_s=1.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(), ngram=(), mtp=None, dropped=())
    prompts = [(i, Prompt(f"prompt {i}", "code")) for i in range(4)]
    search = scripted_search(launch, plan, prompts, SearchSettings(n_predict=32, thread_cores=2, thread_openmp=True),
                             600, clock=clock)
    search.threads.burner = FakeBurner
    search.run()
    first = launch.clients[0]  # the model alone's first thread setting, before the sweep
    # each request's text follows its "Request N." line (tuner.calibration.measure: no two share a cached prompt)
    assert [p.split("\n", 1)[1] for p in first.prompts] == [WARMUP_PROMPT, "prompt 0", "prompt 1", "prompt 0",
                                                             "prompt 1"]
    heads = [p.split("\n", 1)[0] for p in first.prompts[1:]]
    assert heads[0] == heads[1] != heads[2] == heads[3]  # the loaded ones are another repetition: no shared cache


def test_an_ngram_winner_is_measured_loaded_in_a_fresh_launch() -> None:
    """ngram-mod's pool keeps what the idle requests generated: measured in the same launch, the chain ngram-mod +
    draft read 184 tokens/s idle and 351 with another busy program (bench/tune_quality.py). Each setting of a
    candidate with an n-gram type is two launches: the idle requests in one, the same prompts loaded in the next."""
    FakeBurner.started = []
    ngram = Candidate(spec_type="ngram-mod", n_max=16)
    launch = ScriptedLaunch(_tps, content="same text", clock=(clock := SimClock()), load_s=1.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(), ngram=(ngram,), mtp=None, dropped=())
    prompts = [(i, Prompt(f"prompt {i}", "code")) for i in range(6)]
    search = scripted_search(launch, plan, prompts, SearchSettings(n_predict=32, thread_cores=2, thread_openmp=True),
                             1200, clock=clock)
    search.threads.burner = FakeBurner
    outcome = search.run()
    assert outcome.threads is not None and outcome.threads.served_label.startswith("ngram-mod")
    n = 2 * len(outcome.threads.figures)  # two launches per setting, the stage's last
    staged = list(zip(launch.launched, launch.clients))[-n:]
    assert all(c.spec_type == "ngram-mod" for c, _ in staged)
    assert [ThreadSetting(c.threads, c.omp_passive, c.poll) for c, _ in staged[::2]] == \
        [ThreadSetting(c.threads, c.omp_passive, c.poll) for c, _ in staged[1::2]]
    for (_, idle_client), (_, loaded_client) in zip(staged[::2], staged[1::2]):
        idle_texts = [p.split("\n", 1)[1] for p in idle_client.prompts]
        loaded_texts = [p.split("\n", 1)[1] for p in loaded_client.prompts]
        assert idle_texts[1:] == loaded_texts[1:] == ["prompt 0", "prompt 1"]  # the same prompts, a fresh pool
    assert all(f.idle_tps and f.loaded_tps for f in outcome.threads.figures)


def test_a_request_s_time_limit_never_runs_past_the_stage_s_end() -> None:
    """A collapsed default's limit scaled with its 1.6 tokens/s warm-up (3 × 4 tokens ÷ 1.6 = 7.5 s a request):
    15 s of idle requests took a 180 s sweep to 192 s (bench/threads_under_load.py). The limit is now the time left
    over the requests still to run, at least MIN_CAP_S; a request cut there counts as an upper bound."""
    from tuner.calibration.search.threads import MIN_CAP_S

    search, _launch, _ = _search(draft=False, thread_cores=2, thread_openmp=True)
    stage = search.threads
    stage.end_s = search.budget.elapsed_s() + 6.0
    assert stage._capped(7.5, 2) == 1.5  # 6 s over 2 halves × 2 prompts
    assert stage._capped(7.5, 1) == 3.0
    assert stage._capped(1.0, 1) == 1.0  # a short limit stays
    stage.end_s = search.budget.elapsed_s() - 1.0
    assert stage._capped(7.5, 2) == MIN_CAP_S


def _busy_draft_search(budget_s: float):
    """A draft plan's search, run to its end while another program keeps a core busy (2 cores, OpenMP)."""
    FakeBurner.busy_machine = True
    try:
        search, launch, events = _search(draft=True, budget_s=budget_s, thread_cores=2, thread_openmp=True)
        search.run()
    finally:
        FakeBurner.busy_machine = False
    return search, launch, events


def test_the_first_setting_is_measured_before_the_sweep_even_past_the_share() -> None:
    # tune_quality's busy sweep of 113 s: the stage's first step may use 2/3 of 15 % (11.3 s), and before any load
    # was timed a setting is guessed at 5 s load + 1 + 2 × 2.5 + 0.3 = 11.3 s: nothing fitted, the sweep ran at the
    # default and collapsed under the burner. Now the first setting (one core fewer) is always measured, the rest
    # only within the share, and the sweep runs at it.
    search, launch, _events = _busy_draft_search(113)
    before = [c for c in launch.launched[:3] if c.is_baseline and (c.threads is not None or c.omp_passive)]
    assert [c.threads for c in before][:1] == [1], [c.label for c in launch.launched[:4]]
    assert search.threads.sweep_setting is not None and search.threads.sweep_setting.threads == 1
    assert search.measurer.thread_setting == search.threads.sweep_setting


def test_the_next_setting_is_estimated_from_the_stage_s_own_load_times() -> None:
    # a 150 s tune beside the burner on the 2-core box: the first setting (one core fewer) was measured by 4.4 s of
    # the stage's 15 s, and the next was guessed at 5 s load + 1 + 2 × 2.5 + 0.3 = 11.3 s — past the share by 0.2 s,
    # "the thread stage's share of the budget is spent" with two thirds of it left — while every load took 0.3 s.
    # The stage's launches now time the load its next estimate uses (1 s here: 7.3 s a setting).
    search, _launch, events = _busy_draft_search(120)
    assert [f.setting for f in search.threads.base] == [ThreadSetting(1), PASSIVE]
    assert search.estimates.load_s and set(search.estimates.load_s) == {1.0}
    before = [msg for kind, msg in events if kind == "skipped" and msg.startswith("no speculation: thread setting")]
    assert len(before) == 1 and "(the default)" in before[0]
