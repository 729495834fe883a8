"""Goldens: the decision's words, the search's event streams and one scripted tune, compared byte for byte.

They pin today's behaviour while the calibration core is rebuilt as typed steps (issue 24): a change that
moves code must leave every golden file under tests/data/goldens/ identical; a change that means to alter
what users read re-records them (``DRAFTWISE_UPDATE_GOLDENS=1 python -m pytest -q
tests/calibration/test_goldens.py``) and says why in its commit.

Nothing here depends on real time or on the machine: the decisions are built from recorded
measurements, the sweeps run on a simulated clock that the scripted servers advance by the time each
request and load would take, and the scripted tune stubs the hardware probe, the load watcher and the
search for other llama-server processes. Floats are written with 9 significant digits, so a last-bit
difference of the C library does not count as a change.
"""

from __future__ import annotations

import calendar
import difflib
import functools
import io
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.calibration import test_search
from tests.fakes.scripted_server import DraftsOf, ScriptedLaunch, SimClock, TpsOf, half_accepted, scripted_search
from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.decide import Decision, decide
from tuner.calibration.measure import Launch
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pairing import Mix
from tuner.calibration.prompts import Prompt
from tuner.calibration.request import TuneResult
from tuner.calibration.results import Divergence, Measurement, Sample, synthetic_rounds, synthetic_samples
from tuner.calibration.sampling import Sampling
from tuner.calibration.search import SearchSettings, run_search
from tuner.calibration.sentences import Sentence, Slot
from tuner.calibration.workload import Workload

GOLDENS = Path(__file__).resolve().parent.parent / "data" / "goldens"
UPDATE = os.environ.get("DRAFTWISE_UPDATE_GOLDENS") == "1"


# ---- the comparison -------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """``value`` as plain JSON with every float at 9 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def check_golden(name: str, value: Any) -> None:
    """Compare ``value`` (plain JSON) with the golden file ``name``; record it when updating."""
    text = json.dumps(_plain(value), indent=1, ensure_ascii=False) + "\n"
    path = GOLDENS / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path.name} missing: record it with DRAFTWISE_UPDATE_GOLDENS=1"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = difflib.unified_diff(expected.splitlines(), text.splitlines(), "golden", "now", lineterm="", n=2)
        pytest.fail(f"{name} differs from the golden (first 80 lines of the diff):\n" + "\n".join(list(diff)[:80]))


# ---- decision words ------------------------------------------------------------------------------------
BASE = Candidate()
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
BAD = Candidate(spec_type="draft-simple", draft_path="/m/unrelated.gguf", n_max=8, p_min=0.0)
NGRAM = Candidate(spec_type="ngram-mod")
SIMPLE = Candidate(spec_type="ngram-simple")
SINGLE = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
CHAIN = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
CATS = ["code", "creative", "math", "chat", "summary"]
LONG_CATS: list[str | None] = ["code", "chat", "long document", "long code"]
LONG_PROMPTS = [(0, Prompt("short code question", "code")), (1, Prompt("short chat turn", "chat")),
                (2, Prompt("long text", "long document", fill=0.5)), (3, Prompt("long code", "long code", fill=0.5))]


def _m(c: Candidate, reps: list, acceptance: float | None = None, **kw: Any) -> Measurement:
    return Measurement(c, samples=synthetic_samples(reps, acceptance=acceptance, **kw), speculative_active=True)


def _rounds(c: Candidate, pairs: list, acceptance: float | None = None, **kw: Any) -> list[Measurement]:
    """A screening baseline and a screening run of ``c`` at repetition 0, then paired rounds from 1."""
    b0, c0 = pairs[0]
    return ([_m(BASE, [b0], categories=kw.get("categories")), _m(c, [c0], acceptance=acceptance, **kw)]
            + synthetic_rounds(c, pairs, acceptance=acceptance, first_repetition=1, **kw))


