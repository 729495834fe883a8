"""The decision's words come from one renderer per sentence kind (tuner/calibration/wording.py)."""

from __future__ import annotations

import calendar
import json
from typing import Any

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.report import MachineLoad, machine_sentence
from tuner.calibration.results import NoDrafts
from tuner.calibration.sentences import TEXT, Sentence, Slot
from tuner.calibration.wording import (
    KINDS,
    PLAIN,
    REUSED_NOTE,
    faster_words,
    measured_line,
    never_entry,
    no_drafts_error,
    plain_label,
    plain_tps,
    render,
    short_label,
    where_it_ran,
    words,
)
from tuner.hardware.host import LoadSample, summarize_load

GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
FIGURES = {"speedup": 1.38, "tps": 331.0, "base_tps": 240.0, "requests": 4, "paired": True, "pairs": 4, "low": 1.27,
           "high": 1.49, "decided_at": None}
SCREENING = {**FIGURES, "paired": False, "pairs": 0, "low": None, "high": None}
ACCEPTANCE = {"acceptance": 0.41, "never_pays": False, "break_even": 0.58}
NEVER = never_entry("ngram-mod", "ngram-mod", None, "temperature 0.8", NoDrafts("temperature 0.8", True, 3, 14))
BROKEN = never_entry("draft-simple good.gguf n_max 8", "draft-simple", "request failed: HTTP 500", None, None)
RUN = {"label": GOOD.label, "rpc": ["192.168.1.20:50052"], "hosts": [["RPC0", "192.168.1.20:50052"]],
       "offloaded": 6, "layers": 6, "local_gpus": False, "ngl": 99, "draft": "cpu"}
LOAD = {"load": {"other_cpu_mean": 0.4, "other_cpu_max": 0.55, "steal_mean": 0.0}, "competing": 2}

