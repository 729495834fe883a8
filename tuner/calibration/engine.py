"""Implementation behind :func:`tuner.calibration.tune.tune`: composition of catalog, hardware, server,
search, decision and profile store. Use :func:`tuner.calibration.tune.tune`, not this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.profiles import (
    ModelFileKey,
    Profile,
    ProfileError,
    ProfileStore,
    StalenessKeys,
)
from tuner.units import format_bytes

from .candidates import (
    Candidate,
    CandidatePlan,
    DraftOption,
    HeadOption,
    apply_memory_check,
    plan_candidates,
)
from .decide import Decision, decide
from .measure import Cancelled, Launch, LaunchError, LaunchFn
from .pairing import MIN_PAIRS
from .prompts import (
    MAX_PROMPTS_PER_SWEEP,
    Prompt,
    PromptSet,
    default_prompts,
    load_prompts,
)
from .report import MachineLoad, NoRepack, ReportFacts, RpcPlacement, finish_decision, reused_decision
from .request import (
    EventCallback,
    TuneError,
    TuneEvent,
    TuneRequest,
    TuneResult,
    _check_long_share,
)
from .sampling import Sampling
from .search import BaselineFailed, SearchSettings, run_search
from .serving import candidate_config, config_to_json
from .workload import Workload, long_context_prompts

log = logging.getLogger(__name__)


if TYPE_CHECKING:
    from tuner.catalog.folder import ScanResult
    from tuner.server.discovery import ServerBinary

DEFAULT_SET_PROMPTS = 5
"""Prompts used from the built-in set (one per category) unless ``max_prompts`` says otherwise."""


def select_prompts(ps: PromptSet, max_prompts: int | None) -> list[tuple[int, Prompt]]:
    """Pick at most ``max_prompts`` prompts, round-robin over categories (file order within one)."""
    indexed = list(enumerate(ps.prompts))
    if max_prompts is None or max_prompts >= len(indexed):
        return indexed
    by_cat: dict[str | None, list[tuple[int, Prompt]]] = {}
    for ip in indexed:
        by_cat.setdefault(ip[1].category, []).append(ip)
    out: list[tuple[int, Prompt]] = []
    while len(out) < max_prompts:
        for cat in list(by_cat):
            if by_cat[cat] and len(out) < max_prompts:
                out.append(by_cat[cat].pop(0))
    return sorted(out)


def hardware_fingerprint(devices: Any) -> str:
    """Stable summary of the hardware: GPU names and total memory (GiB), host RAM (GiB), CPU cores; an
    RPC host's device carries its endpoint (``RPC:RPC0@192.168.1.20:50052:24GiB``), so the profile is
    stale when the hosts or their devices change."""
    parts = []
    for d in getattr(devices, "devices", ()) or ():
        total = getattr(d, "total_bytes", None)
        where = f"@{d.rpc_endpoint}" if getattr(d, "rpc_endpoint", None) else ""  # an RPC host is part of it
        parts.append(f"{getattr(d, 'backend', '?')}:{getattr(d, 'name', '?')}{where}:"
                     f"{round(total / 2**30) if total else '?'}GiB")
    ram = getattr(devices, "ram_total_bytes", None)
    parts.append(f"ram:{round(ram / 2**30) if ram else '?'}GiB")
    parts.append(f"cpu:{getattr(devices, 'cpu_cores', None) or '?'}")
    return ";".join(parts)


def _file_identity(path: Path) -> str:
    try:
        st = path.stat()
        return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return str(path)


#: Event kinds logged at INFO (the tune's lifecycle); ``error`` (a non-fatal note) is logged as a warning
#: reading "tune note:", others at debug.
_LOGGED_KINDS = frozenset({"started", "reused", "stale", "measured", "decision", "saved", "cancelled"})


class _Emitter:
    def __init__(self, on_event: EventCallback | None) -> None:
        self.on_event = on_event
        self.t0 = time.monotonic()

    def __call__(self, kind: str, message: str, **kw: Any) -> None:
        # the log gets the event's own sentence (file names, labels, figures; never a prompt text)
        # "error" events are non-fatal notes by contract (fatal problems raise TuneError): "note", as on stderr
        level = logging.WARNING if kind == "error" else logging.INFO if kind in _LOGGED_KINDS else logging.DEBUG
        log.log(level, "tune %s: %s", "note" if kind == "error" else kind, message)
        if self.on_event is None:
            return
        kw["elapsed_s"] = time.monotonic() - self.t0  # one clock for all events of a tune call
        detail = kw.pop("detail", None) or {}
        self.on_event(TuneEvent(kind=kind, message=message, detail=detail, **kw))


def _choose_target(models_dir: Path, target: str | None, scanned: ScanResult | None = None) -> tuple[Any, Any, list]:
    """(target ModelFile, TargetEntry or None, all models); ``scanned`` = the caller's scan of this folder."""
    from tuner.catalog.folder import AmbiguousModelError, default_target, pick_named, scan_models

    if models_dir.is_file():
        raise TuneError(f"--models {models_dir}: is a file; give the folder that holds it (and --target "
                        f"{models_dir.name})", bad_input=True)
    if not models_dir.is_dir():
        raise TuneError(f"--models {models_dir}: no such folder", bad_input=True)
    if scanned is None or Path(scanned.folder).resolve() != models_dir:
        scanned = scan_models(models_dir)
    models = list(scanned.models)
    llms = [m for m in models if m.kind == "llm"]
    if not llms:
        broken = [f"{m.path.name} ({m.kind}{': ' + m.error if m.error else ''})" for m in models]
        raise TuneError(f"--models {models_dir}: no LLM GGUF file in this folder"
                        + (f"; found: {', '.join(broken)}" if broken else ""), bad_input=True)
    entries = {str(Path(e.target.path).resolve()): e for f in scanned.families for e in f.targets}
    chosen = None
    if target is not None:
        tp = Path(target)
        want = tp.resolve() if tp.exists() else None
        chosen = next((m for m in llms if want is not None and Path(m.path).resolve() == want), None)
        if chosen is None:
            try:  # a name or stem: two different files carrying it is an error naming both
                named = pick_named([m.path for m in llms], target, flag="--target")
            except AmbiguousModelError as exc:
                raise TuneError(str(exc), bad_input=True) from exc
            chosen = next((m for m in llms if named is not None and Path(m.path) == named), None)
        if chosen is None:
            raise TuneError(
                f"--target {target!r}: no such LLM in {models_dir}; LLMs there: "
                + ", ".join(Path(m.path).name for m in llms),
                bad_input=True,
            )
    else:
        chosen = default_target(models, scanned.families)
    assert chosen is not None  # there is at least one LLM
    return chosen, entries.get(str(Path(chosen.path).resolve())), models