def _chain_sweep(single: list[float], chain: list[float]) -> list[Measurement]:
    drift = [1.0, 0.93, 1.05, 0.97, 1.02, 0.95]
    cats = ["code", "chat"]
    screening = [
        Measurement(BASE, samples=synthetic_samples([[20.0, 20.0]], categories=cats), stage="baseline"),
        Measurement(SINGLE, samples=synthetic_samples([[20.0 * single[0]] * 2], acceptance=0.8, categories=cats),
                    stage="probe", speculative_active=True),
        Measurement(CHAIN, samples=synthetic_samples([[20.0 * chain[0]] * 2], acceptance=0.85, categories=cats),
                    stage="probe", speculative_active=True),
    ]

    def rounds(c: Candidate, ratios: list[float], first: int, acc: float) -> list[Measurement]:
        pairs: list[tuple[float | list[float], float | list[float]]] = [
            ([20.0 * drift[j % 6]] * 2, [20.0 * drift[j % 6] * r] * 2) for j, r in enumerate(ratios)]
        return synthetic_rounds(c, pairs, acceptance=acc, categories=cats, first_repetition=first)

    return screening + rounds(SINGLE, single, 1, 0.8) + rounds(CHAIN, chain, 20, 0.85)


def _mix_sweep() -> list[Measurement]:
    b_row = [100.0, 101.0, 50.0, 49.0]

    def rounds(c: Candidate, row: list[float], first: int) -> list[Measurement]:
        pairs: list[tuple[float | list[float], float | list[float]]] = [
            ([b * f for b in b_row], [x * f * (1.0 + 0.004 * (j % 2)) for x in row])
            for j, f in enumerate((1.0, 0.99, 1.01, 1.0))]
        return synthetic_rounds(c, pairs, acceptance=0.7, categories=LONG_CATS, first_repetition=first)

    return ([Measurement(BASE, samples=synthetic_samples([b_row], categories=LONG_CATS), speculative_active=True)]
            + rounds(NGRAM, [160.0, 161.6, 40.0, 39.2], 1) + rounds(GOOD, [110.0, 111.1, 80.0, 78.4], 10))


def _never(c: Candidate, why: str = "", at: str = "temperature 0.8") -> Measurement:
    return Measurement(c, samples=synthetic_samples([10.0]), no_drafts_at=at, speculative_active=True,
                       error=f"{c.spec_type} never drafted at the served sampling ({at}){why}; no speedup is possible")


def _winner_with_divergence() -> list[Measurement]:
    ms = _rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)], acceptance=0.64)
    ms[1] = Measurement(GOOD, samples=ms[1].samples, speculative_active=True, lossless=False,
                        divergences=(Divergence(8, 2, 238), Divergence(3, 2, 40)))
    return ms


def _decide(ms: list[Measurement], **kw: Any) -> Decision:
    return decide(SearchOutcome.of(ms, **kw))


def _busy(ms: list[Measurement], **kw: Any) -> Decision:
    """Decided on a machine where other programs used 83 % of the CPU (up to 100 %)."""
    from tuner.calibration.report import MachineLoad, machine_sentence
    from tuner.hardware.host import LoadSummary

    d = _decide(ms, **kw)
    busy = machine_sentence(MachineLoad(LoadSummary(10, 0.83, 1.0, 0.0, 0.9)))
    assert busy is not None
    return d.with_sentences([*d.sentences, busy])


def _categories_screening() -> list[Measurement]:
    cats = ["code", "creative"]
    spec = Measurement(GOOD, samples=tuple(
        Sample(p, cats[p], r, tps, None, 128, 127 / tps * 1000, 100, acc)
        for r in range(2) for p, (tps, acc) in enumerate([(400.0, 90), (200.0, 30)])), speculative_active=True)
    return [_m(BASE, [[240.0, 240.0], [242.0, 238.0]], categories=cats), spec]


def _figures_sweep() -> list[Measurement]:
    def screen(c: Candidate, rows: list, acceptance: float | None = None, stage: str = "probe") -> Measurement:
        return Measurement(c, samples=synthetic_samples(rows, acceptance=acceptance, categories=CATS), stage=stage,
                           speculative_active=True)

    base = screen(BASE, [[700.0, 720.0, 690.0, 710.0, 705.0]], stage="baseline")
    probe = screen(GOOD, [[1000.0, 900.0, 1100.0, 760.0, 800.0]], acceptance=0.7)
    early = Measurement(SIMPLE, samples=(Sample(0, "code", 0, 233.0, None, 128, 127 / 233.0 * 1000, 100, 30),),
                        speculative_active=True, stopped_early=True)
    mod = screen(NGRAM, [[716.0] * 5], acceptance=0.2)
    pairs: list[tuple[float | list[float], float | list[float]]] = [
        ([700.0, 720.0, 690.0, 710.0, 705.0], [1000.0, 900.0, 1100.0, 760.0, 800.0]),
        ([400.0, 410.0, 390.0, 405.0, 400.0], [570.0, 520.0, 610.0, 430.0, 460.0]),
        ([690.0, 700.0, 680.0, 700.0, 700.0], [985.0, 890.0, 1080.0, 750.0, 790.0]),
        ([650.0, 660.0, 640.0, 655.0, 650.0], [930.0, 840.0, 1020.0, 700.0, 745.0])]
    return [base, probe, early, mod, *synthetic_rounds(GOOD, pairs, acceptance=0.7, categories=CATS,
                                                       first_repetition=1)]