SAMPLES: dict[str, tuple[dict[str, Any], str]] = {
    # kind: (params, words expected in the sentence)
    "headline.serving": ({"candidate": GOOD.to_json(), "speedup": 1.38, "tps": 331.0, "base_tps": 240.0},
                         "Serving the draft model good.gguf, guessing up to 8 tokens ahead: 331 against 240 tokens/s"),
    "alone.not_enough_evidence": ({"label": GOOD.label, "figures": FIGURES, "alpha": 0.05, "pairs_needed": 6,
                                   "more_s": 41.0, "acceptance": ACCEPTANCE}, "about 6 pairs in all, about 41 s more"),
    "alone.unsteady": ({"label": GOOD.label, "figures": SCREENING, "acceptance": None}, "not evidence either way"),
    "alone.slower": ({"label": GOOD.label, "figures": SCREENING, "acceptance": ACCEPTANCE},
                     "break-even on this machine is about 58 %"),
    "alone.screening_only": ({"label": GOOD.label, "figures": SCREENING, "acceptance": None},
                             "the best screening result was draft-simple good.gguf n_max 8"),
    "alone.within_noise": ({"label": GOOD.label, "figures": FIGURES, "acceptance": None, "min_gain": 0.03},
                           "needs more than 1.03×"),
    "alone.never_drafted": ({"never": [NEVER], "unmeasured": ["ngram-simple"]},
                            "ngram-mod drafted nothing in 14 requests at these sampling settings, although it "
                            "drafted 3 tokens in the short greedy check (temperature 0)"),
    "alone.failed": ({"failed": [BROKEN, NEVER]}, "draft-simple good.gguf n_max 8: request failed: HTTP 500; "
                                                  "ngram-mod: ngram-mod drafted nothing in 14 requests at the served "
                                                  "sampling (temperature 0.8)"),
    "alone.unmeasured": ({"unmeasured": ["ngram-mod"]}, "the time budget was spent before ngram-mod was measured"),
    "alone.nothing": ({}, "there was nothing to speculate with (no compatible draft model, no n-gram type)"),
    "saved.reason": ({"reason": "Words an older Draftwise saved."}, "Words an older Draftwise saved."),
    "speed.varied": ({"label": "no speculation", "low": 127.0, "high": 694.0, "launches": 3, "others": 1},
                     "The machine's speed varied too much for these figures to mean much: no speculation ran at 127 "
                     "to 694 tokens/s in 3 launches on the same prompts (and 1 more configuration varied as much); a "
                     "re-tune on a quieter machine, or with fewer threads, would help."),
    "evidence.paired": ({"label": GOOD.label, "figures": FIGURES, "acceptance": 0.64},
                        "1.38× over 4 adjacent pairs (4 requests, each run by both sides; sequential-test interval "
                        "1.27–1.49×), draft acceptance 64 %."),
    "evidence.chain_faster": ({"single": GOOD.label, "contrast": {"mean": 1.3, "low": 1.2, "high": 1.4},
                               "min_gain": 0.03}, "1.30× over their pairs, interval 1.20–1.40×"),
    "evidence.chain_not_faster": ({"chain": "ngram-mod,draft-simple", "chain_speedup": 1.44, "single": GOOD.label,
                                   "contrast": None, "min_gain": 0.03}, "(too few pairs; a chain is served only"),
    "evidence.divergence": ({"prompt": 8, "repetition": 2, "char": 238, "more": 1},
                            "at prompt 9, repetition 3, character 238 (1 more request differed)"),
    "cpu.no_repack": ({"cause": "sigill", "build_types": ["AMX"]}, "Repacked CPU kernels are off"),
    "captured.replayed": ({"requests": 30, "first_unix_s": 1.7e9, "last_unix_s": 1.7e9 + 1080, "model_id": "m"},
                          "Tuned on 30 requests served "),
    "threads.trade": ({"setting": "all 2 cores, waiting politely", "default": False, "idle_tps": 59.2,
                       "loaded_tps": 50.1, "loaded_at_most": False, "default_idle_tps": 99.0,
                       "default_loaded_tps": 1.5, "default_loaded_at_most": False},
                      "Threads: all 2 cores, waiting politely: 59 tokens/s idle, 50 with another busy program; "
                      "the default would be 99 and 1.5."),
    "mix.not_applied": ({"share": 0.4}, "the long-context share of 40 % could not be applied"),
    "mix.all_long": ({}, "Every compared request was a long-context one."),
    "mix.share": ({"share": 0.5, "short": 1.4, "long": 1.05, "differ": True},
                  "Over a served mix of 50 % long-context requests (the long-context share setting): short requests "
                  "1.40×, long-context requests 1.05×."),
    "mix.compared": ({"share": 0.5, "n_long": 2, "requests": 4, "short": 1.4, "long": 1.38, "differ": False},
                     "Over the compared requests, 2 of 4 long-context (50 %, every request weighing the same)."),
    "machine.load": (LOAD, "Other programs used 40 % of the CPU during the sweep (up to 55 %); figures are less "
                           "certain. 2 other llama-server processes ran on this machine during the sweep"),
    "saved.measured_on": ({"busy": False}, ""),  # without a time it says nothing (see the dated test)
    "sweep.measured_with": ({"chat": True, "raw_endpoint": "/completion", "sampling": "temperature 0.8",
                             "n_ctx": 8192, "greedy_check": {"prompts": 2, "tokens": 32}},
                            "Measured with chat requests (/v1/chat/completions) at temperature 0.8, context 8192; each "
                            "configuration's first launch also ran a short greedy check (up to 2 prompts of 32 tokens "
                            "at temperature 0), its output compared with the model alone's."),
    "sweep.depth": ({"rows": [["long code", 1.05]], "overall": 1.3},
                    "At depth (≥ half the context: long code 1.05×) the speedup differs from the overall 1.30×."),
    "sweep.never_drafted": ({"labels": ["ngram-mod", "ngram-simple"]},
                            "ngram-mod, ngram-simple drafted nothing at these sampling settings."),
    "sweep.where_it_ran": ({"runs": [RUN]}, "Where it ran: draft-simple good.gguf n_max 8: the target over RPC on "
                                            "RPC0 (192.168.1.20:50052) (6 of 6 layers offloaded) with this "
                                            "machine's CPU for the rest, the draft on this machine's CPU."),
    "sweep.time_limit": ({"limit_s": 64.8, "budget_s": 60.0, "cut": ["ngram-simple", GOOD.label]},
                         "The sweep stopped at its time limit (65 s for a 60 s budget: the estimates from the warm-up "
                         "ran short); cut short or kept from starting by it: ngram-simple, draft-simple good.gguf "
                         "n_max 8."),
    "sweep.pruned": ({"pruned": [{"label": "ngram-simple", "at_most": 1.06, "basis": "ngram-simple ngram n_max 16",
                                  "leader": GOOD.label, "leader_ratio": 1.38}]},
                     "Not launched, because on these prompts they could not beat the best configuration screened so "
                     "far: ngram-simple (at most 1.06× by ngram-simple ngram n_max 16's acceptance, below "
                     "draft-simple good.gguf n_max 8 at 1.38×)."),
    "sweep.baseline_unmeasurable": ({"first_tps": 22.8, "idle_tps": 741.7, "idle_label": "ngram-mod"},
                                    "The model alone measured 22.8 tokens/s in the baseline launch but 741.7 in "
                                    "ngram-mod, which drafted nothing; the budget left no time to measure it again, "
                                    "so figures against the baseline are uncertain."),
    "sweep.baseline_superseded": ({"first_tps": 12.1, "idle_tps": 20.3, "idle_label": "ngram-mod",
                                   "again_tps": 20.1},
                                  "The first launch of the model alone was disturbed (12.1 tokens/s; ngram-mod, which "
                                  "drafted nothing, ran 20.3); it was measured again at 20.1 tokens/s, and that launch "
                                  "is the reference."),
    "sweep.baseline_unsteady": ({"first_tps": 12.1, "idle_tps": 20.3, "idle_label": "ngram-mod", "again_tps": 31.0},
                                "The model alone ran at 12.1, 20.3 (ngram-mod, which drafted nothing) and 31.0 "
                                "tokens/s in three launches: its speed varied with the machine's load, so figures "
                                "from launches minutes apart (screening) are not evidence either way; only pairs "
                                "measured next to each other in time can show a speedup."),
    "sweep.long_context_left_out": ({"one_s": 95.2, "prompt_tokens": 4112, "prompt_tokens_per_s": 52.4,
                                     "n_predict": 128, "gen_tokens_per_s": 8.1, "budget_s": 300.0},
                                    "The long-context requests were left out: one would take about 95 s here (4112 "
                                    "prompt tokens at 52 tokens/s, then 128 generated at 8 tokens/s), more than a "
                                    "300 s budget affords; the decision holds for short requests only."),
    TEXT: ({"text": "Words the search built."}, "Words the search built."),
}


