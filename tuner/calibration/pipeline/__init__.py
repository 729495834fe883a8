"""The tune as a pipeline of steps with typed, frozen hand-offs (:mod:`.run` lists them).

One module per step: ``events`` (the event sink), ``server`` (the llama-server and its dialect), ``target``
(the models folder and the target), ``inputs`` (everything resolved once: ``TuneInputs``), ``keys`` (the
staleness keys), ``reuse`` (a fresh saved profile, or why it is stale), ``placement`` (the candidates placed
and checked against memory: ``SweepPlan``), ``launchers`` (the supervised servers), ``sweep`` (the search
under the load watcher), ``decision`` (decide and report), ``save`` (the profile), ``run`` (``run_tune``).
"""

from .run import run_tune

__all__ = ["run_tune"]
