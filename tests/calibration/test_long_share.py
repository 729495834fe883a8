"""The served mix of short and long-context requests (issue 11, Deliver 4): the pick is the configuration
fastest over the share of long-context requests the user sets, on recorded measurements; the share is a
setting, a ``tune`` flag and a staleness key of the profile."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.scripted_server import ScriptedLaunch, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import decide, mix_sentence
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pairing import Mix, adjacent_pairs, compare, pooled_tokens_per_s
from tuner.calibration.prompts import Prompt
from tuner.calibration.results import Measurement, synthetic_rounds, synthetic_samples
from tuner.calibration.search import Search, SearchSettings
from tuner.calibration.wording import words
from tuner.profiles import ModelFileKey, StalenessKeys, stale_reasons
from tuner.settings import Settings, SettingsError, from_json

BASE = Candidate()
SHORT_WINNER = Candidate(spec_type="ngram-mod")  # A: 1.6× on short requests, 0.8× at depth
LONG_WINNER = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=4, p_min=0.0)  # B: 1.1×, 1.6×

CATS: list[str | None] = ["code", "chat", "long document", "long code"]
PROMPTS = [(0, Prompt("short code question", "code")), (1, Prompt("short chat turn", "chat")),
           (2, Prompt("long text", "long document", fill=0.5)), (3, Prompt("long code", "long code", fill=0.5))]
# baseline tokens/s per prompt: short requests 100, long-context ones 50 (attention over a long context)
B_ROW = [100.0, 101.0, 50.0, 49.0]


def _rounds(c: Candidate, row: list[float], first: int) -> list[Measurement]:
    """Four adjacent pairs of ``c`` against the baseline (a little noise per pair)."""
    pairs: list[tuple[float | list[float], float | list[float]]] = []
    for j, f in enumerate((1.0, 0.99, 1.01, 1.0)):
        pairs.append(([b * f for b in B_ROW], [x * f * (1.0 + 0.004 * (j % 2)) for x in row]))
    return synthetic_rounds(c, pairs, acceptance=0.7, categories=CATS, first_repetition=first)


def _sweep() -> list[Measurement]:
    screening = [Measurement(BASE, samples=synthetic_samples([B_ROW], categories=CATS), speculative_active=True)]
    return (screening + _rounds(SHORT_WINNER, [160.0, 161.6, 40.0, 39.2], 1)
            + _rounds(LONG_WINNER, [110.0, 111.1, 80.0, 78.4], 10))


def test_the_pick_flips_with_the_long_context_share():
    ms = _sweep()
    short_heavy = decide(SearchOutcome.of(ms, mix=Mix.of(PROMPTS, 0.1)))
    assert short_heavy.winner == SHORT_WINNER
    # over 90 % short / 10 % long requests (equal tokens per request): time 0.9/160 + 0.1/40 vs 0.9/100 + 0.1/50
    assert short_heavy.speedup == pytest.approx((0.9 / 100 + 0.1 / 50) / (0.9 / 160 + 0.1 / 40), rel=0.02)
    assert ("Over a served mix of 10 % long-context requests (the long-context share setting): short requests "
            "1.60×, long-context requests 0.80×.") in short_heavy.reason

    long_heavy = decide(SearchOutcome.of(ms, mix=Mix.of(PROMPTS, 0.5)))
    assert long_heavy.winner == LONG_WINNER
    assert long_heavy.speedup == pytest.approx((0.5 / 100 + 0.5 / 50) / (0.5 / 110 + 0.5 / 80), rel=0.02)
    assert "Over a served mix of 50 % long-context requests (the long-context share setting): short requests " \
           "1.10×, long-context requests 1.60×." in long_heavy.reason
    rows = {c.candidate: c for c in long_heavy.comparisons}
    assert (rows[SHORT_WINNER].speedup or 0.0) < 1.0 < (rows[LONG_WINNER].speedup or 0.0)  # A loses over it
    assert rows[SHORT_WINNER].to_json()["long_share"] == 0.5

    short_only = decide(SearchOutcome.of(ms, mix=Mix.of(PROMPTS, 0.0)))
    assert short_only.winner == SHORT_WINNER and short_only.speedup == pytest.approx(1.6, rel=0.01)
    # no share set: every request weighs the same (the prompt set's own share, 2 of 4 here)
    own = decide(SearchOutcome.of(ms, mix=Mix.of(PROMPTS)))
    assert own.winner == LONG_WINNER
    n = own.comparisons[0].requests
    assert f"Over the compared requests, {n // 2} of {n} long-context (50 %, every request weighing the same)" \
        in own.reason, own.reason


def test_the_search_ranks_and_tests_its_finalists_over_the_same_mix():
    def search(share: float | None) -> Search:
        s = scripted_search(ScriptedLaunch(lambda c: 100.0), CandidatePlan(baseline=BASE), PROMPTS,
                            SearchSettings(long_share=share), 300)
        s.record.measurements = _sweep()
        return s

    assert [c for _r, c in search(0.1).screening.contenders()] == [SHORT_WINNER, LONG_WINNER]
    # A is slower than the baseline there
    assert [c for _r, c in search(0.6).screening.contenders()] == [LONG_WINNER]
    assert search(0.1).confirmation.side_by_side.look(SHORT_WINNER).verdict == "faster"
    assert search(0.6).confirmation.side_by_side.look(SHORT_WINNER).verdict == "not faster"


def test_pair_ratios_and_pooled_figures_are_weighted_by_the_mix():
    mix = Mix.of(PROMPTS, 0.25)
    assert mix.long_prompts == frozenset({2, 3})
    ms = _sweep()
    [pair, *_] = adjacent_pairs(ms, LONG_WINNER, mix)
    assert pair.mix == mix
    b = pooled_tokens_per_s(pair.baseline_samples, mix)
    assert b == pytest.approx(1 / (0.375 / 100 + 0.375 / 101 + 0.125 / 50 + 0.125 / 49), rel=0.01)
    cmp_ = compare(ms, LONG_WINNER, 0.03, mix=mix)
    assert cmp_ is not None and cmp_.share_set and cmp_.long_share == 0.25
    assert cmp_.short_speedup == pytest.approx(1.1, rel=0.01) and cmp_.long_speedup == pytest.approx(1.6, rel=0.01)
    w = mix.weights(pair.baseline_samples)
    assert sum(w) == pytest.approx(len(w)) and w[0] == pytest.approx(1.5) and w[2] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Mix.of(PROMPTS, 1.5)


def test_a_share_that_cannot_be_applied_is_said_and_close_speedups_are_not_split():
    short_only = [(0, Prompt("a", "code")), (1, Prompt("b", "chat"))]
    ms = [Measurement(BASE, samples=synthetic_samples([[100.0, 100.0]]), speculative_active=True),
          *synthetic_rounds(LONG_WINNER, [([100.0, 100.0], [130.0, 131.0])] * 4, acceptance=0.7, first_repetition=1)]
    d = decide(SearchOutcome.of(ms, mix=Mix.of(short_only, 0.4)))
    assert d.winner == LONG_WINNER and d.speedup == pytest.approx(1.305, rel=0.01)
    assert "No long-context request was compared, so the long-context share of 40 % could not be applied" in d.reason
    # nothing to say without long requests
    assert "served mix" not in decide(SearchOutcome.of(ms, mix=Mix.of(short_only))).reason
    # short and long within 5 % of each other: the share is stated, the speedups are not split
    close = [*ms[:1], *synthetic_rounds(LONG_WINNER, [([100.0, 50.0], [130.0, 66.0])] * 4, acceptance=0.7,
                                        first_repetition=1)]
    mixed = [(0, Prompt("a", "code")), (1, Prompt("long", "long code", fill=0.5))]
    cmp_ = compare(close, LONG_WINNER, 0.03, mix=Mix.of(mixed, 0.3))
    assert cmp_ is not None
    sentence = mix_sentence(cmp_)
    assert sentence is not None
    assert words(sentence) == "Over a served mix of 30 % long-context requests (the long-context share setting)."


def test_long_share_is_a_setting_kept_valid():
    assert Settings().long_share is None
    assert from_json({"long_share": 0.35}).long_share == 0.35
    assert from_json({"long_share": 0}).long_share == 0
    for bad in (1.5, -0.1, "half", True, float("nan")):
        with pytest.raises(SettingsError) as e:
            from_json({"long_share": bad}, Path("/x/settings.json"))
        assert e.value.key == "long_share" and "between 0 and 1" in str(e.value)


def test_a_bad_long_share_in_the_file_costs_only_its_own_key():
    from tuner import settings as settings_mod

    p = settings_mod.settings_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"long_share": 7, "port": 9000}))
    loaded = settings_mod.load_settings_keeping_valid()
    assert loaded.settings.port == 9000 and loaded.settings.long_share is None
    assert [e.key for e in loaded.problems] == ["long_share"]
    assert json.loads(p.read_text())["port"] == 9000 and loaded.kept_aside is not None


def _keys(share: float | None) -> StalenessKeys:
    return StalenessKeys("hw", "bin", "b1", "d", (ModelFileKey("/m.gguf", 1, 1),), "p", n_ctx=8192,
                         workload="chat;server-defaults", long_share=share)


def test_the_share_is_a_staleness_key():
    assert stale_reasons(_keys(0.3), _keys(0.3)) == []
    assert stale_reasons(_keys(0.3), _keys(0.5)) == [
        "the long-context share changed (tuned for 30 % long-context requests, now 50 % long-context requests)"]
    assert stale_reasons(_keys(None), _keys(0.5)) == [
        "the long-context share changed (tuned for the prompt set's own share, now 50 % long-context requests)"]
    # written and read back; a profile from before the key (no "long_share") reads as the set's own share
    assert StalenessKeys.from_json(_keys(0.3).to_json()) == _keys(0.3)
    old = {k: v for k, v in _keys(None).to_json().items() if k != "long_share"}
    assert StalenessKeys.from_json(old) == _keys(None)
    with pytest.raises(TypeError):
        StalenessKeys.from_json({**old, "long_share": "most"})


def test_the_long_share_flag_reaches_the_tune_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from tuner.cli import main

    # out of range: refused by the flag check, naming the flag
    assert main(["tune", "--models", str(tmp_path), "--long-share", "1.5"]) == 2
    assert "--long-share 1.5: must be between 0 and 1" in capsys.readouterr().err
    # in range, but with --no-long-context: only run_tune knows there is nothing to weigh, so the value got there
    assert main(["tune", "--models", str(tmp_path), "--long-share", "0.5", "--no-long-context"]) == 2
    assert "--long-share 0.5: the sweep has no long-context requests to weigh" in capsys.readouterr().err
    # a share of 0 with no long-context requests is consistent: the run goes on to the folder (empty here)
    assert main(["tune", "--models", str(tmp_path), "--long-share", "0", "--no-long-context"]) == 2
    assert "no LLM GGUF file" in capsys.readouterr().err


def test_the_share_is_checked_against_the_sweeps_long_context_requests():
    from tuner.calibration.engine import _check_long_share
    from tuner.calibration.tune import TuneError

    _check_long_share(None, False)
    _check_long_share(0.0, False)
    _check_long_share(1.0, True)
    with pytest.raises(TuneError, match="--long-share 0.2: the sweep has no long-context") as e:
        _check_long_share(0.2, False)
    assert e.value.bad_input
    with pytest.raises(TuneError, match="--long-share -1: must be between 0 and 1"):
        _check_long_share(-1.0, True)


@pytest.mark.server
def test_a_real_sweep_is_weighted_to_the_share_and_records_it(tmp_path: Path, llama_server_bin,
                                                              capsys: pytest.CaptureFixture[str]):
    """A tiny generated family on the real llama-server: the decision's figures are the share-weighted
    ones, the profile keeps the share, the same share reuses it and another one finds it stale."""
    from tests.synth import write_llama_gguf
    from tuner.calibration.prompts import make_prompt_set
    from tuner.calibration.sampling import GREEDY
    from tuner.calibration.tune import tune
    from tuner.profiles import ProfileStore

    from .conftest import TUNE_THREADS

    models = tmp_path / "models"
    models.mkdir()
    common: dict[str, Any] = dict(n_embd=128, n_head=4, n_head_kv=2, dtype="f32")
    write_llama_gguf(models / "target.gguf", n_layers=4, eps=0.05, keep_blocks=2, seed=3, general_name="t", **common)
    write_llama_gguf(models / "draft.gguf", n_layers=2, seed=3, general_name="d", **common)
    ps = make_prompt_set([Prompt("Once upon a time, there was a little girl named Lily.", "creative"),
                          Prompt("The cat sat on the mat and looked at the", "chat")], source="test")
    store = ProfileStore()  # the default store (under the test's own DRAFTWISE_HOME), which the CLI uses too
    kw = dict(target="target.gguf", prompts=ps, budget_s=40, server=llama_server_bin, store=store, n_predict=32,
              repetitions=2, n_ctx=512, threads=TUNE_THREADS, sampling=GREEDY)
    # the first sweep: no candidate is stopped early as a clear loser (on this tiny, fast target every draft
    # loses, and a loser stopped after its first short requests never reaches the long-context ones)
    from tuner.calibration.engine import run_tune
    from tuner.calibration.request import TuneRequest

    request = TuneRequest.create(models, target="target.gguf", prompts=ps, budget_s=40, server=llama_server_bin,
                                 n_predict=32, repetitions=2, n_ctx=512, threads=TUNE_THREADS, sampling=GREEDY,
                                 long_share=0.25)
    res = run_tune(request, on_event=None, cancel=threading.Event(), store=store,
                   settings=SearchSettings(n_predict=32, max_pairs=4, side_by_side=True, loser_ratio=0.0))
    d = res.decision
    assert d is not None and res.profile is not None and res.profile.keys.long_share == 0.25
    both = [c for c in d.comparisons if c.long_speedup is not None and c.short_speedup is not None]
    assert both, [c.to_json() for c in d.comparisons]  # the long-context requests were compared
    for c in both:  # every quoted speedup is the 75 / 25 weighted one, recomputed here from its requests
        def tps(samples) -> float:
            is_long = [s.category in ("long document", "long code") for s in samples]
            w = [0.25 / sum(is_long) if lg else 0.75 / (len(samples) - sum(is_long)) for lg in is_long]
            return (sum(wi * (s.predicted_n - 1) for wi, s in zip(w, samples))
                    / sum(wi * s.predicted_ms / 1000 for wi, s in zip(w, samples)))

        assert c.speedup == pytest.approx(tps(c.candidate_samples) / tps(c.baseline_samples), rel=1e-9)
        assert c.gen_tokens_per_s == pytest.approx(tps(c.candidate_samples), rel=1e-9)
        assert c.long_share == 0.25 and c.share_set
    best = next(c for c in d.comparisons if c.candidate == d.best_speculative)
    if best.long_speedup is not None and best.short_speedup is not None:
        assert "Over a served mix of 25 % long-context requests (the long-context share setting)" in d.reason
    assert tune(models, long_share=0.25, **kw).reused  # type: ignore[arg-type]
    # the CLI flag reaches the same request: the same share finds the profile fresh (another would re-tune)
    from tuner.cli import main

    pf = tmp_path / "prompts.jsonl"
    pf.write_text("".join(json.dumps({"prompt": p.text, "category": p.category}) + "\n" for p in ps.prompts))
    argv = ["tune", "--models", str(models), "--target", "target.gguf", "--prompts", str(pf), "--budget", "40",
            "--n-predict", "32", "--repetitions", "2", "--ctx-size", "512", "--threads", str(TUNE_THREADS),
            "--temperature", "0", "--top-k", "1", "--server", str(llama_server_bin), "--json"]
    capsys.readouterr()
    assert main(argv + ["--long-share", "0.25"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reused"] and out["decision"]["long_share"] == 0.25

    cancel = threading.Event()
    seen: list[str] = []

    def on_event(ev) -> None:
        if ev.kind == "stale":
            seen.append(ev.message)
            cancel.set()

    again = tune(models, long_share=0.5, on_event=on_event, cancel=cancel, **kw)  # type: ignore[arg-type]
    assert again.cancelled
    assert seen and "the long-context share changed (tuned for 25 % long-context requests, now 50 % " \
                     "long-context requests)" in seen[0]
