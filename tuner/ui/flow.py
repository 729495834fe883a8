"""The GUI's calls into the core, in one place (plain Python, no Qt; runs inside workers).

Nothing here re-implements core logic: scanning is :func:`tuner.catalog.folder.scan_models` (done
once: the sweep gets the same scan and the same binary), the request is
:func:`tuner.calibration.request.request_from_settings`, tuning is :func:`tuner.calibration.tune.tune`,
serving is :class:`tuner.server.supervisor.Supervisor`. This module only chains them the way the
one-click "Tune & serve" needs and turns their results into small records for the window.

Every core call is typed: events are :class:`~tuner.calibration.request.TuneEvent` (the flow's own
steps, e.g. "Serving paused for re-tune", are ``TuneEvent(kind="status")``), results are
:class:`~tuner.calibration.request.TuneResult`, the server is a
:class:`~tuner.server.supervisor.Supervisor` whose states are :class:`~tuner.server.supervisor.ServerState`
members.

The core modules the workers use are imported here, at module level, so the app pays their import
time while it starts (``tuner.ui.controller`` imports this module before the event loop runs): a first
import inside a worker thread holds the interpreter lock long enough to stall the GUI (~150 ms
measured, ``tests/ui/test_loop_latency.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner import calibration
from tuner.calibration import (
    Candidate,
    EventCallback,
    Measurement,
    Rendered,
    TargetChoice,
    TuneEvent,
    TuneRequest,
    TuneResult,
    break_even_rate,
    captured,
    measured_line,
    profile_server_config,
    reachable_config,
    request_from_settings,
    reused_result,
    rpc_fallback_config,
    saved_state,
    serving_plan,
    target_choices,
    with_served,
)
from tuner.catalog import DEMO_LABEL as DEMO_LABEL  # re-exported for the Models tab
from tuner.catalog import (
    DemoFolder,
    DemoProgress,
    ModelFile,
    ScanResult,
    has_chat_template,
    is_generated_demo,
    scan_models,
    write_demo_folder,
)
from tuner.catalog import default_target as choose_default_target
from tuner.crosscheck import build_probes, find_server_binary, plan_check_lines, workaround_sentence
from tuner.ctxsize import DEFAULT_CTX_CAP, resolve_ctx_size
from tuner.errors import (
    Cancelled,  # re-exported: the one cancellation type
    DraftwiseError,
)
from tuner.hardware import (
    Devices,
    LoadWatcher,
    MemoryPlan,
    MemoryRequest,
    context_trade,
    detect_devices,
    load_model_spec,
    plan_memory,
    used_bytes_total,
)
from tuner.process import tree_usage
from tuner.profiles import Profile, ProfileError, ProfileStore
from tuner.server import (
    NON_WAKING_PATHS,
    RouterError,
    RouterPlan,
    RouterSupervisor,
    ServerBinary,
    ServerClient,
    ServerConfig,
    ServerNotFoundError,
    ServerStartError,
    ServerState,
    StateChange,
    Supervisor,
    cached_dialect,
    captured_count,
    command_line,
    default_alias,
    find_server,
    log_prompts_dir,
    probe_dialect,
    server_env,
)
from tuner.server import delete_captured as delete_captured  # re-exported: the captured requests for the window
from tuner.server import forget_captured as forget_captured
from tuner.server import list_captured as list_captured
from tuner.settings import Settings, server_api_key
from tuner.telemetry import AcceptanceWatch, CollapseWatch, MetricsSampler, ProcessSampler, ProcessUsage, VramSampler
from tuner.ui.step_words import candidate_words, plain_step
from tuner.units import MIB, format_bytes

log = logging.getLogger(__name__)

#: What :func:`server_samplers` returns: ``(MetricsSampler, ProcessSampler, AcceptanceWatch | None)``.
Samplers = tuple[MetricsSampler, ProcessSampler, AcceptanceWatch | None]
#: One row of the candidate chart: ``(label, gen tokens/s, acceptance 0..1 | None, is_baseline)``.
ResultRow = tuple[str, float, float | None, bool]


def status_event(message: str) -> TuneEvent:
    """The flow's own step (pausing, resuming or starting the served server) as a ``TuneEvent`` of
    kind ``"status"``, so ``on_event`` carries one type."""
    return TuneEvent(kind="status", message=message)


@dataclass(frozen=True)
class ServingInfo:
    """What is being served.

    Attributes:
        model_name: display name of the target.
        target_path: the target GGUF.
        endpoint_url: OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``).
        base_url: server root (``http://127.0.0.1:PORT``).
        argv: the exact llama-server command line at serving start (after a crash restart the live
            one is :attr:`ServerRunner.argv`).
        pid: process id of llama-server at serving start, or None (live: :attr:`ServerRunner.pid`).
        spec_label: the speculation in words ("no speculation", "draft-simple d.gguf n_max 8", …).
        break_even_rate: acceptance rate below which speculation loses (0..1), None when unknown.
        api_key: the key clients must send, or None.
        model_id: the id the API reports for the model (``--alias``), used by the Chat tab.
        cache_ram_mib: the host prompt-cache limit passed (``--cache-ram``, MiB), None = server default.
        base_model: the target has no chat template (a base model): llama-server wraps chat messages in its
            ChatML fallback, which such a model does not know (the Chat tab says so).
        models: every model id the endpoint serves when it is llama-server's router (a request's ``model``
            picks one); () when it serves one model.
        models_why: how many models the router keeps loaded at once, in words ("" for one model).
        profile_tps: the profile's generation tokens/s (its decision's), the collapse watch's reference; None
            when unknown.
        spec_words: the speculation in plain words (:func:`tuner.ui.step_words.candidate_words`: "the draft
            model d.gguf (n_max 8)", "the model alone"); "" when unknown (:attr:`spec_label` says it).
    """

    model_name: str
    target_path: Path
    endpoint_url: str
    base_url: str
    argv: tuple[str, ...]
    pid: int | None
    spec_label: str
    break_even_rate: float | None = None
    api_key: str | None = None
    model_id: str | None = None
    cache_ram_mib: int | None = None
    base_model: bool = False
    models: tuple[str, ...] = ()
    models_why: str = ""
    profile_tps: float | None = None
    spec_words: str = ""


def winner_words(winner: dict[str, Any]) -> str:
    """A profile's winner (its JSON dict) in plain words (:func:`tuner.ui.step_words.candidate_words`); "" when
    it cannot be read as a candidate (a profile of an older or newer Draftwise)."""
    try:
        return candidate_words(Candidate.from_json(dict(winner)))
    except (KeyError, TypeError, ValueError):
        return ""


@dataclass(frozen=True)
class ServeOutcome:
    """Result of :func:`tune_and_serve`: the scan, the tune result (``tune_result.reused`` when a fresh profile
    was served again without measuring), the decision's plain first sentence, and what is now being served."""

    scan: ScanResult | None
    tune_result: TuneResult
    decision_text: str
    serving: ServingInfo
    samplers: Samplers | None = None


def demo_models_dir() -> Path:
    """``resources/demo`` (holds stories260K.gguf), for newcomers without models."""
    from tuner.resources import resource_path

    return resource_path("demo")


def prepare_demo(on_event: Callable[[DemoProgress], None], cancel: threading.Event) -> DemoFolder:
    """Write the app's demo folder (``data_dir()/demo``: a copy of the bundled stories260K and the generated
    target + draft pair, generated on first use; :func:`tuner.catalog.demo.write_demo_folder`). Progress
    arrives as :class:`~tuner.catalog.demo.DemoProgress` through ``on_event``.

    Raises:
        tuner.catalog.demo.DemoError: the folder cannot be written (names it and why).
        Cancelled: ``cancel`` was set (the partial file is removed).
    """
    return write_demo_folder(progress=on_event, cancel=cancel)


def is_demo_family(members: Sequence[ModelFile]) -> bool:
    """Whether a family's models are all generated demo models (their label is :data:`DEMO_LABEL`)."""
    return bool(members) and all(is_generated_demo(m.path) for m in members)


def scan(folder: Path) -> ScanResult:
    """Scan ``folder`` and group families (``tuner.catalog.folder.scan_models``; never raises for a bad
    file: it is a ``broken`` row).

    Raises:
        FileNotFoundError: ``folder`` does not exist (names it).
    """
    return scan_models(folder)


def default_target(result: ScanResult) -> Path | None:
    """The target the one-click flow tunes when the user picked none (the sweep's own rule,
    ``tuner.catalog.folder.default_target``); None when the folder has no LLM."""
    chosen = choose_default_target(result.models, result.families)
    return Path(chosen.path) if chosen is not None else None


class FlowError(DraftwiseError, RuntimeError):
    """A step of the one-click flow cannot run; the message is in the app's words (no command-line flags),
    e.g. a selected model that is not in the scanned folder."""

    bad_input = True


def check_target(result: ScanResult, target: Path | None) -> None:
    """The flow's own check before tuning, worded for the app: the folder holds an LLM, and ``target``
    (None = the default choice) is one of the folder's LLMs.

    Raises:
        FlowError: no LLM in the folder, or ``target`` is not one of them (both named).
    """
    llms = [Path(m.path).resolve() for m in result.models if m.kind == "llm"]
    if not llms:
        raise FlowError(f"No model to tune in {result.folder}: the folder holds no language-model GGUF file "
                        "(the Models tab lists what it holds).")
    if target is not None and Path(target).resolve() not in llms:
        raise FlowError(f"{Path(target).name} is not in the models folder {result.folder}: pick a model in the "
                        "Models tab, or choose the folder that holds it.")


def set_autostart(enabled: bool) -> None:
    """Install or remove the start-at-login entry (:func:`tuner.desktop.set_autostart`).

    Raises:
        OSError: the autostart entry cannot be written or removed.
    """
    from tuner import desktop

    desktop.set_autostart(enabled)


def describe_error(exc: BaseException) -> str:
    """A failure in plain words: a server that did not start says its diagnosis, anything else its
    message (the type name when the message is empty)."""
    if isinstance(exc, ServerStartError) and exc.diagnosis.message:
        return exc.diagnosis.message
    return f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)


