"""*Serve at start*: the app comes back serving what it served when it last ran (issue 26 item 1).

The setting has three states (``Settings.serve_at_start``): unset (``None``; the first profile served turns it
on), on, off (an explicit off: later serves leave it off). ``Settings.served_target`` is what is served; a stop by
hand clears it. At start (a login too, through the autostart entry) :meth:`ServeAtStart.restore` serves that
target's saved profile again when it is still fresh for what a *Tune & serve* would measure now
(:func:`tuner.ui.flow.restore_serving`), announced as "Serving X again (profile of DATE)", never "tuning
finished". A stale profile is not served: the notification says why and a click on it re-tunes
(:attr:`tuner.ui.controller.AppController.retune_offer`).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tuner.ui import flow
from tuner.ui.state import AppState

log = logging.getLogger(__name__)


class ServeAtStart:
    """*Serve at start* for one :class:`~tuner.ui.controller.AppController` (its settings, worker and signals;
    typed ``Any`` here: the controller imports this module)."""

    def __init__(self, controller: Any) -> None:
        self.c = controller

    def restore(self) -> bool:
        """Serve what was served when the app last ran (``settings.served_target``) again from its saved profile,
        in a worker, when the setting is on; a stale profile is not served: a notification says why and offers
        the re-tune (``retune_offer``; a click on it re-tunes). Returns False (and does nothing) when the setting
        is off or nothing was served."""
        c = self.c
        st = c.settings
        target = st.served_target
        if not st.serve_at_start or target is None:
            return False
        folder = st.models_dir or flow.demo_models_dir()
        c.selected_target = target
        prompts_path = c.prompts_path
        tune_options = dict(c.tune_options)
        c.restoring = target
        c.set_state(AppState.TUNING, f"Serving {target.name} again…")

        def job(on_event: flow.EventCallback, cancel: threading.Event) -> flow.ServeOutcome | flow.NotRestored:
            return flow.restore_serving(folder, target, st, prompts_path, c.runner, on_event, cancel, tune_options)

        if c._start_work(job, "restore", self._done, c.tune_event.emit) is None:
            c.restoring = None
            c.set_state(AppState.IDLE)
            return False
        return True

    def _done(self, outcome: flow.ServeOutcome | flow.NotRestored) -> None:
        c = self.c
        c.restoring = None
        if isinstance(outcome, flow.ServeOutcome):
            c._on_served(outcome)
            return
        if outcome.scan is not None:
            c._on_scanned(outcome.scan)
        c.retune_offer = outcome.target_path if outcome.reasons else None
        message = outcome.message()
        c.set_state(AppState.IDLE, message)
        c.restore_refused.emit(message)
        title = "Draftwise: not serving — re-tune?" if outcome.reasons else "Draftwise: not serving"
        c.notify.emit(title, message + (" Click here to re-tune." if outcome.reasons else ""))

    def clicked(self) -> None:
        """The user clicked the last notification: a pending re-tune offer (a stale profile at start) is taken."""
        if self.c.retune_offer is not None and not self.c.busy:
            self.c.retune()

    def remember(self, info: flow.ServingInfo) -> None:
        """What is served now is what *Serve at start* serves next time; the first serve turns the unset setting
        on (an explicit off stays off)."""
        c = self.c
        st = c.settings
        on = True if st.serve_at_start is None else st.serve_at_start
        if st.served_target == info.target_path and st.serve_at_start == on:
            return
        try:
            c.update_settings(st.replace(served_target=info.target_path, serve_at_start=on))
        except Exception:  # noqa: BLE001 - serving goes on; the log says why it is not remembered
            log.exception("could not remember the served target in the settings")

    def forget(self) -> None:
        """Stopped by hand: nothing to serve again at the next start."""
        c = self.c
        if c.settings.served_target is None:
            return
        try:
            c.update_settings(c.settings.replace(served_target=None))
        except Exception:  # noqa: BLE001
            log.exception("could not clear the served target in the settings")


__all__ = ["ServeAtStart"]
