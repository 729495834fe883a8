"""``draftwise serve`` and ``draftwise doctor``.

serve: run one supervised llama-server in the foreground until Ctrl-C (endpoint on stdout, state
changes on stderr), either from flags (``--target`` [``--draft``, ``--spec-type``, ``--n-max``]) or
from the saved tuning profile (``--models DIR [--target NAME|PATH]``). It listens on 127.0.0.1; any
other ``--host`` needs an API key (``--api-key`` or the key stored by the app), and the printed
endpoint is the address actually bound. SIGINT and SIGTERM handlers are installed explicitly, so
Ctrl-C works even when the parent started it with SIGINT ignored (a background job). ``--idle-sleep SECONDS``
(off by default; the app's default is 15 min) lets llama-server unload the model while idle
(``--sleep-idle-seconds``); the sleep and wake lines, with the first request's reload time, go to stderr.
``--capture-requests`` (off by default) keeps the requests it answers to re-tune on them (``--log-prompts-dir``
to a private folder per model id, pruned while serving: :mod:`tuner.server.capture`); a line on stderr says where.

doctor: which binary, its build, devices, flag dialect, and a few-second self-test that proves
speculation really happens on this build (the bundled demo model as both target and draft with
``draft-simple``: ``/slots[].speculative`` true and ``timings.draft_n`` > 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tuner.cli.options import (
    add_option,
    bind_host,
    check_limits,
    check_options,
    check_resolvable,
    folder_problem,
    path_problem,
)
from tuner.safetext import error_text, safe_text
from tuner.server.argv import UnsupportedConfigError, command_line, cors_locked, server_env
from tuner.server.config import ServerConfig, default_alias
from tuner.server.dialect import Dialect, DialectError, probe_dialect
from tuner.server.discovery import ServerBinary, ServerNotFoundError, find_named_server, find_server
from tuner.server.supervisor import ServerStartError, ServerState, StateChange, Supervisor
from tuner.spectypes import DRAFT_MODEL_TYPES
from tuner.units import format_bytes

log = logging.getLogger(__name__)



def _err(msg: str) -> None:
    """One line on stderr: ``serve``'s state lines, notes, errors and the relayed llama-server lines, made safe
    (:func:`tuner.safetext.safe_text`: a file name or a log line with a control character or a newline shows
    it escaped, never as a terminal command or a line of its own)."""
    print(safe_text(msg), file=sys.stderr, flush=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve`` and ``doctor`` to the ``draftwise`` CLI."""
    p = subparsers.add_parser(
        "serve", help="run a supervised llama-server in the foreground",
        description="Run llama-server under supervision until Ctrl-C. Either give --target (and "
        "optionally --draft/--spec-type/--n-max), or --models DIR to serve the tuned profile.")
    p.add_argument("--target", help="target GGUF (with --models: its file name, stem or path)")
    p.add_argument("--draft", help="draft GGUF (implies --spec-type draft-simple)")
    p.add_argument("--spec-type", help="speculation type, e.g. none, draft-simple, draft-mtp, ngram-mod")
    add_option(p, "n_max", "--n-max", dest="n_max")
    p.add_argument("--models", help="models folder that was tuned: serve its saved profile")
    add_option(p, "port", "--port", dest="port", default=None, default_help="default: a free one")
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1); any other address "
                   "exposes the server on the network and needs an API key")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--api-key", default=None, help="API key clients must send; "
                      "default for a non-loopback --host: the key stored by the app (Settings)")
    keys.add_argument("--api-key-file", default=None, metavar="FILE",
                      help="read the API key from FILE (first non-empty line), so it is not on this "
                      "command line where other local users can see it in ps")
    add_option(p, "n_ctx", "--ctx-size", dest="n_ctx", help="context size in tokens (-c)",
               default_help="default: with --models the tuned profile's, else the model's training context "
               "capped at 8192, at least 4096 unless the model's is smaller. With --models, another size than "
               "the profile's is refused (the profile is stale for it)")
    add_option(p, "ngl", "--ngl", dest="ngl", keywords=True, default_help="default: llama-server's")
    add_option(p, "draft_ngl", "--draft-ngl", dest="draft_ngl", keywords=True, default_help="default: llama-server's")
    p.add_argument("--server", help="llama-server binary (default: discovered)")
    add_option(p, "ready_timeout_s", "--ready-timeout", dest="ready_timeout")
    from tuner.cli.hardware import add_rpc_argument

    add_rpc_argument(p)
    from tuner.cli.hardware import add_server_arg_argument

    add_server_arg_argument(p, serve_models=True)
    add_option(p, "liveness_timeout_s", "--liveness-timeout", dest="liveness_timeout")
    add_option(p, "threads", "--threads", dest="threads", default=None,
               default_help="default: the threads setting, else the profile's tuned setting (with --models), else "
               "llama-server's")
    add_option(p, "idle_sleep_s", "--idle-sleep", dest="idle_sleep", default=None,
               default_help="default: off, the model stays loaded (the app's default: 15 min)")
    from tuner.server.capture import KEEP_WORDS, MAX_BYTES, MAX_FILES, captures_root

    p.add_argument("--capture-requests", action="store_true",
                   help=f"{KEEP_WORDS[0].upper()}{KEEP_WORDS[1:]}: the full prompt of each request this server "
                   f"answers, the newest {MAX_FILES} and at most {format_bytes(MAX_BYTES, decimals=0)}, in a folder only "
                   f"you can read ({captures_root()}/MODEL-ID); delete that folder to forget them. Default: off")
    p.set_defaults(func=cmd_serve)

    d = subparsers.add_parser(
        "doctor", help="check llama-server: binary, build, devices, flags, speculation self-test",
        description="Report the llama-server binary, its build, devices and flag dialect, and run a "
        "few-second self-test proving speculative decoding happens on this build.")
    d.add_argument("--server", help="llama-server binary (default: discovered)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--no-self-test", action="store_true", help="skip the speculation self-test")
    add_option(d, "doctor_timeout_s", "--timeout", dest="timeout")
    d.set_defaults(func=cmd_doctor)


