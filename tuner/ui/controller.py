"""The app's brain on the Qt side: owns the settings, the llama-server supervisor, the telemetry
collector and the running workers, and tells the tray and the window what happened through signals.

Every long step (scan, tune, start/stop the server, telemetry polling) runs in a
:class:`~tuner.ui.workers.CallWorker` / :class:`~tuner.ui.workers.PollWorker`; the GUI thread only
receives signals. The steps themselves are the core's functions, called through
:mod:`tuner.ui.flow` (the same calls the ``draftwise`` command makes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from tuner import settings as settings_mod
from tuner.calibration import EventCallback, TuneResult
from tuner.catalog import ModelFile
from tuner.hardware import LoadWatcher
from tuner.safetext import safe_text
from tuner.server import MAX_CAPTURED_FILES as MAX_FILES
from tuner.server import WAKING_MESSAGE, SleepStatus, StateChange, reload_words
from tuner.settings import Settings
from tuner.telemetry import Collector, TelemetryTick, collapse_words
from tuner.ui import flow
from tuner.ui.capture_control import CaptureControl
from tuner.ui.recent_requests import RecentRequests
from tuner.ui.serve_at_start import ServeAtStart
from tuner.ui.serve_targets import ServeTargets, stale_check, switched
from tuner.ui.server_notices import on_state_change
from tuner.ui.state import AppState
from tuner.ui.workers import CallWorker, PollWorker

log = logging.getLogger(__name__)


def activity_text(collector: Collector, now_s: float | None = None) -> str:
    """What the server is doing, in words, for the tray tooltip and the Monitor header:
    ``"31.2 tokens/s"`` while requests run, ``"idle (last reply 31.2 tokens/s, 3 min ago)"`` when
    no request ran in the last ``IDLE_AFTER_S`` seconds, ``"idle (no request yet)"``."""
    from tuner.telemetry import IDLE_AFTER_S

    now = collector.clock() if now_s is None else now_s
    series = collector.series["gen_tokens_per_s"]
    idle = collector.idle_for_s(now)
    last = series.latest_valued()
    if idle is None:
        return "idle (no request yet)"
    if idle > IDLE_AFTER_S:
        if last is None:
            return "idle"
        ago = max(0.0, now - last.t_s)
        when = f"{ago:.0f} s ago" if ago < 90 else f"{ago / 60:.0f} min ago"
        return f"idle (last generation {last.value:.1f} tokens/s, {when})"
    tps = last.value if last is not None and now - last.t_s <= IDLE_AFTER_S else None
    return f"{tps:.1f} tokens/s" if tps is not None else "working (no tokens/s yet)"


def capture_text(status: flow.CaptureStatus) -> str | None:
    """The capture of served requests in words while the served llama-server keeps them (the tray's tooltip and
    menu): ``"keeping your last 200 requests on this machine (12 kept now)"``; None while it does not."""
    if not status.active:
        return None
    return f"keeping your last {MAX_FILES} requests on this machine ({status.files} kept now)"


def sleep_text(status: SleepStatus, headline: bool = True) -> str | None:
    """Idle sleep in words for the tray, the Serve tab and the Monitor: ``"sleeping — memory freed; …"``
    while asleep (without its first words when ``headline`` is False: the Serve tab's state says them),
    ``"waking up — …"`` while the model loads again, the first request's reload time once awake again;
    None when the server has not slept."""
    last = reload_words(status.last_reload_s) if status.last_reload_s is not None else None
    if status.waking:
        return WAKING_MESSAGE
    if status.sleeping:
        since = time.strftime(" at %H:%M", time.localtime(status.since_unix_s)) if status.since_unix_s else ""
        rest = (f"the model was unloaded{since}; the next request loads it again"
                + (f" (last time in {last})" if last else ""))
        return f"sleeping — memory freed; {rest}" if headline else rest[0].upper() + rest[1:]
    if last is not None:
        return f"awake — the first request after sleeping waited {last} for the model to load"
    return None


def tooltip_text(c: AppController) -> str:
    """Tray tooltip: state, model, endpoint and the current tokens/s, or "idle" when no request
    ran in the last :data:`tuner.telemetry.collector.IDLE_AFTER_S` seconds."""
    if c.restoring is not None:
        return f"Draftwise — starting\nServing {safe_text(c.restoring.name)} again (its saved profile)"
    lines = [f"Draftwise — {c.state.value}"]
    if c.serving and c.paused_for_retune:
        lines.append(f"{c.serving.model_name}: serving paused for re-tune")
    elif c.serving:
        lines.append(f"{c.serving.model_name} at {c.serving.endpoint_url}")
        asleep = c.sleep.sleeping
        lines.append(sleep_text(c.sleep) or "" if asleep else activity_text(c.collector))
        if not asleep and c.sleep.last_reload_s is not None:
            lines.append(sleep_text(c.sleep) or "")
        said = capture_text(c.captures.status())
        if said is not None:
            lines.append(said)
    elif c.state is AppState.ERROR and c.last_error:
        lines.append(c.last_error[:120])
    return "\n".join(safe_text(line) for line in lines)  # a file name's newline stays inside its line


class AppController(QObject):
    """State and actions of the running app.

    Signals:
        state_changed(AppState): tray state changed.
        status(str): one-line status for the tooltip / status bar.
        scan_done(object): a :class:`tuner.ui.flow.ScanResult`.
        scan_failed(str): a scan failed, in words (the Models tab says it; the server's state is not touched).
        tune_event(object): a :class:`tuner.calibration.TuneEvent` (progress; the flow's steps: ``kind="status"``).
        tune_done(object): the :class:`tuner.calibration.request.TuneResult` behind what is served.
        server_changed(object): a :class:`tuner.ui.flow.ServingInfo` or None when stopped.
        telemetry(object): a :class:`tuner.telemetry.collector.TelemetryTick` (1 Hz while polling).
        sleep_changed(object): the served server fell asleep or woke: a :class:`tuner.server.SleepStatus`.
        capture_changed(): the capture of served requests changed (:meth:`CaptureControl.status` says how it stands).
        notify(str, str): title and message for a desktop notification.
        error(str): a failure in plain words (also shown in the Serve tab).
        plan_ready(object, str): a model and its memory plan in words.
        restore_refused(str): *Serve at start* did not serve (a stale or missing profile), in one line.
    """

    state_changed = Signal(object)
    status = Signal(str)
    scan_done = Signal(object)
    scan_failed = Signal(str)
    tune_event = Signal(object)
    tune_done = Signal(object)
    server_changed = Signal(object)
    server_log = Signal(str)
    telemetry = Signal(object)
    sleep_changed = Signal(object)
    capture_changed = Signal()
    notify = Signal(str, str)
    error = Signal(str)
    plan_ready = Signal(object, str)
    restore_refused = Signal(str)
    _supervisor_state = Signal(object)

    def __init__(self, settings: Settings | None = None, poll_interval_s: float = 1.0) -> None:
        super().__init__()
        self.settings = settings if settings is not None else Settings()
        self.state = AppState.IDLE
        self.last_error: str | None = None
        self.scan: flow.ScanResult | None = None
        self.selected_target: Path | None = None
        self.prompts_path: Path | None = self.settings.prompts_path
        self.last_tune: TuneResult | None = None
        self.serving: flow.ServingInfo | None = None
        self.runner = flow.ServerRunner(on_state=self._supervisor_state.emit)
        self._supervisor_state.connect(self._on_supervisor_state)
        self.collector = Collector(vram=flow.vram_sampler())
        self.poll_interval_s = poll_interval_s
        self.tune_options: dict[str, Any] = {}
        self._poller: PollWorker | None = None
        self._load_meter: LoadWatcher | None = None  # other programs' CPU while serving (the collapse watch)
        self._work: CallWorker | None = None
        self._plan_workers: list[CallWorker] = []
        self.stopping = False
        """True while the app stops the served server itself (its transitions are no news)."""
        self.last_tick: TelemetryTick | None = None
        self.paused_for_retune = False
        """True while a re-tune runs with the served server stopped (tray and Serve tab say so)."""
        self.sleep = SleepStatus()
        """Idle sleep of the served server (asleep now, the last reload's seconds)."""
        self.retune_offer: Path | None = None
        """The target whose stale profile *Serve at start* did not serve: the re-tune it offers."""
        self.restoring: Path | None = None
        """The target *Serve at start* serves again now (state TUNING meanwhile): the views say "starting"."""
        self.serve_at_start = ServeAtStart(self)
        """*Serve at start*: ``restore()`` at start, ``remember`` / ``forget`` as serving starts and stops."""
        self.recent = RecentRequests(self)  # Re-tune on recent requests
        self.closed = False  # shutdown() ran: no new worker starts (a late scan's memory plan, a targets reading)
        self.captures = CaptureControl(self)
        """The capture of served requests: on/off, forget, delete one (:class:`tuner.ui.capture_control.CaptureControl`)."""
        self.serve_targets = ServeTargets()
        """The folder's targets for the tray's *Serve* menu (read in a worker after each scan and serve)."""

    # ------------------------------------------------------------ state
    def set_state(self, state: AppState, message: str | None = None) -> None:
        """Change the tray state (emits :attr:`state_changed` when it differs)."""
        if state is AppState.ERROR:
            self.last_error = message
        changed = state is not self.state
        self.state = state
        if changed:
            self.state_changed.emit(state)
        if message:
            self.status.emit(message)

    @property
    def busy(self) -> bool:
        """True while a scan/tune/serve worker runs, and until its result (or error) has been handled here: a
        thread that has returned but whose queued ``done`` is not yet delivered still counts as busy, so a
        caller never sees "not busy" with the state of the finished step not applied yet."""
        w = self._work
        return w is not None and (w.isRunning() or not w.reported)

    def can_retune(self) -> bool:
        """Re-tune makes sense once there is something to re-tune: a sweep ran in this session, a profile is
        being served, or a stale profile was not served at start (before that, "Tune & serve" is the action)."""
        return self.state is not AppState.TUNING and (self.serving is not None or self.last_tune is not None
                                                      or self.retune_offer is not None)

    def endpoint_url(self) -> str | None:
        """The served OpenAI-compatible URL, or None when not serving."""
        return self.serving.endpoint_url if self.serving else None

    def tooltip(self) -> str:
        """Tray tooltip (:func:`tooltip_text`)."""
        return tooltip_text(self)

    # ------------------------------------------------------------ settings
    def update_settings(self, new: Settings) -> None:
        """Save new settings (raises :class:`tuner.settings.SettingsError`) and apply autostart."""
        if new.start_at_login != self.settings.start_at_login:
            flow.set_autostart(new.start_at_login)
        settings_mod.save_settings(new)
        self.settings = new

    # ------------------------------------------------------------ actions
    def _start_work(self, fn: Callable[[Callable[[Any], None], threading.Event], Any], name: str,
                    on_done: Callable[[Any], None], on_event: Callable[[Any], None] | None = None,
                    on_failed: Callable[[BaseException], None] | None = None,
                    report: bool = True) -> CallWorker | None:
        if self.busy or self.closed:
            self.status.emit("Busy: wait for the current step or cancel it")
            return None
        w = CallWorker(fn, name)
        if on_event is not None:
            w.event.connect(on_event)
        w.done.connect(lambda result: self._deliver(w, on_done, value=result))
        failed_handlers = [h for h in (on_failed, self._on_failed if report else None) if h is not None]
        # report: the usual error signal, state ERROR and notification after the caller's own handler
        w.failed.connect(lambda exc: self._deliver(w, *failed_handlers, value=exc))
        w.finished.connect(lambda: self._work_finished(w))
        self._work = w
        w.start()
        return w

    @staticmethod
    def _deliver(w: CallWorker, *handlers: Callable[[Any], None], value: Any) -> None:
        """Hand a worker's result or error to its handlers, in the GUI thread (queued); from here on the worker
        no longer counts as :attr:`busy` once its thread has returned, so a handler may start the next step."""
        w.reported = True
        for handler in handlers:
            handler(value)

    def _work_finished(self, w: CallWorker) -> None:
        if self._work is w:
            self._work = None

    def _on_failed(self, exc: BaseException) -> None:
        self.restoring = None
        if self.paused_for_retune:
            # the previous configuration was started again (same port): a new process to show
            self.paused_for_retune = False
            if self.runner.pid is not None:
                self._serving_process_changed()
            else:
                self._serving_stopped()
        if isinstance(exc, flow.Cancelled):
            self.set_state(AppState.SERVING if self.serving else AppState.IDLE, "Cancelled")
            self.status.emit("Cancelled")
            return
        msg = flow.describe_error(exc)
        self.error.emit(msg)
        self.set_state(AppState.ERROR, msg)
        self.notify.emit("Draftwise: something failed", msg)

    def scan_models(self, folder: Path | None = None) -> None:
        """Scan ``folder`` (default: the settings' models folder, else the demo folder) in a worker."""
        folder = folder or self.settings.models_dir or flow.demo_models_dir()
        self.status.emit(f"Scanning {folder}")
        self._start_work(lambda ev, cancel: flow.scan(folder), "scan", self._on_scanned,
                         on_failed=self._scan_failed, report=False)

    def _scan_failed(self, exc: BaseException) -> None:
        """A failed scan is the Models tab's news (and a balloon): the served server's state is not touched."""
        msg = "Cancelled" if isinstance(exc, flow.Cancelled) else flow.describe_error(exc)
        self.scan_failed.emit(msg)
        self.status.emit(msg)
        if not isinstance(exc, flow.Cancelled):
            self.notify.emit("Draftwise: the scan failed", msg)

    def prepare_demo(self, on_ready: Callable[[Any], None], on_progress: Callable[[Any], None],
                     on_failed: Callable[[BaseException], None]) -> bool:
        """Write the demo folder in a worker (:func:`tuner.ui.flow.prepare_demo`: the generated pair is made
        on first use, some seconds). ``on_progress`` gets each :class:`~tuner.catalog.DemoProgress`,
        ``on_ready`` the :class:`~tuner.catalog.DemoFolder`, ``on_failed`` the exception (after the usual
        error report). Returns False when another step is running (nothing started)."""
        self.status.emit("Preparing the demo models")
        return self._start_work(flow.prepare_demo, "demo", on_ready, on_progress, on_failed) is not None

    def _on_scanned(self, result: flow.ScanResult) -> None:
        self.scan = result
        self.refresh_targets()
        if self.selected_target is None or not any(m.path == self.selected_target for m in result.models):
            self.selected_target = flow.default_target(result)
        self.scan_done.emit(result)
        n = len(result.models)
        self.status.emit(f"Found {n} GGUF file{'' if n == 1 else 's'} in {result.folder}")

    def plan_memory(self, model: ModelFile) -> None:
        """The memory plan of ``model`` in a worker (runs ``--list-devices``), answered as :attr:`plan_ready`."""
        if self.closed:  # quitting: no new probe
            return
        cram = self.settings.cache_ram_mib
        ctx_size = self.settings.ctx_size
        w = CallWorker(lambda ev, cancel: flow.memory_plan_text(model, ctx_size, cram), "plan")
        w.done.connect(lambda text: self.plan_ready.emit(model, text))
        w.failed.connect(lambda exc: self.plan_ready.emit(model, f"Memory plan unavailable: {exc}"))
        self._plan_workers = [x for x in self._plan_workers if x.isRunning()] + [w]
        w.start()

    def tune_and_serve(self, force_retune: bool = False, served_model_id: str | None = None) -> None:
        """One click: scan → tune (or reuse a fresh profile) → serve, in one worker (``served_model_id``: on its captures)."""
        folder = self.settings.models_dir or flow.demo_models_dir()
        target = self.selected_target
        st = self.settings
        prompts_path, tune_options = self.prompts_path, dict(self.tune_options)
        if served_model_id is not None:  # tune on its captured requests (tuner.ui.recent_requests)
            prompts_path, tune_options = None, {**tune_options, "prompts_from_served": True, "served_model_id": served_model_id}
        # re-tune while serving: flow.tune_and_serve stops the served server for the sweep
        self.paused_for_retune = self.serving is not None
        self.set_state(AppState.TUNING, "Serving paused for re-tune" if self.paused_for_retune else "Tuning…")

        def job(on_event: EventCallback, cancel: threading.Event) -> flow.ServeOutcome:
            return flow.tune_and_serve(
                folder=folder,
                target=target,
                settings=st,
                prompts_path=prompts_path,
                runner=self.runner,
                on_event=on_event,
                cancel=cancel,
                force_retune=force_retune,
                tune_options=tune_options,
            )

        if self._start_work(job, "tune", self._on_served, self.tune_event.emit) is None:
            self.paused_for_retune = False
            self.set_state(AppState.SERVING if self.serving else AppState.IDLE)

    def retune(self) -> None:
        """Tune again even when a fresh profile exists, then serve the new winner."""
        self.retune_offer = None
        self.tune_and_serve(force_retune=True)


    def _on_served(self, outcome: flow.ServeOutcome) -> None:
        """The worker finished: update the views in separate event-loop turns (each repaint is
        small), serving state first."""
        self.last_tune = outcome.tune_result
        self.paused_for_retune = False
        self._serving_started(outcome.serving, outcome.samplers)
        result = outcome.tune_result
        if result is not None:
            QTimer.singleShot(60, self, lambda: self.tune_done.emit(result))
            if result.reused:  # nothing was tuned: say what is served again, from when
                title, line = "Draftwise", flow.served_again_text(outcome.serving, result.profile)
            else:
                title, line = "Draftwise: tuning finished", outcome.decision_text  # one line: the first sentence
            QTimer.singleShot(120, self, lambda: self.notify.emit(title, line))
        scanned = outcome.scan
        if scanned is not None:
            QTimer.singleShot(180, self, lambda: self._on_scanned(scanned))

    def start_server(self) -> None:
        """Serve the selected target with its saved profile (tunes first when there is none)."""
        self.tune_and_serve(force_retune=False)

    @property
    def targets(self) -> list[flow.TargetChoice]:
        """The folder's targets for the *Serve* menu (:attr:`serve_targets`)."""
        return self.serve_targets.items

    def refresh_targets(self) -> None:
        """Read the folder's targets again (:meth:`ServeTargets.refresh`), unless the app is quitting."""
        if not self.closed:
            stale = stale_check(self.settings, self.prompts_path, dict(self.tune_options))
            self.serve_targets.refresh(self.scan, stale)

    def serve_target(self, target: Path) -> None:
        """The *Serve* menu: the served router loads a tuned ``target`` (a worker); anything else is tuned (or its
        fresh profile reused) and served, as *Tune & serve* does for the selected target (a router adds it)."""
        router = self.runner.router
        model = router.plan.model_for(target) if router is not None and router.plan is not None else None
        if self.serving is None or model is None or not model.tuned:  # untuned: "tune and serve"
            self.selected_target = Path(target)
            self.tune_and_serve()
            return
        self.status.emit(f"Loading {Path(target).name}")
        self._start_work(lambda ev, cancel: flow.switch_target(self.runner, Path(target), cancel), "switch",
                         lambda info: switched(self, info))

    def _serving_started(self, info: flow.ServingInfo, samplers: flow.Samplers | None = None) -> None:
        self.serving = info
        self.retune_offer = None
        self.serve_at_start.remember(info)
        self.sleep = SleepStatus()
        self.collector.attach(*(samplers or flow.server_samplers(info, self.runner)),
                              sleeps=flow.sleep_counter(self.runner))
        self._watch_collapse(info)
        self._start_polling()
        self.server_changed.emit(info)
        self.set_state(AppState.SERVING, f"Serving {info.model_name} at {info.endpoint_url}")
        self.refresh_targets()  # a new profile may have been saved

    def stop_server(self) -> None:
        """Stop llama-server (in a worker; the whole process tree goes)."""
        self.stopping = True

        def job(on_event: EventCallback, cancel: threading.Event) -> None:
            self.runner.stop()

        if self._start_work(job, "stop", lambda _r: self._serving_stopped()) is not None:
            self.serve_at_start.forget()

    def _watch_collapse(self, info: flow.ServingInfo | None) -> None:
        """(Re)start the collapse watch and its meter of other programs' CPU for ``info`` (None: stop them)."""
        if self._load_meter is not None:
            self._load_meter.stop()
        watch, self._load_meter = flow.collapse_watch(info) if info is not None else (None, None)
        self.collector.watch_collapse(watch, self._load_meter.latest_other_cores if self._load_meter else None)

    def _serving_stopped(self) -> None:
        self.stopping = False
        self.serving = None
        self.sleep = SleepStatus()
        self._watch_collapse(None)
        self.collector.detach()
        self.server_changed.emit(None)
        self.set_state(AppState.IDLE, "Server stopped")

    def cancel(self) -> None:
        """Cancel the running scan/tune (the core stops every child process it started)."""
        if self._work is not None:
            self._work.cancel()

    def _on_supervisor_state(self, change: StateChange) -> None:
        """Supervisor transitions while serving (:func:`tuner.ui.server_notices.on_state_change`)."""
        on_state_change(self, change)

    def idle_sleep_problem(self) -> str | None:
        """Why the app's llama-server cannot unload an idle model (ik_llama.cpp, legacy builds), or None."""
        return flow.idle_sleep_problem(self.settings, self.runner)

    def _serving_process_changed(self) -> None:
        """After a crash restart (or the previous configuration started again after a failed re-tune)
        a new llama-server runs: the views are told, and read its pid and command line (a fallback
        configuration may differ) from the supervisor (:attr:`ServerRunner.pid` / ``.argv``)."""
        if self.serving is not None:
            self.server_changed.emit(self.serving)

    def metrics_reset(self) -> None:
        """Forget the previous /metrics scrape (after a restart, or on a router another model: the counters start
        again), and the live prediction's window of requests with it."""
        self.collector.spec_window.clear()
        if self.collector.metrics is not None:
            self.collector.metrics.reset()

    # ------------------------------------------------------------ telemetry
    def _start_polling(self) -> None:
        if self._poller is not None:
            return
        self._poller = PollWorker(self.collector.poll, self.poll_interval_s)
        self._poller.tick.connect(self._on_tick)
        self._poller.start()

    def _on_tick(self, tick: TelemetryTick) -> None:
        self.last_tick = tick
        self.telemetry.emit(tick)
        watch = self.collector.watch
        collapse = self.collector.collapse
        if tick.collapse is not None and tick.collapse.alert and collapse is not None:
            self.notify.emit(*collapse_words(tick.collapse, collapse.profile_tps))
        if tick.watch is not None and tick.watch.alert and watch is not None:
            rate = tick.watch.acceptance_rate or 0.0
            self.notify.emit(
                "Draftwise: speculation is now slowing you down — re-tune?",
                f"Draft acceptance {rate:.0%} has stayed below the break-even "
                f"{watch.break_even_rate:.0%} for {watch.hold_s / 60:.0f} minutes.",
            )

    # ------------------------------------------------------------ shutdown
    def shutdown(self, timeout_s: float = 20.0) -> None:
        """Cancel work, stop polling, stop the server (blocking; called on Quit); no worker starts after it."""
        self.closed = True
        if self._work is not None:
            self._work.cancel()
            self._work.wait(int(timeout_s * 1000))
        for w in [*self._plan_workers, *self.serve_targets.workers]:
            w.wait(int(timeout_s * 1000))
        if self._poller is not None:
            self._poller.stop()
            self._poller = None
        self._watch_collapse(None)
        self.stopping = True
        try:
            self.runner.stop()
        except Exception:
            log.exception("stopping llama-server on quit failed")
