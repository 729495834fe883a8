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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tuner.profiles import Profile, ProfileStore

from .candidates import Candidate, DroppedCandidate
from .decide import Decision
from .prompts import PromptSet
from .results import Measurement

DEFAULT_BUDGET_S = 180.0
"""Default time budget of a sweep (seconds)."""

DEFAULT_N_PREDICT = 256
"""Default generated tokens per measured request: closer to real answers than a few dozen tokens (the
budget planning shortens it for slow models)."""


class TuneError(RuntimeError):
    """Tuning cannot start or cannot finish: no models, unknown target, no server, baseline failed.

    The message is for the user (names the folder, file or flag); ``evidence`` holds log lines or
    details when there are any. ``bad_input`` is True when the user's input is at fault (missing or
    empty folder, unknown target, bad ``--server`` path, bad budget): the CLI exits 2 for those, 1 otherwise.
    """

    def __init__(self, message: str, evidence: Sequence[str] = (), bad_input: bool = False) -> None:
        self.evidence = tuple(evidence)
        self.bad_input = bad_input
        super().__init__(message)


@dataclass(frozen=True)
class TuneEvent:
    """One progress report from :func:`tune`, delivered to ``on_event``.

    Attributes:
        kind: what happened, one of:

            * ``"started"``: tuning began (``message`` names the target).
            * ``"reused"``: a fresh saved profile was found and is returned without measuring.
            * ``"stale"``: a saved profile exists but is stale (``message`` gives the reasons).
            * ``"plan"``: candidates planned (``message`` summarizes; ``detail["dropped"]`` lists
              dropped candidates with reasons).
            * ``"launch"``: a server is being started for ``candidate``.
            * ``"ready"``: that server is ready (``detail["load_s"]``).
            * ``"measured"``: ``measurement`` of ``candidate`` finished (may carry an ``error``).
            * ``"predicted"``: the long-draft probe predicted throughput for shorter drafts
              (``detail["curve"]`` = list of ``[n_max, acceptance, gen_tokens_per_s]``).
            * ``"skipped"``: a candidate was not measured (budget, predicted loser, dropped early);
              ``message`` says why.
            * ``"decision"``: ``decision`` is final.
            * ``"saved"``: the profile was written (``detail["profile_path"]``).
            * ``"cancelled"``: the cancel event was seen; tuning stopped cleanly.
            * ``"error"``: a non-fatal problem (``message``); fatal problems raise :class:`TuneError`.
            * ``"budget"``: the protocol planned from the first warm-up (``detail``: ``n_predict``,
              ``prompts``, ``load_s``, ``warmup_gen_tokens_per_s``, ``planned_s``, and
              ``budget_too_small`` / ``suggested_budget_s`` when the budget cannot hold one comparison).
            * ``"confirmed"``: a finalist's paired rounds ended (``detail["verdict"]``, ``["pairs"]``).
            * ``"progress"``: a request finished (for progress bars; ``message`` is short).
        message: one line for humans.
        progress: 0.0–1.0 estimate of the work done (``None`` when unknown); never moves back and
            stays below 1.0 until the decision.
        elapsed_s: seconds since ``tune`` started.
        eta_s: estimated seconds left (``None`` until the first warm-up was timed); never more than the
            remaining budget plus the time to finish the current step.
        candidate: the candidate concerned, if any.
        measurement: the finished measurement (``"measured"``), if any.
        decision: the decision (``"decision"``), if any.
        detail: extra JSON-able data depending on ``kind``.
    """

    kind: str
    message: str
    progress: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    candidate: Candidate | None = None
    measurement: Measurement | None = None
    decision: Decision | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` returns.

    Attributes:
        target_path: the target GGUF tuned.
        decision: the decision (``None`` only when cancelled before the baseline was measured).
        measurements: every measurement of this sweep (empty when a profile was reused).
        profile: the saved (or reused) profile; ``None`` when cancelled.
        profile_path: where the profile is on disk; ``None`` when cancelled.
        reused: True when a fresh saved profile was returned without measuring.
        cancelled: True when the cancel event stopped the sweep (nothing saved).
        dropped: candidates removed before launch, with reasons.
        elapsed_s: wall time of the call.
    """

    target_path: Path
    decision: Decision | None
    measurements: tuple[Measurement, ...] = ()
    profile: Profile | None = None
    profile_path: Path | None = None
    reused: bool = False
    cancelled: bool = False
    dropped: tuple[DroppedCandidate, ...] = ()
    elapsed_s: float = 0.0


EventCallback = Callable[[TuneEvent], None]


def tune(
    models_dir: str | Path,
    target: str | None = None,
    prompts: str | Path | PromptSet | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    force: bool = False,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    server: str | Path | None = None,
    store: ProfileStore | None = None,
    n_predict: int = DEFAULT_N_PREDICT,
    repetitions: int = 3,
    n_ctx: int | None = None,
    threads: int | None = None,
    max_prompts: int | None = None,
    sampling: Any = None,
    long_context: bool = True,
    chat: bool | None = None,
    rpc_hosts: tuple[str, ...] = (),
) -> TuneResult:
    """Tune speculative decoding for one target in ``models_dir`` and save the profile.

    Args:
        models_dir: folder of GGUF files (scanned with ``tuner.catalog.scan_folder``).
        target: target model by file name, stem or path; ``None`` = the largest LLM that has a
            compatible draft, else the largest LLM.
        prompts: a prompt file path, a :class:`PromptSet`, or ``None`` for the built-in set.
        budget_s: time budget in seconds (default 180), first launch to decision. The first launch's
            warm-up gives the model's speed and load time, and the protocol (prompts × ``n_predict`` ×
            launches) is planned to fit (event ``"budget"``; when even the smallest comparison does not
            fit, that event says so up front and names the budget that would). Every step after the
            first probe runs only when its estimated time fits (``"skipped"`` otherwise); the paired
            rounds go on while the sequential test is inconclusive and the budget allows.
        force: re-tune even when a fresh profile exists.
        on_event: callback receiving :class:`TuneEvent`s (on the calling thread).
        cancel: set it to stop; see the module docstring.
        server: llama-server path, used as is (``tuner.server.discovery.find_named_server``: a missing
            or non-executable path raises :class:`TuneError` naming ``--server``, never a fallback);
            ``None`` = discovered (``tuner.server.discovery.find_server``).
        store: profile store (``None`` = the default folder).
        n_predict: generated tokens per request (fixed length; default 256, planned down from the warm-up's speed so the sweep fits the budget).
        repetitions: sets the most adjacent pairs per finalist (``2 × repetitions``, at least
            ``tuner.calibration.pairing.MIN_PAIRS``); probes use one repetition.
        n_ctx: context size of every launch and of the saved profile (``-c``); ``None`` = automatic
            (:func:`tuner.ctxsize.default_ctx_size`: the target's training context capped at 8192, never
            below 4096 unless the model's is smaller). A staleness key of the profile.
        threads: CPU threads per launch (``None`` = server default).
        max_prompts: use at most this many prompts of the set (spread over categories).
        sampling: a :class:`tuner.calibration.workload.Sampling` with the user's client settings; ``None``
            = llama-server's own defaults (the requests send no sampling fields). Every request carries a
            seed fixed per (prompt, repetition); a separate short greedy pass is the lossless check.
        long_context: add the built-in long-context requests (a long document and a long code file with
            a question, each filling at least half of ``n_ctx``) to the prompts.
        chat: ``True``/``False`` forces ``/v1/chat/completions`` / ``/completion``; ``None`` = chat when the
            target GGUF has ``tokenizer.chat_template``.
        rpc_hosts: llama.cpp RPC hosts (``host:port``, each a ``ggml-rpc-server``) whose devices the target
            may use (:mod:`tuner.calibration.remote`: "target split local + remote, draft local" and "target
            local as far as it fits" per draft; the baseline over RPC). An unreachable host costs a few
            seconds and a note; the hosts and their devices are part of the profile's staleness keys.

    Returns:
        A :class:`TuneResult`.

    Raises:
        TuneError: no LLM in the folder, target not found, llama-server not found, or the baseline
            itself cannot run (with the server's diagnosis as evidence); ``bad_input`` tells the first
            three (the user's input) from the last.
        PromptFileError: the prompt file is unusable (names file and line).
    """
    from .engine import run_tune  # the implementation (search + I/O)

    return run_tune(
        models_dir=Path(models_dir),
        target=target,
        prompts=prompts,
        budget_s=budget_s,
        force=force,
        on_event=on_event,
        cancel=cancel or threading.Event(),
        server=server,
        store=store or ProfileStore(),
        n_predict=n_predict,
        repetitions=repetitions,
        n_ctx=n_ctx,
        threads=threads,
        max_prompts=max_prompts,
        sampling=sampling,
        long_context=long_context,
        chat=chat,
        rpc_hosts=tuple(rpc_hosts),
    )


__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_N_PREDICT",
    "TuneError",
    "TuneEvent",
    "TuneResult",
    "EventCallback",
    "tune",
]