def _check_serve_args(args: argparse.Namespace) -> None:
    """Reject bad flags before anything is launched: every declared number (:mod:`tuner.options`; ``--ngl``
    and ``--draft-ngl`` become a number, ``auto`` or ``all``), ``--models ''`` or a missing folder, and a
    ``--host`` with white space inside (stripped around, so the loopback check and the bind agree).
    Raises ValueError naming the flag."""
    problem = (folder_problem(getattr(args, "models", None)) or path_problem(args.target, "--target")
               or path_problem(args.draft, "--draft") or check_options(args))
    if problem:
        raise ValueError(problem)
    models = getattr(args, "models", None)
    if models and not Path(models).is_dir():  # as tune says it: "run tune --models DIR first" would not help
        raise ValueError(f"--models {models}: no such folder")
    if args.host is not None:
        args.host = bind_host(args.host)


def _check_model_file(path: Path, role: str, given: str | None = None) -> int | None:
    """Pre-flight read of a GGUF header and its split shards (tuner.catalog), so a missing or
    broken file is one clear line instead of a failed launch. ``given``: the value of ``--target`` /
    ``--draft`` (``role``) the path came from, named in the message; ``None`` for a profile's file.
    Returns the model's blocks (GGUF ``<arch>.block_count``; None when it does not say).
    Raises ValueError naming the flag and value (or the file)."""
    from tuner.catalog.header import GGUFError, read_header
    from tuner.catalog.split import missing_shards, short_name_list

    if given is None:
        what = f"{role} model {path}"
    else:
        what = f"--{role} {given}" + ("" if os.path.abspath(given) == str(path) else f" ({path})")
    try:
        present = path.exists()
    except OSError as exc:  # a name longer than the system allows, a link loop, a folder not permitted
        raise ValueError(f"{what}: {error_text(exc, with_path=False)}") from None
    if not present:
        raise ValueError(f"{what}: no such file" if given is not None else f"{role} model not found: {path}")
    gone = missing_shards(path)
    if gone:
        raise ValueError(f"{what}: incomplete split set: missing shard "
                         + short_name_list([p.name for p in gone]))
    try:
        header = read_header(path)
    except GGUFError as exc:  # its path may be another file (a shard): then named as well
        raise ValueError(f"{what}: {exc.reason if Path(exc.path) == path else exc}") from None
    if not header.tensors and header.get("split.count") in (None, 0, 1):
        raise ValueError(f"{what}: has no tensors (a vocab-only file holds a tokenizer and no "
                         "weights); llama-server cannot serve it")
    arch = header.get("general.architecture")
    blocks = header.get(f"{arch}.block_count") if isinstance(arch, str) else None
    return blocks if isinstance(blocks, int) and not isinstance(blocks, bool) else None