def _head_options(entry: Any, target_path: Path, emit: Callable) -> list[HeadOption]:
    """The draft heads the catalog matched to the target (``TargetEntry.heads``) as plan inputs; each
    refused head is reported with the rule it failed (``TargetEntry.mismatched_heads``)."""
    if entry is None:
        return []
    for m, verdict in getattr(entry, "mismatched_heads", ()):
        emit("error", f"head {Path(m.path).name} does not fit {target_path.name} (rule: {verdict.rule}): "
             f"{verdict.message}")
    return [HeadOption(path=str(Path(h.model.path).resolve()), spec_type=h.spec_type, size_bytes=h.model.size_bytes)
            for h in getattr(entry, "heads", ())]


def _memory_check_factory(target_path: Path, devices: Any, n_ctx: int, notes: list[str]) -> Callable | None:
    try:
        from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory
    except Exception as exc:  # noqa: BLE001
        log.debug("memory plan unavailable", exc_info=True)
        notes.append(f"memory plan unavailable ({exc})")
        return None
    specs: dict[str, Any] = {}

    def spec(path: str) -> Any:
        if path not in specs:
            specs[path] = load_model_spec(path)
        return specs[path]

    def check(c: Candidate) -> str | None:
        try:
            req = MemoryRequest(
                target=spec(str(target_path)),
                draft=spec(c.draft_path) if c.draft_path else None,
                spec_type=c.spec_type,
                ngl=c.ngl,
                draft_ngl=c.draft_ngl,
                n_ctx=n_ctx,
                n_parallel=1,
            )
            plan = plan_memory(req, devices)
        except Exception as exc:  # noqa: BLE001 - a plan failure must not block tuning
            log.debug("memory plan failed for %s", c.label, exc_info=True)
            notes.append(f"memory plan failed for {c.label}: {exc}")
            return None
        if plan.fits:
            return None
        short = format_bytes(-(plan.margin_bytes or 0), unit="MiB", decimals=0)
        return f"does not fit in memory (short by about {short})"

    return check


