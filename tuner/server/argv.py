"""Pure argv building for llama-server, per flag dialect, and the child's clean environment.

Rules (llama.cpp sources named with each):
- the speculation type is always passed explicitly where the binary has ``--spec-type``
  (``-md`` alone loads the draft and never uses it: common/arg.cpp, server-context.cpp
  ``load_model``), and as ``-md`` + ``--draft-max`` on legacy builds (where ``-md`` is the switch);
- only flags the binary lists in ``--help`` are used (a removed or unknown flag exits 1);
- ``--metrics`` and ``--slots`` are always on where they exist; ``-np`` is explicit;
- ``LLAMA_ARG_*`` variables are stripped from the child environment, because the server applies
  them first and ``--spec-type`` *appends* to the env value (common/arg.cpp
  ``common_params_parse_ex`` and the ``--spec-type`` handler);
- the one variable a configuration adds is ``OMP_WAIT_POLICY=PASSIVE`` (:func:`server_env`), shown with the
  argv wherever the exact command line is (:func:`command_line`).
"""

from __future__ import annotations

from pathlib import Path

from tuner.errors import DraftwiseError
from tuner.server.config import ServerConfig
from tuner.server.dialect import CAPTURE_FLAG, IDLE_SLEEP_FLAG, Dialect
from tuner.spectypes import DRAFT_MODEL_TYPES, NGRAM_TYPES

#: Draft-length flag per n-gram type in the current dialect (common/arg.cpp ``--spec-ngram-*``).
_NGRAM_N_MAX_FLAG = {
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
}


class UnsupportedConfigError(DraftwiseError, ValueError):
    """The configuration needs a flag or speculation type this binary does not have.

    ``flag`` names the missing flag or ``--spec-type`` value; the message says which binary
    dialect lacks it.
    """

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(message)


def _need(dialect: Dialect, *names: str) -> str:
    flag = dialect.first(*names)
    if flag is None:
        raise UnsupportedConfigError(
            names[0], f"this llama-server ({dialect.spec_style} dialect) has no {' / '.join(names)} flag"
        )
    return flag


def _fmt_layers(v: int | str) -> str:
    return str(v)


def _fmt_float(v: float) -> str:
    return f"{float(v):g}"


def build_argv(binary_path: str | Path, config: ServerConfig, dialect: Dialect,
               api_key_file: str | Path | None = None) -> list[str]:
    """The exact argv (``[binary, flag, value, …]``) that launches ``config`` on this binary.

    Pure: no file or process access. ``--cors-origins`` (``config.cors_origins``, default
    ``localhost``) is added where the binary lists the flag; builds without it (the legacy
    dialect) answer any web page (:func:`cors_locked`). ``config.port`` must be set (the supervisor picks a free
    port first). ``api_key_file``: a file holding ``config.api_key``; when given, the key is passed
    as ``--api-key-file FILE`` instead of ``--api-key KEY``, so it is not readable in ``ps`` or
    ``/proc/PID/cmdline`` by other users (llama.cpp common/arg.cpp, ``--api-key-file``: one key per
    line, read at start-up).

    ``config.rpc`` → ``--rpc host:port,...`` right after the binary (common/arg.cpp ``add_rpc_devices``
    registers the hosts' devices while the arguments are parsed, so it precedes any device flag).

    ``config.alias`` → ``-a ALIAS`` (the model id the API reports); ``config.cache_ram_mib`` →
    ``-cram N`` (host prompt-cache limit, common/arg.cpp ``--cache-ram``); each only where the
    binary lists the flag (older builds have no prompt cache to limit and report the path).
    ``config.no_repack`` → ``--no-repack`` where the binary lists it. ``config.sleep_idle_s`` →
    ``--sleep-idle-seconds N`` where the binary lists it (b11434 and later; not ik_llama.cpp or legacy builds:
    callers that must not serve without it check :attr:`Dialect.has_idle_sleep` first).
    ``config.log_prompts_dir`` → ``--log-prompts-dir DIR`` (the capture of served requests; only when set, so
    the argv never carries it while capture is off); a binary without the flag is refused (callers ask
    :meth:`Dialect.capture_problem` first).

    Raises:
        UnsupportedConfigError: the binary lacks a needed flag or speculation type (e.g.
            ``ngram-mod`` on a legacy build, ``--fit`` on a build without it), or a draft-model
            type without ``draft_path``, or ``draft_path`` without a type that uses it.
        ValueError: ``config.port`` is None.
    """
    if config.port is None:
        raise ValueError("ServerConfig.port is None: pick a port before building the argv")
    d = dialect
    argv: list[str] = [str(binary_path)]
    if config.rpc:  # first: --device / --spec-draft-device may name the RPC devices it registers
        argv += [_need(d, "--rpc"), ",".join(config.rpc)]
    argv += [_need(d, "-m", "--model"), str(config.model_path)]
    argv += [_need(d, "--host"), config.host, _need(d, "--port"), str(config.port)]
    if config.n_ctx is not None:
        argv += [_need(d, "-c", "--ctx-size"), str(config.n_ctx)]
    if config.n_parallel is not None:
        argv += [_need(d, "-np", "--parallel"), str(config.n_parallel)]
    if config.ngl is not None:
        argv += [_need(d, "-ngl", "--gpu-layers", "--n-gpu-layers"), _fmt_layers(config.ngl)]
    argv += _thread_args(config, d)
    if config.cache_type_k is not None:
        argv += [_need(d, "-ctk", "--cache-type-k"), config.cache_type_k]
    if config.cache_type_v is not None:
        argv += [_need(d, "-ctv", "--cache-type-v"), config.cache_type_v]
    if config.fit is not None:
        argv += [_need(d, "--fit", "-fit"), "on" if config.fit else "off"]
    argv += _no_repack_args(config, d)
    alias_flag = d.first("-a", "--alias")
    if config.alias and alias_flag:
        argv += [alias_flag, config.alias]
    cram_flag = d.first("-cram", "--cache-ram")
    if config.cache_ram_mib is not None and cram_flag:
        argv += [cram_flag, str(int(config.cache_ram_mib))]
    if config.sleep_idle_s is not None and d.has_idle_sleep:
        argv += [IDLE_SLEEP_FLAG, str(int(config.sleep_idle_s))]
    if config.log_prompts_dir is not None:
        argv += [_need(d, CAPTURE_FLAG), str(config.log_prompts_dir)]
    if d.has_metrics:
        argv.append("--metrics")
    if d.has_slots:
        argv.append("--slots")
    if config.api_key and api_key_file is not None:
        argv += [_need(d, "--api-key-file"), str(api_key_file)]
    elif config.api_key:
        argv += [_need(d, "--api-key"), config.api_key]
    if config.cors_origins and d.has("--cors-origins"):
        # locked down by default (the server's own default, '*', echoes any Origin with credentials)
        argv += ["--cors-origins", config.cors_origins]
    argv += _spec_args(config, d)
    argv += list(config.extra_args)
    return argv