def _inconclusive(pairs_ratios: list[float]) -> list[Measurement]:
    return _rounds(GOOD, [(100.0, 100.0 * r) for r in pairs_ratios], acceptance=0.7)


DECISIONS: dict[str, Callable[[], Decision]] = {
    "winner": lambda: _decide(_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)],
                                     acceptance=0.64) + [_m(BAD, [78.0], acceptance=0.05)]),
    "winner, per category and a stopped-early loser": lambda: _decide(_figures_sweep()),
    "winner whose output differs": lambda: _decide(_winner_with_divergence()),
    "winner on a busy machine": lambda: _busy(_rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0),
                                                             (240.0, 331.0)], acceptance=0.64)),
    "ngram winner": lambda: _decide(_rounds(NGRAM, [(240.0, 300.0), (242.0, 305.0), (238.0, 298.0), (239.0, 301.0)],
                                           acceptance=0.6)),
    "chain faster beyond noise": lambda: _decide(_chain_sweep([1.40, 1.37, 1.42, 1.39], [1.81, 1.76, 1.84, 1.79])),
    "chain within noise of the single": lambda: _decide(_chain_sweep([1.40, 1.42, 1.38, 1.41, 1.39, 1.40],
                                                                    [1.44, 1.40, 1.47, 1.43, 1.45, 1.42])),
    "chain within noise of the baseline": lambda: _decide(_chain_sweep([0.95, 0.97, 0.96, 0.94],
                                                                      [1.08, 0.92, 1.25, 1.03])),
    "mix with a share set, short heavy": lambda: _decide(_mix_sweep(), mix=Mix.of(LONG_PROMPTS, 0.1)),
    "mix with a share set, long heavy": lambda: _decide(_mix_sweep(), mix=Mix.of(LONG_PROMPTS, 0.5)),
    "mix without a share": lambda: _decide(_mix_sweep(), mix=Mix.of(LONG_PROMPTS)),
    "mix share that cannot be applied": lambda: _decide(
        [_m(BASE, [[100.0, 100.0]]),
         *synthetic_rounds(GOOD, [([100.0, 100.0], [130.0, 131.0])] * 4, acceptance=0.7, first_repetition=1)],
        mix=Mix.of([(0, Prompt("a", "code")), (1, Prompt("b", "chat"))], 0.4)),
    "not enough evidence, pairs needed": lambda: _decide(_inconclusive([1.6, 1.05, 1.5])),
    "not enough evidence after six pairs": lambda: _decide(_inconclusive([1.6, 1.05, 1.5, 0.98, 1.45, 1.02]),
                                                       max_pairs=6),
    "unsteady baseline": lambda: _decide([_m(BASE, [20.2, 20.0, 20.4], categories=["code"]),
                                         _m(GOOD, [1.8, 1.9, 1.7], acceptance=1.0, categories=["code"])],
                                        baseline_unsteady=True),
    "slower, break-even": lambda: _decide([_m(BASE, [240.0, 238.0, 243.0]),
                                          _m(GOOD, [205.0, 210.0, 199.0], acceptance=0.41)]),
    "slower, never pays": lambda: _decide([_m(BASE, [240.0, 238.0, 243.0]),
                                          _m(BAD, [80.0, 78.0, 81.0], acceptance=0.07, drafted_per_token=0.5)]),
    "slower, stopped early": lambda: _decide([
        Measurement(BASE, samples=synthetic_samples([[757.0, 65.1, 70.0, 900.0, 880.0],
                                                     [760.0, 70.0, 880.0, 60.0, 890.0]], categories=CATS),
                    stage="baseline", speculative_active=True),
        Measurement(SIMPLE, samples=(Sample(0, "code", 0, 233.0, None, 128, 127 / 233.0 * 1000, 100, 30),),
                    speculative_active=True, stopped_early=True)]),
    "screening only": lambda: _decide(_categories_screening()),
    "within noise": lambda: _decide(_rounds(GOOD, [(240.0, 247.0), (252.0, 229.0), (231.0, 251.0), (246.0, 240.0)],
                                           acceptance=0.90) + [_m(BAD, [80.0], acceptance=0.07)]),
    "within noise, drafted nothing": lambda: _decide([_m(BASE, [20.2, 20.0, 20.4], categories=["code"]),
                                                     _m(NGRAM, [30.1, 29.8, 30.3], categories=["code"])]),
    "never drafted, one shared reason": lambda: _decide([_m(BASE, [10.0, 10.1]), _never(NGRAM), _never(SIMPLE)]),
    "never drafted, different reasons": lambda: _decide([
        _m(BASE, [10.0, 10.1]), _never(NGRAM, ", although it drafted 3 tokens at greedy settings"),
        _never(SIMPLE, ", although it drafted 30 tokens at greedy settings")]),
    "never drafted, other wording": lambda: _decide([
        Measurement(BASE, samples=synthetic_samples([[100.0] * 5], categories=CATS), stage="baseline"),
        Measurement(NGRAM, samples=(), speculative_active=True, no_drafts_at="greedy settings",
                    error="ngram-mod never drafted at greedy settings: these prompts repeat no n-gram")]),
    "never drafted and unmeasured": lambda: _decide(
        [Measurement(BASE, samples=(Sample(0, "code", 0, 60.0),), stage="baseline"),
         Measurement(NGRAM, samples=(Sample(0, "code", 0, 59.0),), stage="probe", no_drafts_at="greedy",
                     error="ngram-mod never drafted at the served sampling (greedy); no speedup is possible")],
        unmeasured=[SIMPLE, Candidate(spec_type="ngram-simple", ngram_n_max=16)]),
    "all failed": lambda: _decide([
        _m(BASE, [240.0, 241.0]),
        Measurement(GOOD, samples=synthetic_samples([900.0, 910.0]), speculative_active=False,
                    error="the server started without speculation (/slots speculative: false)"),
        _never(NGRAM),
        Measurement(SIMPLE, samples=(), speculative_active=True,
                    error="request failed (prompt 1, repetition 1): HTTP 500")]),
    "unmeasured only": lambda: _decide([_m(BASE, [240.0, 238.0])], unmeasured=[NGRAM]),
    "unmeasured, many": lambda: _decide([_m(BASE, [240.0, 238.0])], unmeasured=[
        NGRAM, SIMPLE, Candidate(spec_type="ngram-map-k"), Candidate(spec_type="ngram-map-k4v"), GOOD]),
    "nothing available": lambda: _decide([_m(BASE, [240.0, 238.0])]),
    "nothing available on a busy machine": lambda: _busy([_m(BASE, [240.0, 238.0])]),
}


