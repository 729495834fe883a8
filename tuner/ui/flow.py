"""The GUI's calls into the core, in one place (plain Python, no Qt; runs inside workers).

Nothing here re-implements core logic: scanning is :func:`tuner.catalog.folder.scan_models` (done
once: the sweep gets the same scan and the same binary), the request is
:func:`tuner.calibration.request.request_from_settings`, tuning is :func:`tuner.calibration.tune.tune`,
serving is :class:`tuner.server.supervisor.Supervisor`. This module only chains them the way the
one-click "Tune & serve" needs and turns their results into small records for the window.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.calibration.request import TuneRequest, request_from_settings
from tuner.catalog.folder import ScanResult, scan_models
from tuner.catalog.folder import default_target as choose_default_target
from tuner.errors import Cancelled  # re-exported: the one cancellation type
from tuner.settings import Settings

if TYPE_CHECKING:
    from tuner.server.discovery import ServerBinary


@dataclass(frozen=True)
class ServingInfo:
    """What is being served.

    Attributes:
        model_name: display name of the target.
        target_path: the target GGUF.
        endpoint_url: OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``).
        base_url: server root (``http://127.0.0.1:PORT``).
        argv: the exact llama-server command line.
        pid: process id of llama-server, or None.
        spec_label: the speculation in words ("no speculation", "draft-simple d.gguf n_max 8", …).
        break_even_rate: acceptance rate below which speculation loses (0..1), None when unknown.
        api_key: the key clients must send, or None.
        model_id: the id the API reports for the model (``--alias``), used by the Chat tab.
        cache_ram_mib: the host prompt-cache limit passed (``--cache-ram``, MiB), None = server default.
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


@dataclass(frozen=True)
class ServeOutcome:
    """Result of :func:`tune_and_serve`: the scan, the tune result (None when a fresh profile was
    reused), the decision in words, and what is now being served."""

    scan: ScanResult | None
    tune_result: Any
    decision_text: str
    serving: ServingInfo
    samplers: tuple[Any, ...] = ()


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
    """``tuner.desktop.set_autostart`` (the packaging engineer's module), guarded until it exists.

    Raises:
        RuntimeError: the desktop module is not available on this install.
    """
    try:
        from tuner import desktop
    except ImportError as exc:
        raise RuntimeError(f"start at login is not available: {exc}") from exc
    desktop.set_autostart(enabled)


def describe_error(exc: BaseException) -> str:
    """A failure in plain words, with the core's evidence where it carries one."""
    diag = getattr(exc, "diagnosis", None)
    if diag is not None and getattr(diag, "message", None):
        return f"{diag.message}"
    return f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)


def describe_supervisor_failure(runner: ServerRunner) -> str:
    """Why the served llama-server stopped, from the supervisor's diagnosis."""
    sup = runner.supervisor
    diag = getattr(sup, "diagnosis", None) if sup is not None else None
    if diag is not None and getattr(diag, "message", None):
        return f"llama-server stopped: {diag.message}"
    return "llama-server stopped unexpectedly"


class ServerRunner:
    """Holds the one served :class:`tuner.server.supervisor.Supervisor` (thread-safe start/stop).

    Args:
        on_state: called with each ``tuner.server.supervisor.StateChange`` (from supervisor threads;
            it must return quickly, e.g. emit a Qt signal).
    """

    def __init__(self, on_state: Callable[[Any], None] | None = None) -> None:
        self.on_state = on_state
        self.supervisor: Any = None
        self._lock = threading.Lock()

    def _state_cb(self, change: Any) -> None:
        if self.on_state is not None:
            self.on_state(change)

    def start(
        self,
        config: Any,
        binary: Any = None,
        ready_timeout_s: float | None = None,
        cancel: threading.Event | None = None,
        rpc_fallback: Any = None,
    ) -> Any:
        """Stop any running server, start ``config`` (crash restarts on) and wait until ready.
        ``rpc_fallback``: the local-only configuration the supervisor switches to when an RPC host of
        ``config`` is lost (``tuner.calibration.serving.rpc_fallback_config``).

        Raises:
            tuner.server.discovery.ServerNotFoundError: no llama-server (names the places looked at).
            tuner.server.supervisor.ServerStartError: the server failed (with ``diagnosis``).
            Cancelled: ``cancel`` was set while loading (the process tree is stopped).
        """
        from tuner.server.supervisor import ServerStartError, Supervisor

        self.stop()
        sup = Supervisor(binary, auto_restart=True, on_state=self._state_cb, rpc_fallback=rpc_fallback)
        with self._lock:
            self.supervisor = sup
        sup.start(config)
        try:
            sup.wait_ready(timeout_s=ready_timeout_s, cancel=cancel)
        except ServerStartError:
            if cancel is not None and cancel.is_set():
                self.stop()
                raise Cancelled() from None
            raise
        return sup

    def pause(self) -> Any:
        """Stop the served server for a re-tune and return its configuration (``None`` when nothing
        was serving), so :meth:`start` can bring the same configuration back on the same port."""
        with self._lock:
            sup = self.supervisor
        if sup is None:
            return None
        state = getattr(getattr(sup, "state", None), "value", None)
        config = getattr(sup, "config", None)
        if state not in ("ready", "starting") or config is None:
            return None
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
        """llama-server's process id, or None."""
        sup = self.supervisor
        return sup.pid if sup is not None else None


