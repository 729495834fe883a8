"""The CPU thread setting served on a shared desktop: the settings tried, the rule that picks one, its sentence.

llama-server's default thread count (``-t``: the physical cores, common/common.cpp ``cpu_get_num_math``) is
tuned for an idle server. On a build whose CPU backend uses OpenMP (``system_info: … OPENMP = 1``), every
graph node ends at a barrier where the threads spin-wait for each other (ggml/src/ggml-cpu/ggml-cpu.c
``ggml_barrier`` is an ``omp barrier``), so when one other CPU-bound program preempts one of them, all of them
wait at full spin: measured on a 2-core machine, the default generated 99 tokens/s idle and 1.5 with one busy
program; ``-t 1`` 51 and 52; ``OMP_WAIT_POLICY=PASSIVE`` (the threads sleep at the barrier) with ``-t 2``
59 and 50. On a build with ggml's own threadpool, ``--poll 0`` makes its idle threads sleep instead
(common/arg.cpp ``--poll``; it changes nothing on an OpenMP build).

The tune's thread stage (``tuner.calibration.search.threads``) measures :func:`settings_for` idle and with
one other busy program, then :func:`choose` serves the setting with the highest mean of its two speeds, and
:func:`threads_sentence` says the trade (slot THREADS, rendered by ``tuner.calibration.wording``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .sentences import Sentence, Slot

SHARE = 0.15
"""The largest share of the tune's time budget the thread stage may use."""

LOADING_MESSAGE = "loading one core for a few seconds to see how each thread setting copes"
"""What the Tune tab and the CLI say while the stage's burner runs."""


@dataclass(frozen=True)
class ThreadSetting:
    """One way to run llama-server's CPU threads.

    Attributes:
        threads: ``-t`` (and ``-td`` with a draft model); None = llama-server's default (the physical cores).
        omp_passive: ``OMP_WAIT_POLICY=PASSIVE`` in its environment (an OpenMP build).
        poll: ``--poll`` (0 = ggml's threadpool never spins); None = not passed.
    """

    threads: int | None = None
    omp_passive: bool = False
    poll: int | None = None

    @property
    def is_default(self) -> bool:
        """llama-server's own behaviour: nothing passed."""
        return self.threads is None and not self.omp_passive and self.poll is None

    def words(self, cores: int) -> str:
        """The setting in words: ``"all 2 cores, waiting politely"``, ``"1 core"``, ``"all 2 cores (the
        default)"``, ``"all 2 cores, not polling"``."""
        n = cores if self.threads is None else self.threads
        count = f"all {n} cores" if n == cores else f"{n} core{'s' if n != 1 else ''}"
        if self.omp_passive:
            return f"{count}, waiting politely"
        if self.poll == 0:
            return f"{count}, not polling"
        return f"{count} (the default)" if self.is_default else count

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: ``{"threads", "omp_passive", "poll"}``."""
        return {"threads": self.threads, "omp_passive": self.omp_passive, "poll": self.poll}


DEFAULT = ThreadSetting()
"""llama-server's default."""