DECISION_JSON_KEYS = (
    "winner", "label", "spec_type", "draft", "n_max", "gen_tokens_per_s", "baseline_gen_tokens_per_s", "speedup",
    "speedup_ci_low", "speedup_ci_high", "best_speculative", "best_speculative_speedup", "break_even",
    "per_category", "lossless", "comparisons", "pairs", "busy_note")
"""The decision's JSON fields pinned here (``reason`` is pinned on its own; a field added later is not a change)."""


def _gui_text(result: TuneResult) -> dict[str, Any]:
    """What the Tune tab shows: the first sentence, and the details behind its *Details* expander."""
    from tuner.ui.flow import decision_words

    words = decision_words(result)
    return {"first": words.first, "details": list(words.details)}


def _words(d: Decision, *, reused: bool = False, profile: Any = None) -> dict[str, Any]:
    """What a user reads of ``d``: the reason, the CLI's last line and table (``--details``'s), the GUI's text,
    and the JSON."""
    from tuner.cli.tune_report import decision_line, print_table

    result = TuneResult(target_path=Path("/m/t.gguf"), decision=d, reused=reused, profile=profile)
    table = io.StringIO()
    print_table(result, table, details=True)
    as_json = d.to_json()
    missing = set(DECISION_JSON_KEYS) - set(as_json)
    assert not missing, missing
    return {"reason": d.reason, "line": decision_line(d), "gui": _gui_text(result),
            "table": table.getvalue().splitlines(), "json": {k: as_json[k] for k in DECISION_JSON_KEYS}}


