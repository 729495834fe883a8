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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner.calibration import render
from tuner.calibration.candidates import Candidate
from tuner.calibration.request import (
    EventCallback,
    TuneEvent,
    TuneRequest,
    TuneResult,
    request_from_settings,
)
from tuner.calibration.results import Measurement
from tuner.calibration.serving import profile_server_config
from tuner.calibration.tune import tune
from tuner.catalog.folder import ScanResult, scan_models
from tuner.catalog.folder import default_target as choose_default_target
from tuner.catalog.model import ModelFile
from tuner.crosscheck import build as cc_build
from tuner.crosscheck.cpu_buffers import workaround_sentence
from tuner.crosscheck.lines import plan_check_lines
from tuner.ctxsize import DEFAULT_CTX_CAP, resolve_ctx_size
from tuner.errors import Cancelled  # re-exported: the one cancellation type
from tuner.hardware import LoadWatcher, nvml
from tuner.hardware import devices as hw_devices
from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory
from tuner.process import tree_usage
from tuner.profiles import Profile
from tuner.server import (
    NON_WAKING_PATHS,
    ServerNotFoundError,
    cached_dialect,
    captured_count,
    command_line,
    log_prompts_dir,
    server_env,
)
from tuner.server import delete_captured as delete_captured  # re-exported: the captured requests for the window
from tuner.server import forget_captured as forget_captured
from tuner.server import list_captured as list_captured
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig, default_alias
from tuner.server.discovery import ServerBinary, find_server
from tuner.server.supervisor import (
    ServerStartError,
    ServerState,
    StateChange,
    Supervisor,
)
from tuner.settings import Settings, server_api_key
from tuner.telemetry.samplers import (
    MetricsSampler,
    ProcessSampler,
    ProcessUsage,
    VramSampler,
)
from tuner.telemetry.watch import AcceptanceWatch, CollapseWatch
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
        profile_tps: the profile's generation tokens/s (its decision's), the collapse watch's reference; None
            when unknown.
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
    profile_tps: float | None = None


@dataclass(frozen=True)
class ServeOutcome:
    """Result of :func:`tune_and_serve`: the scan, the tune result (None when a fresh profile was
    reused), the decision in words, and what is now being served."""

    scan: ScanResult | None
    tune_result: TuneResult
    decision_text: str
    serving: ServingInfo
    samplers: Samplers | None = None


def demo_models_dir() -> Path:
    """``resources/demo`` (holds stories260K.gguf), for newcomers without models."""
    from tuner.resources import resource_path

    return resource_path("demo")


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
    """Why the served llama-server stopped, from the supervisor's diagnosis."""
    sup = runner.supervisor
    diag = sup.diagnosis if sup is not None else None
    if diag is not None and diag.message:
        return f"llama-server stopped: {diag.message}"
    return "llama-server stopped unexpectedly"


