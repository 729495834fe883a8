"""tuner.calibration: the sweep, the decision and the profile it saves.

Entry points: :func:`tuner.calibration.tune.tune` (one call for the CLI and the GUI; progress as
:class:`~tuner.calibration.tune.TuneEvent`, cancel with a ``threading.Event``) and
:func:`tuner.calibration.serving.config_from_profile` (what ``draftwise serve --models DIR`` serves).
Modules: ``prompts`` (prompt sets), ``candidates`` (the plan), ``measure`` (the protocol), ``predict``
(per-position acceptance → shorter drafts, cost model), ``search`` (probe / refine / confirm),
``decide`` (statistics, break-even, "no speculation"), ``report`` (the sentences about the machine and
the sweep), ``sentences`` and ``wording`` (the decision's sentences as data, and their words: :func:`render`),
``results`` (measurement records), ``routing`` (what one endpoint serves for a folder: the router plan),
``engine`` (composition behind ``tune``), ``command`` (``draftwise tune``).
"""

from .routing import TargetChoice, break_even_rate, captured, serving_plan, target_choices
from .tune import DEFAULT_BUDGET_S, TuneError, TuneEvent, TuneResult, tune
from .wording import Rendered, render

__all__ = ["DEFAULT_BUDGET_S", "Rendered", "TargetChoice", "TuneError", "TuneEvent", "TuneResult", "break_even_rate",
           "captured", "render", "serving_plan", "target_choices", "tune"]
