"""``draftwise devices`` and ``draftwise plan``: the hardware package's CLI.

Machine-readable output (``--json``) goes to stdout; progress and notes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.cli.options import (
    add_option,
    bind_host,
    check_limits,
    check_options,
    check_resolvable,
    folder_problem,
    path_problem,
)
from tuner.crosscheck.build import build_probes, find_server_binary
from tuner.crosscheck.fit_params import cross_check, find_fit_params
from tuner.crosscheck.server_check import cached_server_report, server_config_for, server_cross_check
from tuner.hardware.devices import Devices, detect_devices
from tuner.hardware.memory import (
    ContextTrade,
    MemoryPlan,
    MemoryRequest,
    ModelMemorySpec,
    context_trade,
    load_model_spec,
    plan_memory,
)
from tuner.hardware.repack import no_repack_in
from tuner.hardware.rpc import (
    NO_AUTH_WARNING,
    RpcHostError,
    parse_rpc_hosts,
)
from tuner.safetext import error_text, safe_text
from tuner.settings import DEFAULT_CACHE_RAM_MIB
from tuner.units import MIB, format_bytes

if TYPE_CHECKING:  # annotations only
    from tuner.crosscheck.fit_params import FitCrossCheck
    from tuner.crosscheck.server_check import ServerCrossCheck

DEFAULT_PLAN_CTX = 4096
"""The automatic context size when the model does not say its own (:data:`tuner.ctxsize.DEFAULT_CTX_FLOOR`)."""


def plan_n_ctx(requested: int | None, context_length: int | None) -> tuple[int, str | None]:
    """The n_ctx ``draftwise plan`` uses, and a note about it (None when nothing to say).

    Default: the rule shared with tune and serve, :func:`tuner.ctxsize.default_ctx_size` (the GGUF key
    ``<arch>.context_length``, the training context, capped at 8192, at least 4096 unless the model's own
    is smaller; llama.cpp warns when n_ctx exceeds it, llama-context.cpp "n_ctx_seq > n_ctx_train").
    An explicit ``--ctx-size`` above the training context is kept and warned about.
    """
    from tuner.ctxsize import default_ctx_size

    if requested is None:
        n = default_ctx_size(context_length)
        if context_length is not None and context_length < DEFAULT_PLAN_CTX:
            return n, (f"n_ctx {context_length}: the model's training context "
                       f"(context_length), below the usual {DEFAULT_PLAN_CTX}; set --ctx-size to change")
        return n, None
    if context_length is not None and requested > context_length:
        return requested, (f"--ctx-size {requested} exceeds the model's training context {context_length} "
                           "(context_length): quality degrades beyond it")
    return requested, None


def plan_cache_ram(given: int | None) -> tuple[int, str]:
    """The prompt-cache limit (``--cache-ram``, MiB) ``draftwise plan`` counts in host RAM, and its line for
    the report. Default: what ``draftwise serve`` passes (:func:`tuner.settings.served_values`: the
    ``cache_ram_mib`` setting, :data:`tuner.settings.DEFAULT_CACHE_RAM_MIB` unless changed). -1 (no limit)
    cannot be counted: 0 bytes, and the line says so."""
    if given is not None:
        mib, source = given, f"--cache-ram {given}"
    else:
        from tuner.settings import served_values

        mib = served_values()[1]
        source = f"--cache-ram {mib}, as serve passes it: the cache_ram_mib setting"
    if mib < 0:
        return mib, f"prompt cache: no limit ({source}): it grows with use and is not counted here"
    if mib == 0:
        return 0, f"prompt cache: off ({source}), not counted"
    return mib, f"prompt cache: up to {_mib(mib * MIB)} of host RAM while serving ({source}), counted above"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``devices`` and ``plan`` sub-commands."""
    p = subparsers.add_parser("devices", help="list GPUs, their memory budgets, and host RAM/CPU")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--server", help="llama-server binary to ask (--list-devices); default: found automatically")
    add_rpc_argument(p)
    p.set_defaults(func=cmd_devices)

    p = subparsers.add_parser("plan", help="memory plan of one configuration: where every byte goes, does it fit")
    p.add_argument("--target", metavar="NAME|PATH",
                   help="target model GGUF: a path, or a file name / stem in --models DIR (as for tune); default "
                   "with --models: the target tune picks (the largest model that has a compatible draft)")
    p.add_argument("--draft", metavar="NAME|PATH",
                   help="draft model GGUF, path or name in --models DIR (implies --spec-type draft-simple)")
    p.add_argument("--models", metavar="DIR", help="models folder where --target / --draft names are looked up")
    p.add_argument("--spec-type", help="--spec-type value (default: draft-simple with --draft, else none)")
    add_option(p, "n_ctx", "--ctx-size", "--ctx", dest="ctx", help="context size n_ctx (-c)",
               default_help="default: the model's training context (GGUF <arch>.context_length) capped at 8192, "
               "at least 4096 unless the model's is smaller")
    add_option(p, "ngl", "--ngl", dest="ngl")
    add_option(p, "draft_ngl", "--draft-ngl", dest="draft_ngl")
    add_option(p, "n_max", "--n-max", dest="n_max", help="draft length (--spec-draft-n-max)",
               default_help="default: the server's default for the type (3 for draft-*)")
    add_option(p, "n_cpu_moe", "--n-cpu-moe", dest="n_cpu_moe")
    p.add_argument("--cpu-moe", action="store_true", help="keep all target MoE expert tensors on the CPU (--cpu-moe)")
    add_option(p, "cache_ram_mib", "--cache-ram", dest="cache_ram", default=None,
               help="llama-server's host-RAM prompt cache limit (--cache-ram MiB), counted in the host's need",
               default_help="default: what draftwise serve passes, the cache_ram_mib setting "
               f"({DEFAULT_CACHE_RAM_MIB} unless changed); 0 = off, -1 = no limit, neither counted")
    add_option(p, "n_parallel", "--np", dest="np")
    p.add_argument("--ctk", default="f16", help="KV cache type K (-ctk)")
    p.add_argument("--ctv", default="f16", help="KV cache type V (-ctv)")
    add_option(p, "margin_mib", "--margin-mib", dest="margin_mib")
    p.add_argument("--server", help="llama-server binary (for --list-devices); default: found automatically")
    p.add_argument("--no-cross-check", action="store_true",
                   help="skip the cross-check with llama-fit-params (run when the build ships it)")
    p.add_argument("--server-check", action="store_true",
                   help="also start llama-server once with exactly the argv it would get (one model load; "
                   "cached per binary, model files and settings) and compare its own start-up projection "
                   "and allocated buffers with this plan")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    add_rpc_argument(p)
    add_server_arg_argument(p)
    p.set_defaults(func=cmd_plan)

    p = subparsers.add_parser(
        "rpc-host", help="offer this machine's devices to another machine's llama-server (ggml-rpc-server)",
        description="Run a supervised ggml-rpc-server (the one installed next to llama-server) until Ctrl-C, "
        "so that `draftwise tune/serve --rpc HOST:PORT` on another machine can place layers here. "
        "Binds 127.0.0.1 unless --host says otherwise. " + NO_AUTH_WARNING.capitalize() + ".")
    add_option(p, "rpc_port", "--port", dest="port")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only); a LAN address (e.g. 0.0.0.0) "
                   "exposes the devices without any authentication")
    p.add_argument("--device", help="ggml device names to offer, comma-separated (e.g. CUDA0); default: all")
    add_option(p, "threads", "--threads", dest="threads", help="CPU threads of its CPU device",
               default_help="default: ggml-rpc-server's, 1")
    p.add_argument("--server", help="llama-server binary whose ggml-rpc-server to run; default: found automatically")
    p.add_argument("--check-build", action="store_true",
                   help="only check that the found llama-server has --rpc and a ggml-rpc-server next to it "
                   "(exit 0) or not (exit 1, with the rebuild command)")
    p.set_defaults(func=cmd_rpc_host)


