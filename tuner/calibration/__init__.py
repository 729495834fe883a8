"""tuner.calibration: the sweep, the decision and the profile it saves.

Entry points: :func:`tuner.calibration.tune.tune` (one call for the CLI and the GUI; progress as
:class:`~tuner.calibration.tune.TuneEvent`, cancel with a ``threading.Event``) and
:func:`tuner.calibration.serving.config_from_profile` (what ``draftwise serve --models DIR`` serves).
Modules: ``prompts`` (prompt sets), ``candidates`` (the plan), ``measure`` (the protocol), ``predict``
(per-position acceptance → shorter drafts, cost model), ``search`` (probe / refine / confirm),
``decide`` (statistics, break-even, "no speculation"), ``report`` (the sentences about the machine and
the sweep), ``sentences`` and ``wording`` (the decision's sentences as data, and their words: :func:`render`),
``results`` (measurement records), ``freshness`` (is a saved profile still fresh, without tuning:
:func:`saved_state`), ``routing`` (what one endpoint serves for a folder: the router plan),
``pipeline`` (the tune's steps behind ``tune``: inputs, staleness keys, reuse, plan and placement, launchers,
sweep, decision, save).
"""

from .advice import Advice, ProfileFacts, advice_on_window
from .candidates import Candidate
from .freshness import SavedState, reused_result, saved_state
from .prompts import DEFAULT_SET_PROMPTS, PromptFileError, default_prompts, load_prompts, select_prompts
from .request import EventCallback, TuneRequest, request_from_settings
from .results import Measurement
from .routing import STALE_WORDS, TargetChoice, break_even_rate, captured, decision_words, serving_plan, target_choices
from .serving import profile_server_config, reachable_config, rpc_fallback_config, with_served
from .tune import DEFAULT_BUDGET_S, TuneError, TuneEvent, TuneResult, tune
from .wording import Rendered, measured_line, render

__all__ = ["Advice", "Candidate", "ProfileFacts", "STALE_WORDS", "advice_on_window", "decision_words", "DEFAULT_BUDGET_S", "DEFAULT_SET_PROMPTS", "EventCallback", "Measurement", "PromptFileError",
           "Rendered", "SavedState", "TargetChoice", "TuneError", "TuneEvent", "TuneRequest", "TuneResult",
           "break_even_rate", "captured", "default_prompts", "load_prompts", "measured_line",
           "profile_server_config", "reachable_config", "render", "request_from_settings", "reused_result",
           "rpc_fallback_config", "saved_state", "select_prompts", "serving_plan", "target_choices", "tune",
           "with_served"]