def _memory_cross_check_lines(target_path: Path, devices: Any, n_ctx: int, server_binary: Any) -> list[str]:
    """The memory plan's cross-check lines for the tune log (:func:`tuner.crosscheck.lines.plan_check_lines`:
    the context-vs-layers trade and a cached llama-server disagreement, which it lists whenever there is one;
    it reads the cache only and never starts a server). Raises nothing: a failed check is one line."""
    try:
        from tuner.crosscheck.lines import plan_check_lines
        from tuner.hardware.memory import MemoryRequest, load_model_spec

        lines = plan_check_lines(MemoryRequest(target=load_model_spec(str(target_path)), n_ctx=n_ctx),
                                 devices, server_binary)
    except Exception as exc:  # noqa: BLE001 - the sweep stands without the cross-check
        log.debug("memory plan cross-check unavailable", exc_info=True)
        return [f"memory plan cross-check unavailable ({exc})"]
    return [f"memory plan: {c.text}" for c in lines if c.disagrees]


def has_chat_template(path: Path) -> bool:
    """True when the GGUF carries a non-empty ``tokenizer.chat_template`` (llama-server then applies it to
    ``/v1/chat/completions`` requests: tools/server/server-common.cpp ``oaicompat_chat_params_parse``).
    An unreadable header counts as no template."""
    from tuner.catalog.header import GGUFError, read_header

    try:
        v = read_header(path).kv.get("tokenizer.chat_template")
    except (GGUFError, OSError):
        return False
    return isinstance(v, str) and bool(v.strip())