def is_loopback_host(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine (``127.0.0.0/8``, ``::1``,
    ``localhost``). ``0.0.0.0``, ``::``, LAN addresses and other host names are not."""
    import ipaddress

    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _given_key(args: argparse.Namespace) -> str | None:
    """The key given by ``--api-key`` or read from ``--api-key-file`` (first non-empty line), else None.

    Raises:
        ValueError: the ``--api-key-file`` cannot be read or holds no key (message names the flag and file).
    """
    path = getattr(args, "api_key_file", None)
    if path is None:
        return getattr(args, "api_key", None)
    from tuner.settings import read_private_key_file

    try:
        key = read_private_key_file(path)  # regular file only (no FIFO wait), mode 0600 or stricter
    except OSError as exc:
        raise ValueError(f"--api-key-file {path}: cannot read it ({exc})") from None
    except ValueError as exc:  # group/world-readable (mode named), too large, not UTF-8
        raise ValueError(f"--api-key-file refused: {exc}") from None
    if not key:
        raise ValueError(f"--api-key-file {path}: the file holds no key")
    return key


def _api_key_for(host: str, given: str | None) -> str | None:
    """The key to pass as ``--api-key``: ``given`` (``--api-key``), else for a non-loopback host the
    key stored by the app (:func:`tuner.settings.read_api_key`). Issue 6: exposing the server on the
    LAN requires an API key.

    Raises:
        ValueError: non-loopback ``--host`` with no key (message names ``--host`` and ``--api-key``),
            an empty ``--api-key``, or an unreadable stored key.
    """
    if given is not None:
        if not given.strip():
            raise ValueError("--api-key must not be empty")
        return given.strip()
    if is_loopback_host(host):
        return None
    from tuner.settings import SettingsError, read_api_key

    try:
        key = read_api_key()
    except SettingsError as exc:
        raise ValueError(f"--host {host} needs an API key, and the stored one is unusable: {exc}") from None
    if key is None:
        raise ValueError(f"--host {host} exposes the server beyond this machine: give --api-key KEY or "
                         "--api-key-file FILE (or generate a key in the app's settings), or use --host 127.0.0.1")
    return key


def _profile_config(args: argparse.Namespace) -> ServerConfig:
    """The saved profile's configuration for ``--models`` (``tuner.calibration.serving``; it carries the user
    flags it was tuned with). ``args.server_words`` (the ``--server-arg`` words; None when not given) must be
    those flags. Raises ValueError when they differ (the profile is stale for them), LookupError /
    ProfileError as ``config_from_profile``."""
    from tuner.calibration.serving import config_from_profile, find_profile  # lazy: calibration is above us

    cfg = config_from_profile(Path(args.models), args.target)
    given = getattr(args, "server_words", None)
    if given is None:
        return cfg
    tuned = tuple(find_profile(Path(args.models), args.target).keys.server_args)
    if tuple(given) != tuned:
        from tuner.serverargs import describe, to_specs

        raise ValueError(
            f"--server-arg {describe(given)}: the profile for {cfg.model_path.name} was tuned with the extra "
            f"llama-server flags {describe(tuned)}, so it is stale for these and would serve an unmeasured "
            f"configuration. Re-tune: draftwise tune --models {args.models}"
            + (f" --target {args.target}" if args.target else "")
            + "".join(f" --server-arg={w}" for w in to_specs(given)) + " (or serve without --server-arg)")
    return cfg


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """The :class:`ServerConfig` a ``serve`` command line asks for. Host, port and API key come
    from the flags (never from a profile); the CORS origin from the settings (``cors_origin``,
    default: pages from localhost only); the user's llama-server flags from ``args.server_words`` (argv
    words of ``--server-arg`` or the ``server_args`` setting; with ``--models`` the profile's).

    Raises:
        ValueError: inconsistent flags (message names them).
        LookupError / ProfileError: from ``config_from_profile`` with ``--models``.
    """
    _check_serve_args(args)
    if args.models and not args.draft and not args.spec_type:
        cfg = _profile_config(args)
        if args.n_ctx is not None and args.n_ctx != cfg.n_ctx:
            raise ValueError(
                f"--ctx-size {args.n_ctx}: the profile for {cfg.model_path.name} was tuned at context size "
                f"{cfg.n_ctx}, so it is stale for {args.n_ctx} and would serve an unmeasured configuration. "
                f"Re-tune: draftwise tune --models {args.models}"
                + (f" --target {args.target}" if args.target else "")
                + f" --ctx-size {args.n_ctx} (or serve without --ctx-size)")
        cors, cache_ram = _settings_served()
        over: dict[str, Any] = {"cors_origins": cors, "cache_ram_mib": cache_ram,
                                "sleep_idle_s": getattr(args, "idle_sleep", None) or None}
        if args.port is not None:
            over["port"] = args.port
        if args.host:
            over["host"] = args.host
        key = _api_key_for(args.host or cfg.host, _given_key(args))
        if key is not None:
            over["api_key"] = key
        if not cfg.alias:
            over["alias"] = default_alias(cfg.model_path)
        threads = _threads_asked(args)
        if threads is not None:  # the user's count overrides the tuned thread setting
            over.update(threads=threads, omp_passive=False, poll=None)
        if over:
            from dataclasses import replace

            cfg = replace(cfg, **over)
        return cfg
    if not args.target:
        raise ValueError("serve needs --target T (or --models DIR to serve a tuned profile)")
    cors, cache_ram = _settings_served()
    target = Path(args.target)
    if args.models and not target.is_file():
        from tuner.catalog.folder import find_named_model

        target = find_named_model(args.models, args.target, "--target") or Path(args.models) / args.target
    spec = args.spec_type or ("draft-simple" if args.draft else "none")
    speculative = spec != "none"
    if not args.draft and {t.strip() for t in spec.split(",")} & DRAFT_MODEL_TYPES:
        raise ValueError(f"--spec-type {spec} needs a draft model: add --draft D")
    if args.draft_ngl is not None and not args.draft:
        raise ValueError("--draft-ngl needs --draft")
    if args.n_max is not None and not speculative:
        raise ValueError("--n-max (draft length) needs speculation: add --draft D or --spec-type TYPE")
    rpc = getattr(args, "rpc_hosts", ())
    return ServerConfig(
        rpc=tuple(rpc or ()),
        model_path=Path(os.path.abspath(target)),
        draft_path=Path(os.path.abspath(args.draft)) if args.draft else None,
        spec_type=spec,
        n_max=args.n_max,
        ngl=args.ngl,
        draft_ngl=args.draft_ngl if args.draft else None,
        n_ctx=_serve_ctx_size(args.n_ctx, target),
        n_parallel=1 if speculative else None,
        host=args.host or "127.0.0.1",
        port=args.port,
        api_key=_api_key_for(args.host or "127.0.0.1", _given_key(args)),
        cors_origins=cors,
        cache_ram_mib=cache_ram,
        alias=default_alias(target),
        extra_args=tuple(getattr(args, "server_words", None) or ()),
        sleep_idle_s=getattr(args, "idle_sleep", None) or None,
        threads=_threads_asked(args),
    )


def _threads_asked(args: argparse.Namespace) -> int | None:
    """``--threads``, else the ``threads`` setting (``tuner.settings.threads_value``), else None."""
    given = getattr(args, "threads", None)
    if given is not None:
        return int(given)
    from tuner.settings import threads_value

    return threads_value()


def _settings_served() -> tuple[str, int]:
    """What ``serve`` takes from the user's settings, as the app does (``tuner.ui.flow.serving_config``):
    :func:`tuner.settings.served_values` (the ``--cors-origins`` value and ``--cache-ram`` MiB)."""
    from tuner.settings import served_values

    return served_values()


def _serve_ctx_size(requested: int | None, target: Path) -> int | None:
    """``--ctx-size`` or the automatic size (:func:`tuner.ctxsize.default_ctx_size`) from the target's
    GGUF ``<arch>.context_length``; ``None`` when the header cannot be read (the pre-flight check then
    names the file)."""
    if requested is not None:
        return requested
    from tuner.catalog.header import GGUFError, read_header
    from tuner.ctxsize import default_ctx_size

    try:
        h = read_header(target)
    except (GGUFError, OSError):
        return None
    arch = h.kv.get("general.architecture")
    ctx = h.kv.get(f"{arch}.context_length") if isinstance(arch, str) else None
    return default_ctx_size(ctx if isinstance(ctx, int) else None)


def _served_lists(args: argparse.Namespace, from_profile: bool) -> bool:
    """``args.rpc_hosts`` and ``args.server_words`` from ``--rpc`` / ``--server-arg`` or (serving from flags)
    the settings; a profile carries its own. False after printing the line naming a bad one."""
    from tuner.cli.hardware import rpc_hosts_arg, server_args_arg

    if getattr(args, "rpc", None) is not None or not from_profile:
        hosts = rpc_hosts_arg(args, "serve")
        if hosts is None:
            return False
        args.rpc_hosts = hosts
    if not from_profile or getattr(args, "server_args", None) is not None:
        words = server_args_arg(args, "serve")
        if words is None:
            return False
        args.server_words = words
    return True


def _with_rpc_fallback(cfg: ServerConfig, args: argparse.Namespace,
                       from_profile: bool) -> tuple[ServerConfig, ServerConfig | None]:
    """``cfg`` without the RPC hosts that do not answer (a note says so), and the configuration to fall back
    to when one is lost while serving (None without RPC)."""
    if not cfg.rpc:
        return cfg, None
    from tuner.calibration.serving import find_profile, reachable_config, rpc_fallback_config

    prof = find_profile(Path(args.models), args.target) if from_profile else None
    fallback = rpc_fallback_config(cfg, prof)
    cfg, note = reachable_config(cfg, fallback)
    if note:
        _err(f"draftwise serve: {note}")
    return cfg, fallback if cfg.rpc else None


def _preflight(cfg: ServerConfig, args: argparse.Namespace, from_profile: bool) -> None:
    """The address to bind resolvable, the model files readable, and ``--ngl`` / ``--draft-ngl`` within each
    model's blocks + 1. Raises ValueError naming the flag or file."""
    from tuner.options import Limits

    if args.host is not None:
        check_resolvable(cfg.host)
    blocks = _check_model_file(cfg.model_path, "target", None if from_profile else args.target)
    problem = check_limits(args, Limits(blocks=blocks, model=cfg.model_path.name), ["ngl"])
    if cfg.draft_path is not None:
        blocks = _check_model_file(cfg.draft_path, "draft", None if from_profile else args.draft)
        problem = problem or check_limits(args, Limits(blocks=blocks, model=cfg.draft_path.name), ["draft_ngl"])
    if problem:
        raise ValueError(problem)


