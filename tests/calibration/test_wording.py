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
    REUSED_PREFIX,
    never_entry,
    no_drafts_error,
    plain_label,
    plain_tps,
    render,
    where_it_ran,
    words,
)
from tuner.hardware.host import LoadSample, summarize_load

GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=8, p_min=0.0)
FIGURES = {"speedup": 1.38, "tps": 331.0, "base_tps": 240.0, "requests": 4, "paired": True, "pairs": 4, "low": 1.27,
           "high": 1.49, "decided_at": None}
SCREENING = {**FIGURES, "paired": False, "pairs": 0, "low": None, "high": None}
ACCEPTANCE = {"acceptance": 0.41, "never_pays": False, "break_even": 0.58}
NEVER = never_entry("ngram-mod", "ngram-mod", None, "temperature 0.8", NoDrafts("temperature 0.8", True, 3))
BROKEN = never_entry("draft-simple good.gguf n_max 8", "draft-simple", "request failed: HTTP 500", None, None)
RUN = {"label": GOOD.label, "rpc": ["192.168.1.20:50052"], "hosts": [["RPC0", "192.168.1.20:50052"]],
       "offloaded": 6, "layers": 6, "local_gpus": False, "ngl": 99, "draft": "cpu"}
LOAD = {"load": {"other_cpu_mean": 0.4, "other_cpu_max": 0.55, "steal_mean": 0.0}, "competing": 2}

SAMPLES: dict[str, tuple[dict[str, Any], str]] = {
    # kind: (params, words expected in the sentence)
    "headline.serving": ({"candidate": GOOD.to_json(), "speedup": 1.38, "tps": 331.0, "base_tps": 240.0},
                         "Serving the draft model good.gguf, guessing up to 8 tokens ahead: about 1.4× as fast"),
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
                            "ngram-mod never drafted at these sampling settings, although it drafted 3 tokens"),
    "alone.failed": ({"failed": [BROKEN, NEVER]}, "draft-simple good.gguf n_max 8: request failed: HTTP 500; "
                                                  "ngram-mod: ngram-mod never drafted at the served sampling"),
    "alone.unmeasured": ({"unmeasured": ["ngram-mod"]}, "the time budget was spent before ngram-mod was measured"),
    "alone.nothing": ({}, "no speculative configuration was available to measure"),
    "saved.reason": ({"reason": "Words an older Draftwise saved."}, "Words an older Draftwise saved."),
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
    "sweep.measured_with": ({"chat": True, "raw_endpoint": "/completion", "sampling": "greedy (temperature 0)",
                             "n_ctx": 8192},
                            "Measured with chat requests (/v1/chat/completions) at greedy (temperature 0), context "
                            "8192."),
    "sweep.depth": ({"rows": [["long code", 1.05]], "overall": 1.3},
                    "At depth (≥ half the context: long code 1.05×) the speedup differs from the overall 1.30×."),
    "sweep.never_drafted": ({"labels": ["ngram-mod", "ngram-simple"]},
                            "ngram-mod, ngram-simple never drafted at these sampling settings."),
    "sweep.where_it_ran": ({"runs": [RUN]}, "Where it ran: draft-simple good.gguf n_max 8: the target over RPC on "
                                            "RPC0 (192.168.1.20:50052) (6 of 6 layers offloaded) with this "
                                            "machine's CPU for the rest, the draft on this machine's CPU."),
    "sweep.time_limit": ({"limit_s": 64.8, "budget_s": 60.0, "cut": ["ngram-simple", GOOD.label]},
                         "The sweep stopped at its time limit (65 s for a 60 s budget: the estimates from the warm-up "
                         "ran short); cut short or kept from starting by it: ngram-simple, draft-simple good.gguf "
                         "n_max 8."),
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
    assert out.first == f"{REUSED_PREFIX} {words(head)}"
    assert out.details == ("This profile was measured on 2026-12-01 at 11:50 UTC; other programs used 40 % of the "
                           "CPU during that sweep (up to 55 %); figures are less certain. 2 other llama-server "
                           "processes ran on this machine during that sweep and competed with it.",)
    assert render([], reused=True).text == f"{REUSED_PREFIX} no reason recorded"
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
    """The words the search's ``error`` holds today, from ``Measurement.no_drafts``'s facts."""
    at = "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama-server's defaults)"
    tail = "; no speedup is possible for these requests"
    assert no_drafts_error("ngram-mod", NoDrafts(at, True, 12)) == (
        f"ngram-mod never drafted at the served sampling ({at}), although it drafted 12 tokens at greedy settings "
        f"(the lossless check){tail}")
    assert no_drafts_error("ngram-mod", NoDrafts(at, True, 0)) == (
        f"ngram-mod never drafted at the served sampling ({at}), nor at greedy settings (the lossless check): these "
        f"prompts repeat no n-gram{tail}")
    assert no_drafts_error("ngram-simple", NoDrafts("greedy (temperature 0)", False)) == (
        "ngram-simple never drafted at the served sampling (greedy (temperature 0)): these prompts repeat no n-gram "
        f"it could continue{tail}")
    assert no_drafts_error("ngram-mod", NoDrafts(at, True, None)) == (
        f"ngram-mod never drafted at the served sampling ({at}){tail}")


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
