"""*Re-tune on recent requests* (issue 28 item 2): a forced sweep on the requests captured while serving a model,
offered by the Tune tab and the tray only while that model has captured requests.

The model is the served one (its ``--alias``, else its file's default id), else the selected target
(:func:`tuner.ui.flow.served_model_id`); the sweep is ``tune --prompts-from-served``'s (each captured prompt
replayed as a raw completion, sampled over time), then the winner is served as *Re-tune* does.
"""

from __future__ import annotations

from typing import Any

from tuner.ui import flow
from tuner.ui.state import AppState

TIP = ("Measure again on the requests this model was sent while its requests were kept (replayed as they were "
       "served), and serve the fastest configuration for them")
"""The tooltip of *Re-tune on recent requests* (the tray and the Tune tab)."""


class RecentRequests:
    """*Re-tune on recent requests* for one :class:`~tuner.ui.controller.AppController` (typed ``Any`` here: the
    controller imports this module)."""

    def __init__(self, controller: Any) -> None:
        self.c = controller

    def model_id(self) -> str | None:
        """The model whose captured requests the re-tune uses (``None``: nothing served nor selected)."""
        return flow.served_model_id(self.c.serving, self.c.selected_target)

    def count(self) -> int:
        """How many captured requests that model has; the action is offered while above 0."""
        return flow.captured_requests_of(self.model_id())

    def retune(self) -> None:
        """Start the forced sweep on the captured requests (a status line instead when there are none or a
        sweep runs)."""
        model_id = self.model_id()
        if model_id is None or self.c.state is AppState.TUNING or not flow.captured_requests_of(model_id):
            self.c.status.emit("No captured requests to re-tune on")
            return
        self.c.tune_and_serve(force_retune=True, served_model_id=model_id)


__all__ = ["TIP", "RecentRequests"]