def _supervisor_launch_fn(
    sup: Any, target_path: Path, n_ctx: int, threads: int | None, emit: Callable, startup_timeout_s: float | None,
    server_args: tuple[str, ...] = (),
) -> LaunchFn:
    from tuner.server.argv import UnsupportedConfigError
    from tuner.server.diagnosis import speculation_reason
    from tuner.server.supervisor import ServerStartError

    def launch(c: Candidate, cancel: threading.Event) -> Launch:
        cfg = candidate_config(c, target_path, n_ctx=n_ctx, threads=threads, server_args=server_args)
        t = time.monotonic()
        try:
            sup.start(cfg, startup_timeout_s=startup_timeout_s)
            sup.wait_ready(cancel=cancel)
        except UnsupportedConfigError as exc:
            raise LaunchError(str(exc)) from exc
        except ServerStartError as exc:
            sup.stop(grace_s=2.0)
            if cancel.is_set():
                raise Cancelled() from exc
            d = exc.diagnosis
            raise LaunchError(f"{d.message}", getattr(d, "evidence", ())) from exc
        load_s = time.monotonic() - t
        emit("ready", f"{c.label}: ready in {load_s:.1f} s", candidate=c, detail={"load_s": load_s,
                                                                                 "argv": sup.argv})
        client = sup.client(timeout_s=30.0)

        def stop() -> None:
            try:
                client.close()
            finally:
                sup.stop(grace_s=5.0)

        # where /slots cannot say (ik_llama.cpp), the supervisor's ready check confirmed speculation from the log
        confirmed = None if getattr(sup.dialect, "spec_on_slots", True) else not c.is_baseline
        return Launch(client=client, stop=stop, log_tail=sup.log_tail, load_s=load_s,
                      speculation_reason=speculation_reason, speculative_active=confirmed)

    return launch


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
    """See :func:`tuner.calibration.tune.tune`. ``launch_fn`` / ``settings`` replace the supervisor
    and the search settings (tests); ``scanned`` / ``binary``: the caller's scan and server, used
    instead of scanning and discovering again."""
    target = request.target
    prompts = request.prompts
    budget_s = request.budget_s
    force = request.force
    server = request.server
    n_predict = request.n_predict
    repetitions = request.repetitions
    n_ctx = request.n_ctx
    threads = request.threads
    max_prompts = request.max_prompts
    sampling = request.sampling
    long_context = request.long_context
    chat = request.chat
    long_share = request.long_share
    rpc_hosts = request.rpc_hosts
    emit = _Emitter(on_event)
    t0 = time.monotonic()
    models_dir = Path(request.models_dir).resolve()

    # Prompts first: a bad file is the user's quickest fix.
    if isinstance(prompts, PromptSet):
        ps = prompts
    elif prompts is None:
        ps = default_prompts()
        if max_prompts is None:
            max_prompts = DEFAULT_SET_PROMPTS
    else:
        ps = load_prompts(prompts)
    if len(ps) > MAX_PROMPTS_PER_SWEEP and (max_prompts is None or max_prompts > MAX_PROMPTS_PER_SWEEP):
        emit("skipped", f"the prompt set has {len(ps):,} prompts; a sweep measures at most "
             f"{MAX_PROMPTS_PER_SWEEP} of them (spread over its categories)")
        max_prompts = MAX_PROMPTS_PER_SWEEP
    chosen_prompts = select_prompts(ps, max_prompts)
    if long_share is None and settings is not None:
        long_share = settings.long_share
    _check_long_share(long_share, long_context)

    target_model, entry, _models = _choose_target(models_dir, target, scanned)
    target_path = Path(target_model.path).resolve()
    from tuner.ctxsize import resolve_ctx_size

    try:
        n_ctx, ctx_note = resolve_ctx_size(n_ctx, getattr(target_model, "context_length", None))
    except ValueError as exc:
        raise TuneError(str(exc), bad_input=True) from exc
    # Server (its dialect decides where raw completions go) and hardware.
    from tuner.server.dialect import DialectError, probe_dialect
    from tuner.server.discovery import (
        ServerNotFoundError,
        find_named_server,
        find_server,
    )

    if binary is not None:
        pass  # the caller's binary (the app: one binary for the sweep and for serving)
    elif server is not None:
        # A path the user named is that binary or an error, never a silent fallback to another build.
        try:
            binary = find_named_server(server, flag="--server")
        except ServerNotFoundError as exc:
            raise TuneError(f"--server {server}: no such file, or not executable", bad_input=True) from exc
    else:
        try:
            binary = find_server(None)
        except ServerNotFoundError as exc:
            raise TuneError(str(exc)) from exc
    try:
        dialect = probe_dialect(binary.path)
    except DialectError as exc:  # a broken binary, or one that is not llama-server: a TuneError, not a traceback
        raise TuneError(str(exc), evidence=getattr(exc, "evidence", ()), bad_input=server is not None) from exc
    _check_server_args(request.server_args, dialect, binary.path)
    use_chat = has_chat_template(target_path) if chat is None else chat
    workload = Workload(chat=use_chat, sampling=sampling or Sampling(), n_ctx=n_ctx,
                        raw_endpoint=getattr(dialect, "draft_counts_endpoint", "/completion"))
    if long_context:
        base = len(ps.prompts)
        chosen_prompts = list(chosen_prompts) + [(base + j, p) for j, p in enumerate(long_context_prompts())]
    emit("started", f"tuning {target_path.name} in {models_dir}: {workload.describe()}",
         detail={"target": str(target_path), "n_ctx": n_ctx, "endpoint": workload.endpoint,
                 "sampling": workload.sampling.body()})
    if ctx_note:
        emit("error", ctx_note)

    drafts: list[DraftOption] = []
    if entry is not None:
        for dc in entry.drafts:
            drafts.append(DraftOption(path=str(Path(dc.model.path).resolve()), size_bytes=dc.model.size_bytes,
                                      score=dc.score, warnings=tuple(dc.warnings)))
        for m, verdict in entry.incompatible:
            emit("error", f"{Path(m.path).name} cannot draft for {target_path.name}: {verdict.message}")
    heads = _head_options(entry, target_path, emit)

    try:
        from tuner.crosscheck.build import build_probes
        from tuner.hardware import detect_devices

        devices = detect_devices(binary.path, build_probes(), rpc_hosts=tuple(rpc_hosts) or None)
    except Exception as exc:  # noqa: BLE001 - hardware detection never blocks tuning
        log.warning("hardware detection failed", exc_info=True)
        devices = None
        emit("error", f"hardware detection failed: {exc}")

    keys = StalenessKeys(
        hardware_fingerprint=hardware_fingerprint(devices) if devices is not None else None,
        server_binary=_file_identity(Path(binary.path)),
        server_build=(f"{binary.build} ({binary.commit})" if binary.commit else str(binary.build))
        if binary.build is not None else None,
        dialect_fingerprint=dialect.help_sha256,
        model_files=(ModelFileKey.of(target_path), *(ModelFileKey.of(d.path) for d in drafts)),
        prompt_set_sha256=hashlib.sha256(
            (ps.sha256 + ":" + ",".join(str(i) for i, _ in chosen_prompts) + f":{n_predict}"
             + (":long-context" if long_context else "")).encode()
        ).hexdigest(),
        n_ctx=n_ctx,
        workload=workload.key(),
        long_share=long_share,
        server_args=tuple(request.server_args),
    )

    try:
        saved = store.load(target_path)
    except ProfileError as exc:
        saved = None
        emit("error", f"the saved profile was unreadable and has been kept aside: {exc}")
    if saved is not None:
        reasons = store.stale_reasons(saved, keys)
        spent = saved.decision.get("budget_spent_before") or []
        old_budget = saved.decision.get("budget_s")
        if spent and isinstance(old_budget, (int, float)) and budget_s > old_budget:
            # a sweep that ran out of time is not an answer a larger budget should reuse
            reasons.append(f"its {old_budget:.0f} s budget was spent before {', '.join(map(str, spent[:3]))}"
                           f"{' and others' if len(spent) > 3 else ''} were measured; this sweep has {budget_s:.0f} s")
        if not reasons and not force:
            flags = f", tuned with the extra llama-server flags {' '.join(keys.server_args)}" if keys.server_args else ""
            emit("reused", f"using the saved profile for {target_path.name} (still fresh{flags}; --force re-tunes)",
                 detail={"profile_path": str(store.path_for(target_path))})
            return TuneResult(target_path=target_path, request=request, decision=_decision_from_profile(saved), profile=saved,
                              profile_path=store.path_for(target_path), reused=True,
                              elapsed_s=time.monotonic() - t0)
        if reasons:
            emit("stale", "the saved profile is stale: " + "; ".join(reasons), detail={"reasons": reasons})

    # Plan.
    notes: list[str] = []
    gpu = bool(devices is not None and getattr(devices, "devices", ()))
    memory_check = _memory_check_factory(target_path, devices, n_ctx, notes) if devices is not None else None
    plan: CandidatePlan = plan_candidates(
        target_path, drafts, spec_types=dialect.spec_types, mtp_layers=getattr(target_model, "mtp_layers", 0),
        memory_check=None if gpu else memory_check, gpu=gpu, heads=heads,
        autotune=getattr(dialect, "has_spec_autotune", False), supports=getattr(dialect, "supports_spec_type", None),
    )
    rpc_used = bool(devices is not None and getattr(devices, "rpc_endpoints", ()))
    if rpc_hosts and devices is not None:
        notes += list(devices.rpc_notes)
        if not rpc_used:
            notes.append("no RPC host reachable: tuning on this machine only")
    if gpu:
        plan = _place_on_gpu(plan, target_path, devices, n_ctx, notes)
        if rpc_used:
            from .remote import place_over_rpc

            plan = place_over_rpc(plan, target_path, devices, n_ctx, notes)
        if memory_check is not None:
            plan = apply_memory_check(plan, memory_check, drafts_only=True)
    plan = add_draft_sampling_variants(plan, workload, dialect)
    if devices is not None:
        notes += _memory_cross_check_lines(target_path, devices, n_ctx, binary.path)
    for note in notes:
        emit("error", note)
    emit(
        "plan",
        f"{len(plan.all_probes)} configurations to probe ({len(plan.drafts)} draft, {len(plan.ngram)} n-gram"
        + (", MTP" if plan.mtp else "") + f"), {len(plan.dropped)} dropped before launch",
        detail={"dropped": [{"label": d.candidate.label, "reason": d.reason} for d in plan.dropped],
                "probes": [c.label for c in plan.all_probes],
                "prompts": [i for i, _ in chosen_prompts]},
    )

    settings = settings or SearchSettings(
        n_predict=n_predict,
        max_pairs=max(MIN_PAIRS, 2 * repetitions),
        # weights mmapped in host memory: the baseline's and a finalist's server share the page cache,
        # so the paired rounds run them side by side; with a GPU, alternate launches instead
        side_by_side=not gpu,
    )
    if long_share is not None:
        settings = dataclasses.replace(settings, long_share=long_share)
    sups: list[Any] = []
    if launch_fn is None:
        from tuner.server.supervisor import Supervisor

        try:
            sup_base, sup_cand = Supervisor(binary, dialect), Supervisor(binary, dialect)
        except DialectError as exc:
            raise TuneError(str(exc), bad_input=server is not None) from exc
        sups = [sup_base, sup_cand]
        base_fn = _supervisor_launch_fn(sup_base, target_path, n_ctx, threads, emit, None, keys.server_args)
        cand_fn = _supervisor_launch_fn(sup_cand, target_path, n_ctx, threads, emit, None, keys.server_args)

        def launch_fn(c: Candidate, cancel: threading.Event) -> Launch:
            # one supervisor for the baseline, one for the candidates: both can run at once (side by side)
            return (base_fn if c.is_baseline else cand_fn)(c, cancel)
    from tuner.crosscheck.cpu_buffers import recorded_no_repack
    from tuner.hardware.host import LoadWatcher, foreign_processes

    watcher = LoadWatcher()
    competing = foreign_processes("llama-server")
    if competing:
        emit("error", f"{len(competing)} other llama-server process{'es' if len(competing) != 1 else ''} "
             f"running on this machine (pid {', '.join(str(p) for p, _ in competing[:3])}): the measurements "
             "compete with them for CPU, GPU and memory; stop them (the app's Re-tune pauses its own server) "
             "for figures you can trust", detail={"competing": [{"pid": p, "cmdline": c} for p, c in competing]})

    watcher.start()
    try:
        outcome = run_search(plan, chosen_prompts, settings, workload, budget_s, launch_fn, cancel, emit,
                             busy=lambda: watcher.summary().busy)
        if outcome.cancelled:
            emit("cancelled", "tuning cancelled; nothing was saved")
            return TuneResult(target_path=target_path, request=request, decision=None,
                              measurements=outcome.measurements, cancelled=True, dropped=plan.dropped,
                              elapsed_s=time.monotonic() - t0)
    except BaselineFailed as exc:
        raise TuneError(
            f"{target_path.name} could not be measured on its own: {exc.measurement.error}",
            exc.measurement.evidence,
        ) from exc
    finally:
        load = watcher.stop()
        for sup in sups:
            sup.stop(grace_s=5.0)

    no_repack = recorded_no_repack(binary.path)  # the --no-repack workaround every launch ran with
    facts = ReportFacts(
        workload=workload,
        depth_categories=tuple(p.category for _, p in chosen_prompts if p.fill is not None and p.category),
        placement=RpcPlacement(devices, getattr(target_model, "n_layers", None), plan.baseline)
        if rpc_used and devices is not None else None,
        machine=MachineLoad(load, tuple(p for p, _ in competing)),
        cpu_workaround=NoRepack(*no_repack) if no_repack is not None else None,
    )
    decision = finish_decision(decide(outcome), outcome, facts)
    measurements = outcome.measurements
    emit("decision", decision.reason, decision=decision,
         detail={"load": {"other_cpu_mean": load.other_cpu_mean, "other_cpu_max": load.other_cpu_max,
                          "steal_mean": load.steal_mean, "samples": load.samples, "busy": load.busy},
                 "protocol": dict(outcome.protocol)})

    winner_cfg = candidate_config(decision.winner, target_path, n_ctx=n_ctx, threads=threads,
                                  server_args=keys.server_args)
    try:
        from tuner.server.argv import tuned_argv

        argv = tuple(tuned_argv(binary.path, winner_cfg, dialect))  # where to listen is the server's setting
    except Exception as exc:  # noqa: BLE001
        log.warning("could not build the winner's argv", exc_info=True)
        argv = ()
        emit("error", f"could not build the winner's argv: {exc}")
    profile = Profile(
        target_path=str(target_path),
        keys=keys,
        winner=decision.winner.to_json(),
        server_config=config_to_json(winner_cfg),
        argv=argv,
        decision={**decision.to_json(), "budget_s": budget_s,
                  "budget_spent_before": [c.label for c in outcome.unmeasured]},
        evidence=tuple(m.to_json() for m in measurements),
    )
    path = store.save(profile)
    emit("saved", f"profile saved to {path}", detail={"profile_path": str(path)})
    return TuneResult(
        request=request,
        target_path=target_path,
        decision=decision,
        measurements=tuple(measurements),
        profile=store.load(target_path),
        profile_path=path,
        dropped=plan.dropped,
        elapsed_s=time.monotonic() - t0,
    )


