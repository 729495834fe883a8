"""The tray's *Serve* menu behind the scenes: the folder's targets (read in a worker) and how the app follows
llama-server's router when another model becomes the one served.

:class:`ServeTargets` keeps :attr:`ServeTargets.items` (:class:`tuner.calibration.TargetChoice`: tuned ones with
their decision in a few words) and reads them again after each scan and serve; only the newest reading counts.
:func:`follow_router` is the controller's answer to a router state change: the views follow the current model
(the Monitor's ``/metrics?model=ID``, the Chat tab's ``model``) — the one picked in the menu, or the last one a
request loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from tuner.calibration import STALE_WORDS, decision_words
from tuner.catalog import Family
from tuner.profiles import ProfileError, ProfileStore
from tuner.server import ServerState, SleepStatus, StateChange
from tuner.ui import flow
from tuner.ui.state import AppState
from tuner.ui.workers import CallWorker

log = logging.getLogger(__name__)

StaleCheck = Callable[[flow.ScanResult, Path], tuple[str, ...]]
"""Why a target's saved profile is stale now (phrases; empty = fresh), given the scan and the target."""

def draft_only(family: Family) -> set[Path]:
    """The models of ``family`` that are only ever a draft there: listed as a draft of a larger target and with
    no drafts of their own (the Models tab shows them as drafts, not as targets)."""
    drafts = {Path(dc.model.path) for e in family.targets for dc in e.drafts}
    return drafts - {Path(e.target.path) for e in family.targets if e.drafts}


def menu_choices(scanned: flow.ScanResult, stale: StaleCheck | None = None,
                 store: ProfileStore | None = None) -> list[flow.TargetChoice]:
    """The *Serve* menu's targets: :func:`tuner.ui.flow.serve_choices` less the models the folder only knows as
    drafts (:func:`draft_only`; one with its own saved profile stays), each tuned one worded by
    :func:`tuner.calibration.decision_words` (``stale``: asked for each tuned one; None = not checked). Reads the profiles (a worker)."""
    drafts = {p for fam in scanned.families for p in draft_only(fam)}
    store = store or ProfileStore()
    out = []
    for choice in flow.serve_choices(scanned):
        if not choice.tuned:
            if Path(choice.path) in drafts and not choice.problem:
                continue
            out.append(choice)
            continue
        try:
            prof = store.load(choice.path, keep_aside=False)
        except (ProfileError, OSError):
            prof = None
        if prof is None:  # gone since it was read
            out.append(choice)
            continue
        out.append(replace(choice, words=decision_words(prof, _reasons(stale, scanned, choice.path))))
    return out


def _reasons(stale: StaleCheck | None, scanned: flow.ScanResult, target: Path) -> tuple[str, ...]:
    if stale is None:
        return ()
    try:
        return tuple(stale(scanned, Path(target)))
    except Exception:  # noqa: BLE001 - the menu still lists it; the serve itself says what is wrong
        log.warning("cannot tell whether the profile of %s is stale", target, exc_info=True)
        return ()


def stale_check(settings: Any, prompts_path: Path | None, tune_options: dict[str, Any]) -> StaleCheck:
    """Why a target's saved profile is stale for what a *Tune & serve* of it with ``settings`` would measure now
    (``tuner.calibration.saved_state``, as *Serve at start* asks: ``llama-server --list-devices`` and ``--help``
    run). Raises what :func:`tuner.ui.flow.find_server` raises when there is no llama-server."""

    def check(scanned: flow.ScanResult, target: Path) -> tuple[str, ...]:
        binary = flow.find_server(settings.server_binary)
        options = dict(flow.TUNE_OPTIONS_DEFAULT, prompts=prompts_path, **tune_options)
        request = flow.request_from_settings(settings, scanned.folder, target=target, server=binary.path,
                                             options=options)
        return tuple(flow.saved_state(request, target, binary, scanned).reasons)

    return check


class Controller(Protocol):
    """What :func:`switched` and :func:`follow_router` use of :class:`tuner.ui.controller.AppController`."""

    serving: flow.ServingInfo | None
    sleep: SleepStatus
    runner: flow.ServerRunner
    server_changed: Any
    status: Any

    def metrics_reset(self) -> None: ...

    def set_state(self, state: AppState, message: str | None = None) -> None: ...


class ServeTargets(QObject):
    """The folder's targets for the *Serve* menu.

    Signals:
        changed(object): the targets were read again: the list, also in :attr:`items`.
    """

    changed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.items: list[flow.TargetChoice] = []
        self._asked = 0
        self.workers: list[CallWorker] = []
        """The readings started (the app waits for them on quit)."""

    def refresh(self, scanned: flow.ScanResult | None, stale: StaleCheck | None = None) -> None:
        """Read the targets of ``scanned`` and their saved decisions again (a worker: it reads the profiles and,
        with ``stale``, asks whether each is stale: :func:`menu_choices`); the answer arrives as
        :attr:`changed`. Nothing before a scan (the scan's end asks)."""
        if scanned is None:
            return
        self._asked += 1
        asked = self._asked
        w = CallWorker(lambda ev, cancel: menu_choices(scanned, stale), "targets")
        w.done.connect(lambda choices: self._read(asked, choices))
        w.failed.connect(lambda exc: log.warning("cannot read the folder's targets: %s", exc))
        self.workers = [x for x in self.workers if x.isRunning()] + [w]
        w.start()

    def _read(self, asked: int, choices: list[flow.TargetChoice]) -> None:
        if asked != self._asked:
            return  # a later reading is on its way
        self.items = list(choices)
        self.changed.emit(self.items)


def switched(c: Controller, info: flow.ServingInfo) -> None:
    """The router serves another model now (the user's pick, or a request named it): the views follow it."""
    if c.serving is not None and c.serving.model_id == info.model_id:
        c.serving = info
        return
    c.serving = info
    c.sleep = SleepStatus()
    c.metrics_reset()  # another process: its counters start again
    c.server_changed.emit(info)
    c.set_state(AppState.SERVING, f"Serving {info.model_name} at {info.endpoint_url}")


def follow_router(c: Controller, change: StateChange) -> bool:
    """A router loads another model, or serves one it did not: True when the change was that (handled)."""
    router = c.runner.router
    if router is None:
        return False
    if change.state is ServerState.SWITCHING:
        c.status.emit(change.message)
        return True
    if change.state is ServerState.READY and router.current not in (None, c.serving and c.serving.model_id):
        info = flow.router_serving_info(c.runner)
        if info is not None:
            switched(c, info)
            return True
    return False


__all__ = ["STALE_WORDS", "ServeTargets", "draft_only", "follow_router", "menu_choices",
           "stale_check", "switched"]