def settings_for(cores: int, openmp: bool | None) -> tuple[ThreadSetting, ...]:
    """The settings the stage measures: the default (all ``cores`` physical cores), one fewer (when there
    are 2 or more), and all cores with the threads sleeping while they wait — ``OMP_WAIT_POLICY=PASSIVE`` on
    an OpenMP build (also when ``openmp`` is None, unknown: other runtimes ignore the variable), ``--poll 0``
    on a ggml-threadpool build (``openmp`` False).

    Raises:
        ValueError: ``cores`` < 1.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    out = [DEFAULT]
    if cores >= 2:
        out.append(ThreadSetting(cores - 1))
    out.append(ThreadSetting(cores, poll=0) if openmp is False else ThreadSetting(cores, omp_passive=True))
    return tuple(out)


@dataclass(frozen=True)
class ThreadFigures:
    """One setting's speed on one candidate (generated tokens/s; None = not measured or failed).

    ``loaded_at_most``: the loaded request ran past its time limit, so ``loaded_tps`` is an upper bound
    (the tokens asked for over the limit); ``idle_at_most`` the same of the idle request (another program
    already kept the CPU busy: the setting collapsed without the stage's burner)."""

    setting: ThreadSetting
    idle_tps: float | None
    loaded_tps: float | None
    loaded_at_most: bool = False
    idle_at_most: bool = False

    @property
    def score(self) -> float | None:
        """The mean of the idle and the loaded speed, None unless both were measured."""
        if self.idle_tps is None or self.loaded_tps is None:
            return None
        return (self.idle_tps + self.loaded_tps) / 2

    def to_json(self) -> dict[str, Any]:
        """Plain JSON of the figures and the setting."""
        return {**self.setting.to_json(), "idle_tps": self.idle_tps, "loaded_tps": self.loaded_tps,
                "loaded_at_most": self.loaded_at_most, "idle_at_most": self.idle_at_most}


@dataclass(frozen=True)
class ThreadChoice:
    """What the stage found for the served candidate.

    Attributes:
        chosen: the setting to serve.
        figures: each measured setting's figures on the served candidate, in the order measured.
        cores: the physical cores the settings were built for.
        served_label: the served candidate's label (``Candidate.label``).
        baseline: the model alone's figures per setting when it was measured too (the served one is speculative).
        sweep_default_tps: the model alone's speed at the default threads as the sweep measured it (the
            sentence quotes it when the stage had no time left for the default; None when the sweep ran at
            another setting).
        of_baseline: ``figures`` are the model alone's: the served speculative configuration could not be
            measured in the time left, and it is served at the setting the model alone chose.
    """

    chosen: ThreadSetting
    figures: tuple[ThreadFigures, ...]
    cores: int
    served_label: str
    baseline: tuple[ThreadFigures, ...] = ()
    sweep_default_tps: float | None = None
    of_baseline: bool = False

    def figures_of(self, setting: ThreadSetting) -> ThreadFigures | None:
        """The served candidate's figures of ``setting``, None when it was not measured."""
        return next((f for f in self.figures if f.setting == setting), None)

    def detail(self) -> dict[str, Any]:
        """Plain JSON for events and the profile."""
        return {"chosen": self.chosen.to_json(), "cores": self.cores, "served": self.served_label,
                "figures": [f.to_json() for f in self.figures], "baseline": [f.to_json() for f in self.baseline],
                "sweep_default_tps": self.sweep_default_tps, "of_baseline": self.of_baseline}


def choose(figures: Sequence[ThreadFigures]) -> ThreadSetting | None:
    """The setting with the highest mean of its idle and loaded speed (:attr:`ThreadFigures.score`); a tie
    keeps the earlier one (the default first). None when no setting has both figures."""
    scored = [f for f in figures if f.score is not None]
    if not scored:
        return None
    return max(scored, key=lambda f: f.score or 0.0).setting


def threads_sentence(choice: ThreadChoice) -> Sentence:
    """The trade in one sentence (slot THREADS, kind ``threads.trade``), e.g. "Threads: all 2 cores, waiting
    politely: 59 tokens/s idle, 50 with another busy program; the default would be 99 and 1.5."; params: the
    chosen setting's words and figures and the default's (None when the default is chosen or was not measured;
    the model alone's when only it was, ``default_of_baseline``), ``of_baseline`` (the figures are the model
    alone's)."""
    chosen = choice.figures_of(choice.chosen)
    default = choice.figures_of(DEFAULT)
    # the default not measured on the served configuration: the model alone's, measured before the sweep
    default_alone = default is None and not choice.of_baseline
    if default_alone:
        default = next((f for f in choice.baseline if f.setting == DEFAULT and f.score is not None), None)
    params: dict[str, Any] = {
        "setting": choice.chosen.words(choice.cores), "default": choice.chosen.is_default,
        "idle_tps": chosen.idle_tps if chosen else None, "loaded_tps": chosen.loaded_tps if chosen else None,
        "loaded_at_most": chosen.loaded_at_most if chosen else False,
        "idle_at_most": chosen.idle_at_most if chosen else False,
        "default_idle_tps": default.idle_tps if default and not choice.chosen.is_default else None,
        "default_loaded_tps": default.loaded_tps if default and not choice.chosen.is_default else None,
        "default_loaded_at_most": default.loaded_at_most if default else False,
        "default_idle_at_most": default.idle_at_most if default else False,
        "sweep_default_tps": choice.sweep_default_tps if default is None else None,
        "of_baseline": choice.of_baseline,
        "default_of_baseline": default_alone and default is not None,
    }
    if choice.chosen.is_default:
        others = [f for f in choice.figures if f.setting != DEFAULT and f.score is not None]
        best = max(others, key=lambda f: f.score or 0.0, default=None)
        if best is not None:
            params.update(other=best.setting.words(choice.cores), other_idle_tps=best.idle_tps,
                          other_loaded_tps=best.loaded_tps)
    return Sentence(Slot.THREADS, "threads.trade", params)


__all__ = ["DEFAULT", "LOADING_MESSAGE", "SHARE", "ThreadChoice", "ThreadFigures", "ThreadSetting", "choose",
           "settings_for", "threads_sentence"]