class ServerRunner:
    """Holds the one served :class:`tuner.server.supervisor.Supervisor` (thread-safe start/stop).

    Args:
        on_state: called with each ``tuner.server.supervisor.StateChange`` (from supervisor threads;
            it must return quickly, e.g. emit a Qt signal).
    """

    def __init__(self, on_state: Callable[[StateChange], None] | None = None) -> None:
        self.on_state = on_state
        self.supervisor: Supervisor | None = None
        self._lock = threading.Lock()

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
        sup = Supervisor(binary, auto_restart=True, on_state=self._state_cb, rpc_fallback=rpc_fallback)
        with self._lock:
            self.supervisor = sup
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

        Raises:
            tuner.server.supervisor.ServerStartError: the new configuration did not start (with ``diagnosis``).
        """
        with self._lock:
            sup = self.supervisor
        if sup is None or sup.state not in (ServerState.READY, ServerState.SLEEPING):
            return None
        sup.restart(_capturable(config, sup), applying=setting)
        sup.wait_ready(timeout_s=ready_timeout_s)
        return sup

    def pause(self) -> ServerConfig | None:
        """Stop the served server for a re-tune and return its configuration (``None`` when nothing
        was serving), so :meth:`start` can bring the same configuration back on the same port."""
        with self._lock:
            sup = self.supervisor
        if sup is None:
            return None
        config = sup.config
        if sup.state not in (ServerState.READY, ServerState.SLEEPING, ServerState.STARTING) or config is None:
            return None
        log.info("pausing the served llama-server (port %s) for a re-tune", config.port)
        sup.stop()
        return config

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


def capture_status(settings: Settings, runner: ServerRunner | None = None) -> CaptureStatus:
    """Where the capture of served requests stands: the setting, the live argv, the files kept, and why the
    llama-server cannot (the served supervisor's dialect, else the binary's cached ``--help``; never runs it)."""
    argv = runner.argv if runner is not None and runner.pid is not None else None
    folder = None
    if argv and "--log-prompts-dir" in argv and argv.index("--log-prompts-dir") + 1 < len(argv):
        folder = Path(argv[argv.index("--log-prompts-dir") + 1])
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
    read = nvml.used_bytes_total
    try:
        if read() is None:  # no NVML library or no NVIDIA GPU: no VRAM series at all
            return None
    except Exception:
        log.debug("NVML used-memory reading failed: no VRAM series", exc_info=True)
        return None
    return VramSampler(read)


def server_samplers(info: ServingInfo, runner: ServerRunner) -> Samplers:
    """``(MetricsSampler, ProcessSampler, AcceptanceWatch | None)`` for the served server. The ``/metrics``
    client may ask only what does not wake a sleeping server (:data:`tuner.server.client.NON_WAKING_PATHS`)."""
    client = ServerClient(info.base_url, api_key=info.api_key, paths=NON_WAKING_PATHS)
    metrics = MetricsSampler(client.metrics_text)

    def read_usage() -> ProcessUsage | None:
        pid = runner.pid
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


def _break_even_for(decision_json: dict[str, Any]) -> float | None:
    """The winner's break-even acceptance (0..1) from a decision's JSON, None for the baseline/unknown."""
    winner = decision_json.get("winner") or {}
    if not winner or winner.get("spec_type", "none") == "none":
        return None
    best = None
    for be in decision_json.get("break_even") or ():
        cand = be.get("candidate") or {}
        value = be.get("break_even_acceptance")
        if value is None:
            continue
        same_type = cand.get("spec_type") == winner.get("spec_type") and cand.get("draft_path") == winner.get("draft_path")
        if same_type:
            best = value
    if best is None or not 0.0 < best < 1.0:
        return None
    return float(best)


def serving_config(profile: Profile, settings: Settings) -> ServerConfig:
    """The profile's winning ``ServerConfig`` with the user's port, listen address and API key, the
    friendly model id (``--alias`` = :func:`tuner.server.config.default_alias`), the prompt-cache
    limit (``settings.cache_ram_mib``), idle sleep (``settings.idle_sleep_s``; 0 = off; passed only where
    the binary has ``--sleep-idle-seconds``), the user's ``threads`` setting over the tuned thread setting, and
    the capture of served requests (``settings.capture_requests``:
    :func:`capture_config`, whose folder is made here).

    Raises:
        tuner.settings.SettingsError: LAN exposure without an API key.
        tuner.profiles.ProfileError: the profile sets an option a profile may not (named).
        tuner.server.CaptureError: the capture folder cannot be made private.
    """
    cfg = profile_server_config(profile)  # raises ProfileError for a tampered profile (option named)
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
        tuner.calibration.tune.TuneError: no LLM, no server, baseline failed (with evidence).
        tuner.server.supervisor.ServerStartError: the winner did not start (with diagnosis).
    """
    scanned = scan(folder)
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
                runner.start(paused, binary=binary)
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
        result = tune(request, on_event=on_event, cancel=cancel, scanned=scanned, binary=binary)
    except Exception:
        if cancel.is_set():  # e.g. the baseline's server stopped by the cancel: not a failure to report
            raise Cancelled() from None
        raise
    if result.cancelled or cancel.is_set():
        raise Cancelled()
    profile = result.profile
    if profile is None:
        raise RuntimeError(f"tuning {result.target_path} produced no profile")
    config = serving_config(profile, settings)
    from tuner.calibration.serving import reachable_config, rpc_fallback_config

    fallback = rpc_fallback_config(config, profile)
    if fallback is not None:  # a lost RPC host does not stop the capture of served requests
        fallback = replace(fallback, log_prompts_dir=config.log_prompts_dir)
    config, rpc_note = reachable_config(config, fallback)
    if rpc_note:
        on_event(status_event(rpc_note))
    on_event(status_event(f"Starting llama-server for {Path(profile.target_path).name} on port {config.port}"))
    sup = runner.start(config, binary=binary, cancel=cancel, rpc_fallback=fallback if config.rpc else None)
    decision_json = dict(profile.decision)
    base_url = sup.base_url
    if base_url is None:  # wait_ready returned: the child was launched, so it has an address
        raise RuntimeError("llama-server is ready but has no address")
    info = ServingInfo(
        model_name=Path(profile.target_path).name,
        target_path=Path(profile.target_path),
        endpoint_url=f"{base_url}/v1",
        base_url=base_url,
        argv=tuple(sup.argv or ()),
        pid=sup.pid,
        spec_label=str(decision_json.get("label") or "no speculation"),
        break_even_rate=_break_even_for(decision_json),
        api_key=config.api_key,
        model_id=config.alias if _argv_has(sup.argv, ("-a", "--alias")) else None,
        cache_ram_mib=config.cache_ram_mib if _argv_has(sup.argv, ("-cram", "--cache-ram")) else None,
        profile_tps=_positive(decision_json.get("gen_tokens_per_s")),
    )
    return ServeOutcome(
        scan=scanned,
        tune_result=result,
        decision_text=decision_text(result),
        serving=info,
        # built here, off the GUI thread: creating the HTTP client costs tens of ms of CPU
        samplers=server_samplers(info, runner),
    )


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
    measurement of a type that never drafted becomes a bar-less ``never`` row."""
    if ev.kind == "status":  # the flow's own step: a message, not a point on the sweep's clock
        return TuneProgress(message=ev.message)
    result = None
    never = None
    m = ev.measurement
    if m is not None:
        row = measurement_row(m)
        if row is not None:
            result = row
        elif m.no_drafts_at:
            never = m.candidate.label
    return TuneProgress(fraction=ev.progress, eta_s=ev.eta_s, message=ev.message, result=result,
                        elapsed_s=ev.elapsed_s, never=never)


def measurement_row(m: Measurement) -> ResultRow | None:
    """``(label, gen tokens/s, acceptance, is_baseline)`` of one measurement, None without a speed
    or when it failed."""
    tps = m.gen_tokens_per_s
    if tps is None or m.error:
        return None
    return (m.candidate.label, float(tps), m.acceptance, m.candidate.is_baseline)


def result_rows(result: TuneResult) -> list[ResultRow]:
    """Rows for the candidate chart from a ``TuneResult``: the decision's pooled figures
    (``Decision.comparisons``, one per candidate, over the requests it was compared on — adjacent
    pairs where it had them), so the chart, the decision sentence and the per-category lines quote the
    same numbers. The baseline's bar is the decision's baseline figure. Without a decision (an old
    profile), each candidate's successful runs pooled. Empty when there is nothing to show."""
    d = result.decision
    figures = result.comparison_figures()  # a reused profile's as it saved them
    if d is not None and figures:
        rows: list[ResultRow] = [("no speculation", float(d.baseline_gen_tokens_per_s), None, True)] \
            if d.baseline_gen_tokens_per_s else []
        for c in figures:
            if c.get("gen_tokens_per_s"):
                rows.append((str(c.get("label") or ""), float(c["gen_tokens_per_s"]), c.get("acceptance"), False))
        return rows
    pooled: dict[Candidate, Measurement] = {}
    for m in result.measurements:
        if measurement_row(m) is None:
            continue
        key = m.candidate
        pooled[key] = pooled[key].merged(m) if key in pooled else m
    return [r for r in (measurement_row(m) for m in pooled.values()) if r is not None]