def test_every_kind_has_a_sample_here() -> None:
    assert set(SAMPLES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_kind_renders(kind: str) -> None:
    params, expected = SAMPLES[kind]
    sentence = Sentence(Slot.HEADLINE, kind, json.loads(json.dumps(params)))  # as a saved profile holds it
    text = words(sentence)
    assert expected in text
    if text:
        assert text.endswith(".") and "  " not in text, text  # a whole sentence (a label may start it)
        assert "None" not in text and "{" not in text, text


def test_an_unknown_kind_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="threads.from_the_future"):
        render([Sentence(Slot.THREADS, "threads.from_the_future", {})])


def test_render_reads_in_slot_order_and_joins_once() -> None:
    head = Sentence(Slot.HEADLINE, "alone.nothing", {})
    load = Sentence(Slot.MACHINE_LOAD, "machine.load", LOAD)
    sweep = Sentence(Slot.SWEEP, "sweep.never_drafted", {"labels": ["ngram-mod"]})
    out = render([sweep, load, head])
    assert out.first == words(head) and out.details == (words(load), words(sweep))
    assert out.text == " ".join([out.first, *out.details])
    assert render([]).text == "" and render([]).first == ""


def test_a_reused_profile_says_so_first_and_dates_the_load() -> None:
    t = calendar.timegm((2026, 12, 1, 11, 50, 0, 0, 0, 0))
    head = Sentence(Slot.HEADLINE, "alone.nothing", {})
    load = Sentence(Slot.MACHINE_LOAD, "machine.load", LOAD)
    out = render([head, load], measured_unix_s=t, reused=True)
    assert out.first == PLAIN["alone.nothing"]({})  # the plain first sentence stays first
    assert out.details == ("Using the saved profile (still fresh): nothing was measured again.",
                           "This profile was measured on 2026-12-01 at 11:50 UTC; other programs used 40 % of the "
                           "CPU during that sweep (up to 55 %); figures are less certain. 2 other llama-server "
                           "processes ran on this machine during that sweep and competed with it.")
    assert out.details[0] == REUSED_NOTE
    assert render([], reused=True).text == f"No reason was recorded. {REUSED_NOTE}"
    saved = Sentence(Slot.SWEEP, "saved.measured_on", {"busy": True})
    assert words(saved, t) == ("This profile was measured on 2026-12-01 at 11:50 UTC; what it says about other "
                               "programs on the machine was true then, not necessarily now.")
    assert words(saved) == ""  # no time, nothing to say


def test_the_load_watchers_figures_in_words() -> None:
    def said(samples: list[LoadSample], competing: tuple[int, ...] = ()) -> str | None:
        s = machine_sentence(MachineLoad(summarize_load(samples), competing))
        return None if s is None else words(s)

    assert said([LoadSample(i, 0.02, 0.0) for i in range(10)]) is None  # a quiet machine: no sentence
    assert said([LoadSample(i, 0.4, 0.0) for i in range(10)]) == (
        "Other programs used 40 % of the CPU during the sweep; figures are less certain.")
    assert "the hypervisor took 5 % (steal time)" in (said([LoadSample(i, 0.3, 0.05) for i in range(4)]) or "")
    assert said([LoadSample(i, 0.02, 0.0) for i in range(10)], (17,)) == (
        "1 other llama-server process ran on this machine during the sweep and competed with it.")
    assert machine_sentence(None) is None and machine_sentence(MachineLoad()) is None