DRAFT_SAMPLING_FLAG = "--spec-draft-sampling"
DRAFT_SAMPLING_TYPES = ("draft-simple", "draft-mtp")
"""Types that fill the draft distribution ``--spec-draft-sampling probabilistic`` needs. b11434:
common/arg.cpp sets ``params.speculative.draft.probabilistic`` from the flag; both
``common_speculative_impl_draft_simple`` and ``common_speculative_impl_draft_mtp`` (common/speculative.cpp;
the MTP one is built from ``params.draft``, "reuses the draft-model params slot") keep the sampled draft
candidates (``result_q``) in ``draft()`` only when that is set, and tools/server/server-context.cpp
``use_spec_rejection`` verifies them by rejection at temperature > 0. The other drafters fall back to
sample-and-match."""


def add_draft_sampling_variants(plan: CandidatePlan, workload: Workload, dialect: Any) -> CandidatePlan:
    """At sampled settings (temperature > 0) and where the binary offers ``--spec-draft-sampling``, each
    draft-model probe gets a twin with ``probabilistic`` drafts, right after it, and the ``draft-mtp``
    probe (the target's own MTP layers) gets one at the end of ``plan.drafts``: a candidate like any
    other (the search probes, refines and confirms it as its own group, with the draft probes). Greedy
    workloads and builds without the flag get the plan unchanged."""
    from dataclasses import replace

    has = getattr(dialect, "has", None)
    if workload.sampling.is_greedy or has is None or not has(DRAFT_SAMPLING_FLAG):
        return plan
    drafts: list[Candidate] = []
    for c in plan.drafts:
        drafts.append(c)
        if c.spec_type in DRAFT_SAMPLING_TYPES and c.draft_sampling is None:
            drafts.append(replace(c, draft_sampling="probabilistic"))
    mtp = plan.mtp
    if mtp is not None and mtp.spec_type in DRAFT_SAMPLING_TYPES and mtp.draft_sampling is None:
        drafts.append(replace(mtp, draft_sampling="probabilistic"))
    return replace(plan, drafts=tuple(drafts))


