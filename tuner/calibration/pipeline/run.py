"""``run_tune``: the tune as a list of steps, each in its own module, handing the next one a frozen object.

    TuneRequest ─ inputs.resolve_inputs ─▶ TuneInputs ─ keys.staleness_keys ─▶ StalenessKeys
      ─ reuse.check_saved ─▶ Reuse (fresh: reuse.reused_result, done)
      ─ placement.plan_sweep ─▶ SweepPlan ─ launchers.open_launchers ─▶ LaunchFn
      ─ sweep.run_sweep ─▶ SweepResult (cancelled: save.cancelled_result, done)
      ─ decision.reach_decision ─▶ Decision ─ save.save_result ─▶ TuneResult

Where a change goes: a new input of the sweep (another prompt source, such as requests captured while
serving) is resolved in ``inputs.py`` and becomes a field of ``TuneInputs``; a new stage before the sweep
(a setting measured first, such as the CPU thread count) is one more step between ``plan_sweep`` and
``run_sweep`` in the list below, taking and returning a ``SweepPlan``; a new staleness key goes to
``keys.py``; a new sentence of the report to ``tuner.calibration.report``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from tuner.profiles import ProfileStore

from ..measure import LaunchFn
from ..request import EventCallback, TuneRequest, TuneResult
from ..search import SearchSettings
from .decision import reach_decision
from .events import Events
from .inputs import resolve_inputs
from .keys import staleness_keys
from .launchers import open_launchers
from .placement import plan_sweep
from .reuse import check_saved, reused_result
from .save import cancelled_result, save_result
from .sweep import run_sweep

if TYPE_CHECKING:
    from tuner.catalog.folder import ScanResult
    from tuner.server.discovery import ServerBinary


def run_tune(
    request: TuneRequest,
    on_event: EventCallback | None,
    cancel: threading.Event,
    store: ProfileStore,
    launch_fn: LaunchFn | None = None,
    settings: SearchSettings | None = None,
    scanned: ScanResult | None = None,
    binary: ServerBinary | None = None,
) -> TuneResult:
    """Run one tune (:func:`tuner.calibration.tune.tune` is the public entry; its docstring says what the
    caller sees). ``launch_fn`` / ``settings`` replace the supervisors and the search settings (tests);
    ``scanned`` / ``binary``: the caller's scan and server, used instead of scanning and discovering again.

    Raises:
        TuneError: a bad input (``bad_input``), no llama-server, or a baseline that cannot run.
        PromptFileError: the prompt file is unusable.
    """
    events = Events(on_event)
    inputs = resolve_inputs(request, scanned=scanned, binary=binary, events=events,
                            default_long_share=settings.long_share if settings is not None else None)
    keys = staleness_keys(inputs)
    saved = check_saved(store, inputs, keys, events)
    if saved.fresh and saved.profile is not None:
        return reused_result(store, inputs, saved.profile, events)
    plan = plan_sweep(inputs, settings, events, saved.profile)
    with open_launchers(inputs, launch_fn, events) as launch:
        sweep = run_sweep(plan, inputs, launch, cancel, events)
    if sweep.outcome.cancelled:
        return cancelled_result(inputs, plan, sweep.outcome, events)
    decision = reach_decision(inputs, plan, sweep, events)
    return save_result(store, inputs, keys, plan, sweep.outcome, decision, events)