def _thread_args(config: ServerConfig, d: Dialect) -> list[str]:
    """``-t N`` for ``config.threads``, and with a separate draft model the same count for the draft's threads
    (``-td N``, b11434's alias of ``--spec-draft-threads``; common/arg.cpp: without it the draft's threads copy
    ``-t`` anyway, ``postprocess_cpu_params``), so the argv says both; ``--poll N`` for ``config.poll``."""
    out: list[str] = []
    if config.threads is not None:
        out += [_need(d, "-t", "--threads"), str(config.threads)]
        td = d.first("-td", "--spec-draft-threads", "--threads-draft")
        if config.draft_path is not None and td is not None:
            out += [td, str(config.threads)]
    if config.poll is not None:
        out += [_need(d, "--poll"), str(int(config.poll))]
    return out


OMP_WAIT_POLICY = "OMP_WAIT_POLICY"
"""The OpenMP runtime's variable for how idle threads wait (``PASSIVE``: they sleep; GNU libgomp reads it at
start-up). The only variable a :class:`~tuner.server.config.ServerConfig` sets in llama-server's environment."""


def server_env(config: ServerConfig | None) -> dict[str, str]:
    """The variables ``config`` sets in llama-server's environment on top of the cleaned one
    (``tuner.process.clean_env``): ``{"OMP_WAIT_POLICY": "PASSIVE"}`` with ``config.omp_passive``, else ``{}``
    (also for None). Pure. Every launch goes through it (``tuner.server.launch.Launch.spawn``); with a
    supervisor's ``config`` it is what the current child got; :func:`command_line` shows it."""
    return {OMP_WAIT_POLICY: "PASSIVE"} if config is not None and config.omp_passive else {}