def _check_server_args(words: tuple[str, ...], dialect: Any, binary_path: Path) -> None:
    """The user's llama-server flags must be ones this binary lists (:func:`tuner.serverargs.check_known`).

    Raises:
        TuneError: (``bad_input``) naming the flag and the binary.
    """
    from tuner.serverargs import ServerArgError, check_known

    try:
        check_known(words, dialect.has, binary_path, where="extra llama-server flag")
    except ServerArgError as exc:
        raise TuneError(str(exc), bad_input=True) from None


def _place_on_gpu(plan: CandidatePlan, target_path: Path, devices: Any, n_ctx: int, notes: list[str]) -> CandidatePlan:
    """Set ``ngl``/``draft_ngl`` for the two GPU placements of each draft.

    ``draft-on-gpu``: the draft fully on the GPU, the target gets the most layers that still fit
    (``tuner.hardware.memory.max_target_ngl``). ``target-whole``: every target layer on the GPU, the draft
    on the CPU (``draft_ngl`` 0). When the first already keeps the target whole, the second is dropped.
    """
    from dataclasses import replace

    try:
        from tuner.hardware.memory import MemoryRequest, load_model_spec, max_target_ngl
    except Exception as exc:  # noqa: BLE001
        log.debug("GPU placement unavailable", exc_info=True)
        notes.append(f"GPU placement unavailable ({exc}); the server's --fit decides")
        return plan
    out: list[Candidate] = []
    try:
        tspec = load_model_spec(str(target_path))
    except Exception as exc:  # noqa: BLE001
        log.debug("cannot read %s for the memory plan", target_path, exc_info=True)
        notes.append(f"cannot read {target_path.name} for the memory plan ({exc}); the server's --fit decides")
        return plan
    full = tspec.n_layer + 1
    for c in plan.drafts:
        try:
            dspec = load_model_spec(c.draft_path) if c.draft_path else None
            if c.placement == "draft-on-gpu":
                ngl = max_target_ngl(MemoryRequest(target=tspec, draft=dspec, spec_type=c.spec_type, draft_ngl=None,
                                                   n_ctx=n_ctx, n_parallel=1), devices)
                out.append(replace(c, ngl=ngl, draft_ngl=None))
            elif c.placement == "target-whole":
                twin = next((o for o in out if o.draft_path == c.draft_path and o.placement == "draft-on-gpu"), None)
                if twin is not None and twin.ngl is not None and twin.ngl >= full:
                    continue
                out.append(replace(c, ngl=full, draft_ngl=0))
            else:
                out.append(c)
        except Exception as exc:  # noqa: BLE001
            log.debug("memory plan failed for %s", c.label, exc_info=True)
            notes.append(f"memory plan failed for {c.label}: {exc}")
            out.append(c)
    return replace(plan, drafts=tuple(out))