def describe_supervisor_failure(runner: ServerRunner) -> str:
    """Why the served llama-server stopped, from the supervisor's diagnosis (on a router: why the served model
    stopped; the endpoint still serves the folder's other models)."""
    sup = runner.supervisor
    diag = sup.diagnosis if sup is not None else None
    if runner.router is not None and runner.router.pid is not None:
        why = diag.message if diag is not None and diag.message else "it stopped unexpectedly"
        return f"The served model stopped ({why}); the endpoint still serves the folder's other models"
    if diag is not None and diag.message:
        return f"llama-server stopped: {diag.message}"
    return "llama-server stopped unexpectedly"


@dataclass(frozen=True)
class PausedRouter:
    """A router stopped for a re-tune (:meth:`ServerRunner.pause`): its plan and the model it served."""

    plan: RouterPlan
    current: str

    @property
    def port(self) -> int | None:
        """The router's port."""
        return self.plan.port


class ServerRunner:
    """Holds the one served supervisor (thread-safe start/stop): a :class:`tuner.server.supervisor.Supervisor`
    (one model), or a :class:`tuner.server.RouterSupervisor` (every model of the folder from one endpoint).

    Args:
        on_state: called with each ``tuner.server.supervisor.StateChange`` (from supervisor threads;
            it must return quickly, e.g. emit a Qt signal).
    """

    def __init__(self, on_state: Callable[[StateChange], None] | None = None) -> None:
        self.on_state = on_state
        self.supervisor: Supervisor | RouterSupervisor | None = None
        self._rpc_fallback: ServerConfig | None = None
        self._lock = threading.Lock()

    @property
    def router(self) -> RouterSupervisor | None:
        """The served router, None when one model (or nothing) is served."""
        sup = self.supervisor
        return sup if isinstance(sup, RouterSupervisor) else None

    def current_model(self) -> str | None:
        """The id of the model the router serves now (None when not a router or none is ready)."""
        router = self.router
        return router.current if router is not None else None

    def start_router(self, plan: RouterPlan, initial: str, binary: ServerBinary | Path | None = None,
                     ready_timeout_s: float | None = None, cancel: threading.Event | None = None) -> RouterSupervisor:
        """Stop any running server, start llama-server's router serving ``plan`` with ``initial`` loaded, and wait
        until that model is ready.

        Raises:
            tuner.server.PresetError: a model cannot be written into the preset (nothing started).
            tuner.server.supervisor.ServerStartError: the router or the model failed (with ``diagnosis``).
            Cancelled: ``cancel`` was set while loading (everything is stopped).
        """
        self.stop()
        sup = RouterSupervisor(binary, on_state=self._state_cb)
        with self._lock:
            self.supervisor = sup
        try:
            sup.start_and_wait(plan, initial, timeout_s=ready_timeout_s, cancel=cancel)
        except ServerStartError:
            if cancel is not None and cancel.is_set():
                self.stop()
                raise Cancelled() from None
            raise
        return sup

    def switch(self, model: str, cancel: threading.Event | None = None) -> RouterSupervisor:
        """Have the served router load ``model`` and serve it (the previous one may be unloaded).

        Raises:
            tuner.server.RouterError: no router serves, or ``model`` is not one of its models.
            tuner.server.supervisor.ServerStartError: ``model`` failed to load (with ``diagnosis``).
            Cancelled: ``cancel`` was set.
        """
        router = self.router
        if router is None:
            raise RouterError("no llama-server router is serving")
        try:
            router.switch(model, cancel=cancel)
        except ServerStartError:
            if cancel is not None and cancel.is_set():
                raise Cancelled() from None
            raise
        return router

    def _state_cb(self, change: StateChange) -> None:
        if self.on_state is not None:
            self.on_state(change)

    def start(
        self,
        config: ServerConfig,
        binary: ServerBinary | Path | None = None,
        ready_timeout_s: float | None = None,
        cancel: threading.Event | None = None,
        rpc_fallback: ServerConfig | None = None,
    ) -> Supervisor:
        """Stop any running server, start ``config`` (crash restarts on) and wait until ready.
        ``rpc_fallback``: the local-only configuration the supervisor switches to when an RPC host of
        ``config`` is lost (``tuner.calibration.serving.rpc_fallback_config``).

        Args:
            binary: the llama-server to run; None = :func:`tuner.server.discovery.find_server`.

        Raises:
            tuner.server.discovery.ServerNotFoundError: no llama-server (names the places looked at).
            tuner.server.supervisor.ServerStartError: the server failed (with ``diagnosis``).
            Cancelled: ``cancel`` was set while loading (the process tree is stopped).
        """
        self.stop()
        sup = Supervisor(binary, auto_restart=True, on_state=self._state_cb)
        if rpc_fallback is not None:  # without a capture this build cannot do, as the configuration itself
            sup.set_rpc_fallback(_capturable(rpc_fallback, sup))
        with self._lock:
            self.supervisor = sup
            self._rpc_fallback = rpc_fallback
        sup.start(_capturable(config, sup))
        try:
            sup.wait_ready(timeout_s=ready_timeout_s, cancel=cancel)
        except ServerStartError:
            if cancel is not None and cancel.is_set():
                self.stop()
                raise Cancelled() from None
            raise
        return sup

    def apply(self, config: ServerConfig, setting: str, ready_timeout_s: float | None = None) -> Supervisor | None:
        """Restart the served server with ``config`` to apply a start-up setting (``setting``, in words: "keeping
        served requests"): ready or sleeping → applying → starting → ready on the same port
        (:meth:`Supervisor.restart`); waits until ready. None when nothing is served (the setting then applies at
        the next start).

        The local-only fallback of an RPC configuration takes the same serving settings
        (``tuner.calibration.serving.with_served``): a capture switched off stays off when a host is lost.

        Raises:
            tuner.server.supervisor.ServerStartError: the new configuration did not start (with ``diagnosis``).
        """
        with self._lock:
            sup = self.supervisor
            fallback = self._rpc_fallback = (with_served(self._rpc_fallback, config)
                                             if self._rpc_fallback is not None else None)
        if sup is None or sup.state not in (ServerState.READY, ServerState.SLEEPING):
            return None
        if isinstance(sup, RouterSupervisor):  # every model of the endpoint: capture is the app's setting
            plan = sup.plan
            if plan is not None:
                on = config.log_prompts_dir is not None and sup.dialect.capture_problem() is None
                sup.apply(replace(plan, models=tuple(captured(m, on) for m in plan.models)), setting, ready_timeout_s)
            return None
        if fallback is not None:
            sup.set_rpc_fallback(_capturable(fallback, sup))
        sup.restart(_capturable(config, sup), applying=setting)
        sup.wait_ready(timeout_s=ready_timeout_s)
        return sup

    def pause(self) -> ServerConfig | PausedRouter | None:
        """Stop the served server for a re-tune and return what it served (``None`` when nothing was serving):
        a configuration, or a router's plan and model, so :meth:`resume` brings it back on the same port."""
        with self._lock:
            sup = self.supervisor
        if sup is None:
            return None
        config = sup.config
        live = (ServerState.READY, ServerState.SLEEPING, ServerState.STARTING, ServerState.SWITCHING)
        if sup.state not in live or config is None:
            return None
        log.info("pausing the served llama-server (port %s) for a re-tune", config.port)
        paused: ServerConfig | PausedRouter = config
        if isinstance(sup, RouterSupervisor) and sup.plan is not None:
            paused = PausedRouter(sup.plan, sup.current or config.alias or "")
        sup.stop()
        return paused

    def resume(self, paused: ServerConfig | PausedRouter, binary: ServerBinary | Path | None = None) -> None:
        """Start again what :meth:`pause` stopped (raises like :meth:`start` / :meth:`start_router`)."""
        if isinstance(paused, PausedRouter):
            self.start_router(paused.plan, paused.current, binary=binary)
        else:
            self.start(paused, binary=binary)

    def stop(self) -> None:
        """Stop the server and its whole process tree (no-op when none runs)."""
        with self._lock:
            sup = self.supervisor
        if sup is not None:
            sup.stop()

    def log_tail(self, n: int = 200) -> list[str]:
        """Last ``n`` log lines of the running (or last) server."""
        sup = self.supervisor
        return list(sup.log_tail(n)) if sup is not None else []

    @property
    def pid(self) -> int | None:
        """The running llama-server's process id (a crash restart's new one), or None."""
        sup = self.supervisor
        return sup.pid if sup is not None else None

    @property
    def argv(self) -> tuple[str, ...] | None:
        """The running (or last) llama-server's command line (a crash restart's own), or None."""
        sup = self.supervisor
        argv = sup.argv if sup is not None else None
        return tuple(argv) if argv else None

    def command_text(self, argv: Sequence[str]) -> str:
        """``argv`` as the exact command line, the variables the running configuration sets in front
        (``OMP_WAIT_POLICY=PASSIVE …``: ``tuner.server.command_line``)."""
        sup = self.supervisor
        return command_line(list(argv), server_env(sup.config if sup is not None else None))