def _supervisor(args: argparse.Namespace) -> tuple[ServerBinary, Supervisor]:
    """The llama-server binary (``--server`` or discovered) and its supervisor, checked against the user's
    flags. Raises ValueError with the line to print."""
    from tuner.serverargs import ServerArgError, check_known

    try:
        binary = find_named_server(args.server) if args.server else find_server()
        sup = Supervisor(binary, auto_restart=True,
                         liveness_timeout_s=args.liveness_timeout or None)  # --liveness-timeout 0: off
    except (ServerNotFoundError, DialectError) as exc:
        raise ValueError(_server_error(exc, args.server)) from None
    try:  # a flag this build does not list would make it exit 1 ("invalid argument")
        check_known(getattr(args, "server_words", None) or (), sup.dialect.has, binary.path)
    except ServerArgError as exc:
        raise ValueError(str(exc)) from None
    problem = sup.dialect.idle_sleep_problem() if getattr(args, "idle_sleep", None) else None
    if problem:  # never serve with the model pinned when the user asked for it to be freed
        raise ValueError(f"--idle-sleep {args.idle_sleep}: {problem}; serve without --idle-sleep")
    problem = sup.dialect.capture_problem() if getattr(args, "capture_requests", False) else None
    if problem:
        raise ValueError(f"--capture-requests: {problem}; serve without --capture-requests")
    return binary, sup