def _mib(n: int | None) -> str:
    return format_bytes(n, "unknown", smallest="MiB")


def _bad_server_flag(server: str | None, command: str) -> bool:
    """True (after printing one line naming ``--server``) when ``--server`` names no executable file:
    a path typed by the user must not silently fall back to a CPU-only answer."""
    if server is None:
        return False
    from tuner.server.discovery import ServerNotFoundError, find_named_server

    try:
        find_named_server(server, read_build=False)
    except ServerNotFoundError:
        print(f"draftwise {command}: --server {server}: no such executable llama-server", file=sys.stderr)
        return True
    return False


def add_rpc_argument(p: argparse.ArgumentParser) -> None:
    """The shared ``--rpc HOST:PORT,...`` option (devices, plan, tune, serve)."""
    p.add_argument("--rpc", metavar="HOST:PORT,...", default=None,
                   help="llama.cpp RPC hosts (each running `draftwise rpc-host` / ggml-rpc-server) whose devices "
                   "to use as well; default: the rpc_hosts setting. An unreachable host is a note, not an error")
    return None


def rpc_hosts_arg(args: argparse.Namespace, command: str) -> tuple[str, ...] | None:
    """``--rpc`` as ``host:port`` strings (or the ``rpc_hosts`` setting when not given); None after printing
    one line naming ``--rpc`` when it is malformed."""
    value = getattr(args, "rpc", None)
    try:
        if value is None:
            from tuner.settings import load_settings_keeping_valid

            saved = load_settings_keeping_valid(repair=False).settings.rpc_hosts  # a bad key is left out
            return tuple(str(e) for e in parse_rpc_hosts(list(saved), where="setting rpc_hosts"))
        return tuple(str(e) for e in parse_rpc_hosts(value))
    except RpcHostError as exc:
        print(f"draftwise {command}: {exc}", file=sys.stderr)
        return None