def _capturable(config: ServerConfig, sup: Supervisor) -> ServerConfig:
    """``config`` without ``--log-prompts-dir`` when ``sup``'s llama-server cannot keep the requests it serves
    (ik_llama.cpp, legacy builds: the Serve tab says why), so serving goes on without capture."""
    problem = sup.dialect.capture_problem() if config.log_prompts_dir is not None else None
    if problem is None:
        return config
    log.warning("not keeping served requests: %s", problem)
    return replace(config, log_prompts_dir=None)


def capture_config(config: ServerConfig, on: bool) -> ServerConfig:
    """``config`` with the capture of served requests on (the model id's private folder as ``--log-prompts-dir``,
    made now: :func:`tuner.server.log_prompts_dir`) or off.

    Raises:
        tuner.server.CaptureError: the folder cannot be made private (names it).
    """
    folder = log_prompts_dir(config.alias or default_alias(config.model_path)) if on else None
    return replace(config, log_prompts_dir=folder)


@dataclass(frozen=True)
class CaptureStatus:
    """The capture of served requests as the tray and the Serve tab show it.

    Attributes:
        setting: the ``capture_requests`` setting.
        active: the served llama-server runs with ``--log-prompts-dir`` now.
        folder: where the served model's requests go (from the live argv), None when not active.
        files, size_bytes: what is kept now, over every model.
        problem: why the app's llama-server cannot keep requests (None when it can, or not known yet).
    """

    setting: bool
    active: bool
    folder: Path | None
    files: int
    size_bytes: int
    problem: str | None


