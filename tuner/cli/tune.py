"""``draftwise tune``: calibrate on the user's machine and save the profile (headless front end of ``tune``).

    draftwise tune --models DIR [--target NAME|PATH] [--prompts FILE | --prompts-from-served [MODEL_ID]]
                   [--budget SECONDS] [--force] [--json] [--details] [--server-arg=FLAG[=VALUE] ...]

Progress goes to stderr (a one-line progress bar on a terminal, plain lines otherwise), the final
table and the decision's plain first sentence to stdout (``--details``: the evidence behind it too; the
global ``--verbose`` is debug logging, not this); ``--details`` without ``--force`` (nor ``--json``) prints a saved profile of the
target as it is, without tuning (a stale one says why and that ``--force`` tunes again), and tunes only when
there is none; with ``--json`` stdout is exactly one JSON object::

    {"decision": {"spec_type", "draft", "n_max", "argv" (the tuned flags; no --host/--port: where to
                  listen is serve's setting), "env" (the variables the profile sets in llama-server's
                  environment: {"OMP_WAIT_POLICY": "PASSIVE"} or {}), "gen_tokens_per_s",
                  "baseline_gen_tokens_per_s", "speedup", "reason" (every sentence of the decision),
                  "first_sentence" (its plain first sentence, the table's ``Decision:`` line)},
     "measurements": [{"candidate": {...}, "gen_tokens_per_s", "acceptance",
                       "speculative_active", "lossless", "divergences", "error", "no_drafts_at",
                       "greedy_draft_n" (tokens a type that drafted nothing drafted in the short greedy check),
                       "cut_short" (the hard time limit ended the launch), "superseded" (a disturbed
                       baseline launch measured again: why it is not the model's speed)}],
     "profile_path": "..."}

Exit status: 0 done (also when the answer is "no speculation"), 1 tuning failed, 2 bad input
(prompt file, folder, target), 130 interrupted (Ctrl-C cancels cleanly: no server is left running).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from tuner.calibration.prompts import PromptFileError
from tuner.calibration.request import (
    TuneError,
    TuneEvent,
    TuneRequest,
    TuneResult,
)
from tuner.calibration.sampling import Sampling
from tuner.calibration.tune import tune
from tuner.calibration.wording import measured_line
from tuner.cli.options import add_option, check_options, folder_problem, path_problem
from tuner.cli.tune_report import print_table, result_to_json
from tuner.safetext import error_text, safe_text


def register(subparsers: Any) -> None:
    """Add the ``tune`` sub-command."""
    p = subparsers.add_parser(
        "tune",
        help="measure speculative decoding configurations and save the fastest (often none)",
        description="Measure the target alone, n-gram speculation and each compatible draft model on your "
        "prompts, pick the fastest configuration beyond measurement noise and save it as a profile "
        "that 'draftwise serve --models DIR' uses.",
    )
    p.add_argument("--models", required=True, metavar="DIR", help="folder of GGUF models")
    p.add_argument("--target", metavar="NAME|PATH", help="target model (file name, stem or path); "
                   "default: the largest model that has a compatible draft")
    p.add_argument("--prompts", metavar="FILE", help="prompt file: JSONL with 'prompt' (+ 'category') or text "
                   "with prompts separated by lines holding only '---' (default: built-in set)")
    p.add_argument("--prompts-from-served", nargs="?", const="", default=None, metavar="MODEL_ID",
                   help="re-tune on the requests captured while serving the target (serve --capture-requests): each "
                   "replayed as the server logged it, as a raw completion, at the sampling given here; at most "
                   "--max-prompts of them (default 8), sampled over time; no built-in long-context requests. "
                   "MODEL_ID: the served model id (default: the target's file name without .gguf). A profile "
                   "tuned on them stays fresh as new requests come: --force re-tunes on the newer ones")
    add_option(p, "budget_s", "--budget", dest="budget")
    p.add_argument("--force", action="store_true", help="re-tune even when a fresh profile exists")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--details", action="store_true",
                   help="after the decision's first sentence, the evidence behind it (pairs, intervals, acceptance "
                   "and break-even, per category, the machine's load, how it was measured); a saved profile of the "
                   "target, fresh or stale, is printed so without tuning (tunes only when there is none; "
                   "--force tunes again; not with --json)")
    p.add_argument("--server", metavar="PATH", help="llama-server binary (default: discovered)")
    add_option(p, "n_predict", "--n-predict", dest="n_predict")
    add_option(p, "repetitions", "--repetitions", dest="repetitions")
    add_option(p, "max_prompts", "--max-prompts", dest="max_prompts")
    add_ctx_size_flag(p, "context size of every launch and of the saved profile")
    add_sampling_flags(p)
    p.add_argument("--no-long-context", dest="long_context", action="store_false",
                   help="leave out the built-in long-context requests (a long document and a long code file, "
                   "each filling half the context)")
    add_option(p, "long_share", "--long-share", dest="long_share",
               help="share of your requests that are long-context ones; the pick is the fastest configuration "
               "over that mix")
    add_option(p, "threads", "--threads", dest="threads",
               default_help="default: the threads setting, else the tune measures the thread settings idle and with "
               "one core busy and serves the one that copes best")
    from tuner.cli.hardware import add_server_arg_argument

    add_server_arg_argument(p)
    p.set_defaults(func=run)


def add_ctx_size_flag(p: argparse.ArgumentParser, what: str) -> None:
    """The one ``--ctx-size N`` flag of tune / serve (dest ``n_ctx``; ``None`` = automatic)."""
    from tuner.ctxsize import DEFAULT_CTX_CAP, DEFAULT_CTX_FLOOR

    add_option(p, "n_ctx", "--ctx-size", dest="n_ctx", help=f"{what} in tokens (-c)",
               default_help=f"default: the model's training context capped at {DEFAULT_CTX_CAP}, at least "
               f"{DEFAULT_CTX_FLOOR} unless the model's is smaller")


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """``--temperature``, ``--top-p``, ``--top-k``, ``--min-p``: the client's sampling settings the sweep
    measures at (default: none sent, so llama-server's defaults apply: ``tuner.options.SERVER_DEFAULT_SAMPLING``),
    and the shared ``--rpc``."""
    from tuner.options import server_defaults_text

    g = p.add_argument_group(f"served sampling (what your chat client sends; default: llama-server's defaults "
                             f"{server_defaults_text()})")
    for name, flag in (("temperature", "--temperature"), ("top_p", "--top-p"), ("top_k", "--top-k"),
                       ("min_p", "--min-p")):
        add_option(g, name, flag, dest=name, owner=p)
    from tuner.cli.hardware import add_rpc_argument

    add_rpc_argument(p)


class _Progress:
    """Renders TuneEvents on stderr: a rewritten bar line on a TTY, plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._bar_shown = False

    def _bar(self, ev: TuneEvent) -> None:
        frac = ev.progress or 0.0
        width = 24
        filled = int(round(frac * width))
        eta = f" ETA {ev.eta_s:.0f}s" if ev.eta_s else ""
        line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {100 * frac:3.0f}% {ev.elapsed_s:5.0f}s{eta}  "
                f"{safe_text(ev.message)}")
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._bar_shown = True

    def __call__(self, ev: TuneEvent) -> None:
        if self.tty and ev.kind == "progress":
            self._bar(ev)
            return
        if ev.kind == "progress":
            return
        if self._bar_shown:
            self.stream.write("\n")
            self._bar_shown = False
        eta = f" (ETA {ev.eta_s:.0f} s)" if ev.eta_s else ""
        # "error" events are non-fatal by contract (fatal problems raise TuneError): say "note" so a
        # notice such as the model's short training context does not read as a broken sweep
        label = "note" if ev.kind == "error" else ev.kind
        message, m = ev.message, ev.measurement
        nd = m.drafted_nothing() if m is not None else None
        if m is not None and nd is not None:  # a run that drafted nothing: what was measured, not a failure's words
            message = measured_line(m.candidate.label, nd)
        self.stream.write(f"[{ev.elapsed_s:6.1f}s] {label}: {safe_text(message)}{eta}\n")
        if ev.kind == "plan":
            for d in ev.detail.get("dropped", []):
                self.stream.write(f"          dropped {safe_text(d['label'])}: {safe_text(d['reason'])}\n")
        self.stream.flush()


