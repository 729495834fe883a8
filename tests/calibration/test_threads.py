"""The thread settings tried, the rule that picks one, its sentence, and the setting reaching the profile."""

from __future__ import annotations

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.decide import decide
from tuner.calibration.outcome import SearchOutcome
from tuner.calibration.pipeline.save import served_candidate
from tuner.calibration.serving import candidate_config, config_from_json, config_to_json
from tuner.calibration.threads import (
    DEFAULT,
    ThreadChoice,
    ThreadFigures,
    ThreadSetting,
    choose,
    settings_for,
    threads_sentence,
)
from tuner.calibration.wording import render
from tuner.hardware.buffers import CpuBuffers

PASSIVE = ThreadSetting(2, omp_passive=True)


def test_settings_follow_the_build() -> None:
    assert settings_for(2, True) == (DEFAULT, ThreadSetting(1), PASSIVE)
    assert settings_for(8, False) == (DEFAULT, ThreadSetting(7), ThreadSetting(8, poll=0))
    assert settings_for(1, None) == (DEFAULT, ThreadSetting(1, omp_passive=True))
    with pytest.raises(ValueError, match="cores"):
        settings_for(0, True)


def test_the_best_mean_of_idle_and_loaded_wins_and_a_tie_keeps_the_default() -> None:
    figs = [ThreadFigures(DEFAULT, 99, 1.5), ThreadFigures(ThreadSetting(1), 51, 52), ThreadFigures(PASSIVE, 59, 50)]
    assert choose(figs) == PASSIVE
    assert choose([ThreadFigures(DEFAULT, 60, 40), ThreadFigures(ThreadSetting(1), 50, 50)]) == DEFAULT
    assert choose([ThreadFigures(DEFAULT, 99, None), ThreadFigures(ThreadSetting(1), 51, 52)]) == ThreadSetting(1)
    assert choose([ThreadFigures(DEFAULT, None, None)]) is None


def test_the_default_kept_names_the_best_other_and_a_collapse_reads_at_most() -> None:
    figs = (ThreadFigures(DEFAULT, 120, 90), ThreadFigures(ThreadSetting(1), 51, 52),
            ThreadFigures(PASSIVE, 70, 3.0, loaded_at_most=True))
    text = render([threads_sentence(ThreadChoice(DEFAULT, figs, 2, "no speculation"))]).text
    assert text == ("Threads: all 2 cores (the default): 120 tokens/s idle, 90 with another busy program; "
                    "1 core would be 51 and 52.")
    figs = (ThreadFigures(DEFAULT, 99, 4.0, loaded_at_most=True), ThreadFigures(ThreadSetting(1), 51, 52))
    text = render([threads_sentence(ThreadChoice(ThreadSetting(1), figs, 2, "no speculation"))]).text
    assert text == ("Threads: 1 core: 51 tokens/s idle, 52 with another busy program; the default would be 99 "
                    "and at most 4.0.")
    # another program already kept the CPU busy: the default collapsed without the burner too (a new user's
    # app read "the default would be 2.0 and at most 2.0", the first figure unmarked)
    figs = (ThreadFigures(DEFAULT, 2.0, 2.0, loaded_at_most=True, idle_at_most=True),
            ThreadFigures(ThreadSetting(1), 347, 275))
    text = render([threads_sentence(ThreadChoice(ThreadSetting(1), figs, 2, "no speculation"))]).text
    assert text == ("Threads: 1 core: 347 tokens/s idle, 275 with another busy program; the default stalled even "
                    "without the added load (at most 2.0 tokens/s: another program was already using the CPU).")


def test_without_time_for_the_default_the_sentence_quotes_the_sweep() -> None:
    figs = (ThreadFigures(ThreadSetting(1), 50.4, 47.9), ThreadFigures(PASSIVE, 44, 30))
    choice = ThreadChoice(choose(figs) or DEFAULT, figs, 2, "no speculation", sweep_default_tps=4.6)
    assert render([threads_sentence(choice)]).text == (
        "Threads: 1 core: 50 tokens/s idle, 48 with another busy program; the default was not tried with another "
        "busy program in the time left (the sweep measured it at 4.6 tokens/s).")


def test_the_chosen_setting_reaches_the_saved_configuration() -> None:
    from tuner.calibration.results import Measurement, Sample

    base = Candidate()
    m = Measurement(candidate=base, samples=[Sample(0, "code", 0, 50.0)])
    outcome = SearchOutcome.of([m], threads=ThreadChoice(PASSIVE, (ThreadFigures(PASSIVE, 59, 50),), 2,
                                                         base.label))
    served = served_candidate(decide(outcome), outcome)
    assert (served.threads, served.omp_passive) == (2, True) and served.label == "no speculation -t 2 waiting politely"
    cfg = candidate_config(served, "/m/t.gguf", threads=None)
    assert (cfg.threads, cfg.omp_passive) == (2, True)
    assert config_from_json(config_to_json(cfg)) == cfg  # part of the profile
    assert "threads" not in base.to_json() and served.to_json()["omp_passive"] is True
    other = SearchOutcome.of([m], threads=ThreadChoice(PASSIVE, (), 2, "draft-simple x.gguf n_max 4"))
    assert served_candidate(decide(other), other) == base  # measured on another candidate: not applied


def test_openmp_is_read_from_the_build_flags_only() -> None:
    assert CpuBuffers(("CPU_REPACK",), ("avx2", "openmp")).openmp is True
    assert CpuBuffers((), ("avx2",)).openmp is False
    assert CpuBuffers((), ("avx2",), source="CPU flags").openmp is None


def test_the_default_measured_only_on_the_model_alone_is_quoted_as_such() -> None:
    """The last step had no time for the default on the served configuration; the first step measured it on the
    model alone (a run under load said nothing of the default at all)."""
    mine = (ThreadFigures(ThreadSetting(1), 171, 110), ThreadFigures(PASSIVE, 150, 90))
    base = (ThreadFigures(ThreadSetting(1), 120, 80), ThreadFigures(DEFAULT, 140, 4.0, loaded_at_most=True))
    choice = ThreadChoice(ThreadSetting(1), mine, 2, "ngram-mod", base)
    assert render([threads_sentence(choice)]).text == (
        "Threads: 1 core: 171 tokens/s idle, 110 with another busy program; the default would be 140 and at most "
        "4.0 (measured with the model alone).")