def served_model_id(serving: ServingInfo | None, target: Path | None) -> str | None:
    """The model id whose captured requests a re-tune on recent requests uses: the served one's (its
    ``--alias``, else its file's default id, as :func:`capture_config` names its folder), else the selected
    target's default id; ``None`` when there is neither."""
    if serving is not None:  # read as attributes: a view may hold a partial stand-in before serving starts
        model_id, served = getattr(serving, "model_id", None), getattr(serving, "target_path", None)
        return model_id or (default_alias(served) if served is not None else None)
    return default_alias(target) if target is not None else None


def captured_requests_of(model_id: str | None) -> int:
    """How many captured requests ``model_id`` has (0 for ``None``); reads the folder's listing, never a file."""
    return captured_count(model_id)[0] if model_id else 0


def capture_status(settings: Settings, runner: ServerRunner | None = None) -> CaptureStatus:
    """Where the capture of served requests stands: the setting, the live argv, the files kept, and why the
    llama-server cannot (the served supervisor's dialect, else the binary's cached ``--help``; never runs it)."""
    argv = runner.argv if runner is not None and runner.pid is not None else None
    folder = None
    if argv and "--log-prompts-dir" in argv and argv.index("--log-prompts-dir") + 1 < len(argv):
        folder = Path(argv[argv.index("--log-prompts-dir") + 1])
    router = runner.router if runner is not None and runner.pid is not None else None
    if router is not None and router.config is not None:  # a router: the served model's own section
        folder = router.config.log_prompts_dir
    files, size = captured_count()
    sup = runner.supervisor if runner is not None else None
    if sup is not None:
        problem = sup.dialect.capture_problem()
    else:
        try:
            dialect = cached_dialect(find_server(settings.server_binary, read_build=False).path)
        except ServerNotFoundError:
            dialect = None
        problem = dialect.capture_problem() if dialect is not None else None
    return CaptureStatus(settings.capture_requests, folder is not None, folder, files, size, problem)


def vram_sampler() -> VramSampler | None:
    """A :class:`tuner.telemetry.samplers.VramSampler` over NVML (``tuner.hardware.nvml.used_bytes_total``);
    None when there is no reading (no NVML library, no NVIDIA GPU)."""
    read = used_bytes_total
    try:
        if read() is None:  # no NVML library or no NVIDIA GPU: no VRAM series at all
            return None
    except Exception:
        log.debug("NVML used-memory reading failed: no VRAM series", exc_info=True)
        return None
    return VramSampler(read)


def server_samplers(info: ServingInfo, runner: ServerRunner) -> Samplers:
    """``(MetricsSampler, ProcessSampler, AcceptanceWatch | None)`` for the served server. The ``/metrics``
    client may ask only what does not wake a sleeping server (:data:`tuner.server.client.NON_WAKING_PATHS`); on a
    router both follow the current model: its own ``/metrics`` (``?model=ID&autoload=false``) and its process (the
    router's when none is loaded)."""
    client = ServerClient(info.base_url, api_key=info.api_key, paths=NON_WAKING_PATHS)
    metrics = MetricsSampler(client.metrics_text)
    if info.models:  # a router: the current model's own /metrics, never loading a model (autoload=false)
        metrics = MetricsSampler(lambda: client.metrics_text(model=runner.current_model() or info.model_id))

    def read_usage() -> ProcessUsage | None:
        router, current = runner.router, runner.current_model()
        pid = (router.model_pid(current) if router is not None and current is not None else None) or runner.pid
        if pid is None:
            return None
        usage = tree_usage(pid)
        if usage is None:
            return None
        return ProcessUsage(rss_bytes=usage[0], cpu_seconds=usage[1])

    watch = AcceptanceWatch(info.break_even_rate) if info.break_even_rate else None
    return metrics, ProcessSampler(read_usage), watch


