"""The sweep itself: the search (``tuner.calibration.search.run_search``) under the load watcher
(``tuner.hardware.host.LoadWatcher``), after a look for other llama-servers that would compete with it.

A cancel is an outcome (``SearchOutcome.cancelled``, the ``"cancelled"`` event sent before the servers
stop); a baseline that cannot run ends the tune with the server's diagnosis as evidence.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..measure import LaunchFn
from ..outcome import SearchOutcome
from ..report import MachineLoad
from ..request import TuneError
from ..search import BaselineFailed, run_search
from .events import Events
from .inputs import TuneInputs
from .placement import SweepPlan

if TYPE_CHECKING:
    from tuner.hardware.host import LoadSummary


@dataclass(frozen=True)
class SweepResult:
    """What the sweep found, and what else ran on the machine meanwhile.

    Attributes:
        outcome: the search's findings (``cancelled`` when the user stopped it).
        load: the load watcher's summary of other programs during the sweep.
        competing_pids: other llama-server processes seen when it started (not ours).
    """

    outcome: SearchOutcome
    load: LoadSummary
    competing_pids: tuple[int, ...] = ()

    @property
    def machine(self) -> MachineLoad:
        """The report's fact about the machine (``tuner.calibration.report.MachineLoad``)."""
        return MachineLoad(self.load, self.competing_pids)


def run_sweep(plan: SweepPlan, inputs: TuneInputs, launch: LaunchFn, cancel: threading.Event,
              events: Events) -> SweepResult:
    """Run the search over ``plan`` with ``launch``; other llama-servers already running are a note (they
    compete for CPU, GPU and memory), and the busy machine's state goes to the search (``busy``).

    Raises:
        TuneError: the target alone could not be measured (its error, with the server's evidence).
    """
    import tuner.hardware.host as host

    watcher = host.LoadWatcher()
    competing = host.foreign_processes("llama-server")
    if competing:
        events.note(f"{len(competing)} other llama-server process{'es' if len(competing) != 1 else ''} running on "
                    f"this machine (pid {', '.join(str(p) for p, _ in competing[:3])}{', …' if len(competing) > 3 else ''}): the measurements compete "
                    "with them for CPU, GPU and memory; stop them (the app's Re-tune pauses its own server) for "
                    "figures you can trust", detail={"competing": [{"pid": p, "cmdline": c} for p, c in competing]})
    watcher.start()
    try:
        outcome = run_search(plan.candidates, inputs.prompts.chosen, plan.settings, inputs.workload, plan.budget_s,
                             launch, cancel, events, busy=lambda: watcher.summary(early=True).busy)
        if outcome.cancelled:
            events("cancelled", "tuning cancelled; nothing was saved")
    except BaselineFailed as exc:
        raise TuneError(f"{inputs.target_path.name} could not be measured on its own: {exc.measurement.error}",
                        exc.measurement.evidence) from exc
    finally:
        load = watcher.stop()
    return SweepResult(outcome, load, tuple(p for p, _ in competing))
