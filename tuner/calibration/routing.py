"""What one endpoint serves for a folder: each target with its saved profile's tuned configuration (or alone,
untuned), and how many may be loaded at once (``--models-max``) from the memory plan.

The router preset itself is :mod:`tuner.server.preset`'s; this module decides what goes into it:

- :func:`target_choices`: the folder's LLMs (every one can be a target: :mod:`tuner.catalog.families`), each
  with its id, whether a saved profile tuned it and that decision in a few words (the tray's *Serve* menu);
- :func:`router_plan`: the :class:`~tuner.server.preset.RouterPlan` of those targets — a tuned one's section is
  its profile's configuration (:func:`tuner.calibration.serving.profile_server_config`, one source of truth with
  ``serve --models``), an untuned one the model alone at the context size the app serves; the user's prompt-cache
  limit and flags on every one; a model the preset format cannot carry is left out with the reason;
- :func:`models_max_for`: ``--models-max`` from :func:`tuner.hardware.memory.plan_memory`: 1 when a model uses a
  GPU (one model's weights are what a GPU is planned to hold), else as many of the largest models as fit in the
  RAM available now while :data:`RAM_MARGIN_FRACTION` of the RAM stays free.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner.catalog.folder import ScanResult
from tuner.catalog.model import ModelFile
from tuner.ctxsize import resolve_ctx_size
from tuner.errors import DraftwiseError
from tuner.hardware.devices import Devices
from tuner.hardware.memory import MemoryRequest, load_model_spec, plan_memory
from tuner.profiles import Profile, ProfileError, ProfileStore
from tuner.server.capture import CaptureError, log_prompts_dir
from tuner.server.config import ServerConfig
from tuner.server.dialect import Dialect
from tuner.server.preset import PresetError, RouterModel, RouterPlan, model_id, section_pairs
from tuner.server.router_launch import router_problem
from tuner.serverargs import parse_server_args
from tuner.settings import Settings
from tuner.units import GIB, MIB, format_bytes

from .serving import profile_server_config

log = logging.getLogger(__name__)

#: Share of the machine's RAM that stays free when models are loaded side by side (never less than
#: :data:`RAM_MARGIN_MIN_BYTES`): the desktop and other programs keep running.
RAM_MARGIN_FRACTION = 0.2
RAM_MARGIN_MIN_BYTES = 1 * GIB
#: Most models loaded at once on a CPU (llama-server's own default of ``--models-max``): each loaded model
#: is a process whose threads compete for the same cores when requests for several arrive together.
MAX_MODELS = 4


@dataclass(frozen=True)
class TargetChoice:
    """One target of the folder, for the *Serve* menu.

    Fields:
        path: the GGUF; ``name``: its file name; ``model_id``: the id a router serves it as.
        tuned: a readable saved profile exists; ``words``: its decision in a few words ("" untuned).
        label: the profile's speculation label ("no speculation", …); ``break_even_rate``: 0..1 or None.
        problem: why its profile cannot be used (unreadable, refused), "" when fine.
    """

    path: Path
    name: str
    model_id: str
    tuned: bool
    words: str = ""
    label: str = "no speculation"
    break_even_rate: float | None = None
    problem: str = ""


def break_even_rate(decision: dict[str, Any]) -> float | None:
    """The winner's break-even acceptance (0..1) from a profile's decision JSON, None for the model alone or
    when unknown."""
    winner = decision.get("winner") or {}
    if not winner or winner.get("spec_type", "none") == "none":
        return None
    best = None
    for be in decision.get("break_even") or ():
        cand = be.get("candidate") or {}
        value = be.get("break_even_acceptance")
        if value is None:
            continue
        if cand.get("spec_type") == winner.get("spec_type") and cand.get("draft_path") == winner.get("draft_path"):
            best = value
    if best is None or not 0.0 < best < 1.0:
        return None
    return float(best)


_ALONE_WORDS = {
    "slower": "fastest on its own",
    "never_drafted": "fastest on its own",
    "within_noise": "on its own (speculation was no faster)",
    "not_enough_evidence": "on its own for now (not sure yet)",
    "screening_only": "on its own for now (not sure yet)",
    "unsteady": "on its own for now (its speed varied too much to tell)",
    "unmeasured": "on its own for now (speculation not measured yet)",
    "failed": "on its own (speculation did not run correctly here)",
    "nothing": "on its own (nothing to speculate with)",
}
"""The few words of each ``alone.*`` decision kind (``tuner.calibration.decide``)."""
STALE_WORDS = "needs a re-tune (its saved profile is out of date)"


def decision_kind(profile: Profile) -> str:
    """The saved decision's kind as its headline sentence holds it (``"headline.serving"``, ``"alone.slower"``, …;
    ``tuner.calibration.sentences``), else the decision's ``kind`` field (``"speculate"``, ``"alone_slower"``)
    translated; ``""`` for a profile saved before kinds were kept."""
    for s in profile.decision.get("sentences") or ():
        if isinstance(s, dict) and s.get("slot") == "HEADLINE":
            return str(s.get("kind") or "")
    kind = str(profile.decision.get("kind") or "")
    if kind == "speculate":
        return "headline.serving"
    return kind.replace("alone_", "alone.", 1) if kind.startswith("alone_") else ""


def decision_words(profile: Profile, stale: Iterable[str] = ()) -> str:
    """A saved decision in a few words (the tray's *Serve* menu, ``serve --models``), from its stored kind (never its prose): speculation
    "draft model d.gguf speeds up 1.6×", the model alone because speculation was slower or never drafted
    "fastest on its own", not enough evidence "on its own for now (not sure yet)", …; a stale profile
    (``stale``: its reasons) "needs a re-tune …"."""
    if tuple(stale):
        return STALE_WORDS
    kind = decision_kind(profile)
    winner = profile.winner or {}
    spec = str(winner.get("spec_type") or "none")
    if kind.startswith("alone.") or (not kind and spec == "none"):
        return _ALONE_WORDS.get(kind.removeprefix("alone."), "on its own")
    draft = winner.get("draft_path")
    what = ("MTP" if "draft-mtp" in spec and not draft else f"draft model {Path(str(draft)).name}" if draft
            else "n-gram speculation")
    speedup = profile.decision.get("speedup")
    return f"{what} speeds up {speedup:.1f}×" if isinstance(speedup, (int, float)) and speedup > 0 else what


def _llms(scan: ScanResult) -> list[ModelFile]:
    return sorted((m for m in scan.models if m.kind == "llm"), key=lambda m: str(m.path))


def target_choices(scan: ScanResult, store: ProfileStore | None = None) -> list[TargetChoice]:
    """The folder's LLMs, tuned ones first (then by name), each with its saved decision. Reads the profile files
    (small JSON); never raises for a bad profile (it is untuned, with :attr:`TargetChoice.problem`)."""
    store = store or ProfileStore()
    out: list[TargetChoice] = []
    taken: list[str] = []
    for m in _llms(scan):
        mid = model_id(m.path, taken)
        taken.append(mid)
        try:
            prof = store.load(m.path, keep_aside=False)
        except (ProfileError, OSError) as exc:
            out.append(TargetChoice(Path(m.path), Path(m.path).name, mid, False, problem=str(exc)))
            continue
        if prof is None:
            out.append(TargetChoice(Path(m.path), Path(m.path).name, mid, False))
            continue
        out.append(TargetChoice(Path(m.path), Path(m.path).name, mid, True, decision_words(prof),
                                str(prof.decision.get("label") or "no speculation"), break_even_rate(prof.decision)))
    return sorted(out, key=lambda c: (not c.tuned, c.name.lower()))


def untuned_config(model: ModelFile, settings: Settings) -> ServerConfig:
    """The model alone, as the app would serve it untuned: its context size (``tuner.ctxsize``), one slot, the
    user's prompt-cache limit and flags.

    Raises:
        ValueError: the context setting does not fit the model (named).
        tuner.serverargs.ServerArgError: a refused user flag.
    """
    n_ctx, _ = resolve_ctx_size(settings.ctx_size, model.context_length)
    return ServerConfig(model_path=Path(model.path), n_ctx=n_ctx, n_parallel=1, cache_ram_mib=settings.cache_ram_mib,
                        extra_args=parse_server_args(settings.server_args, "the server_args setting"))


def tuned_model(choice: TargetChoice, profile: Profile, settings: Settings,
                models_dir: Path | None = None) -> RouterModel:
    """A tuned target's section: its profile's configuration with the user's prompt-cache limit, checked as
    ``serve --models`` checks it (:func:`tuner.calibration.serving.profile_server_config`: its drafts from
    ``models_dir``, None = the target's own folder; RPC hosts loopback or ``settings.rpc_hosts``).

    Raises:
        ProfileError: the profile sets an option a profile may not, names another model, a draft outside the
            folder, an RPC host not allowed or a number out of range (the field named).
    """
    cfg = replace(profile_server_config(profile, models_dir, rpc_allowed=settings.rpc_hosts),
                  cache_ram_mib=settings.cache_ram_mib, alias=None)
    return RouterModel(choice.model_id, cfg, True, choice.label, choice.words, choice.break_even_rate)


def _model_for(choice: TargetChoice, model: ModelFile, settings: Settings, store: ProfileStore,
               models_dir: Path) -> RouterModel:
    """The section of one choice (tuned from its profile, else the model alone).

    Raises: ProfileError, OSError, ValueError, ServerArgError (the caller leaves the model out with the words).
    """
    if choice.tuned:
        prof = store.load(choice.path, keep_aside=False)
        if prof is not None:
            return tuned_model(choice, prof, settings, models_dir)
    return RouterModel(choice.model_id, untuned_config(model, settings), False, "no speculation", "")


def router_plan(scan: ScanResult, settings: Settings, binary: Path | str, dialect: Dialect,
                devices: Devices | None = None, store: ProfileStore | None = None,
                api_key: str | None = None) -> RouterPlan:
    """The router plan for the folder ``scan`` found: one section per LLM (:func:`target_choices` order), the
    app's listen settings (``settings.port``, loopback, ``api_key``, CORS, idle sleep) and ``--models-max``
    from ``devices`` (:func:`models_max_for`; None = 1). A model that cannot be a section (its profile refused,
    a path the preset format cannot carry, a flag the binary lacks) is in ``left_out`` with the reason.
    Raises nothing for one bad model; the plan may hold none (the caller serves one model then)."""
    store = store or ProfileStore()
    files = {str(Path(m.path)): m for m in _llms(scan)}
    models: list[RouterModel] = []
    left_out: list[tuple[str, str]] = []
    for choice in target_choices(scan, store):
        try:
            model = _model_for(choice, files[str(choice.path)], settings, store, scan.folder)
            section_pairs(model, binary, dialect)  # the preset can carry it (raises PresetError)
        except (DraftwiseError, OSError, ValueError) as exc:
            why = str(exc) if isinstance(exc, PresetError) else f"{choice.name}: {exc}"
            log.info("left out of the router preset: %s", why)
            left_out.append((str(choice.path), why))
            continue
        models.append(model)
    if settings.capture_requests and dialect.has_capture:
        models = [captured(m) for m in models]
    n, why = models_max_for(models, devices) if devices is not None else (1, "one model at a time")
    return RouterPlan(tuple(models), n, why, host="127.0.0.1", port=settings.port, api_key=api_key,
                      cors_origins=settings.cors_origins_value(), sleep_idle_s=settings.idle_sleep_s or None,
                      left_out=tuple(left_out))


def captured(model: RouterModel, on: bool = True) -> RouterModel:
    """``model`` keeping the requests it serves in its own private folder (``--log-prompts-dir`` in its section:
    :func:`tuner.server.log_prompts_dir` of its id, made now), or not (``on`` False). A folder that cannot be
    made leaves the model without capture (logged), serving goes on."""
    folder = None
    if on:
        try:
            folder = log_prompts_dir(model.model_id)
        except CaptureError:
            log.warning("not keeping the requests %s serves", model.model_id, exc_info=True)
    return replace(model, config=replace(model.config, log_prompts_dir=folder))


def serving_plan(scan: ScanResult, settings: Settings, binary: Path | str, dialect: Dialect, target: Path | str | None,
                 api_key: str | None = None, devices: Devices | None = None) -> tuple[RouterPlan | None, str]:
    """How the app serves ``target`` of the folder ``scan`` found: ``(plan, "")`` through llama-server's router
    (every model of the folder from one endpoint, :func:`router_plan`), or ``(None, why)`` one model at a time —
    a binary without router mode, a wrapper script or a LAN endpoint
    (:func:`tuner.server.router_launch.router_problem`),
    RPC hosts set (the router cannot switch a model to its local fallback when a host is lost), fewer than two
    models to serve, or ``target`` itself left out of the preset (the reason said). ``devices`` None = detected
    now (``llama-server --list-devices``, cached probes only)."""
    problem = router_problem(binary, dialect, settings.host)
    if problem is not None:
        return None, problem
    if settings.rpc_hosts:
        return None, "RPC hosts are set, and a placement over RPC hosts is served as one model"
    if len(_llms(scan)) < 2:
        return None, "the folder holds one model"
    if devices is None:
        from tuner.crosscheck.build import build_probes
        from tuner.hardware.devices import detect_devices

        devices = detect_devices(Path(binary), build_probes(probe=False))
    plan = router_plan(scan, settings, binary, dialect, devices, api_key=api_key)
    if target is not None and plan.model_for(target) is None:
        why = next((w for p, w in plan.left_out if Path(p) == Path(target)), "it is not an LLM of the folder")
        return None, f"{Path(target).name} cannot be served through the router: {why}"
    if len(plan.models) < 2:
        return None, "only one model of the folder can be served through the router"
    return plan, ""


def _memory_request(cfg: ServerConfig) -> MemoryRequest:
    """The memory plan's request for a section's configuration (``ngl`` words = all layers)."""
    def layers(v: int | str | None) -> int | None:
        return v if isinstance(v, int) else None

    return MemoryRequest(
        target=load_model_spec(cfg.model_path), draft=load_model_spec(cfg.draft_path) if cfg.draft_path else None,
        spec_type=cfg.spec_type or "none", ngl=layers(cfg.ngl), draft_ngl=layers(cfg.draft_ngl),
        n_ctx=cfg.n_ctx or 4096, n_parallel=cfg.n_parallel, no_repack=cfg.no_repack,
        prompt_cache_bytes=max(cfg.cache_ram_mib or 0, 0) * MIB)


def models_max_for(models: Sequence[RouterModel], devices: Devices) -> tuple[int, str]:
    """``(--models-max, why in words)`` for ``models`` on this machine (the module docstring's rule). A model
    whose plan fails is left out of the count; none planned = 1."""
    needs: list[tuple[int, int]] = []  # (host bytes, GPU bytes) per model
    for m in models:
        try:
            plan = plan_memory(_memory_request(m.config), devices)
        except (DraftwiseError, OSError, ValueError):
            log.debug("no memory plan for %s", m.model_id, exc_info=True)
            continue
        needs.append((plan.host.need.total_bytes, sum(d.need.total_bytes for d in plan.devices)))
    if not needs:
        return 1, "one model at a time (the memory of the models could not be planned)"
    if any(gpu > 0 for _host, gpu in needs):
        return 1, "one model at a time: each is planned to fill the GPU"
    total, free = devices.ram_total_bytes, devices.ram_available_bytes
    if not total or not free:
        return 1, "one model at a time (this machine's free RAM is unknown)"
    margin = max(RAM_MARGIN_MIN_BYTES, int(total * RAM_MARGIN_FRACTION))
    room = free - margin
    n, used = 0, 0
    for host, _gpu in sorted(needs, reverse=True)[:MAX_MODELS]:
        if used + host > room:
            break
        n, used = n + 1, used + host
    n = max(1, n)
    gb = format_bytes
    if len(needs) == 1:
        return 1, "one model"
    if n == 1:
        return 1, f"one model at a time: two need more than the {gb(free)} of RAM free (keeping {gb(margin)} free)"
    return n, (f"up to {n} models loaded at once: they need {gb(used)} of the {gb(free)} of RAM free "
               f"(keeping {gb(margin)} free)")


__all__ = ["MAX_MODELS", "RAM_MARGIN_FRACTION", "RAM_MARGIN_MIN_BYTES", "TargetChoice", "break_even_rate", "captured",
           "STALE_WORDS", "decision_kind", "decision_words", "models_max_for", "router_plan", "serving_plan", "target_choices", "tuned_model",
           "untuned_config"]