def never_drafted(result: TuneResult | None) -> list[str]:
    """Labels of the speculation types in a ``TuneResult`` that ran but never drafted (measurements with
    ``no_drafts_at``) and have no figures of their own, in measurement order: the chart's bar-less
    "never drafted" rows, the same types the decision names (the ``alone.never_drafted`` and
    ``sweep.never_drafted`` sentences, ``tuner.calibration.wording``)."""
    if result is None:
        return []
    measured = {m.candidate.label for m in result.measurements if measurement_row(m) is not None}
    out: list[str] = []
    for m in result.measurements:
        label = m.candidate.label
        if m.no_drafts_at and label not in measured and label not in out:
            out.append(label)
    return out


def decision_text(result: TuneResult | None) -> str:
    """The decision in words (its sentences rendered: ``tuner.calibration.wording.render``); for a reused
    profile, that it was reused, then its words with the sweep's load dated."""
    if result is None:
        return "Served from a saved profile (still fresh)."
    decision = result.decision
    if decision is None:
        return "No decision was recorded."
    measured = result.profile.created_unix_s if result.reused and result.profile is not None else None
    return render(decision.sentences, measured_unix_s=measured, reused=result.reused).text or "No decision was recorded."


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


def memory_plan_text(model: ModelFile, ctx_size: int | None = None, cache_ram_mib: int | None = None) -> str:
    """Where the model's weights and KV cache go on this machine at the context size it will be served
    with (:func:`context_text`), in words (``tuner.hardware``), with the context-vs-layers trade and the
    cached llama-server cross-check, plus the host RAM llama-server's prompt cache may take while serving
    (``cache_ram_mib``, the ``--cache-ram`` limit; None = not mentioned)."""
    try:
        n_ctx, _ = resolve_ctx_size(ctx_size, model.context_length)
        binary = cc_build.find_server_binary()  # through the modules: tests replace them
        devices = hw_devices.detect_devices(binary, cc_build.build_probes(probe=False))
        spec = load_model_spec(model.path)
        cache_bytes = max(cache_ram_mib or 0, 0) * MIB
        plan = plan_memory(MemoryRequest(target=spec, n_ctx=n_ctx, prompt_cache_bytes=cache_bytes), devices)
    except Exception as exc:  # the Models tab shows why; the log keeps the traceback
        log.debug("memory plan unavailable for %s", model.path, exc_info=True)
        return f"Memory plan unavailable for {Path(model.path).name}: {exc}"
    text = context_text(model, ctx_size) + ". " + plan.summary
    try:  # the context-vs-layers trade and the cached llama-server cross-check (never runs the server)
        spec_request = MemoryRequest(target=spec, n_ctx=n_ctx)
        text = " ".join([text, *(line.text for line in plan_check_lines(spec_request, devices, binary))])
    except Exception:  # noqa: BLE001 - the plan above stands on its own
        log.debug("plan check lines unavailable for %s", model.path, exc_info=True)
    if cache_ram_mib is not None:
        if cache_ram_mib > 0:
            extra = f"up to {format_bytes(cache_ram_mib * MIB)} of host RAM, counted in the host RAM above"
        else:
            extra = "no limit on host RAM" if cache_ram_mib < 0 else "off"
        text += f"\nWhile serving, llama-server's prompt cache (--cache-ram): {extra}."
    return text