def _with_capture(cfg: ServerConfig, args: argparse.Namespace) -> ServerConfig:
    """``cfg`` with ``--log-prompts-dir`` set to the model id's private folder when ``--capture-requests`` was
    given (:func:`tuner.server.capture.log_prompts_dir`, made before the launch), else ``cfg`` unchanged.
    Raises CaptureError (an OSError naming the folder)."""
    if not getattr(args, "capture_requests", False):
        return cfg
    from tuner.server.capture import log_prompts_dir

    return dataclasses.replace(cfg, log_prompts_dir=log_prompts_dir(cfg.alias or default_alias(cfg.model_path)))


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the server until Ctrl-C/SIGTERM. Exit 0 after a clean stop, 1 if it failed, 2 for a
    bad command line / missing profile / missing binary."""
    from_profile = bool(args.models and not args.draft and not args.spec_type)
    if not _served_lists(args, from_profile):
        return 2
    try:
        cfg = config_from_args(args)
    except Exception as exc:  # ValueError, NoProfileError, ProfileError, ImportError, OSError (a path)
        _err(f"draftwise serve: {error_text(exc)}")
        return 2
    try:
        _preflight(cfg, args, from_profile)
        binary, sup = _supervisor(args)
        if from_profile:
            _check_tuned_binary(args, binary)
        cfg = _with_capture(cfg, args)
        cfg, fallback = _with_rpc_fallback(cfg, args, from_profile)  # every serving setting of cfg: the capture too
        sup.set_rpc_fallback(fallback)
    except (ValueError, OSError) as exc:
        _err(f"draftwise serve: {error_text(exc)}")
        return 2
    return _serve(args, cfg, binary, sup)


def _check_tuned_binary(args: argparse.Namespace, binary: ServerBinary) -> None:
    """A profile served with ``--models`` runs on the llama-server it was tuned with: another file, build or flag
    dialect (e.g. a profile tuned with ``tune --server WRAPPER``, served with the default binary) would serve an
    unmeasured configuration, so the profile is stale for it (``tuner.calibration.freshness.binary_reasons``).

    Raises:
        ValueError: the profile is stale for ``binary`` (the reason, and what to run instead).
    """
    from tuner.calibration.freshness import binary_reasons
    from tuner.calibration.serving import find_profile

    prof = find_profile(Path(args.models), args.target)
    reasons = binary_reasons(prof.keys, binary)
    if reasons:
        raise ValueError(
            f"the profile for {Path(prof.target_path).name} is stale for {binary.path}: {'; '.join(reasons)}. "
            f"Serve it with the llama-server it was tuned with (--server PATH), or re-tune with this one: "
            f"draftwise tune --models {args.models}" + (f" --target {args.target}" if args.target else "")
            + (f" --server {args.server}" if args.server else ""))


class _StateLines:
    """``serve``'s state lines on stderr and the endpoint on stdout (``Supervisor.on_state`` callback);
    ``done`` is set when serving ended, ``said`` keeps the failure messages already printed."""

    def __init__(self, cfg: ServerConfig, sup: Supervisor) -> None:
        from tuner.catalog.header import has_chat_template

        self.cfg, self.sup = cfg, sup
        self.done = threading.Event()
        self.said: list[str] = []
        self.base_model = not has_chat_template(cfg.model_path)

    def __call__(self, ch: StateChange) -> None:
        # a crash, a retry or a restart is its own sentence ("llama-server crashed (…); restarting in 2 s
        # (restart 3)", tuner/server/restart_policy.py describe), as are idle sleep's ("sleeping — memory
        # freed (…)", "awake: the first request waited 2.1 s …", tuner/server/sleep.py); others "state: message"
        said_why = ch.state == ServerState.STARTING and ch.diagnosis is not None
        sleep = ServerState.SLEEPING in (ch.state, ch.previous) and ch.state in (ServerState.SLEEPING, ServerState.READY)
        _err(f"[{time.strftime('%H:%M:%S')}] " + (ch.message if said_why or sleep else f"{ch.state.value}: {ch.message}"))
        if ch.state == ServerState.FAILED:
            self.said.append(ch.message)
        if ch.state == ServerState.FAILED and ch.previous != ServerState.STARTING:
            self.done.set()
        if ch.state == ServerState.READY and ch.previous == ServerState.STARTING:
            self._ready(ch)

    def _ready(self, ch: StateChange) -> None:
        cfg = self.cfg
        url = bound_url(cfg.host, ch.base_url)
        print(f"{url}/v1", flush=True)
        if self.base_model:
            # common/chat.cpp common_chat_templates_init: no template in the GGUF = ChatML
            _err(f"note: {cfg.model_path.name} has no chat template (a base model): /v1/chat/completions "
                 "wraps messages in llama-server's ChatML fallback, which a base model does not know, and "
                 "its answers may carry those tokens; send plain text to /v1/completions instead")
        if cfg.alias and any(a in ("-a", "--alias") for a in (self.sup.argv or ())):
            _err(f"model id (--alias): {cfg.alias}")
        if not is_loopback_host(cfg.host):
            _err(f"listening on {url} (reachable from the network; clients must send the API key); "
                 f"from this machine: {ch.base_url}/v1")
        if cfg.log_prompts_dir is not None:
            from tuner.server.capture import KEEP_WORDS

            _err(f"capturing requests: Draftwise {KEEP_WORDS}, in {cfg.log_prompts_dir} (only you can read it; "
                 "delete the folder to forget them)")


def _serve(args: argparse.Namespace, cfg: ServerConfig, binary: ServerBinary, sup: Supervisor) -> int:
    """Start ``sup`` with ``cfg`` and serve until a signal or a failure; the exit status of :func:`cmd_serve`."""
    lines = _StateLines(cfg, sup)
    sup.on_state(lines)
    done = lines.done
    prev = {}
    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_reason.append("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)
        # Never done.set() here: the handler runs on the main thread, possibly while that thread is
        # inside done.wait() holding the Event's lock, and set() would then deadlock. A helper thread
        # sets it as soon as the main thread lets go of the lock.
        threading.Thread(target=done.set, name="serve-signal", daemon=True).start()

    # Installed explicitly, SIGINT included: a background job of a non-interactive shell inherits
    # SIGINT as SIG_IGN, and Python then never raises KeyboardInterrupt.
    if threading.current_thread() is threading.main_thread():
        sigs = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
        for sig in sigs:
            prev[sig] = signal.signal(sig, on_signal)
    _err(f"llama-server: {binary.path} (build {binary.build or 'unknown'}, {sup.dialect.spec_style} flags)")
    try:
        return _serve_until_done(args, cfg, sup, lines, stop_reason)
    finally:
        for sig, handler in prev.items():
            signal.signal(sig, handler)


def _serve_until_done(args: argparse.Namespace, cfg: ServerConfig, sup: Supervisor, lines: _StateLines,
                      stop_reason: list[str]) -> int:
    """Start, wait for ready, then wait for ``lines.done``; stop the server and return the exit status."""
    try:
        sup.start(cfg, startup_timeout_s=args.ready_timeout)
        shown = ["<api key>" if cfg.api_key and a == cfg.api_key else a for a in (sup.argv or [])]
        _err("argv: " + command_line(shown, server_env(sup.config)))  # OMP_WAIT_POLICY=PASSIVE in front when the profile says
        sup.wait_ready(cancel=lines.done)
        while not lines.done.wait(0.5):
            if sup.state == ServerState.FAILED:
                break
        if stop_reason:
            _err(f"stopping ({stop_reason[0]})")
    except UnsupportedConfigError as exc:
        _err(f"draftwise serve: {exc}")
        return 2
    except ServerStartError as exc:
        if stop_reason and exc.diagnosis.code == "cancelled":
            _err(f"stopping ({stop_reason[0]}) before the server was ready")
            sup.stop()
            return 0
        _print_diagnosis(exc.diagnosis, sup, lines.said)
        sup.stop()
        return 1
    except KeyboardInterrupt:
        _err("stopping (Ctrl-C)")
    failed = sup.state == ServerState.FAILED
    if failed and sup.diagnosis is not None:
        _print_diagnosis(sup.diagnosis, sup, lines.said)
    sup.stop()
    return 1 if failed else 0


def bound_url(host: str, base_url: str | None) -> str:
    """``http://HOST:PORT`` with the address the server is bound to (``--host``), not the loopback
    address the supervisor connects to; the port is taken from ``base_url`` (``http://h:port``)."""
    port = (base_url or "").rsplit(":", 1)[-1]
    h = host.strip()
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}"