def _profile_cases() -> dict[str, Any]:
    """A saved decision shown again (``decision_from_profile``): its sentence about other programs dated, or
    left out without a time; a profile saved before the decision's sentences were kept ("older profile"):
    its reason verbatim, then when it was measured."""
    from tuner.calibration.pipeline.reuse import decision_from_profile
    from tuner.profiles.profile import Profile, StalenessKeys

    keys = StalenessKeys(hardware_fingerprint="h", server_binary="s", server_build="b", dialect_fingerprint="d",
                         model_files=(), prompt_set_sha256="p")
    d = DECISIONS["winner on a busy machine"]()
    ms = _rounds(GOOD, [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)], acceptance=0.64)
    when = calendar.timegm((2026, 12, 1, 11, 50, 0, 0, 0, 0))
    out = {}
    for name, created in (("profile, dated", when), ("profile, undated", None)):
        prof = Profile(target_path="/m/t.gguf", keys=keys, winner=d.winner.to_json(), server_config={}, argv=(),
                       decision=d.to_json(), evidence=tuple(m.to_json() for m in ms), created_unix_s=created)
        out[name] = _words(decision_from_profile(prof), reused=True, profile=prof)
        older = {k: v for k, v in d.to_json().items() if k not in ("kind", "named", "sentences")}
        prof = replace(prof, decision=older)
        out[f"older {name}"] = _words(decision_from_profile(prof), reused=True, profile=prof)
    return out


RPC_HOST = "192.168.1.20:50052"
# the search's own sentences (tuner/calibration/search/): their words are pinned in decision_words.json
TIME_LIMIT = Sentence(Slot.SWEEP, "sweep.time_limit", {
    "limit_s": 64.8, "budget_s": 60.0, "cut": ["ngram-simple", "draft-simple good.gguf n_max 4"]})
REMEASURED = Sentence(Slot.SWEEP, "sweep.baseline_superseded", {
    "first_tps": 12.1, "idle_tps": 20.3, "idle_label": "ngram-mod", "again_tps": 20.1})
LONG_LEFT_OUT = Sentence(Slot.SWEEP, "sweep.long_context_left_out", {
    "one_s": 95.2, "prompt_tokens": 4112, "prompt_tokens_per_s": 52.4, "n_predict": 128, "gen_tokens_per_s": 8.1,
    "budget_s": 300.0})
WORKLOAD = Workload(sampling=Sampling(), n_ctx=4096)
"""Raw completions (/completion) at llama-server's default sampling, context 4096."""


def _rpc_devices() -> Any:
    from tuner.hardware import Device, Devices

    remote = Device(index=0, name="RPC0", backend="RPC", total_bytes=24 * 2**30, free_bytes=20 * 2**30,
                    budget_bytes=20 * 2**30, source="llama-server", rpc_endpoint=RPC_HOST)
    return Devices(devices=(remote,), ram_total_bytes=16 * 2**30, ram_available_bytes=12 * 2**30, cpu_cores=2,
                   rpc_endpoints=(RPC_HOST,))


def _reported(ms: list[Measurement], facts: dict[str, Any], **outcome: Any) -> Decision:
    """``ms`` decided and reported as the tune does (``decide``, then ``finish_decision``)."""
    from tuner.calibration.report import MachineLoad, ReportFacts, RpcPlacement, finish_decision
    from tuner.hardware.host import LoadSummary

    done = SearchOutcome.of(ms, **outcome)
    placement = facts.pop("placement", None)
    machine = facts.pop("machine", None)
    load = None if machine is None or machine[0] is None else LoadSummary(10, *machine[0], 0.0, 0.5)
    return finish_decision(decide(done), done, ReportFacts(
        workload=WORKLOAD, **facts,
        placement=None if placement is None else RpcPlacement(_rpc_devices(), 5, BASE_RPC),
        machine=None if machine is None else MachineLoad(load, machine[1])))


GOOD_RPC = replace(GOOD, rpc=(RPC_HOST,), ngl=99, draft_ngl=0, placement="rpc-split")
BASE_RPC = replace(BASE, rpc=(RPC_HOST,), ngl=99)
WINNER_PAIRS = [(240.0, 330.0), (236.0, 338.0), (244.0, 325.0), (240.0, 331.0)]