def check_args(args: argparse.Namespace) -> str | None:
    """The first bad option as a one-line message naming the flag (``--models ''``, a number outside its
    declaration in :mod:`tuner.options`), ``None`` when all are usable."""
    return (folder_problem(args.models) or path_problem(args.target, "--target")
            or path_problem(args.prompts, "--prompts") or check_options(args))


#: Seconds a cancelled sweep gets to stop its llama-server (SIGTERM, then the tree is killed)
#: before ``tune`` kills every child itself and exits 130; a second Ctrl-C does that at once.
TUNE_STOP_GRACE_S = 3.0


def _wait_for(worker: threading.Thread, cancel: threading.Event, signals: list[int]) -> bool:
    """Wait for the sweep thread; on a signal, cancel it and give its children
    ``TUNE_STOP_GRACE_S`` to stop, then kill them. Returns True when interrupted."""

    from tuner import process

    deadline = None
    try:
        while worker.is_alive():
            worker.join(0.1)
            if signals and deadline is None:
                cancel.set()
                sys.stderr.write("\ncancelling: stopping the server...\n")
                sys.stderr.flush()
                deadline = time.monotonic() + TUNE_STOP_GRACE_S
            if deadline is not None and (len(signals) > 1 or time.monotonic() > deadline):
                break
    except KeyboardInterrupt:  # a handler installed by someone else
        cancel.set()
        signals.append(signal.SIGINT)
    if signals:
        process.kill_all_children()
        return True
    return False