def _print_diagnosis(diag: Any, sup: Supervisor | None, said: list[str] | tuple[str, ...] = ()) -> None:
    """The failure's cause (``diag.message``), unless a ``failed:`` state line in ``said`` printed it
    already, then its evidence lines and the server log's path."""
    if diag.message not in said:
        _err(f"llama-server failed: {diag.message}")
    for line in diag.evidence[-15:]:
        _err(f"  | {line}")
    if sup is not None and sup.log_path is not None:
        _err(f"full log: {sup.log_path}")


def _devices_report(binary: ServerBinary) -> dict:
    from tuner.crosscheck.build import build_probes
    from tuner.hardware import detect_devices

    try:
        devs = detect_devices(binary.path, build_probes())
    except Exception as exc:  # the hardware package promises not to raise; be safe anyway
        return {"available": False, "note": f"device detection failed: {exc}"}
    rows = []
    for d in devs.devices:
        rows.append({"index": d.index, "name": d.name, "backend": d.backend, "total_bytes": d.total_bytes,
                     "free_bytes": d.free_bytes, "budget_bytes": d.budget_bytes})
    return {"available": True, "devices": rows, "ram_total_bytes": devs.ram_total_bytes,
            "cpu_cores": devs.cpu_cores, "notes": list(devs.notes),
            "cpu_buffers": dataclasses.asdict(devs.cpu_buffers) if devs.cpu_buffers is not None else None}