REPORTS: dict[str, Callable[[], Decision]] = {
    "report: time limit, re-measured baseline, busy with competing servers": lambda: _reported(
        _rounds(GOOD, WINNER_PAIRS, acceptance=0.64), {"machine": ((0.40, 0.55), (4242, 4343))},
        notes=[REMEASURED, TIME_LIMIT]),
    "report: one competing server, no load": lambda: _reported(
        [_m(BASE, [240.0, 238.0])], {"machine": (None, (4242,))}, unmeasured=[NGRAM]),
    "report: a quiet machine": lambda: _reported([_m(BASE, [240.0, 238.0])], {"machine": (None, ())}),
    "report: long context left out": lambda: _reported(
        _rounds(NGRAM, [(240.0, 300.0), (242.0, 305.0), (238.0, 298.0), (239.0, 301.0)], acceptance=0.6), {},
        long_context=LONG_LEFT_OUT),
    "report: the speedup at depth": lambda: _reported(
        _mix_sweep(), {"depth_categories": ("long document", "long code")}, mix=Mix.of(LONG_PROMPTS, 0.5)),
    "report: a type that never drafted, not named": lambda: _reported(
        [*_rounds(GOOD, WINNER_PAIRS, acceptance=0.64), _never(SIMPLE)], {}),
    "report: never drafted, named in the reason": lambda: _reported(
        [_m(BASE, [10.0, 10.1]), _never(NGRAM), _never(SIMPLE)], {}),
    "report: where it ran, a winner over RPC": lambda: _reported(
        [_m(BASE_RPC, [240.0])] + synthetic_rounds(GOOD_RPC, WINNER_PAIRS, acceptance=0.64, first_repetition=1,
                                                   baseline=BASE_RPC), {"placement": True}),
    "report: where it ran, the baseline won": lambda: _reported(
        [_m(BASE_RPC, [240.0, 238.0, 243.0]), _m(GOOD_RPC, [205.0, 210.0, 199.0], acceptance=0.41)],
        {"placement": True}),
}