def _one_line_error(exc: BaseException) -> str | None:
    """A one-line message for an expected failure (any project error, e.g. a binary that is not
    llama-server, a missing binary, an unreadable file), or None for a bug (re-raised with its traceback)."""
    from tuner.errors import DraftwiseError

    if isinstance(exc, (DraftwiseError, OSError)):
        return error_text(exc)
    return None


def request_from_args(args: argparse.Namespace, rpc_hosts: tuple[str, ...] = (),
                      server_args: tuple[str, ...] = ()) -> TuneRequest:
    """The command line's :class:`TuneRequest` (the same constructor as the app's
    ``tuner.calibration.request.request_from_settings``); ``rpc_hosts`` = the checked ``--rpc`` list
    (``tuner.cli.hardware.rpc_hosts_arg``), ``server_args`` = the checked ``--server-arg`` flags as argv words
    (``tuner.cli.hardware.server_args_arg``: the setting's when none was given).

    Raises:
        TuneError: a value the request refuses (names the field).
    """
    return TuneRequest.create(
        Path(args.models),
        target=args.target,
        prompts=args.prompts,
        budget_s=args.budget,
        force=args.force,
        server=args.server,
        n_predict=args.n_predict,
        repetitions=args.repetitions,
        n_ctx=args.n_ctx,
        threads=args.threads if args.threads is not None else _threads_setting(),
        max_prompts=args.max_prompts,
        sampling=Sampling.from_settings(args),
        long_context=args.long_context,
        long_share=args.long_share,
        rpc_hosts=tuple(rpc_hosts),
        server_args=tuple(server_args),
        prompts_from_served=getattr(args, "prompts_from_served", None) is not None,
        served_model_id=getattr(args, "prompts_from_served", None) or None,
    )


def saved_result(request: TuneRequest) -> tuple[TuneResult, tuple[str, ...]] | None:
    """The target's saved profile as the tune's answer, without measuring (``tune --details``): its decision
    rebuilt as a reused profile shows it (``tuner.calibration.pipeline.reuse.decision_from_profile``), with why
    it is stale for ``request`` (``()``: still fresh; the same keys a tune compares,
    ``tuner.calibration.pipeline.reuse.check_saved``). None when the target has no saved profile (or an
    unreadable one, kept aside by the store): the caller tunes then.

    Raises:
        TuneError, PromptFileError: as :func:`tuner.calibration.tune.tune` for the same request (bad folder,
            target, prompt file, no llama-server); nothing is launched.
    """
    from tuner.calibration.pipeline.events import Events
    from tuner.calibration.pipeline.inputs import resolve_inputs
    from tuner.calibration.pipeline.keys import staleness_keys
    from tuner.calibration.pipeline.reuse import check_saved, decision_from_profile
    from tuner.profiles import ProfileStore

    store, events = ProfileStore(), Events(None, logged=False)  # nothing is tuned: no "tune started" in the log
    inputs = resolve_inputs(request, scanned=None, binary=None, events=events)
    saved = check_saved(store, inputs, staleness_keys(inputs), events)
    if saved.profile is None:
        return None
    result = TuneResult(target_path=inputs.target_path, decision=decision_from_profile(saved.profile),
                        profile=saved.profile, profile_path=store.path_for(inputs.target_path),
                        reused=not saved.reasons, request=request)
    return result, saved.reasons