def command_line(argv: list[str] | tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """The exact command line as a shell would run it: ``env`` as ``NAME=VALUE`` words in front of the quoted
    argv (``OMP_WAIT_POLICY=PASSIVE /path/llama-server -m … -t 2``). Pure; shape: one line of text."""
    import shlex

    words = [f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    return " ".join([*words, shlex.join(list(argv))])


def _no_repack_args(config: ServerConfig, d: Dialect) -> list[str]:
    """``--no-repack`` when ``config.no_repack`` and the binary lists it (b11434 ``--repack, -nr,
    --no-repack``, common/arg.cpp) and ``extra_args`` does not already say it; nothing on builds
    without the flag (ik_llama.cpp repacks only with its opt-in ``--run-time-repack``)."""
    flag = d.first("--no-repack", "-nr")
    if not config.no_repack or flag is None or {"--no-repack", "-nr"} & set(config.extra_args):
        return []
    return [flag]


def cors_locked(dialect: Dialect) -> bool:
    """True when this binary can restrict which web pages may call it (``--cors-origins`` in its
    ``--help``, b11434 and later); False means any page the user opens can drive the model
    (tools/server/server-http.cpp: without the flag the Origin is echoed with credentials)."""
    return dialect.has("--cors-origins")


def _spec_args(config: ServerConfig, d: Dialect) -> list[str]:
    types = config.spec_types
    for t in types:
        if t not in d.spec_types:
            raise UnsupportedConfigError(
                "--spec-type",
                f"speculation type {t!r} is not supported by this llama-server "
                f"({d.spec_style} dialect; supported: {', '.join(d.spec_types) or 'none'})",
            )
    needs_draft = any(t in DRAFT_MODEL_TYPES for t in types)
    if needs_draft and config.draft_path is None:
        raise UnsupportedConfigError(
            "--spec-draft-model", f"speculation type {config.spec_type!r} needs a draft model (draft_path)"
        )
    uses_draft_file = needs_draft or "draft-mtp" in types
    if config.draft_path is not None and not uses_draft_file:
        raise UnsupportedConfigError(
            "--spec-type",
            f"draft model {config.draft_path} given with speculation type {config.spec_type or 'none'!r}: "
            "the server would load it and never use it; pass a draft-* speculation type",
        )
    out: list[str] = []
    if d.spec_style == "legacy":
        if not types:
            return out
        # legacy: -md is the switch; only draft-simple exists
        out += [_need(d, "-md", "--model-draft"), str(config.draft_path)]
        if config.n_max is not None:
            out += [_need(d, "--draft-max", "--draft", "--draft-n"), str(config.n_max)]
        if config.n_min is not None:
            out += [_need(d, "--draft-min", "--draft-n-min"), str(config.n_min)]
        if config.p_min is not None:
            out += [_need(d, "--draft-p-min"), _fmt_float(config.p_min)]
        if config.draft_ngl is not None:
            out += [_need(d, "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), _fmt_layers(config.draft_ngl)]
        return out
    if d.spec_style == "ik":
        return _ik_spec_args(config, types, d)
    if config.spec_autotune:
        raise UnsupportedConfigError("--spec-autotune", f"this llama-server ({d.spec_style} dialect) has no "
                                     "--spec-autotune (run-time draft-length tuning is an ik_llama.cpp flag)")
    if d.spec_style == "none":
        if types:
            raise UnsupportedConfigError("--spec-type", "this llama-server has no speculative decoding flags")
        return out
    # current dialect: always explicit
    out += ["--spec-type", ",".join(types) if types else "none"]
    if config.draft_path is not None:
        out += [_need(d, "--spec-draft-model", "-md", "--model-draft"), str(config.draft_path)]
    draft_types = [t for t in types if t.startswith("draft-")]
    if draft_types:
        if config.n_max is not None:
            out += [_need(d, "--spec-draft-n-max"), str(config.n_max)]
        if config.n_min is not None:
            out += [_need(d, "--spec-draft-n-min"), str(config.n_min)]
        if config.p_min is not None:
            out += [_need(d, "--spec-draft-p-min", "--draft-p-min"), _fmt_float(config.p_min)]
        if config.draft_ngl is not None and config.draft_path is not None:
            out += [_need(d, "--spec-draft-ngl", "-ngld"), _fmt_layers(config.draft_ngl)]
    out += _ngram_length_args(config, types, d)
    return out


def _ik_spec_args(config: ServerConfig, types: tuple[str, ...], d: Dialect) -> list[str]:
    """The speculative flags in ik_llama.cpp's syntax (its common/common.cpp ``gpt_params_find_arg``
    and common/speculative.cpp ``common_speculative_init``):

    - ``--spec-type`` takes ONE n-gram type (``none`` otherwise); a draft model is switched on by
      ``-md`` alone and runs after the n-gram type (so ``ngram-X,draft-simple`` is ``--spec-type
      ngram-X -md D``); MTP is the ``-mtp`` flag, which replaces any ``--spec-type`` (no chain);
    - ``--draft-max``/``--draft-min``/``--draft-p-min`` are the draft lengths of the draft model, the
      MTP head **and** ``ngram-mod``; ``ngram-simple``/``-map-k``/``-map-k4v`` read
      ``--spec-ngram-size-m`` (one value for all three);
    - ``--spec-autotune`` adapts those lengths at run time.

    Raises:
        UnsupportedConfigError: two n-gram types, an n-gram type chained with MTP, or two different
            lengths where ik_llama.cpp has one shared flag (``ngram-mod`` chained with a draft model).
    """
    ngram = [t for t in types if t in NGRAM_TYPES]
    draft = [t for t in types if t.startswith("draft-")]
    if len(ngram) > 1:
        raise UnsupportedConfigError("--spec-type", f"ik_llama.cpp takes one n-gram type, not {', '.join(ngram)}")
    if "draft-mtp" in draft and ngram:
        raise UnsupportedConfigError("--spec-type", "ik_llama.cpp's -mtp replaces --spec-type: MTP cannot be "
                                     f"chained with {ngram[0]}")
    ng_max, ng_min = ngram_lengths(config)
    out: list[str] = ["--spec-type", ngram[0] if ngram else "none"]
    if config.draft_path is not None:
        out += [_need(d, "-md", "--model-draft"), str(config.draft_path)]
    if "draft-mtp" in draft:
        out.append(_need(d, "-mtp", "--multi-token-prediction"))
    length_max = config.n_max if draft else None
    length_min = config.n_min if draft else None
    if ngram and ngram[0] == "ngram-mod":
        if draft and ng_max is not None and length_max is not None and ng_max != length_max:
            raise UnsupportedConfigError(
                "--draft-max", f"ik_llama.cpp has one --draft-max for ngram-mod and the draft model; "
                f"cannot give them {ng_max} and {length_max}")
        length_max = length_max if length_max is not None else ng_max
        length_min = length_min if length_min is not None else ng_min
    if length_max is not None:
        out += [_need(d, "--draft-max", "--draft", "--draft-n"), str(length_max)]
    if length_min is not None:
        out += [_need(d, "--draft-min", "--draft-n-min"), str(length_min)]
    if draft and config.p_min is not None:
        out += [_need(d, "--draft-p-min"), _fmt_float(config.p_min)]
    if ngram and ngram[0] in ("ngram-simple", "ngram-map-k", "ngram-map-k4v") and ng_max is not None:
        out += [_need(d, "--spec-ngram-size-m"), str(ng_max)]
    if ngram and ngram[0] == "ngram-cache" and config.ngram_n_max is not None:
        raise UnsupportedConfigError("--spec-type", "ngram-cache has a fixed draft length of 8")
    if config.draft_ngl is not None and config.draft_path is not None:
        out += [_need(d, "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), _fmt_layers(config.draft_ngl)]
    if config.spec_autotune:
        out.append(_need(d, "--spec-autotune"))
    return out


def ngram_lengths(config: ServerConfig) -> tuple[int | None, int | None]:
    """``(n_max, n_min)`` of the n-gram component of ``config``: ``ngram_n_max`` / ``ngram_n_min``,
    or — for a config without a ``draft-*`` type — ``n_max`` / ``n_min`` (one length for one type).
    In a chained config the draft keeps ``n_max`` to itself (common/speculative.cpp
    ``common_speculative_n_max``: each type reads its own parameter block)."""
    has_draft = any(t.startswith("draft-") for t in config.spec_types)
    n_max = config.ngram_n_max if config.ngram_n_max is not None else (None if has_draft else config.n_max)
    n_min = config.ngram_n_min if config.ngram_n_min is not None else (None if has_draft else config.n_min)
    return n_max, n_min


def _ngram_length_args(config: ServerConfig, types: tuple[str, ...], d: Dialect) -> list[str]:
    n_max, n_min = ngram_lengths(config)
    out: list[str] = []
    for t in types:
        if t not in NGRAM_TYPES:
            continue
        if n_max is not None and t in _NGRAM_N_MAX_FLAG:
            out += [_need(d, _NGRAM_N_MAX_FLAG[t]), str(n_max)]
        elif config.ngram_n_max is not None and t == "ngram-cache":
            raise UnsupportedConfigError(
                "--spec-type", "ngram-cache has a fixed draft length of 8 (common/speculative.cpp); "
                "ngram_n_max cannot change it")
        if t == "ngram-mod" and n_min is not None:
            out += [_need(d, "--spec-ngram-mod-n-min"), str(n_min)]
    return out


def tuned_argv(binary_path: str | Path, config: ServerConfig, dialect: Dialect) -> list[str]:
    """The tuned part of :func:`build_argv`'s argv: the same list without where to listen (``--host H
    --port P``), which a profile does not decide — ``draftwise serve`` and the app add the served host,
    port, API key and alias from their own settings. For profiles and ``tune --json``.

    Raises:
        UnsupportedConfigError: as :func:`build_argv`.
    """
    argv = build_argv(binary_path, config if config.port is not None else config.with_port(0), dialect)
    # build_argv puts host and port right after the model, as two flag/value pairs
    i = argv.index(config.host, 3) - 1
    return argv[:i] + argv[i + 4:]