class _ServerArgAction(argparse.Action):
    """``--server-arg=FLAG[=VALUE]``, repeatable. With a space instead of ``=`` a flag such as ``--no-mmap``
    is taken by argparse for an option of draftwise, and ``--server-arg`` is left without a value: that is
    refused here with the ``=`` form to use (``nargs='?'`` lets this action see it)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if values is None:
            raise argparse.ArgumentError(self, "give the llama-server flag after '=', as in --server-arg=--no-mmap "
                                         "or --server-arg=-tb=2 (after a space, a word starting with '-' is read "
                                         "as an option of draftwise)")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), str(values)])


def add_server_arg_argument(p: argparse.ArgumentParser, serve_models: bool = False) -> None:
    """The shared repeatable ``--server-arg=FLAG[=VALUE]`` option (tune, serve, plan; dest ``server_args``)."""
    from tuner.serverargs import user_allowed

    p.add_argument("--server-arg", dest="server_args", action=_ServerArgAction, nargs="?", default=None,
                   metavar="FLAG[=VALUE]",
                   help="add a llama-server flag to every launch, written with '=' (--server-arg=--no-repack, "
                   "--server-arg=-tb=2); repeat it for more. Given, it replaces the server_args setting (Serve "
                   "tab: Extra llama-server flags); --server-arg= alone means none. "
                   + ("With --models the profile's flags are used, and another list is refused (re-tune with it). "
                      if serve_models else "")
                   + "Allowed: " + " ".join(user_allowed()) + "; never a flag that changes where the server "
                   "listens, its key, CORS or tools, or one Draftwise sets itself")


def server_args_arg(args: argparse.Namespace, command: str) -> tuple[str, ...] | None:
    """``--server-arg`` values (or the ``server_args`` setting when none was given) as llama-server argv words
    (:func:`tuner.serverargs.parse_server_args`); None after printing one line naming the refused flag."""
    from tuner.serverargs import ServerArgError, parse_server_args

    given = getattr(args, "server_args", None)
    try:
        if given is None:
            from tuner.settings import load_settings_keeping_valid

            saved = load_settings_keeping_valid(repair=False).settings.server_args  # a bad key is left out
            return parse_server_args(saved, where="setting server_args")
        return parse_server_args(given, where="--server-arg")
    except ServerArgError as exc:
        print(f"draftwise {command}: {exc}", file=sys.stderr)
        return None


def _detect(server: str | None, rpc_hosts: tuple[str, ...] = ()) -> tuple[Devices, Path | None]:
    binary = Path(server) if server else find_server_binary()
    print(f"asking {binary} --list-devices ..." if binary else "no llama-server found; using NVML/sysfs only",
          file=sys.stderr)
    if rpc_hosts:
        print(f"asking RPC hosts {', '.join(rpc_hosts)} ...", file=sys.stderr)
    return detect_devices(binary, build_probes(), rpc_hosts=rpc_hosts or None), binary


def devices_json(devs: Devices) -> dict:
    """The JSON shape of ``draftwise devices --json``."""
    return dataclasses.asdict(devs)


def cmd_devices(args: argparse.Namespace) -> int:
    """``draftwise devices``: print the devices (exit 0 also when CPU-only; 2 for a bad ``--server``)."""
    if _bad_server_flag(args.server, "devices"):
        return 2
    rpc = rpc_hosts_arg(args, "devices")
    if rpc is None:
        return 2
    devs, _ = _detect(args.server, rpc)
    if args.json:
        json.dump(devices_json(devs), sys.stdout, indent=2)
        print()
        return 0
    print(f"Host: {_mib(devs.ram_total_bytes)} RAM ({_mib(devs.ram_available_bytes)} available), "
          f"{devs.cpu_cores} cores / {devs.cpu_threads} threads")
    if devs.cpu_only:
        print("GPUs: none (CPU-only: every layer runs on the CPU)")
    else:
        print("GPUs (llama.cpp order):" if devs.listed_by_llama else "GPUs (order from NVML/sysfs):")
        for d in devs.devices:
            kind = ", unified memory" if d.unified_memory else (", remote" if d.remote else "")
            print(safe_text(f"  [{d.index}] {d.name}: {d.description or '?'} ({d.backend}{kind})"))
            print(f"      total {_mib(d.total_bytes)}, free {_mib(d.free_bytes)}, budget {_mib(d.budget_bytes)}"
                  f"  [source: {d.source}]")
            for n in d.notes:
                print(f"      note: {safe_text(n)}")
    for n in devs.notes:
        print(f"note: {safe_text(n)}")
    return 0


def plan_json(plan: MemoryPlan, trade: ContextTrade | int | None) -> dict:
    """The JSON shape of ``draftwise plan --json``: the plan, plus the context-vs-layers trade
    (``max_ngl_at_ctx``: most target GPU layers that fit at the plan's n_ctx next to the draft;
    ``max_ctx_all_on_gpu``: largest n_ctx with every layer on the GPUs; both None without a GPU;
    ``max_target_ngl`` = ``max_ngl_at_ctx``, kept for older readers)."""
    out = dataclasses.asdict(plan)
    out["total_bytes"] = plan.total_bytes
    for dev in out["devices"]:
        dev["need"]["total_bytes"] = sum(v for v in dev["need"].values())
    out["host"]["need"]["total_bytes"] = plan.host.need.total_bytes
    if isinstance(trade, ContextTrade):
        out["max_ngl_at_ctx"] = trade.max_ngl_at_ctx
        out["max_ctx_all_on_gpu"] = trade.max_ctx_all_on_gpu
        out["ctx_ceiling"] = trade.ctx_ceiling
    else:
        out["max_ngl_at_ctx"] = trade
        out["max_ctx_all_on_gpu"] = None
    out["max_target_ngl"] = out["max_ngl_at_ctx"]
    return out


_COLS = (("target_weights_bytes", "target W"), ("target_kv_bytes", "target KV"), ("draft_weights_bytes", "draft W"),
         ("draft_kv_bytes", "draft KV"), ("mtp_kv_bytes", "MTP KV"), ("compute_bytes", "compute"),
         ("output_bytes", "output"), ("prompt_cache_bytes", "cache-ram"))


def _plan_args_problem(args: argparse.Namespace, spec_type: str) -> str | None:
    """One line naming the flag when the plan's command line is inconsistent (the numbers are checked
    against their declarations by :func:`tuner.cli.options.check_options` before), else None."""
    from tuner.spectypes import DRAFT_MODEL_TYPES, NGRAM_TYPES

    known = {"none", "draft-mtp"} | DRAFT_MODEL_TYPES | NGRAM_TYPES
    types = [t.strip() for t in spec_type.split(",") if t.strip()]
    unknown = [t for t in types if t not in known]
    if unknown:
        return f"--spec-type {unknown[0]!r} is not a speculation type; known: {', '.join(sorted(known))}"
    if args.draft and not set(types) & DRAFT_MODEL_TYPES:
        return f"--draft is given but --spec-type {spec_type} does not use a draft model"
    if not args.draft and set(types) & DRAFT_MODEL_TYPES:
        return f"--spec-type {spec_type} needs a draft model: add --draft D"
    if args.draft_ngl is not None and not args.draft:
        return "--draft-ngl needs --draft"
    return None


def _server_argv(req: MemoryRequest, binary: Path | None, server_args: tuple[str, ...] = ()) -> list[str] | None:
    """The argv ``tuner.server.argv.build_argv`` gives the server for ``req`` with the user's flags
    (``server_args``, argv words) at the end, as every launch gets them (port 0 as a placeholder), or None
    when there is no binary or it cannot express the request."""
    if binary is None:
        return None
    try:
        from tuner.server.argv import build_argv
        from tuner.server.dialect import probe_dialect

        cfg = server_config_for(req, binary=binary)
        cfg = dataclasses.replace(cfg, extra_args=(*cfg.extra_args, *server_args))
        return build_argv(binary, cfg.with_port(0), probe_dialect(binary))
    except Exception as exc:  # noqa: BLE001 - DialectError, UnsupportedConfigError: say it, plan anyway
        print(f"draftwise plan: note: no server argv for the cross-checks ({exc})", file=sys.stderr)
        return None


def _unknown_server_arg(server_args: tuple[str, ...], binary: Path | None) -> str | None:
    """One line naming a user flag ``binary`` does not list in its ``--help`` (None when all are known, or
    when there is no binary or its dialect cannot be read: the argv note says so then)."""
    if binary is None or not server_args:
        return None
    from tuner.server.dialect import DialectError, probe_dialect
    from tuner.serverargs import ServerArgError, check_known

    try:
        check_known(server_args, probe_dialect(binary).has, binary)
    except DialectError:
        return None
    except ServerArgError as exc:
        return str(exc)
    return None


def _model_path(given: str, models_dir: str | None, flag: str) -> Path:
    """``given`` as a path when it is one, else a file name or stem in ``models_dir`` (``tune``'s rule:
    ``x.gguf`` or ``x``, ``tuner.catalog.folder.find_named_model``). Raises ValueError naming the flag and
    the value (and the folder's GGUF files), AmbiguousModelError when two files there carry the name."""
    from tuner.catalog.folder import find_named_model, gguf_files_under

    path = Path(given)
    if path.exists():
        return path
    if models_dir is None:
        raise ValueError(f"{flag} {given}: no such file (give a path, or --models DIR to look the name up there)")
    folder = Path(models_dir)
    if not folder.is_dir():
        raise ValueError(f"--models {folder}: no such folder")
    found = find_named_model(folder, given, flag)
    if found is not None:
        return found
    names = sorted({p.name for p in gguf_files_under(folder)})
    raise ValueError(f"{flag} {given!r}: no such model in {folder}; GGUF files there: "
                     + (", ".join(names[:20]) or "none"))


def _default_target(models_dir: str | None) -> Path:
    """The target ``plan`` plans without ``--target``: the one ``tune --models DIR`` tunes
    (``tuner.catalog.folder.default_target``), said on stderr.

    Raises:
        ValueError: no ``--models`` either, or no LLM in the folder (names the flag).
    """
    from tuner.catalog.folder import default_target, default_target_note, scan_models

    if models_dir is None:
        raise ValueError("plan needs --target T (a path), or --models DIR to plan the target tune picks there")
    if not Path(models_dir).is_dir():
        raise ValueError(f"--models {models_dir}: no such folder")
    scanned = scan_models(Path(models_dir))
    chosen = default_target(scanned.models, scanned.families)
    if chosen is None:
        raise ValueError(f"--models {models_dir}: no LLM GGUF file in this folder (give --target)")
    note = default_target_note(scanned.models, chosen)
    print(note or f"target: {Path(chosen.path).name} (the one tune picks: the largest model with a compatible "
          "draft, else the largest; --target names another)", file=sys.stderr)
    return Path(chosen.path)


def _load_spec(given: str, models_dir: str | None, flag: str) -> ModelMemorySpec:
    """The memory spec of the model ``flag`` names (:func:`_model_path`). Raises ValueError naming the flag,
    its value and the file for a file that is no usable GGUF."""
    from tuner.catalog.header import GGUFError

    path = _model_path(given, models_dir, flag)
    try:
        return load_model_spec(path)
    except GGUFError as exc:  # its path may be another file (a missing shard): then named as well
        where = "" if str(path) == given else f" ({path})"
        detail = exc.reason if Path(exc.path) == path else str(exc)
        raise ValueError(f"{flag} {given}{where}: {detail}") from None
    except OSError as exc:  # a name longer than the system allows, a link loop, ...
        where = "" if str(path) == given else f" ({path})"
        raise ValueError(f"{flag} {given}{where}: {error_text(exc, with_path=False)}") from None


def _files_bytes(given: str, models_dir: str | None, flag: str) -> int | None:
    """Bytes of the file (every shard of a split set) ``flag`` names; ``None`` when unreadable."""
    from tuner.catalog.split import split_shard_paths

    try:
        return sum(p.stat().st_size for p in split_shard_paths(_model_path(given, models_dir, flag)))
    except (OSError, ValueError, LookupError):
        return None


def repack_lines(plan: MemoryPlan) -> list[str]:
    """The plan's lines about ggml's extra CPU buffer types: how much of the host's weights they copy, in
    which type (AMX, CPU_REPACK), and the sentence when ``--no-repack`` is in force."""
    from tuner.hardware.repack import no_repack_sentence

    cpu = plan.cpu_buffers
    out = []
    if plan.repack_host_bytes:
        parts = [(name, copy) for name, copy, _ in plan.extra_buffers if copy]
        where = (f"ggml's {parts[0][0]} buffer" if len(parts) == 1 else
                 "ggml's " + " and ".join(f"{n} ({_mib(c)})" for n, c in parts) + " buffers")
        guess = "; guessed from the CPU's flags" if cpu is not None and cpu.source != "load log" else ""
        out.append(f"Weights in host RAM include {_mib(plan.repack_host_bytes)} repacked for this CPU "
                   f"({where}, beside the file's mmapped tensors{guess})")
    if cpu is not None and cpu.no_repack:
        out.append(no_repack_sentence(cpu.cause, cpu.types) if cpu.cause else
                   "Repacked CPU kernels are off (--no-repack): the weights are not copied for this CPU")
    return out


@dataclasses.dataclass(frozen=True)
class _PlanInputs:
    """What ``plan``'s command line asks for, checked: the models, the request, the user's flags and notes."""

    target: ModelMemorySpec
    draft: ModelMemorySpec | None
    spec_type: str
    rpc: tuple[str, ...]
    server_args: tuple[str, ...]
    cache_ram: int
    cache_line: str
    ctx_note: str | None
    ctx_label: str
    req: MemoryRequest


def _plan_inputs(args: argparse.Namespace) -> _PlanInputs | None:
    """``plan``'s inputs from ``args``: numbers within their declarations (:mod:`tuner.options`; GPU layers
    and MoE blocks within the model's blocks), models read, flags consistent. None after printing the one
    line naming the bad flag or file."""
    from tuner.options import Limits

    problem = (folder_problem(args.models) or path_problem(args.target, "--target")
               or path_problem(args.draft, "--draft") or check_options(args))
    if problem:
        print(f"draftwise plan: {problem}", file=sys.stderr)
        return None
    try:
        if args.target is None:
            args.target = str(_default_target(args.models))
        target = _load_spec(args.target, args.models, "--target")
        draft = _load_spec(args.draft, args.models, "--draft") if args.draft else None
    except Exception as exc:  # noqa: BLE001 - GGUFError / ValueError name the flag and file
        print(f"draftwise plan: {error_text(exc)}", file=sys.stderr)
        return None
    spec_type = args.spec_type or ("draft-simple" if draft else "none")
    problem = (_plan_args_problem(args, spec_type)
               or check_limits(args, Limits(blocks=target.n_layer, model=Path(args.target).name), ["ngl", "n_cpu_moe"])
               or (check_limits(args, Limits(blocks=draft.n_layer, model=Path(args.draft).name), ["draft_ngl"])
                   if draft else None))
    if problem:
        print(f"draftwise plan: {problem}", file=sys.stderr)
        return None
    if _bad_server_flag(args.server, "plan"):
        return None
    rpc = rpc_hosts_arg(args, "plan")
    server_args = server_args_arg(args, "plan")
    if rpc is None or server_args is None:
        return None
    cache_ram, cache_line = plan_cache_ram(args.cache_ram)
    n_ctx, ctx_note = plan_n_ctx(args.ctx, target.context_length)
    ctx_label = "warning" if args.ctx is not None else "note"
    if ctx_note is not None and args.json:
        print(f"draftwise plan: {ctx_label}: {ctx_note}", file=sys.stderr)
    req = MemoryRequest(target=target, draft=draft, spec_type=spec_type, ngl=args.ngl, draft_ngl=args.draft_ngl,
                        n_ctx=n_ctx, cache_type_k=args.ctk, cache_type_v=args.ctv,
                        n_parallel=None if args.np == 0 else args.np, margin_bytes=args.margin_mib * MIB,
                        n_max=args.n_max, n_cpu_moe=args.n_cpu_moe, cpu_moe=args.cpu_moe,
                        prompt_cache_bytes=max(cache_ram, 0) * MIB, no_repack=no_repack_in(server_args))
    return _PlanInputs(target, draft, spec_type, rpc, server_args, cache_ram, cache_line, ctx_note, ctx_label, req)


def _margin_problem(args: argparse.Namespace, devs: Devices) -> str | None:
    """``--margin-mib`` above the largest device's memory (host RAM on a CPU-only machine): one line, else None."""
    from tuner.options import Limits

    sizes = [d.total_bytes for d in devs.devices if d.total_bytes]
    largest = max(sizes) if sizes else devs.ram_total_bytes
    return check_limits(args, Limits(device_bytes=largest), ["margin_mib"]) if largest else None


def cmd_plan(args: argparse.Namespace) -> int:
    """``draftwise plan``: exit 0 when the plan fits, 1 when it does not, 2 on a bad flag or model file."""
    inputs = _plan_inputs(args)
    if inputs is None:
        return 2
    req = inputs.req
    devs, binary = _detect(args.server, inputs.rpc)
    problem = _unknown_server_arg(inputs.server_args, binary) or _margin_problem(args, devs)
    if problem:
        print(f"draftwise plan: {problem}", file=sys.stderr)
        return 2
    try:
        plan = plan_memory(req, devs)
    except ValueError as exc:
        print(f"draftwise plan: {exc}", file=sys.stderr)
        return 2
    trade = context_trade(req, devs)
    check, scheck, server_argv = _plan_cross_checks(args, req, devs, binary, inputs.server_args)
    if args.json:
        return _print_plan_json(args, inputs, plan, trade, check, scheck)
    _print_plan(args, inputs, plan, trade, devs)
    _print_plan_checks(inputs, check, scheck, binary is not None and server_argv is not None)
    for n in plan.notes + devs.notes:
        print(f"note: {safe_text(n)}")
    return 0 if plan.fits else 1


def _plan_cross_checks(args: argparse.Namespace, req: MemoryRequest, devs: Devices, binary: Path | None,
                       server_args: tuple[str, ...]) -> tuple[FitCrossCheck | None, ServerCrossCheck | None,
                                                              list[str] | None]:
    """llama-fit-params' answer (unless ``--no-cross-check``), the server check (``--server-check``, or its
    cached report) and the argv they ran with; None for each that did not run."""
    check = None
    # the cross-checks start llama-fit-params / llama-server on this machine's devices only
    server_argv = None if devs.rpc_endpoints else _server_argv(req, binary, server_args)
    if devs.rpc_endpoints:
        print("draftwise plan: note: cross-checks skipped with RPC hosts (they see this machine's devices only)",
              file=sys.stderr)
    tool = None if args.no_cross_check or devs.rpc_endpoints else find_fit_params(binary)
    if tool is not None:
        print(f"cross-checking with {tool} (the server's flags) ...", file=sys.stderr)
        check = cross_check(req, devs, tool, server_argv=server_argv)
    scheck = None
    cached = None
    if binary is not None and server_argv is not None:
        if args.server_check:
            print("cross-checking with llama-server itself (one model load, cached) ...", file=sys.stderr)
            scheck = server_cross_check(req, devs, binary, extra_args=server_args)
        else:
            cfg = server_config_for(req, binary=binary)
            cached = cached_server_report(server_argv, [cfg.model_path, cfg.draft_path])
            if cached is not None:  # from the cache: no server start
                scheck = server_cross_check(req, devs, binary, extra_args=server_args)
    return check, scheck, server_argv


def _print_plan_json(args: argparse.Namespace, inputs: _PlanInputs, plan: MemoryPlan, trade: ContextTrade,
                     check: FitCrossCheck | None, scheck: ServerCrossCheck | None) -> int:
    """``plan --json``: the plan and its checks as one object on stdout; the exit status."""
    server_args, cache_ram, ctx_note = inputs.server_args, inputs.cache_ram, inputs.ctx_note
    data = plan_json(plan, trade)
    data["cross_check"] = dataclasses.asdict(check) if check is not None else None
    data["server_check"] = scheck.to_json() if scheck is not None else None
    data["n_ctx_note"] = ctx_note
    data["cache_ram_mib"] = cache_ram
    data["cache_ram_from"] = "--cache-ram" if args.cache_ram is not None else "setting cache_ram_mib"
    data["server_args"] = list(server_args)
    json.dump(data, sys.stdout, indent=2)
    print()
    return 0 if plan.fits else 1


def _print_plan(args: argparse.Namespace, inputs: _PlanInputs, plan: MemoryPlan, trade: ContextTrade,
                devs: Devices) -> None:
    """The plan's table and verdict for people."""
    target, draft, spec_type, server_args = inputs.target, inputs.draft, inputs.spec_type, inputs.server_args
    cache_line, max_ngl = inputs.cache_line, trade.max_ngl_at_ctx
    dtext = f", draft {Path(args.draft).name} ({draft.n_layer} blocks, {_mib(draft.weights_bytes)})" if draft else ""
    size = _files_bytes(args.target, args.models, "--target")
    print(f"Plan: target {Path(args.target).name} ({target.n_layer} blocks, {_mib(target.weights_bytes)} of tensors"
          + (f" in a {_mib(size)} file" if size else "") + f"){dtext}")
    slots = (f"{plan.n_parallel} slot(s) sharing one unified KV" if plan.kv_unified
             else f"{plan.n_parallel} slot(s) x {plan.n_ctx_slot} cells")
    print(f"      --spec-type {spec_type}, n_ctx {plan.n_ctx} ({slots}, KV {args.ctk}/{args.ctv}), "
          f"target ngl {plan.target_ngl}" + (f", draft ngl {plan.draft_ngl}" if draft else ""))
    if server_args:
        print(f"      extra llama-server flags (in the cross-checks' argv): {' '.join(server_args)}")
    header = f"{'place':<12}" + "".join(f"{h:>11}" for _, h in _COLS) + f"{'total':>11}{'budget':>11}{'headroom':>11}"
    print(header)
    rows = [(f"{p.device_name}", p.need, p.budget_bytes, p.headroom_bytes) for p in plan.devices]
    rows.append(("host RAM", plan.host.need, plan.host.ram_available_bytes, plan.host.headroom_bytes))
    for name, need, budget, head in rows:
        cells = "".join(f"{_mib(getattr(need, k)) if getattr(need, k) else '-':>11}" for k, _ in _COLS)
        print(f"{name:<12}{cells}{_mib(need.total_bytes):>11}{_mib(budget):>11}{_mib(head):>11}")
    print(f"  {cache_line}")
    for p in plan.devices:
        print(f"  {p.device_name}: {p.target_layers} target blocks"
              + (" + output layer" if p.output_on_device else "")
              + (f", {p.draft_layers} draft blocks" if draft else "")
              + f"; {_mib(p.margin_bytes)} kept free")
    if not devs.devices:
        print("  CPU-only: everything in host RAM (budget = available RAM)")
    print(f"Verdict: {plan.verdict}")  # the app's Models tab says the same words
    if max_ngl is not None:
        print(f"Largest target ngl that fits at n_ctx {plan.n_ctx}{' next to this draft placement' if draft else ''}: "
              f"{max_ngl} (of {target.n_layer + 1})")
        if trade.max_ctx_all_on_gpu is not None:
            whole = "target and draft" if draft and plan.draft_ngl is not None else "target"
            if trade.max_ctx_all_on_gpu >= trade.ctx_ceiling:
                print(f"Largest context with the whole {whole} on the GPU: {trade.max_ctx_all_on_gpu} "
                      f"(the training context; all of it fits)")
            elif trade.max_ctx_all_on_gpu == 0:
                print(f"Largest context with the whole {whole} on the GPU: none (not even 256 tokens)")
            else:
                print(f"Largest context with the whole {whole} on the GPU: {trade.max_ctx_all_on_gpu}")
    if plan.expert_host_bytes:
        print(f"MoE experts kept in host RAM: {_mib(plan.expert_host_bytes)}")
    for line in repack_lines(plan):
        print(line)


def _print_plan_checks(inputs: _PlanInputs, check: FitCrossCheck | None, scheck: ServerCrossCheck | None,
                       server_check_possible: bool) -> None:
    """The cross-checks' lines and the context note, for people."""
    draft, ctx_note, ctx_label = inputs.draft, inputs.ctx_note, inputs.ctx_label
    if check is not None:
        what = "target alone (llama-fit-params ignores drafts)" if draft else "target"
        if not check.ok:
            print(f"Cross-check: llama-fit-params gave no answer: {check.note}")
        elif check.agrees:
            print(f"Cross-check: llama-fit-params agrees on the {what}")
        else:
            print(f"Cross-check: llama-fit-params DISAGREES on the {what}:")
            for d in check.disagreements:
                print(f"  - {d}")
    if scheck is not None:
        when = "cached" if scheck.cached else f"{scheck.cost_s:.0f} s"
        if not scheck.ok:
            print(f"Server cross-check: no answer: {scheck.note}")
        elif scheck.agrees:
            print(f"Server cross-check ({when}): llama-server's own projection and buffers agree within 10 %")
        else:
            print(f"Server cross-check ({when}): llama-server DISAGREES with this plan:")
            for d in scheck.disagreements:
                print(f"  - {d}")
    elif server_check_possible:
        print("Server cross-check: not run (--server-check starts llama-server once with this argv; cached)")
    if ctx_note is not None:
        print(f"{ctx_label}: {ctx_note}")


def cmd_rpc_host(args: argparse.Namespace) -> int:
    """``draftwise rpc-host``: run a supervised ggml-rpc-server until Ctrl-C / SIGTERM (exit 0), or with
    ``--check-build`` say whether this install can (0) or cannot (1). 2: no llama-server, bad flag, or
    the RPC server would not start."""
    import signal
    import threading

    from tuner.hardware.rpc import rpc_build_status
    from tuner.hardware.rpchost import RpcHost, RpcHostConfig
    from tuner.hardware.rpchost import RpcHostStartError as StartError
    from tuner.server.dialect import probe_dialect

    if _bad_server_flag(args.server, "rpc-host"):
        return 2
    try:
        problem = check_options(args)
        args.host = bind_host(args.host)
        check_resolvable(args.host)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        print(f"draftwise rpc-host: {problem}", file=sys.stderr)
        return 2
    binary = Path(args.server) if args.server else find_server_binary()
    if binary is None:
        print("draftwise rpc-host: no llama-server found (install the server extra)", file=sys.stderr)
        return 2
    try:
        has_rpc = probe_dialect(binary).has("--rpc")
    except Exception as exc:  # noqa: BLE001 - DialectError (its message starts with the binary's path): say it
        where = f"--server {args.server}" if args.server else str(binary)
        print(f"draftwise rpc-host: {where}: {str(exc).removeprefix(f'{binary}: ')}", file=sys.stderr)
        return 2
    status = rpc_build_status(binary, has_rpc)
    if args.check_build:
        print(f"{binary}: {status.message}")
        return 0 if status.ok else 1
    if status.rpc_server is None:
        print(f"draftwise rpc-host: {status.message}", file=sys.stderr)
        return 2
    cfg = RpcHostConfig(status.rpc_server, host=args.host, port=args.port, device=args.device, threads=args.threads)
    if not cfg.loopback:
        print(f"WARNING: binding {args.host}:{args.port}: {NO_AUTH_WARNING}.", file=sys.stderr)
    host = RpcHost(cfg, on_event=lambda m: print(safe_text(m), file=sys.stderr, flush=True))
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        host.start()
    except StartError as exc:
        print(f"draftwise rpc-host: {exc}", file=sys.stderr)
        for line in exc.evidence[-5:]:
            print(f"  | {safe_text(line)}", file=sys.stderr)
        return 2
    reach = cfg.endpoint if cfg.loopback else f"THIS-MACHINE'S-ADDRESS:{cfg.port}"
    print(f"RPC host ready: {cfg.host}:{cfg.port}; on the other machine: draftwise tune --models DIR --rpc {reach}",
          flush=True)
    try:
        host.supervise(stop)
    except StartError as exc:
        print(f"draftwise rpc-host: {exc}", file=sys.stderr)
        return 2
    return 0