def test_why_an_ngram_type_never_drafted() -> None:
    """Only what was measured: the requests in which it drafted nothing and the greedy check's count, never a
    claim about the prompts in general (issue 26: "these prompts repeat no n-gram; no speedup is possible for
    these requests" rested on 2 greedy checks of 32 tokens, while the same prompts drafted at greedy settings
    over 256 tokens)."""
    at = "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama-server's defaults)"
    assert no_drafts_error("ngram-mod", NoDrafts(at, True, 12, 14)) == (
        f"ngram-mod drafted nothing in 14 requests at the served sampling ({at}), although it drafted 12 tokens in "
        "the short greedy check (temperature 0)")
    assert no_drafts_error("ngram-mod", NoDrafts(at, True, 0, 1)) == (
        f"ngram-mod drafted nothing in 1 request at the served sampling ({at}), nor in the short greedy check "
        "(temperature 0)")
    assert no_drafts_error("ngram-simple", NoDrafts("greedy (temperature 0)", False)) == (
        "ngram-simple drafted nothing at the served sampling (greedy (temperature 0))")
    for nd in (NoDrafts(at, True, 0, 14), NoDrafts(at, False, None, 3)):
        said = no_drafts_error("ngram-mod", nd)
        assert "repeat no" not in said and "no speedup is possible" not in said and "these prompts" not in said
    assert measured_line("ngram-mod", NoDrafts(at, True, 0, 5)) == (
        f"ngram-mod: drafted nothing in 5 requests at the served sampling ({at}), nor in the short greedy check "
        "(temperature 0)")
    # a saved profile's entry from before the facts were kept: what was measured, not its old error's words
    old = never_entry("ngram-mod", "ngram-mod", "ngram-mod never drafted at the served sampling (t 0.8), nor at "
                      "greedy settings (the lossless check): these prompts repeat no n-gram; no speedup is possible "
                      "for these requests", "t 0.8", None)
    said = render([Sentence(Slot.HEADLINE, "alone.never_drafted", {"never": [old], "unmeasured": []})]).text
    assert said.endswith("ngram-mod drafted nothing at these sampling settings.") and "repeat no" not in said
    said = render([Sentence(Slot.HEADLINE, "alone.failed", {"failed": [old]})]).text
    assert "ngram-mod drafted nothing at the served sampling (t 0.8)" in said and "repeat no" not in said


def test_plain_words_for_a_candidate_and_its_speed() -> None:
    assert plain_label(Candidate()) == "the model alone"
    assert plain_label(Candidate(spec_type="ngram-simple")) == (
        "n-gram lookup (ngram-simple, which reuses spans of the prompt and the answer so far)")
    assert plain_label(Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4)) == (
        "the draft model d.gguf, guessing up to 4 tokens ahead, with n-gram lookup (ngram-mod)")
    assert (plain_tps(738.4), plain_tps(7.44), plain_tps(None)) == ("738", "7.4", "0.0")


def test_where_a_candidate_ran() -> None:
    local = {**RUN, "rpc": [], "hosts": [], "offloaded": None, "local_gpus": True, "ngl": 20, "draft": None}
    assert where_it_ran(local) == "the target on this machine only (20 layers on its GPUs, the rest on its CPU)"
    unnamed = {**RUN, "hosts": [], "offloaded": None, "local_gpus": True, "draft": "machine"}
    assert where_it_ran(unnamed) == ("the target over RPC on 192.168.1.20:50052 with the local GPUs for the rest, "
                                     "the draft on this machine")