def _decision_from_profile(p: Profile) -> Decision:
    """Rebuild the :class:`Decision` summary saved in a profile (its words as a reused profile shows
    them: :func:`tuner.calibration.report.reused_decision`), with its break-even and per-category lines.
    Its comparisons are not rebuilt (they hold the samples): the profile's ``decision["comparisons"]``
    keeps their figures."""
    from tuner.calibration.decide import BreakEven, CategoryResult

    d = p.decision

    def parsed(key: str, of: Callable[[dict], Any]) -> tuple:
        out = []
        for obj in d.get(key) or []:
            try:
                out.append(of(obj))
            except (KeyError, TypeError, ValueError, AttributeError):
                log.debug("profile %s: unreadable %s entry %r", p.target_path, key, obj)
        return tuple(out)

    winner = Candidate.from_json(p.winner)
    best = d.get("best_speculative")
    return reused_decision(Decision(
        winner=winner,
        gen_tokens_per_s=d.get("gen_tokens_per_s"),
        baseline_gen_tokens_per_s=d.get("baseline_gen_tokens_per_s"),
        speedup=float(d.get("speedup") or 1.0),
        speedup_ci_low=d.get("speedup_ci_low"),
        speedup_ci_high=d.get("speedup_ci_high"),
        best_speculative=Candidate.from_json(best) if best else None,
        best_speculative_speedup=d.get("best_speculative_speedup"),
        lossless=d.get("lossless"),
        break_even=parsed("break_even", BreakEven.from_json),
        per_category=parsed("per_category", CategoryResult.from_json),
        pairs=int(d.get("pairs") or 0),
    ), d, p.created_unix_s)
