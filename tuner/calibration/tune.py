"""``tune(...)``: the one calibration entry point used by both the CLI and the GUI.

Flow (DESIGN.md "Data flow"): scan the models folder → pick the target and its compatible drafts
(tuner.catalog) → profile store: a fresh profile is reused unless ``force`` → plan candidates (memory
checked, pruned) → search (baseline, one long-draft probe per draft, predicted curve, refine the
promising draft lengths, successive halving, paired rounds against the baseline until a sequential test
is conclusive) → decide → save the profile. A load watcher (``tuner.hardware.host.LoadWatcher``) runs
during the sweep; the decision says when other programs used the CPU.

Threading: ``tune`` blocks; the GUI calls it from a worker thread. Progress goes to ``on_event`` (called
on that same worker thread, so a GUI must marshal it to the GUI thread, e.g. via a Qt signal).
Cancelling: set the ``cancel`` event from any thread; ``tune`` stops at the next request boundary
(within one request's time, at most ``request_timeout_s``), stops the server it launched (the whole
process tree) and returns a :class:`TuneResult` with ``cancelled=True``; no child process is left.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.profiles import ProfileStore

from .request import (
    DEFAULT_BUDGET_S,
    DEFAULT_N_PREDICT,
    DEFAULT_REPETITIONS,
    EventCallback,
    TuneError,
    TuneEvent,
    TuneRequest,
    TuneResult,
)

if TYPE_CHECKING:
    from tuner.catalog.folder import ScanResult
    from tuner.server.discovery import ServerBinary


def tune(
    request: TuneRequest | str | Path,
    *,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    store: ProfileStore | None = None,
    scanned: ScanResult | None = None,
    binary: ServerBinary | None = None,
    **fields: Any,
) -> TuneResult:
    """Tune speculative decoding for one target and save the profile.

    Args:
        request: the :class:`TuneRequest` (built by the CLI or the app). A models folder instead is a
            shorthand for ``TuneRequest.create(folder, **fields)`` (tests and benches).
        on_event: callback receiving :class:`TuneEvent`s (on the calling thread).
        cancel: set it to stop; see the module docstring.
        store: profile store (``None`` = the default folder).
        scanned: the caller's scan of ``request.models_dir`` (``tuner.catalog.families.scan_models``), so a
            caller that scanned already (the app) does not scan twice; ``None`` = scanned here.
        binary: the llama-server the caller found (the app: one binary for the sweep and for serving);
            ``None`` = ``request.server`` or discovered.
        **fields: only with a folder as ``request``: the :class:`TuneRequest` fields.

    Returns:
        A :class:`TuneResult` (its ``request`` is the request it answers).

    Raises:
        TuneError: no LLM in the folder, target not found or its name ambiguous (two files called so; the
            message lists them), llama-server not found or not a llama-server (``--server`` named),
            or the baseline itself cannot run (with the server's diagnosis as evidence); ``bad_input``
            tells the user's input from the rest.
        PromptFileError: the prompt file is unusable (names file and line).
    """
    from .engine import run_tune  # the implementation (search + I/O)

    if isinstance(request, TuneRequest):
        if fields:
            raise TypeError("tune(request, ...) takes no request fields; build the TuneRequest with them")
    else:
        request = TuneRequest.create(request, **fields)
    if binary is None and request.server is not None:
        _check_named_server(request.server)
    scanned = _check_target(request, scanned, on_event)
    return run_tune(request, on_event=on_event, cancel=cancel or threading.Event(),
                    store=store or ProfileStore(), scanned=scanned, binary=binary)


def _check_named_server(server: str | Path) -> None:
    """The ``--server`` binary the user named must be a llama-server whose ``--help`` can be read
    (``tuner.server.dialect.probe_dialect``; cached, so the sweep's own probe costs nothing more).

    Raises:
        TuneError: (``bad_input``) missing, not executable or not a llama-server; names ``--server`` and
            the path.
    """
    from tuner.server.dialect import DialectError, probe_dialect
    from tuner.server.discovery import ServerNotFoundError, find_named_server

    try:
        found = find_named_server(server, read_build=False, flag="--server")
    except ServerNotFoundError as exc:
        raise TuneError(f"--server {server}: no such file, or not executable", bad_input=True) from exc
    try:
        probe_dialect(found.path)
    except DialectError as exc:
        message = str(exc).removeprefix(f"{found.path}: ")
        raise TuneError(f"--server {server}: {message}", evidence=getattr(exc, "evidence", ()),
                        bad_input=True) from exc


def _check_target(request: TuneRequest, scanned: ScanResult | None,
                  on_event: EventCallback | None) -> ScanResult | None:
    """Check the target choice before the sweep; returns the folder's scan (for the sweep to reuse).

    A ``target`` given by name (file name or stem, not an existing path) that two different LLM files of
    the folder carry is refused (``tuner.catalog.folder.pick_named``); without a ``target``, when the
    default target's file name is shared by another LLM, an ``"error"`` (non-fatal note) event says which
    file was chosen (``tuner.catalog.folder.default_target_note``). A folder that does not exist is left
    to the sweep, which names it.

    Raises:
        TuneError: (``bad_input``) the name is ambiguous; the message lists the paths and says to pass one.
    """
    from tuner.catalog.folder import (
        AmbiguousModelError,
        default_target,
        default_target_note,
        pick_named,
        scan_models,
    )

    models_dir = Path(request.models_dir)
    if not models_dir.is_dir():
        return scanned
    if scanned is None or Path(scanned.folder).resolve() != models_dir.resolve():
        scanned = scan_models(models_dir)
    llms = [m for m in scanned.models if m.kind == "llm"]
    if request.target is not None:
        if not Path(request.target).exists():
            try:
                pick_named([m.path for m in llms], str(request.target), flag="--target")
            except AmbiguousModelError as exc:
                raise TuneError(str(exc), bad_input=True) from exc
        return scanned
    note = default_target_note(scanned.models, default_target(scanned.models, scanned.families))
    if note is not None:
        import logging

        logging.getLogger(__name__).info("tune note: %s", note)
        if on_event is not None:
            on_event(TuneEvent(kind="error", message=note))
    return scanned


__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_N_PREDICT",
    "DEFAULT_REPETITIONS",
    "EventCallback",
    "TuneError",
    "TuneEvent",
    "TuneRequest",
    "TuneResult",
    "tune",
]