def _print_saved(result: TuneResult, stale: tuple[str, ...]) -> None:
    """A saved profile's table with its details on stdout; a stale one says why and how to tune again."""
    print_table(result, sys.stdout, details=True)
    if stale:
        sys.stdout.write(f"This saved profile is stale: {safe_text('; '.join(stale))}. These are its details as "
                         "saved; add --force to tune again.\n")


def _threads_setting() -> int | None:
    from tuner.settings import threads_value

    return threads_value()


def _allow_named_rpc_hosts(hosts: tuple[str, ...]) -> None:
    """The ``--rpc`` hosts the user named, added to the ``rpc_hosts`` setting (:func:`tuner.settings.allow_rpc_hosts`)
    so that the profile this tune saves may be served with them; a line on stderr says what was added, or why
    nothing could be (serving such a profile is then refused until the hosts are added). Raises nothing."""
    from tuner.errors import DraftwiseError
    from tuner.settings import allow_rpc_hosts

    try:
        added = allow_rpc_hosts(hosts)
    except (DraftwiseError, OSError) as exc:  # a bad settings file (named), an unwritable folder
        sys.stderr.write(f"draftwise tune: could not add --rpc {','.join(hosts)} to the rpc_hosts setting "
                         f"({safe_text(exc)}): serving a profile that uses them is refused until they are added\n")
        return
    if added:
        sys.stderr.write(f"draftwise tune: added {', '.join(added)} to the rpc_hosts setting (named by --rpc): "
                         "saved profiles may use it, and tunes without --rpc use it too; remove it there to stop\n")


def run(args: argparse.Namespace) -> int:
    """Entry of ``draftwise tune``; returns the exit status (2 for bad input, see the module docstring)."""
    bad = check_args(args)
    if bad is not None:
        sys.stderr.write(f"draftwise tune: {safe_text(bad)}\n")
        return 2
    from tuner.cli.hardware import rpc_hosts_arg, server_args_arg

    rpc_hosts = rpc_hosts_arg(args, "tune")
    server_args = server_args_arg(args, "tune")
    if rpc_hosts is None or server_args is None:
        return 2
    try:
        request = request_from_args(args, rpc_hosts=rpc_hosts, server_args=server_args)
    except TuneError as exc:
        sys.stderr.write(f"draftwise tune: {safe_text(exc)}\n")
        return 2
    if getattr(args, "rpc", None) is not None:
        _allow_named_rpc_hosts(rpc_hosts)
    progress = _Progress(sys.stderr)
    cancel = threading.Event()
    box: dict[str, Any] = {}

    look_up = args.details and not args.force and not args.json

    def work() -> None:
        try:
            saved = saved_result(request) if look_up else None
            if saved is not None:
                box["saved"] = saved
                return
            box["result"] = tune(request, on_event=progress, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - reported on the main thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="draftwise-tune", daemon=True)
    signals: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        signals.append(signum)  # handled by the loop below (no lock taken in a signal handler)

    # Installed explicitly: a background job inherits SIGINT ignored, and Python would never raise
    # KeyboardInterrupt; SIGTERM / SIGHUP (a closed terminal) cancel the same way.
    prev: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()):
            prev[sig] = signal.signal(sig, on_signal)
    worker.start()
    try:
        interrupted = _wait_for(worker, cancel, signals)
    finally:
        for signum, handler in prev.items():
            signal.signal(signum, handler)
    if interrupted:
        return 130
    error = box.get("error")
    if isinstance(error, PromptFileError):
        given = getattr(args, "prompts", None)
        flag = "--prompts " if given and Path(given) == error.path else ""  # the flag that named the file
        sys.stderr.write(f"draftwise tune: {flag}{safe_text(error)}\n")
        return 2
    if isinstance(error, TuneError):
        sys.stderr.write(f"draftwise tune: {safe_text(error)}\n")
        for line in error.evidence[-10:]:
            sys.stderr.write(f"    {safe_text(line)}\n")
        return 2 if error.bad_input else 1
    if error is not None:
        message = _one_line_error(error)
        if message is None:
            raise error
        sys.stderr.write(f"draftwise tune: {message}\n")
        return 2
    if "saved" in box:
        _print_saved(*box["saved"])
        return 0
    result: TuneResult = box["result"]
    if args.json:
        sys.stdout.write(json.dumps(result_to_json(result)) + "\n")
    else:
        print_table(result, sys.stdout, details=args.details)
    return 130 if result.cancelled else 0