def _cpu_kernels_line(cpu: dict | None) -> str:
    """Doctor's line on the repacked CPU kernels (``Devices.cpu_buffers`` as a dict, or None)."""
    from tuner.hardware.repack import no_repack_sentence

    if cpu is None:
        return "unknown (the build's load log could not be read)"
    if cpu["no_repack"]:
        return (no_repack_sentence(cpu["cause"], tuple(cpu["types"])) if cpu["cause"]
                else "off (--no-repack): quantized weights are not copied for this CPU")
    if not cpu["types"]:
        return "none: this build keeps quantized weights as they are in the file on this machine"
    kinds = " and ".join(cpu["types"]) + (" buffer" if len(cpu["types"]) == 1 else " buffers")
    return f"on: this build copies quantized weights into ggml's {kinds} for this CPU's instructions"


def _selftest_buffers(load_lines: list[str]) -> list[str]:
    """The extra CPU buffer types the self-test's target weights went to (empty: none, or no load lines)."""
    from tuner.hardware.buffers import parse_cpu_build

    try:
        return list(parse_cpu_build(load_lines).extra_types)
    except ValueError:
        return []


def _gib(v: int | None) -> str:
    return format_bytes(v, "unknown", unit="GiB")


def _rpc_line(binary: ServerBinary, dialect: Dialect) -> str:
    """Doctor's RPC line: whether this build has ``--rpc`` and a ``ggml-rpc-server`` next to it."""
    from tuner.hardware.rpc import rpc_build_status

    return rpc_build_status(binary.path, dialect.has("--rpc")).message.removeprefix("RPC: ")