def vram_sampler():
    """A :class:`tuner.telemetry.samplers.VramSampler` over NVML when ``tuner.hardware.nvml`` offers
    a used-memory reading; None otherwise (no NVIDIA GPU / module absent)."""
    from tuner.telemetry.samplers import VramSampler

    try:
        from tuner.hardware import nvml
    except ImportError:
        return None
    read = getattr(nvml, "used_bytes_total", None)
    if read is None:
        return None
    try:
        if read() is None:  # no NVML library or no NVIDIA GPU: no VRAM series at all
            return None
    except Exception:
        return None
    return VramSampler(read)


def server_samplers(info: ServingInfo, runner: ServerRunner):
    """``(MetricsSampler, ProcessSampler, AcceptanceWatch|None)`` for the served server."""
    from tuner.server.client import ServerClient
    from tuner.telemetry.samplers import MetricsSampler, ProcessSampler, ProcessUsage
    from tuner.telemetry.watch import AcceptanceWatch

    client = ServerClient(info.base_url, api_key=info.api_key)
    metrics = MetricsSampler(client.metrics_text)

    def read_usage():
        pid = runner.pid
        if pid is None:
            return None
        from tuner.process import tree_usage

        usage = tree_usage(pid)
        if usage is None:
            return None
        return ProcessUsage(rss_bytes=usage[0], cpu_seconds=usage[1])

    watch = AcceptanceWatch(info.break_even_rate) if info.break_even_rate else None
    return metrics, ProcessSampler(read_usage), watch


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


def serving_config(profile: Any, settings: Settings) -> Any:
    """The profile's winning ``ServerConfig`` with the user's port, listen address and API key, the
    friendly model id (``--alias`` = :func:`tuner.server.config.default_alias`) and the prompt-cache
    limit (``settings.cache_ram_mib``).

    Raises:
        tuner.settings.SettingsError: LAN exposure without an API key.
        tuner.profiles.ProfileError: the profile sets an option a profile may not (named).
    """
    from dataclasses import replace

    from tuner.calibration.serving import profile_server_config
    from tuner.server.config import default_alias
    from tuner.settings import server_api_key

    cfg = profile_server_config(profile)  # raises ProfileError for a tampered profile (option named)
    return replace(cfg, port=settings.port, host=settings.host, api_key=server_api_key(settings),
                   cors_origins=settings.cors_origins_value(),
                   alias=cfg.alias or default_alias(cfg.model_path), cache_ram_mib=settings.cache_ram_mib)


def _argv_has(argv, flags: tuple[str, ...]) -> bool:
    """True when the launched command line carries one of ``flags`` (argv omits flags the binary lacks)."""
    return any(a in flags for a in (argv or ()))


def tune_and_serve(
    folder: Path,
    target: Path | None,
    settings: Settings,
    prompts_path: Path | None,
    runner: ServerRunner,
    on_event: Callable[[Any], None],
    cancel: threading.Event,
    force_retune: bool = False,
    tune_options: dict[str, Any] | None = None,
) -> ServeOutcome:
    """Scan → tune (or reuse a fresh profile) → serve. Runs in a worker thread.

    While a server is already serving (re-tune), it is stopped before the sweep (``"Serving paused for
    re-tune"`` goes to ``on_event``), and started again with its previous configuration, on the same
    port, when the sweep is cancelled or fails; after a sweep the new winner is served on the
    settings' port, which is the same port. External clients only see a pause.

    Raises:
        Cancelled: ``cancel`` was set (tune stops every child process it started).
        FileNotFoundError: the models folder does not exist.
        tuner.calibration.tune.TuneError: no LLM, no server, baseline failed (with evidence).
        tuner.server.supervisor.ServerStartError: the winner did not start (with diagnosis).
    """
    from tuner.server.discovery import find_server

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
        on_event(f"Serving paused for re-tune (port {paused.port} comes back when the sweep ends)")
    try:
        return _tune_then_serve(scanned, request, settings, runner, on_event, cancel, binary)
    except BaseException:
        if paused is not None:  # cancelled or failed: the previous configuration comes back, same port
            try:
                runner.start(paused, binary=binary)
                on_event(f"Re-tune did not finish: the previous configuration is serving again on port {paused.port}")
            except Exception as exc:  # noqa: BLE001 - the sweep's own error is the one to report
                on_event(f"Re-tune did not finish, and the previous configuration did not start again: {exc}")
        raise