def _positive(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def collapse_watch(info: ServingInfo) -> tuple[CollapseWatch | None, LoadWatcher | None]:
    """The Monitor's collapse watch for ``info`` (``tuner.telemetry.watch.CollapseWatch`` on the profile's speed)
    and a started meter of other programs' CPU (:class:`tuner.hardware.LoadWatcher`, the app's own process tree
    left out, llama-server included; stop it when serving ends); ``(None, None)`` without the profile's speed."""
    if info.profile_tps is None:
        return None, None
    return CollapseWatch(info.profile_tps), LoadWatcher(keep=60).start()


def sleep_counter(runner: ServerRunner) -> Callable[[], int]:
    """How many times the served llama-server fell asleep (idle sleep) in its current launch, for
    :meth:`tuner.telemetry.collector.Collector.attach` (0 when none runs)."""

    def sleeps() -> int:
        sup = runner.supervisor
        return sup.sleep_status.sleeps if sup is not None else 0

    return sleeps


def idle_sleep_problem(settings: Settings, runner: ServerRunner | None = None) -> str | None:
    """Why the llama-server the app serves with cannot unload an idle model (ik_llama.cpp, legacy builds),
    in words; None when it can or when that is not known yet. The served supervisor's dialect when one ran,
    else the binary's cached ``--help`` (never runs the binary: the window asks this while it builds)."""
    sup = runner.supervisor if runner is not None else None
    if sup is not None:
        return sup.dialect.idle_sleep_problem()
    try:
        binary = find_server(settings.server_binary, read_build=False)
    except ServerNotFoundError:
        return None
    dialect = cached_dialect(binary.path)
    return dialect.idle_sleep_problem() if dialect is not None else None


#: Keyword arguments for :func:`tuner.calibration.tune.tune` that the GUI may override (tests use a
#: small context and few tokens on the demo model).
TUNE_OPTIONS_DEFAULT: dict[str, Any] = {}


def serving_config(profile: Profile, settings: Settings, models_dir: Path | None = None) -> ServerConfig:
    """The profile's winning ``ServerConfig`` with the user's port, listen address and API key, the
    friendly model id (``--alias`` = :func:`tuner.server.config.default_alias`), the prompt-cache
    limit (``settings.cache_ram_mib``), idle sleep (``settings.idle_sleep_s``; 0 = off; passed only where
    the binary has ``--sleep-idle-seconds``), the user's ``threads`` setting over the tuned thread setting, and
    the capture of served requests (``settings.capture_requests``: :func:`capture_config`, whose folder is made
    here). ``models_dir``: the folder served from, whose drafts alone the profile may use (None = the target's
    own folder); its RPC hosts: loopback or ``settings.rpc_hosts``.

    Raises:
        tuner.settings.SettingsError: LAN exposure without an API key.
        tuner.profiles.ProfileError: the profile sets an option a profile may not, names another model, a draft
            outside the folder, an RPC host not allowed or a number out of range (the field named).
        tuner.server.CaptureError: the capture folder cannot be made private.
    """
    cfg = profile_server_config(profile, models_dir, rpc_allowed=settings.rpc_hosts)
    cfg = replace(cfg, port=settings.port, host=settings.host, api_key=server_api_key(settings),
                  cors_origins=settings.cors_origins_value(),
                  alias=cfg.alias or default_alias(cfg.model_path), cache_ram_mib=settings.cache_ram_mib,
                  sleep_idle_s=settings.idle_sleep_s or None)
    if settings.threads is not None:  # the user's thread count overrides the tuned setting
        cfg = replace(cfg, threads=settings.threads, omp_passive=False, poll=None)
    return capture_config(cfg, settings.capture_requests)


def _argv_has(argv: Sequence[str] | None, flags: tuple[str, ...]) -> bool:
    """True when the launched command line carries one of ``flags`` (argv omits flags the binary lacks)."""
    return any(a in flags for a in (argv or ()))


def cpu_kernels_text(argv: Sequence[str] | None) -> str | None:
    """The Serve tab's sentence when the served llama-server runs with ``--no-repack`` because this CPU
    crashed in the repacked kernels (``tuner.crosscheck.cpu_buffers.workaround_sentence`` of ``argv[0]``), else None."""
    if not argv or not _argv_has(argv, ("--no-repack", "-nr")):
        return None
    return workaround_sentence(argv[0])


def tune_and_serve(
    folder: Path,
    target: Path | None,
    settings: Settings,
    prompts_path: Path | None,
    runner: ServerRunner,
    on_event: EventCallback,
    cancel: threading.Event,
    force_retune: bool = False,
    tune_options: dict[str, Any] | None = None,
) -> ServeOutcome:
    """Scan → tune (or reuse a fresh profile) → serve. Runs in a worker thread.

    While a server is already serving (re-tune), it is stopped before the sweep (a ``"status"`` event
    "Serving paused for re-tune" goes to ``on_event``), and started again with its previous configuration, on the same
    port, when the sweep is cancelled or fails; after a sweep the new winner is served on the
    settings' port, which is the same port. External clients only see a pause.

    Raises:
        Cancelled: ``cancel`` was set (tune stops every child process it started).
        FileNotFoundError: the models folder does not exist.
        FlowError: the folder holds no LLM, or ``target`` is not in it (:func:`check_target`).
        tuner.calibration.tune.TuneError: no LLM, no server, baseline failed (with evidence).
        tuner.server.supervisor.ServerStartError: the winner did not start (with diagnosis).
    """
    scanned = scan(folder)
    check_target(scanned, target)
    binary = find_server(settings.server_binary)  # one binary for the sweep and for serving
    if cancel.is_set():
        raise Cancelled()
    target = target or default_target(scanned)
    request = request_from_settings(settings, folder, target=target, force=force_retune, server=binary.path,
                                    options=dict(TUNE_OPTIONS_DEFAULT, prompts=prompts_path, **(tune_options or {})))
    # Re-tune while serving: the served server would compete with the sweep for CPU, GPU and memory.
    paused = runner.pause()
    if paused is not None:
        on_event(status_event(f"Serving paused for re-tune (port {paused.port} comes back when the sweep ends)"))
    try:
        return _tune_then_serve(scanned, request, settings, runner, on_event, cancel, binary)
    except BaseException:
        if paused is not None:  # cancelled or failed: the previous configuration comes back, same port
            try:
                runner.resume(paused, binary=binary)
                on_event(status_event(
                    f"Re-tune did not finish: the previous configuration is serving again on port {paused.port}"))
            except Exception as exc:  # noqa: BLE001 - the sweep's own error is the one to report
                log.exception("the previous configuration did not start again after the re-tune")
                on_event(status_event(
                    f"Re-tune did not finish, and the previous configuration did not start again: {exc}"))
        raise


def _tune_then_serve(scanned: ScanResult, request: TuneRequest, settings: Settings, runner: ServerRunner,
                     on_event: EventCallback, cancel: threading.Event, binary: ServerBinary) -> ServeOutcome:
    try:
        # calibration.tune, not `from tuner.calibration import tune`: import-linter reads that as the module
        result = calibration.tune(request, on_event=on_event, cancel=cancel, scanned=scanned, binary=binary)
    except Exception:
        if cancel.is_set():  # e.g. the baseline's server stopped by the cancel: not a failure to report
            raise Cancelled() from None
        raise
    if result.cancelled or cancel.is_set():
        raise Cancelled()
    return _serve_result(scanned, result, settings, runner, on_event, cancel, binary)


def _serve_result(scanned: ScanResult, result: TuneResult, settings: Settings, runner: ServerRunner,
                  on_event: EventCallback, cancel: threading.Event, binary: ServerBinary) -> ServeOutcome:
    """Serve the profile of ``result`` (a sweep's, or a fresh saved one) with the user's serving settings."""
    profile = result.profile
    if profile is None:
        raise RuntimeError(f"tuning {result.target_path} produced no profile")
    info = _serve_router(scanned, Path(profile.target_path), settings, runner, on_event, cancel, binary)
    if info is None:
        info = _serve_one(profile, settings, scanned.folder, runner, on_event, cancel, binary)
    return ServeOutcome(
        scan=scanned,
        tune_result=result,
        decision_text=decision_text(result),
        serving=info,
        # built here, off the GUI thread: creating the HTTP client costs tens of ms of CPU
        samplers=server_samplers(info, runner),
    )


def _serve_one(profile: Profile, settings: Settings, models_dir: Path, runner: ServerRunner,
               on_event: EventCallback, cancel: threading.Event, binary: ServerBinary) -> ServingInfo:
    """Serve the profile's winner as one llama-server (the settings' port, the RPC fallback where it has one);
    its drafts from ``models_dir``, the scanned folder."""
    config = serving_config(profile, settings, models_dir)
    fallback = rpc_fallback_config(config, profile)  # keeps the capture, idle sleep, the listen settings
    config, rpc_note = reachable_config(config, fallback)
    if rpc_note:
        on_event(status_event(rpc_note))
    on_event(status_event(f"Starting llama-server for {Path(profile.target_path).name} on port {config.port}"))
    sup = runner.start(config, binary=binary, cancel=cancel, rpc_fallback=fallback if config.rpc else None)
    decision_json = dict(profile.decision)
    base_url = sup.base_url
    if base_url is None:  # wait_ready returned: the child was launched, so it has an address
        raise RuntimeError("llama-server is ready but has no address")
    return ServingInfo(
        model_name=Path(profile.target_path).name,
        target_path=Path(profile.target_path),
        endpoint_url=f"{base_url}/v1",
        base_url=base_url,
        argv=tuple(sup.argv or ()),
        pid=sup.pid,
        spec_label=str(decision_json.get("label") or "no speculation"),
        break_even_rate=break_even_rate(decision_json),
        api_key=config.api_key,
        model_id=config.alias if _argv_has(sup.argv, ("-a", "--alias")) else None,
        cache_ram_mib=config.cache_ram_mib if _argv_has(sup.argv, ("-cram", "--cache-ram")) else None,
        base_model=not has_chat_template(profile.target_path),
        profile_tps=_positive(decision_json.get("gen_tokens_per_s")),
        spec_words=winner_words(profile.winner),
    )


def _serve_router(scanned: ScanResult, target: Path, settings: Settings, runner: ServerRunner,
                  on_event: EventCallback, cancel: threading.Event, binary: ServerBinary) -> ServingInfo | None:
    """Serve every model of the folder from one endpoint with ``target`` loaded first
    (:func:`tuner.calibration.serving_plan`); None when the folder is served one model at a time (why: logged
    and said as a status event)."""
    plan, why = serving_plan(scanned, settings, binary.path, probe_dialect(binary.path), target,
                             api_key=server_api_key(settings))
    if plan is None:
        log.info("serving one model at a time: %s", why)
        if len([m for m in scanned.models if m.kind == "llm"]) > 1:
            on_event(status_event(f"Serving one model at a time: {why}"))
        return None
    initial = plan.model_for(target)
    assert initial is not None  # serving_plan checked it
    on_event(status_event(f"Starting llama-server's router for {len(plan.models)} models of the folder, "
                          f"{initial.model_id} first, on port {plan.port}"))
    runner.start_router(plan, initial.model_id, binary=binary, cancel=cancel)
    info = router_serving_info(runner)
    if info is None:
        raise RuntimeError("llama-server's router is ready but serves no model")
    return info


def router_serving_info(runner: ServerRunner) -> ServingInfo | None:
    """What the served router serves now (its current model, with every model id of the endpoint); None when
    no router serves a ready model."""
    router = runner.router
    plan = router.plan if router is not None else None
    current = router.current if router is not None else None
    model = plan.model(current) if plan is not None and current is not None else None
    base_url = router.base_url if router is not None else None
    if router is None or plan is None or model is None or base_url is None:
        return None
    return ServingInfo(
        model_name=Path(model.config.model_path).name,
        target_path=Path(model.config.model_path),
        endpoint_url=f"{base_url}/v1",
        base_url=base_url,
        argv=tuple(router.argv or ()),
        pid=router.pid,
        spec_label=model.label if model.tuned else "no speculation",
        break_even_rate=model.break_even_rate,
        api_key=plan.api_key,
        model_id=model.model_id,
        cache_ram_mib=model.config.cache_ram_mib,
        models=tuple(m.model_id for m in plan.models),
        models_why=plan.models_max_why,
        spec_words=_saved_winner_words(Path(model.config.model_path)) if model.tuned else "",
    )


def _saved_winner_words(target: Path) -> str:
    """The saved profile's winner of ``target`` in plain words (:func:`winner_words`); "" when it cannot be read."""
    try:
        profile = ProfileStore().load(target, keep_aside=False)
    except (ProfileError, OSError):
        return ""
    return winner_words(profile.winner or {}) if profile is not None else ""


def switch_target(runner: ServerRunner, target: Path, cancel: threading.Event) -> ServingInfo:
    """Have the served router load the model of ``target`` and serve it (the tray's *Serve* menu); runs in a
    worker.

    Raises:
        tuner.server.RouterError: no router serves, or ``target`` is not one of its models.
        tuner.server.supervisor.ServerStartError: it failed to load (with ``diagnosis``).
        Cancelled: ``cancel`` was set.
    """
    router = runner.router
    plan = router.plan if router is not None else None
    model = plan.model_for(target) if plan is not None else None
    if model is None:
        raise RouterError(f"{Path(target).name} is not served by the running endpoint")
    runner.switch(model.model_id, cancel=cancel)
    info = router_serving_info(runner)
    if info is None:
        raise RuntimeError(f"{model.model_id} is ready but the router serves no model")
    return info


def serve_choices(scan: ScanResult | None) -> list[TargetChoice]:
    """The folder's targets for the tray's *Serve* menu (tuned ones with their decision in a few words); reads
    the saved profiles, so it runs in a worker. [] without a scan."""
    return target_choices(scan) if scan is not None else []


@dataclass(frozen=True)
class NotRestored:
    """*Serve at start* did not serve: what was scanned (None when the folder could not be) and why, in the app's
    words (``reasons``: why the saved profile is stale, each a phrase; ``problem``: why there is no profile to
    serve, e.g. none saved or the model gone)."""

    target_path: Path
    scan: ScanResult | None
    reasons: tuple[str, ...] = ()
    problem: str | None = None

    def message(self) -> str:
        """One line: ``"Not serving gemma.gguf again: its profile is stale (the llama-server binary changed
        (…)). Re-tune to serve it again."``."""
        name = self.target_path.name
        if self.reasons:
            return (f"Not serving {name} again: its profile is stale ({'; '.join(self.reasons)}). "
                    "Re-tune to serve it again.")
        return f"Not serving {name} again: {self.problem or 'it cannot be served'}."


def restore_serving(folder: Path, target: Path, settings: Settings, prompts_path: Path | None,
                    runner: ServerRunner, on_event: EventCallback, cancel: threading.Event,
                    tune_options: dict[str, Any] | None = None) -> ServeOutcome | NotRestored:
    """*Serve at start*: serve ``target``'s saved profile again when it is still fresh for what a *Tune & serve*
    of it would measure now (``tuner.calibration.saved_state``: the same keys a tune checks), without tuning.

    Returns:
        The :class:`ServeOutcome` (its ``tune_result`` is the reused profile's, ``reused`` True), or
        :class:`NotRestored` when the profile is stale (with the reasons), missing, or the model is not in
        ``folder`` any more: nothing was started.

    Raises:
        Cancelled: ``cancel`` was set.
        tuner.server.discovery.ServerNotFoundError: no llama-server.
        tuner.server.supervisor.ServerStartError: the profile's server did not start (with its diagnosis).
    """
    try:
        scanned = scan(folder)
    except FileNotFoundError:
        return NotRestored(Path(target), None, problem=f"the models folder {folder} is gone")
    try:
        check_target(scanned, target)
    except FlowError:
        return NotRestored(Path(target), scanned, problem=f"it is not in the models folder {folder} any more")
    binary = find_server(settings.server_binary)
    request = request_from_settings(settings, folder, target=target, server=binary.path,
                                    options=dict(TUNE_OPTIONS_DEFAULT, prompts=prompts_path, **(tune_options or {})))
    state = saved_state(request, Path(target), binary, scanned)
    if not state.fresh:
        return NotRestored(state.target_path, scanned, state.reasons, state.problem)
    if cancel.is_set():
        raise Cancelled()
    on_event(status_event(f"Serving {Path(target).name} again (profile of {profile_date(state.profile)})"))
    return _serve_result(scanned, reused_result(state, request), settings, runner, on_event, cancel, binary)


@dataclass(frozen=True)
class TuneProgress:
    """What the Tune tab shows for one calibration event.

    Attributes:
        fraction: 0..1 of the sweep's budget/plan done, None when the event does not say.
        eta_s: seconds left (estimate), None when unknown.
        message: one line for the user, or None.
        result: ``(candidate label, gen tokens/s, acceptance 0..1|None, is_baseline)`` when the event
            carries a finished measurement, else None.
        elapsed_s: seconds since the sweep started, None when the event does not say.
        never: the candidate's label when the event's measurement ran but never drafted (a bar-less
            "never drafted" row on the chart), else None.
    """

    fraction: float | None = None
    eta_s: float | None = None
    message: str | None = None
    result: tuple[str, float, float | None, bool] | None = None
    elapsed_s: float | None = None
    never: str | None = None

    def at(self, seconds_later: float) -> tuple[float | None, float | None]:
        """``(fraction, eta_s)`` extrapolated ``seconds_later`` after the event, so the progress bar
        and the countdown move while one long launch (model load + requests) runs without events.
        The ETA counts down to 0 and stays there; the fraction follows elapsed / (elapsed + ETA)."""
        if self.eta_s is None:
            return self.fraction, None
        eta = max(0.0, self.eta_s - max(0.0, seconds_later))
        if self.elapsed_s is None:
            return self.fraction, eta
        elapsed = self.elapsed_s + max(0.0, seconds_later)
        return (elapsed / (elapsed + eta) if elapsed + eta > 0 else self.fraction), eta


def tune_progress(ev: TuneEvent) -> TuneProgress:
    """Map a ``TuneEvent`` (the sweep's, or the flow's own ``"status"``) to :class:`TuneProgress`; a
    measurement of a type that never drafted becomes a bar-less ``never`` row; a launch's message is
    :func:`tuner.ui.step_words.plain_step`'s (plain words, then the sweep's own line)."""
    if ev.kind == "status":  # the flow's own step: a message, not a point on the sweep's clock
        return TuneProgress(message=ev.message)
    result = None
    never = None
    message = plain_step(ev) or ev.message  # a launch: what is tried, in plain words first
    m = ev.measurement
    if m is not None:
        row = measurement_row(m)
        nd = m.drafted_nothing()
        if row is not None:
            result = row
        elif nd is not None:
            never = m.candidate.label
            message = measured_line(m.candidate.label, nd)  # what was measured, not a failure's words
    return TuneProgress(fraction=ev.progress, eta_s=ev.eta_s, message=message, result=result,
                        elapsed_s=ev.elapsed_s, never=never)


def measurement_row(m: Measurement) -> ResultRow | None:
    """``(label, gen tokens/s, acceptance, is_baseline)`` of one measurement, None without a speed
    or when it failed."""
    tps = m.gen_tokens_per_s
    if tps is None or m.error:
        return None
    return (row_label(m.candidate), float(tps), m.acceptance, m.candidate.is_baseline)


MODEL_ALONE = "the model alone"
"""The baseline's bar on the app's chart: the decision's words for it (the CLI's table says "no speculation")."""


def row_label(c: Candidate) -> str:
    """A chart row's label: the candidate's own (:attr:`Candidate.label`), the baseline's as :data:`MODEL_ALONE`
    with its thread setting after it (``" -t 2"``, from the candidate's fields) when the thread stage set one."""
    if not c.is_baseline:
        return c.label
    threads = (f" -t {c.threads}" if c.threads is not None else "") + (" waiting politely" if c.omp_passive else "")
    return MODEL_ALONE + threads + (f" --poll {c.poll}" if c.poll is not None else "")


def result_rows(result: TuneResult) -> list[ResultRow]:
    """Rows for the candidate chart from a ``TuneResult``: the decision's pooled figures
    (``Decision.comparisons``, one per candidate, over the requests it was compared on — adjacent
    pairs where it had them), so the chart, the decision sentence and the per-category lines quote the
    same numbers. The baseline's bar is the decision's baseline figure. Without a decision (an old
    profile, or a decision without comparisons), each candidate's successful runs pooled, a reused profile's
    from its saved launches (:func:`sweep_measurements`). Empty when there is nothing to show."""
    d = result.decision
    figures = result.comparison_figures()  # a reused profile's as it saved them
    if d is not None and figures:
        rows: list[ResultRow] = [(MODEL_ALONE, float(d.baseline_gen_tokens_per_s), None, True)] \
            if d.baseline_gen_tokens_per_s else []
        for c in figures:
            if c.get("gen_tokens_per_s"):
                rows.append((str(c.get("label") or ""), float(c["gen_tokens_per_s"]), c.get("acceptance"), False))
        return rows
    pooled: dict[Candidate, Measurement] = {}
    for m in sweep_measurements(result) or ():  # a reused profile's from its saved launches
        if measurement_row(m) is None:
            continue
        key = m.candidate
        pooled[key] = pooled[key].merged(m) if key in pooled else m
    return [r for r in (measurement_row(m) for m in pooled.values()) if r is not None]


def sweep_measurements(result: TuneResult | None) -> tuple[Measurement, ...] | None:
    """The sweep's measurements behind ``result``: the tune's own, or a reused profile's as it saved them (its
    ``evidence``: every launch, ``tuner.calibration.pipeline.save``). None when a reused profile kept none
    (saved without evidence): its launches are not known, which is not the same as one launch each."""
    if result is None:
        return ()
    if result.measurements or not result.reused or result.profile is None:
        return result.measurements
    out = []
    for obj in result.profile.evidence:
        try:
            out.append(Measurement.from_json(obj))
        except (KeyError, TypeError, ValueError):
            log.warning("a saved measurement of %s is unreadable", result.target_path, exc_info=True)
    return tuple(out) or None


def launch_points(result: TuneResult | None) -> dict[str, list[float]]:
    """Each configuration's launches as the chart draws them on its bar: label → tokens/s of every launch that
    measured a speed (:func:`measurement_row`), in launch order (the baseline's launches under its bar's label,
    :data:`MODEL_ALONE`); a reused profile's from its saved evidence (:func:`sweep_measurements`)."""
    out: dict[str, list[float]] = {}
    for m in sweep_measurements(result) or ():
        row = measurement_row(m)
        if row is not None:
            out.setdefault(row[0], []).append(row[1])
    return out


def drafted_tokens(measurements: Sequence[Measurement]) -> dict[str, int]:
    """Each configuration's drafted tokens summed over its launches that measured a speed (label of
    :func:`measurement_row` → tokens; ``Measurement.draft_n``), for the chart's "100% of 12 drafted"."""
    out: dict[str, int] = {}
    for m in measurements:
        row = measurement_row(m)
        if row is not None and not row[3]:
            out[row[0]] = out.get(row[0], 0) + m.draft_n
    return out


def never_drafted(result: TuneResult | None) -> list[str]:
    """Labels of the speculation types in a ``TuneResult`` that ran but never drafted (measurements with
    ``no_drafts_at``) and have no figures of their own, in measurement order: the chart's bar-less
    "never drafted" rows, the same types the decision names (the ``alone.never_drafted`` and
    ``sweep.never_drafted`` sentences, ``tuner.calibration.wording``)."""
    measurements = sweep_measurements(result) or ()
    measured = {m.candidate.label for m in measurements if measurement_row(m) is not None}
    out: list[str] = []
    for m in measurements:
        label = m.candidate.label
        if m.no_drafts_at and label not in measured and label not in out:
            out.append(label)
    return out


def decision_words(result: TuneResult | None) -> Rendered:
    """The decision in words (``TuneResult.rendered``: its sentences rendered by
    ``tuner.calibration.wording.render``): ``first``, the plain first sentence the Tune tab shows and the
    notification says; ``details``, the evidence and the rest, behind the Tune tab's *Details*. A reused
    profile's first detail says it was reused, and its sentence about other programs is dated."""
    if result is None:
        return Rendered("Served from a saved profile (still fresh).", (), "Served from a saved profile (still fresh).")
    words = result.rendered()
    if not words.first:
        return Rendered("No decision was recorded.", (), "No decision was recorded.")
    return words


def profile_date(profile: Profile | None) -> str:
    """When a profile was measured, in local time (``"2026-05-01 14:30"``); ``"an unrecorded date"`` without."""
    when = profile.created_unix_s if profile is not None else None
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if when else "an unrecorded date"


def served_again_text(info: ServingInfo, profile: Profile | None) -> str:
    """The one line a saved profile served again is announced with: ``"Serving gemma.gguf again (profile of
    2026-05-01 14:30)."`` (nothing was tuned, so never "tuning finished")."""
    return f"Serving {info.model_name} again (profile of {profile_date(profile)})."


def decision_text(result: TuneResult | None) -> str:
    """The decision's plain first sentence (:func:`decision_words`), one line: the notification's text."""
    return decision_words(result).first


def context_text(model: ModelFile, ctx_size: int | None = None) -> str:
    """The context size the model is tuned and served at, in words: e.g. ``"Context size 8192 tokens
    (automatic: the model's training context 32768, capped at 8192)"`` (``tuner.ctxsize``)."""
    trained = model.context_length
    try:
        n, note = resolve_ctx_size(ctx_size, trained, flag="the context setting")
    except ValueError as exc:
        return str(exc)
    if ctx_size is not None:
        why = "your setting" + (f"; {note}" if note else "")
    elif trained:
        why = f"automatic: the model's training context {trained}" + (f", capped at {DEFAULT_CTX_CAP}"
                                                                        if trained > DEFAULT_CTX_CAP else "")
    else:
        why = "automatic: the model does not state its training context"
    return f"Context size {n} tokens ({why})"


def plan_words(plan: MemoryPlan, n_layers: int) -> str:
    """Where a plan puts the model, in the app's words (no flags, no ``n_ctx`` / ``ngl``): each GPU's share of
    the ``n_layers`` layers (llama.cpp's count: the repeating blocks and the output layer), host RAM with its KV
    cache and prompt cache, then the verdict in the words ``draftwise plan`` prints (``MemoryPlan.verdict``)."""
    parts = [f"{d.device_name}: {d.target_layers + (1 if d.output_on_device else 0)} of {n_layers} layers, "
             f"{format_bytes(d.need.total_bytes)}" for d in plan.devices]
    h = plan.host.need
    kv = h.target_kv_bytes + h.draft_kv_bytes
    extra = f"KV cache {format_bytes(kv)}" + (f", prompt cache up to {format_bytes(h.prompt_cache_bytes)}"
                                             if h.prompt_cache_bytes else "")
    where = "Everything runs on the CPU" if not plan.devices else "; ".join(parts)
    return f"{where}; host RAM: {format_bytes(h.total_bytes)} ({extra}). Verdict: {plan.verdict}."


def _trade_words(request: MemoryRequest, devices: Devices) -> str | None:
    """The context-vs-layers trade with a GPU, in the app's words; None without a GPU."""
    trade = context_trade(request, devices)
    if trade.max_ngl_at_ctx is None:
        return None
    out = (f"At this context size {trade.max_ngl_at_ctx} of {trade.n_layers_all} layers fit on the GPU "
           "(the output layer first).")
    top = trade.max_ctx_all_on_gpu
    if top == 0:
        out += " The whole model does not fit on the GPU at any context size."
    elif top is not None and top >= trade.ctx_ceiling:
        out += f" The whole model stays on the GPU up to its training context ({trade.ctx_ceiling} tokens)."
    elif top is not None:
        out += f" The whole model stays on the GPU up to a context of {top} tokens."
    return out


def memory_plan_text(model: ModelFile, ctx_size: int | None = None, cache_ram_mib: int | None = None) -> str:
    """Where the model's weights and KV cache go on this machine at the context size it will be served
    with (:func:`context_text`), in the app's words (:func:`plan_words`; the verdict's words are
    ``draftwise plan``'s, and the free memory it rests on is dated: it moves while other programs run), with
    the context-vs-layers trade and what the cached llama-server cross-check said, plus the host RAM
    llama-server's prompt cache may take while serving (``cache_ram_mib``, the ``--cache-ram`` limit; None =
    not mentioned). No command-line advice: a plan never checked against llama-server says so, nothing more."""
    try:
        n_ctx, _ = resolve_ctx_size(ctx_size, model.context_length)
        binary = find_server_binary()
        devices = detect_devices(binary, build_probes(probe=False))
        read_at = time.strftime("%H:%M:%S")
        spec = load_model_spec(model.path)
        cache_bytes = max(cache_ram_mib or 0, 0) * MIB
        plan = plan_memory(MemoryRequest(target=spec, n_ctx=n_ctx, prompt_cache_bytes=cache_bytes), devices)
    except Exception as exc:  # the Models tab shows why; the log keeps the traceback
        log.debug("memory plan unavailable for %s", model.path, exc_info=True)
        return f"Memory plan unavailable for {Path(model.path).name}: {exc}"
    text = (f"{context_text(model, ctx_size)}. {plan_words(plan, spec.n_layer + 1)} "
            f"(Free memory as read at {read_at}.)")
    spec_request = MemoryRequest(target=spec, n_ctx=n_ctx)
    try:  # the context-vs-layers trade and the cached llama-server cross-check (never runs the server)
        trade = _trade_words(spec_request, devices)
        checks = [line.text if line.kind != "not_checked" else "Not yet checked against llama-server's own estimate."
                  for line in plan_check_lines(spec_request, devices, binary) if line.kind != "trade"]
        text = " ".join([text, *([trade] if trade else []), *checks])
    except Exception:  # noqa: BLE001 - the plan above stands on its own
        log.debug("plan check lines unavailable for %s", model.path, exc_info=True)
    if cache_ram_mib is not None:
        if cache_ram_mib > 0:
            extra = f"up to {format_bytes(cache_ram_mib * MIB)} of host RAM, counted in the host RAM above"
        else:
            extra = "no limit on host RAM" if cache_ram_mib < 0 else "off"
        text += f"\nWhile serving, llama-server's prompt cache: {extra}."
    return text