def _server_error(exc: Exception, server: str | None) -> str:
    """``exc``'s message, led by ``--server VALUE`` when the binary came from that flag (a dialect error
    starts with the binary's path, which is then not repeated)."""
    message = str(exc)
    if server is None or message.startswith("--server") or isinstance(exc, ServerNotFoundError):
        return message  # a not-found message names --server itself
    return f"--server {server}: {message.removeprefix(str(Path(server).expanduser().absolute()) + ': ')}"


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print the doctor report. Exit 0 when the self-test passed (or was skipped), 1 when it
    failed, 2 when no binary / no readable ``--help``."""
    report: dict[str, Any] = {}
    problem = check_options(args)
    if problem:
        _err(f"draftwise doctor: {problem}")
        return 2
    try:
        binary = find_named_server(args.server) if args.server else find_server()
    except ServerNotFoundError as exc:
        report.update(error=str(exc), code="bad_input", exit_status=2)  # as cli._json_error
        if args.json:  # the one-line error on stderr too, as every --json command
            _err(f"draftwise doctor: {_server_error(exc, args.server)}")
        print(json.dumps(report, indent=2) if args.json else f"llama-server: NOT FOUND\n{exc}")
        return 2
    report["binary"] = {"path": str(binary.path), "source": binary.source, "build": binary.build,
                        "commit": binary.commit, "version": binary.version_text}
    try:
        dialect = probe_dialect(binary.path)
    except DialectError as exc:
        report.update(error=str(exc), code="bad_input", exit_status=2)  # as cli._json_error
        if args.json:  # the one-line error on stderr too, as every --json command
            _err(f"draftwise doctor: {_server_error(exc, args.server)}")
        print(json.dumps(report, indent=2) if args.json else f"llama-server: {binary.path}\n{exc}")
        return 2
    report["dialect"] = {"spec_style": dialect.spec_style, "spec_types": list(dialect.spec_types),
                         "fit": dialect.has_fit, "metrics": dialect.has_metrics, "slots": dialect.has_slots,
                         "list_devices": dialect.has_list_devices,
                         "removed_flags": [f for f, _ in dialect.removed_flags],
                         "cors_locked": cors_locked(dialect), "rpc": dialect.has("--rpc")}
    from tuner.hardware.rpc import rpc_build_status

    rpc_status = rpc_build_status(binary.path, dialect.has("--rpc"))
    report["rpc"] = {"server_has_rpc": rpc_status.server_has_rpc, "ok": rpc_status.ok,
                     "rpc_server": str(rpc_status.rpc_server) if rpc_status.rpc_server else None,
                     "message": rpc_status.message}
    if not args.json:
        print(f"llama-server: {binary.path}  (found via {binary.source})")
        print(f"build:        {binary.build if binary.build is not None else 'unknown'}"
              f"{' (' + binary.commit + ')' if binary.commit else ''}")
        print(f"flags:        {dialect.spec_style} dialect; --fit {'yes' if dialect.has_fit else 'no'}, "
              f"--metrics {'yes' if dialect.has_metrics else 'no'}, --list-devices "
              f"{'yes' if dialect.has_list_devices else 'no'}")
        print(f"spec types:   {', '.join(dialect.spec_types) or '(none)'}")
        print(f"rpc:          {_rpc_line(binary, dialect)}")
        if cors_locked(dialect):
            print("web pages:    only pages from localhost may call the endpoint (--cors-origins localhost)")
        else:
            print("web pages:    OPEN: this build has no --cors-origins, so any web page open in a browser on "
                  "this machine can use the endpoint and read /props; update llama.cpp (b11434 or later)")
        sys.stdout.flush()
    _err("detecting devices...")
    report["devices"] = _devices_report(binary)
    if not args.json:
        dev = report["devices"]
        if not dev.get("available"):
            print(f"devices:      unknown ({dev.get('note')})")
        elif not dev["devices"]:
            print(f"devices:      CPU only; RAM {_gib(dev.get('ram_total_bytes'))}, {dev.get('cpu_cores')} cores")
        else:
            for r in dev["devices"]:
                print(f"device {r['index']}:     {safe_text(r['name'])} ({r['backend']}), total {_gib(r['total_bytes'])}, "
                      f"free {_gib(r['free_bytes'])}")
        for n in dev.get("notes", []):
            print(f"  note: {safe_text(n)}")
        if dev.get("available"):
            print(f"cpu kernels:  {_cpu_kernels_line(dev.get('cpu_buffers'))}")
        sys.stdout.flush()
    rc = 0
    if not args.no_self_test:
        _err("self-test: a tiny quantized model as target and draft, draft-simple, n_max 4 ...")
        from tuner.hardware.host import LoadWatcher
        from tuner.server.selftest import self_test

        # 0.1 s intervals: the whole self-test takes 0.2 s on a fast CPU (one 0.5 s interval saw nothing)
        with LoadWatcher(interval_s=0.1) as watcher:
            st = self_test(binary, dialect, timeout_s=args.timeout)
        load = watcher.summary()
        if load.busy:
            st["note"] = (f"other programs used {100 * (load.other_cpu_mean + load.steal_mean):.0f} % of the CPU "
                          "during the self-test; its tokens/s are lower than on an idle machine")
        st["buffers"] = _selftest_buffers(st.get("load_lines") or [])
        report["self_test"] = st
        rc = 0 if st["ok"] else 1
        if not args.json:
            if st["ok"]:
                print(f"self-test:    OK, speculation active: draft_n {st['draft_n']}, accepted "
                      f"{st['draft_n_accepted']} ({100 * (st['acceptance_rate'] or 0):.0f} %), "
                      f"{st['gen_tokens_per_s'] or 0:.0f} tokens/s, {st['seconds']} s; its quantized weights in "
                      + (" and ".join(st["buffers"]) if st["buffers"] else "no repacked buffer"))
                if st.get("note"):
                    print(f"  note: {st['note']}")
            else:
                print(f"self-test:    FAILED: {safe_text(st['error'])}")
                for line in st.get("evidence", []):
                    print(f"  | {safe_text(line)}")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    return rc
