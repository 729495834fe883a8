"""``tune(...)``: the one calibration entry point used by both the CLI and the GUI.

Flow (``tuner.calibration.pipeline``, one module per step): resolve the inputs once (prompts, the target
and its compatible drafts from the catalog, context size, llama-server and its dialect, workload, devices)
→ profile store: a fresh profile is reused unless ``force`` → plan candidates (memory checked, pruned) →
search (baseline, one long-draft probe per draft, predicted curve, refine the promising draft lengths,
successive halving, paired rounds against the baseline until a sequential test is conclusive) → decide →
report → save the profile. A load watcher (``tuner.hardware.host.LoadWatcher``) runs during the sweep; the
decision says when other programs used the CPU.

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
            tells the user's input from the rest. Of several bad inputs the first in the order of
            ``tuner.calibration.pipeline.inputs`` is reported.
        PromptFileError: the prompt file is unusable (names file and line).
    """
    from .pipeline import run_tune  # the steps (tuner/calibration/pipeline/run.py lists them)

    if isinstance(request, TuneRequest):
        if fields:
            raise TypeError("tune(request, ...) takes no request fields; build the TuneRequest with them")
    else:
        request = TuneRequest.create(request, **fields)
    return run_tune(request, on_event=on_event, cancel=cancel or threading.Event(),
                    store=store or ProfileStore(), scanned=scanned, binary=binary)


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