def _tune_then_serve(scanned: ScanResult, request: TuneRequest, settings: Settings, runner: ServerRunner,
                     on_event: Callable[[Any], None], cancel: threading.Event, binary: ServerBinary) -> ServeOutcome:
    from tuner.calibration.tune import tune

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
    config, rpc_note = reachable_config(config, fallback)
    if rpc_note:
        on_event(rpc_note)
    on_event(f"Starting llama-server for {Path(profile.target_path).name} on port {config.port}")
    sup = runner.start(config, binary=binary, cancel=cancel, rpc_fallback=fallback if config.rpc else None)
    decision_json = dict(profile.decision)
    info = ServingInfo(
        model_name=Path(profile.target_path).name,
        target_path=Path(profile.target_path),
        endpoint_url=f"{sup.base_url}/v1",
        base_url=sup.base_url,
        argv=tuple(sup.argv or ()),
        pid=sup.pid,
        spec_label=str(decision_json.get("label") or "no speculation"),
        break_even_rate=_break_even_for(decision_json),
        api_key=config.api_key,
        model_id=config.alias if _argv_has(sup.argv, ("-a", "--alias")) else None,
        cache_ram_mib=config.cache_ram_mib if _argv_has(sup.argv, ("-cram", "--cache-ram")) else None,
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


def tune_progress(ev: Any) -> TuneProgress:
    """Map a calibration ``TuneEvent`` to :class:`TuneProgress` (see tuner.calibration.tune)."""
    if isinstance(ev, str):
        return TuneProgress(message=ev)
    fraction = getattr(ev, "progress", None)
    eta_s = getattr(ev, "eta_s", None)
    message = getattr(ev, "message", None)
    result = None
    never = None
    m = getattr(ev, "measurement", None)
    if m is not None:
        row = measurement_row(m)
        if row is not None:
            result = row
        elif getattr(m, "no_drafts_at", None):
            never = getattr(m.candidate, "label", None) or str(m.candidate)
    return TuneProgress(fraction=fraction, eta_s=eta_s, message=message, result=result,
                        elapsed_s=getattr(ev, "elapsed_s", None), never=never)


def measurement_row(m: Any) -> tuple[str, float, float | None, bool] | None:
    """``(label, gen tokens/s, acceptance, is_baseline)`` of one measurement, None without a speed."""
    cand = getattr(m, "candidate", None)
    tps = getattr(m, "gen_tokens_per_s", None)
    if cand is None or tps is None:
        return None
    if getattr(m, "error", None):
        return None
    acc = getattr(m, "acceptance", None)
    label = getattr(cand, "label", None) or str(cand)
    return (label, float(tps), acc, bool(getattr(cand, "is_baseline", False)))


def result_rows(result: Any) -> list[tuple[str, float, float | None, bool]]:
    """Rows for the candidate chart from a ``TuneResult``: the decision's pooled figures
    (``Decision.comparisons``, one per candidate, over the requests it was compared on — adjacent
    pairs where it had them), so the chart, the decision sentence and the per-category lines quote the
    same numbers. The baseline's bar is the decision's baseline figure. Without a decision (an old
    profile), each candidate's successful runs pooled. Empty when there is nothing to show."""
    d = getattr(result, "decision", None)
    comps = getattr(d, "comparisons", None) or ()
    if d is not None and comps:
        rows = [("no speculation", float(d.baseline_gen_tokens_per_s), None, True)] \
            if d.baseline_gen_tokens_per_s else []
        for c in comps:
            if c.gen_tokens_per_s:
                rows.append((c.candidate.label, float(c.gen_tokens_per_s), c.acceptance, False))
        return rows
    pooled: dict[Any, Any] = {}
    for m in getattr(result, "measurements", None) or ():
        if measurement_row(m) is None:
            continue
        key = getattr(m, "candidate", None)
        pooled[key] = pooled[key].merged(m) if key in pooled else m
    return [r for r in (measurement_row(m) for m in pooled.values()) if r is not None]


def never_drafted(result: Any) -> list[str]:
    """Labels of the speculation types in a ``TuneResult`` that ran but never drafted (measurements with
    ``no_drafts_at``) and have no figures of their own, in measurement order: the chart's bar-less
    "never drafted" rows, the same types the decision names (tuner.calibration.decide._never_text)."""
    measured = {getattr(m.candidate, "label", None) for m in getattr(result, "measurements", None) or ()
                if measurement_row(m) is not None}
    out: list[str] = []
    for m in getattr(result, "measurements", None) or ():
        label = getattr(getattr(m, "candidate", None), "label", None)
        if getattr(m, "no_drafts_at", None) and label and label not in measured and label not in out:
            out.append(label)
    return out


def decision_text(result: Any) -> str:
    """The decision in words (speedup or "no speculation" with the reason)."""
    if result is None:
        return "Served from a saved profile (still fresh)."
    decision = getattr(result, "decision", result)
    if decision is None and getattr(result, "profile", None) is not None:
        decision = result.profile.decision
    if getattr(result, "reused", False):
        text = decision.get("reason") if isinstance(decision, dict) else getattr(decision, "reason", None)
        return f"Using the saved profile (still fresh): {text or 'no reason recorded'}"
    for attr in ("summary", "reason", "message"):
        text = getattr(decision, attr, None)
        if text:
            return str(text)
    if isinstance(decision, dict):
        return str(decision.get("reason") or decision)
    return str(decision)


def context_text(model: Any, ctx_size: int | None = None) -> str:
    """The context size the model is tuned and served at, in words: e.g. ``"Context size 8192 tokens
    (automatic: the model's training context 32768, capped at 8192)"`` (``tuner.ctxsize``)."""
    from tuner.ctxsize import DEFAULT_CTX_CAP, resolve_ctx_size

    trained = getattr(model, "context_length", None)
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


def memory_plan_text(model: Any, ctx_size: int | None = None, cache_ram_mib: int | None = None) -> str:
    """Where the model's weights and KV cache go on this machine at the context size it will be served
    with (:func:`context_text`), in words (``tuner.hardware``), with the context-vs-layers trade and the
    cached llama-server cross-check, plus the host RAM llama-server's prompt cache may take while serving
    (``cache_ram_mib``, the ``--cache-ram`` limit; None = not mentioned)."""
    from tuner.ctxsize import resolve_ctx_size
    try:
        from tuner.hardware.devices import detect_devices
        from tuner.hardware.memory import MemoryRequest, plan_memory
    except ImportError:
        return "Memory planning is not available yet in this build."
    try:
        n_ctx, _ = resolve_ctx_size(ctx_size, getattr(model, "context_length", None))
        devices = detect_devices()
        cache_bytes = max(cache_ram_mib or 0, 0) * 1024 * 1024
        request = MemoryRequest(target=model, n_ctx=n_ctx, prompt_cache_bytes=cache_bytes)
        plan = plan_memory(request, devices)
    except Exception as exc:
        return f"Memory plan unavailable for {Path(model.path).name}: {exc}"
    text = context_text(model, ctx_size) + ". " + str(getattr(plan, "summary", None) or plan)
    try:  # the context-vs-layers trade and the cached llama-server cross-check (never runs the server)
        from tuner.hardware.devices import find_server_binary
        from tuner.hardware.fitcheck import plan_check_lines
        from tuner.hardware.memory import load_model_spec

        spec_request = MemoryRequest(target=load_model_spec(model.path), n_ctx=request.n_ctx)
        text = " ".join([text, *plan_check_lines(spec_request, devices, find_server_binary())])
    except Exception:  # noqa: BLE001 - the plan above stands on its own
        pass
    if cache_ram_mib is not None:
        from tuner.units import format_bytes

        if cache_ram_mib > 0:
            extra = f"up to {format_bytes(cache_ram_mib * 1024 * 1024)} of host RAM, counted in the host RAM above"
        else:
            extra = "no limit on host RAM" if cache_ram_mib < 0 else "off"
        text += f"\nWhile serving, llama-server's prompt cache (--cache-ram): {extra}."
    return text