def test_decision_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every branch of ``decide``'s reason, every sentence the tune's report appends, and a reused profile,
    as the CLI and the GUI show them."""
    import time

    with monkeypatch.context() as mp:
        mp.setenv("TZ", "UTC")  # the reused profile's table prints its local time
        time.tzset()
        words = {name: _words(build()) for name, build in {**DECISIONS, **REPORTS}.items()}
        words.update(_profile_cases())
    time.tzset()
    check_golden("decision_words.json", words)


# ---- search event streams --------------------------------------------------------------------------------
def _stream(outcome: SearchOutcome, events: list[str]) -> dict[str, Any]:
    """What the tune reads off a finished search (its outcome), with its events and measurement stages."""
    from tuner.calibration.wording import words

    return {
        "events": events,
        "measurements": [f"{m.candidate.label} | {m.stage} | reps {m.repetitions} | {len(m.samples)} samples"
                         + (" | stopped early" if m.stopped_early else "") + (" | cut short" if m.cut_short else "")
                         + (f" | superseded: {m.superseded}" if m.superseded else "")
                         + (f" | error: {m.error}" if m.error else "") for m in outcome.measurements],
        "unmeasured": [c.label for c in outcome.unmeasured],
        "max_pairs": outcome.max_pairs,
        "finalists": outcome.finalists,
        "baseline_unsteady": outcome.baseline_unsteady,
        "planned": dict(outcome.protocol),
        "sweep_notes": [words(s) for s in outcome.notes],
        "decision": decide(outcome).reason,
    }


def _recorder(events: list[str]) -> Callable[..., None]:
    def emit(kind: str, message: str, **kw: Any) -> None:
        c = kw.get("candidate")
        progress, eta = kw.get("progress"), kw.get("eta_s")
        events.append(" | ".join([kind, c.label if c is not None else "-",
                                  "-" if progress is None else f"{progress:.3f}",
                                  "-" if eta is None else f"{eta:.1f}", message]))

    return emit


def _sweep(launch: Callable[[Candidate, threading.Event], Launch], plan: CandidatePlan, prompts: list,
           settings: SearchSettings, budget_s: float, clock: SimClock, busy: bool = False) -> dict[str, Any]:
    events: list[str] = []
    search = scripted_search(launch, plan, prompts, settings, budget_s, clock=clock, emit=_recorder(events),
                             busy=(lambda: True) if busy else None)
    out = _stream(search.run(), events)
    out["simulated_s"] = round(clock.t - 1000.0, 3)
    return out


def _budget_case(budget_s: float, *, side_by_side: bool = True, base_tps: float = 3.0, load_s: float = 8.0,
                 ngram: tuple[str, ...] = ("ngram-mod", "ngram-simple"), drafts: bool = True, n_predict: int = 128,
                 prompts: int = 5, busy: bool = False) -> dict[str, Any]:
    from tests.calibration.test_budget import DRAFT, PROMPTS, slow_launch_fn

    clock = SimClock()
    probe = Candidate(spec_type="draft-simple", draft_path=DRAFT, n_max=16, p_min=0.0)
    plan = CandidatePlan(baseline=Candidate(), drafts=(probe,) if drafts else (),
                         ngram=tuple(Candidate(spec_type=t) for t in ngram), mtp=None, dropped=())
    return _sweep(slow_launch_fn(clock, load_s=load_s, base_tps=base_tps), plan, PROMPTS[:prompts],
                  SearchSettings(n_predict=n_predict, side_by_side=side_by_side), budget_s, clock,
                  busy=busy)  # type: ignore[arg-type]


def _search_case(tps_of: TpsOf, *, drafts_of: DraftsOf = half_accepted, prompts: int = 1,
                 ngram: tuple[Candidate, ...] = (), draft: str | None = "/m/good.gguf", spec_type: str = "draft-simple",
                 **settings: Any) -> dict[str, Any]:
    """A scripted sweep of test_search.py at its speeds ``tps_of``; each request advances the simulated clock
    by its ``predicted_ms`` + 50 ms, each launch by 10 ms."""
    clock = SimClock()
    launch = ScriptedLaunch(tps_of, clock=clock, load_s=0.01, content="same text", drafts=drafts_of,
                            request_s=lambda t: t["predicted_ms"] / 1000.0 + 0.05)
    drafts = (Candidate(spec_type=spec_type, draft_path=draft, n_max=16, p_min=0.0),) if draft else ()
    plan = CandidatePlan(baseline=Candidate(), drafts=drafts, ngram=ngram, mtp=None, dropped=())
    all_prompts = [(0, Prompt("p", "code")), (1, Prompt("q", "creative"))]
    return _sweep(launch, plan, all_prompts[:prompts], SearchSettings(**{"n_predict": 16, **settings}), 600, clock)


SWEEPS: dict[str, Callable[[], dict[str, Any]]] = {
    "budget_240s_side_by_side": lambda: _budget_case(240.0),
    "budget_60s_too_small": lambda: _budget_case(60.0),
    "budget_240s_alternating": lambda: _budget_case(240.0, side_by_side=False),
    "budget_90s_busy": lambda: _budget_case(90.0, base_tps=16.0, load_s=1.0, prompts=3, n_predict=64, busy=True,
                                            ngram=("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v")),
    "budget_180s_losers_only": lambda: _budget_case(180.0, drafts=False,
                                                    ngram=("ngram-mod", "ngram-simple", "ngram-map-k")),
    "search_p_min_variant": lambda: _search_case(test_search._tps),
    "search_dspark_head": lambda: _search_case(test_search._tps, draft="/m/dspark.gguf", spec_type="draft-dspark"),
    "search_abba_confirm": lambda: _search_case(test_search._tps, probe_repetitions=3, p_min_variant=None),
    "search_explore_dip": lambda: _search_case(test_search._dip_tps, p_min_variant=None),
    "search_slow_draft": lambda: _search_case(test_search._slow_draft_tps, p_min_variant=None),
    "search_drift_side_by_side": lambda: _search_case(test_search._drift_tps_of(), prompts=2, p_min_variant=None,
                                                      side_by_side=True),
    "search_ngram_side_by_side": lambda: _search_case(test_search._ngram_tps, prompts=2, draft=None,
                                                      ngram=(NGRAM,), side_by_side=True),
    "search_ngram_never_drafted": lambda: _search_case(
        test_search._tps, drafts_of=test_search._no_ngram_drafts, p_min_variant=None,
        ngram=(SIMPLE, Candidate(spec_type="ngram-simple", ngram_n_max=16), NGRAM,
               Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12))),
}


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_search_events(name: str) -> None:
    """The scripted sweeps of test_budget.py and test_search.py on a simulated clock: each event (kind,
    candidate, progress, ETA, message), each measurement's stage, and what the tune reads afterwards."""
    check_golden(f"search_events/{name}.json", SWEEPS[name]())


# ---- one scripted tune -------------------------------------------------------------------------------------
FAKE_SERVER = Path(__file__).resolve().parent.parent / "fakes" / "fake_llama_server.py"