# ---- the plain first sentence, per decision kind ------------------------------------------------------------
FIRST_SENTENCES = {
    # golden case (a sweep's measurements, decided): its kind and its first sentence, word for word
    "winner": ("speculate", "Fastest here: the draft model good.gguf, about 1.4× faster than the model alone on your "
                            "prompts."),
    "ngram winner": ("speculate", "Fastest here: n-gram lookup (reusing text already in the conversation), about 1.3× "
                                  "faster than the model alone on your prompts."),
    "slower, break-even": ("alone_slower", "Fastest here: the model alone — speculation with the draft model "
                                           "good.gguf was slower on your prompts."),
    "never drafted, one shared reason": ("alone_never_drafted", "Fastest here: the model alone — speculation never "
                                                                "got going on your prompts."),
    "not enough evidence, pairs needed": (
        "alone_not_enough_evidence", "Serving the model alone for now: speculation with the draft model good.gguf "
                                     "looked about 1.3× faster on your prompts, but the measurements were too few to "
                                     "be sure (a longer tune can settle it)."),
    "chain within noise of the baseline": (
        "alone_not_enough_evidence", "Serving the model alone for now: speculation with the draft model good.gguf "
                                     "with n-gram lookup looked about 5 % faster on your prompts, but the measurements "
                                     "were too few to be sure (a longer tune can settle it)."),
    "within noise": ("alone_within_noise", "Serving the model alone: speculation with the draft model good.gguf was no "
                                           "faster beyond measurement noise on your prompts."),
    "screening only": ("alone_screening_only", "Serving the model alone: speculation with the draft model good.gguf "
                                               "looked about 11 % faster in a first quick measurement, but that was "
                                               "never confirmed on your prompts."),
    "within noise, drafted nothing": ("alone_screening_only", "Serving the model alone: no speculation was confirmed "
                                                              "faster on your prompts."),
    "unsteady baseline": ("alone_unsteady", "Serving the model alone: its own speed changed too much during the tune "
                                            "to tell whether speculation helps on your prompts."),
    "all failed": ("alone_failed", "Serving the model alone: speculation did not run correctly on this machine."),
    "unmeasured only": ("alone_unmeasured", "Serving the model alone: the time budget ran out before any speculation "
                                            "was measured."),
    "nothing available": ("alone_nothing", "Serving the model alone: there was nothing to speculate with (no "
                                           "compatible draft model, no n-gram type)."),
}

JARGON = ("n_max", "ngram-", "draft-simple", "screening", "lossless", "/completion", "min_p", "top_k", "paired",
          "adjacent", "sequential", "break-even", "acceptance", "No speculation:", "--")
"""Field terms that belong in the details, never in the first sentence a desktop user reads."""


@pytest.mark.parametrize("case", sorted(FIRST_SENTENCES))
def test_the_first_sentence_of_each_decision_kind(case: str) -> None:
    from tests.calibration.test_goldens import DECISIONS

    decision = DECISIONS[case]()
    kind, first = FIRST_SENTENCES[case]
    out = render(decision.sentences)
    assert decision.kind == kind
    assert out.first == first
    if kind != "alone_nothing":  # nothing was measured: the first sentence is all there is to say
        assert out.details and out.details[0] not in out.first  # the evidence is behind it, not repeated in it


def test_every_decision_kind_has_a_plain_first_sentence() -> None:
    from tests.calibration.test_goldens import DECISIONS

    kinds = set()
    for case, build in DECISIONS.items():
        decision = build()
        kinds.add(decision.kind)
        first = render(decision.sentences).first
        assert first.startswith(("Fastest here: ", "Serving the model alone")), (case, first)
        assert not [j for j in JARGON if j in first], (case, first)
        assert first.count(". ") == 0 and first.endswith("."), (case, first)  # one sentence
    assert kinds == {"speculate", *(f"alone_{k.split('.', 1)[1]}" for k in PLAIN if k.startswith("alone."))}


def test_plain_labels_and_speed_words() -> None:
    assert short_label(Candidate()) == "the model alone"
    assert short_label(GOOD) == "the draft model good.gguf"
    assert short_label(Candidate(spec_type="draft-mtp", n_max=3)) == "the model's own multi-token prediction (MTP)"
    assert short_label(Candidate(spec_type="ngram-simple")) == "n-gram lookup (reusing text already in the conversation)"
    assert (faster_words(1.43), faster_words(1.08), faster_words(1.004)) == (
        "about 1.4× faster", "about 8 % faster", "about 1 % faster")


def test_the_captured_period_reads_today_another_day_or_across_days() -> None:
    import time

    from tuner.calibration.wording import captured_period

    def local(d: int, h: int, m: int) -> float:
        return time.mktime((2026, 12, d, h, m, 0, 0, 0, -1))

    now = local(2, 15, 0)
    assert captured_period(local(2, 14, 2), local(2, 14, 20), now) == "between 14:02 and 14:20 today"
    assert captured_period(local(1, 14, 2), local(1, 14, 20), now) == "on 2026-12-01 between 14:02 and 14:20"
    assert captured_period(local(2, 9, 5), local(2, 9, 5), now) == "at 09:05 today"
    assert captured_period(local(1, 23, 50), local(2, 0, 10), now) == \
        "between 2026-12-01 at 23:50 and 2026-12-02 at 00:10"
