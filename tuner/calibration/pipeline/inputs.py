"""The tune's inputs, resolved once into one frozen :class:`TuneInputs`: the prompts, the target, the
context size, the server and its dialect, the workload, the drafts and heads, the devices.

Bad inputs are reported in one fixed order, the quickest fix first: a named ``--server`` that is no
llama-server, an ambiguous ``--target`` name, the prompt file, the models folder (a file, missing, no LLM,
no such target), the context size, the discovered server and its dialect, then the user's extra llama-server
flags (tests/calibration/pipeline/test_inputs.py pins it). A new input of the sweep (a prompt source, a
setting the launches need) is resolved here and becomes a field of :class:`TuneInputs`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..candidates import DraftOption, HeadOption
from ..prompts import PromptChoice, PromptFileError, captured_prompt_set, choose_prompts
from ..request import TuneError, TuneRequest, _check_long_share
from ..workload import Workload, long_context_prompts
from .events import Events
from .server import ServerChoice, check_server_args, resolve_server
from .target import TargetChoice, check_target_name, choose_target, scan_folder

if TYPE_CHECKING:
    from tuner.catalog.families import TargetEntry
    from tuner.catalog.folder import ScanResult
    from tuner.catalog.model import ModelFile
    from tuner.hardware.devices import Devices
    from tuner.server.dialect import Dialect
    from tuner.server.discovery import ServerBinary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneInputs:
    """Everything the sweep needs to know before it plans, resolved once.

    Attributes:
        request: the request, unchanged.
        models_dir: the models folder, resolved.
        target: the target and the folder's scan.
        prompts: the requests every launch sends.
        n_ctx: the context size of every launch, tokens.
        server: the llama-server and its dialect.
        workload: what one measured request looks like (endpoint, sampling, context).
        devices: this machine's (and the RPC hosts') devices; ``None`` when detection failed.
        drafts: the draft models the catalog matched to the target.
        heads: the draft heads the catalog matched to it.
        long_share: the served share of long-context requests (``None`` = the prompt set's own).
    """

    request: TuneRequest
    models_dir: Path
    target: TargetChoice
    prompts: PromptChoice
    n_ctx: int
    server: ServerChoice
    workload: Workload
    devices: Devices | None
    drafts: tuple[DraftOption, ...]
    heads: tuple[HeadOption, ...]
    long_share: float | None

    @property
    def target_path(self) -> Path:
        """The target file, resolved."""
        return self.target.path

    @property
    def binary(self) -> ServerBinary:
        """The llama-server binary."""
        return self.server.binary

    @property
    def dialect(self) -> Dialect:
        """What the binary accepts."""
        return self.server.dialect

    @property
    def gpu(self) -> bool:
        """True when there is an offload device (local or over RPC)."""
        return self.devices is not None and bool(self.devices.devices)

    @property
    def rpc_used(self) -> bool:
        """True when an RPC host answered: the plan places the target over it."""
        return self.devices is not None and bool(self.devices.rpc_endpoints)


def resolve_inputs(request: TuneRequest, *, scanned: ScanResult | None, binary: ServerBinary | None,
                   events: Events, default_long_share: float | None = None) -> TuneInputs:
    """Resolve ``request`` into :class:`TuneInputs`; emits the ``"skipped"`` note of a large prompt set,
    ``"started"``, and the notes (default target, context size, refused drafts and heads, failed hardware
    detection), in that order.

    Args:
        request: the request.
        scanned: the caller's scan of the models folder (used when it is of that folder).
        binary: the caller's llama-server (``None`` = ``request.server`` or discovered).
        events: the tune's events.
        default_long_share: the share when the request has none (a test's ``SearchSettings.long_share``).

    Raises:
        TuneError: a bad input (``bad_input``), in the module docstring's order; or no llama-server found.
        PromptFileError: the prompt file is unusable (names the file and line).
    """
    named = resolve_server(request.server, None) if binary is None and request.server is not None else None
    models_dir = Path(request.models_dir).resolve()
    scan = scan_folder(models_dir, scanned)
    events.note(check_target_name(scan, request.target))
    if not request.prompts_from_served:
        prompts = choose_prompts(request.prompts, request.max_prompts,
                                 long_context_prompts() if request.long_context else ())
        if prompts.skipped_note:
            events("skipped", prompts.skipped_note)
    long_share = request.long_share if request.long_share is not None else default_long_share
    _check_long_share(long_share, request.long_context or request.prompts_from_served)
    target = choose_target(models_dir, request.target, scan)
    if request.prompts_from_served:
        prompts = served_prompts(request, target.path)
    n_ctx, ctx_note = _context_size(request.n_ctx, target.model)
    server = named or resolve_server(request.server, binary)
    check_server_args(request.server_args, server)
    workload = _workload(request, target.path, n_ctx, server.dialect)
    events("started", f"tuning {target.path.name} in {models_dir}: {workload.describe()}",
           detail={"target": str(target.path), "n_ctx": n_ctx, "endpoint": workload.endpoint,
                   "sampling": workload.sampling.body()})
    events.note(ctx_note)
    drafts, draft_notes = draft_options(target.entry, target.path)
    heads, head_notes = head_options(target.entry, target.path)
    for note in (*draft_notes, *head_notes):
        events.note(note)
    return TuneInputs(request=request, models_dir=models_dir, target=target, prompts=prompts, n_ctx=n_ctx,
                      server=server, workload=workload, devices=_devices(server, request.rpc_hosts, events),
                      drafts=drafts, heads=heads, long_share=long_share)


def served_prompts(request: TuneRequest, target_path: Path) -> PromptChoice:
    """The captured requests of the served model (``request.served_model_id``, else the target's default id)
    as the sweep's prompts, with no built-in long-context requests
    (:func:`tuner.calibration.prompts.captured_prompt_set`).

    Raises:
        TuneError: (``bad_input``) none captured, naming ``--prompts-from-served`` and how to capture.
    """
    from tuner.server.config import default_alias

    model_id = request.served_model_id or default_alias(target_path)
    try:
        captured = captured_prompt_set(model_id, request.max_prompts)
    except PromptFileError:
        raise TuneError(f"--prompts-from-served: no captured requests of model {model_id!r} to re-tune on; serve it "
                        "with capture on first (the setting 'Keep served requests', or serve --capture-requests)",
                        bad_input=True) from None
    return choose_prompts(captured, None)


def _context_size(requested: int | None, model: ModelFile) -> tuple[int, str | None]:
    """``tuner.ctxsize.resolve_ctx_size`` for the target; its ``OptionError`` becomes a ``TuneError``."""
    from tuner.ctxsize import resolve_ctx_size

    try:
        return resolve_ctx_size(requested, model.context_length)
    except ValueError as exc:
        raise TuneError(str(exc), bad_input=True) from exc


def _workload(request: TuneRequest, target_path: Path, n_ctx: int, dialect: Dialect) -> Workload:
    """Chat requests when the target has a chat template (or ``request.chat`` says so), at the request's
    sampling, on the dialect's raw-completion endpoint; captured requests (``request.prompts_from_served``)
    always go as raw completions of the text llama-server logged (the served template is in it)."""
    from tuner.catalog.header import has_chat_template

    if request.prompts_from_served:  # captured prompts are templated already: raw completions, even for chat
        return Workload(chat=False, sampling=request.sampling, n_ctx=n_ctx,
                        raw_endpoint=dialect.draft_counts_endpoint, captured=True)
    chat = has_chat_template(target_path) if request.chat is None else request.chat
    return Workload(chat=chat, sampling=request.sampling, n_ctx=n_ctx, raw_endpoint=dialect.draft_counts_endpoint)


def draft_options(entry: TargetEntry | None, target_path: Path) -> tuple[tuple[DraftOption, ...], tuple[str, ...]]:
    """The draft models the catalog matched to the target (``TargetEntry.drafts``) as plan inputs, and one
    note per file the catalog refused (``TargetEntry.incompatible``, with its verdict)."""
    if entry is None:
        return (), ()
    options = tuple(DraftOption(path=str(Path(dc.model.path).resolve()), size_bytes=dc.model.size_bytes,
                                score=dc.score, warnings=tuple(dc.warnings)) for dc in entry.drafts)
    notes = tuple(f"{Path(m.path).name} cannot draft for {target_path.name}: {verdict.message}"
                  for m, verdict in entry.incompatible)
    return options, notes


def head_options(entry: TargetEntry | None, target_path: Path) -> tuple[tuple[HeadOption, ...], tuple[str, ...]]:
    """The draft heads the catalog matched to the target (``TargetEntry.heads``) as plan inputs, and one
    note per refused head with the rule it failed (``TargetEntry.mismatched_heads``)."""
    if entry is None:
        return (), ()
    options = tuple(HeadOption(path=str(Path(h.model.path).resolve()), spec_type=h.spec_type,
                               size_bytes=h.model.size_bytes) for h in entry.heads)
    notes = tuple(f"head {Path(m.path).name} does not fit {target_path.name} (rule: {verdict.rule}): "
                  f"{verdict.message}" for m, verdict in entry.mismatched_heads)
    return options, notes


def _devices(server: ServerChoice, rpc_hosts: tuple[str, ...], events: Events) -> Devices | None:
    """``tuner.hardware.detect_devices`` with the build's probes; a failure is a note, never the end of the
    tune (``None``: the plan then lets the server's ``--fit`` place every launch)."""
    try:
        import tuner.hardware
        from tuner.crosscheck.build import build_probes

        return tuner.hardware.detect_devices(server.binary.path, build_probes(), rpc_hosts=tuple(rpc_hosts) or None)
    except Exception as exc:  # noqa: BLE001 - hardware detection never blocks tuning
        log.warning("hardware detection failed", exc_info=True)
        events.note(f"hardware detection failed: {exc}")
        return None