def _fake_binary(folder: Path) -> Any:
    """The fake llama-server (b11434's ``--help``): only its dialect is read, nothing is served by it."""
    import stat
    import sys

    from tuner.server.discovery import ServerBinary

    exe = folder / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SERVER} \"$@\"\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return ServerBinary(path=exe, source="test", build=11434, commit="fa4e1ce", version_text="version: 11434 (fa4e1ce)")


class _QuietWatcher:
    """The load watcher of a machine where another program used 40 % of the CPU (its note is in the words)."""

    def start(self) -> None:
        pass

    def summary(self, early: bool = False) -> Any:
        from tuner.hardware.host import LoadSummary

        return LoadSummary(samples=10, other_cpu_mean=0.4, other_cpu_max=0.55, steal_mean=0.0, busy_share=0.5)

    def stop(self) -> Any:
        return self.summary()


def _normalized(value: Any, tmp: str) -> Any:
    """``value`` without what differs between runs: the temporary folder, file times and sizes, durations."""
    volatile = {"created_unix_s", "elapsed_s", "server_binary", "mtime_ns", "load_s", "profile_path"}
    if isinstance(value, dict):
        return {k: "<varies>" if k in volatile else _normalized(v, tmp) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalized(v, tmp) for v in value]
    if isinstance(value, str):
        # the profile's file name carries a hash of the target's absolute path
        return re.sub(r"-[0-9a-f]{10}\.json", "-<hash>.json", value.replace(tmp, "<tmp>"))
    return value


def test_tune_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stories260k: Path) -> None:
    """``run_tune`` on a stories260K folder with a 2-block draft cut from it, the fake server's dialect and a
    scripted launch function on a simulated clock: every event (kind, candidate, message, detail) and the
    saved profile. The hardware probe (a CPU-only machine), the load watcher (40 % other load) and the search
    for other llama-servers (one, pid 4242) are stubbed: what runs beside the test must not leak in."""
    import tuner.calibration.pipeline.sweep as sweep
    import tuner.hardware
    import tuner.hardware.host
    from tests.calibration.test_budget import SimClock, slow_launch_fn
    from tests.synth import write_first_blocks_gguf
    from tuner.calibration.pipeline import run_tune
    from tuner.calibration.prompts import make_prompt_set
    from tuner.calibration.request import TuneRequest
    from tuner.hardware import Devices
    from tuner.profiles import ProfileStore

    models = tmp_path / "models"
    models.mkdir()
    target = models / "stories260K.gguf"
    stories260k.rename(target)
    write_first_blocks_gguf(target, models / "stories-draft.gguf", 2, general_name="stories draft")
    clock = SimClock()
    monkeypatch.setattr(sweep, "run_search", functools.partial(run_search, clock=clock))
    monkeypatch.setattr(tuner.hardware, "detect_devices", lambda *a, **k: Devices(
        devices=(), ram_total_bytes=16 * 2**30, ram_available_bytes=12 * 2**30, cpu_cores=2, cpu_threads=2))
    monkeypatch.setattr(tuner.hardware.host, "LoadWatcher", _QuietWatcher)
    monkeypatch.setattr(tuner.hardware.host, "foreign_processes", lambda name: [(4242, "llama-server -m other.gguf")])
    events: list[Any] = []
    prompts = make_prompt_set([Prompt("Once upon a time", "creative"), Prompt("def f(x):", "code"),
                               Prompt("2 + 2 =", "math")], source="golden")
    request = TuneRequest.create(models, target="stories260K.gguf", prompts=prompts, budget_s=240, n_predict=64,
                                 repetitions=2, n_ctx=512, threads=1)
    store = ProfileStore(tmp_path / "profiles")
    result = run_tune(request, events.append, threading.Event(), store,
                             launch_fn=slow_launch_fn(clock, load_s=2.0, base_tps=20.0),
                             binary=_fake_binary(tmp_path))
    tmp = str(tmp_path)
    assert result.profile is not None
    check_golden("tune_events.json", _normalized({
        "events": [{"kind": e.kind, "candidate": e.candidate.label if e.candidate is not None else None,
                    "progress": None if e.progress is None else round(e.progress, 3),
                    "eta_s": None if e.eta_s is None else round(e.eta_s, 1),
                    "message": e.message, "detail": e.detail} for e in events],
        "profile": result.profile.to_json(),
        "simulated_s": round(clock.t - 1000.0, 3),
    }, tmp))
