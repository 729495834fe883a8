"""The user's own llama-server flags (``--server-arg=FLAG[=VALUE]``, the ``server_args`` setting) and the
options a saved profile may carry: one declaration of both allow-lists and the one rule that checks them.

Neutral (no core import), so :mod:`tuner.settings` validates the setting with the same rule the command line
and the sweep use. Whether the installed binary knows a flag is asked through a predicate
(:func:`check_known`; the caller passes ``tuner.server.dialect.Dialect.has``).

Why an allow-list: Draftwise strips every ``LLAMA_ARG_*`` variable from its children (``--spec-type``
values would append to the environment's, common/arg.cpp ``common_params_parse_ex``), so a user who needs
a flag the tuner does not set (``--no-repack`` on a CPU whose AMX kernels trap, ``-tb``) has this one way
in. It must never change who can reach the server, hand it tools, or override a tuned value: llama.cpp keeps
the last of two equal flags (common/arg.cpp ``common_params_parse_ex``: "specified multiple times … only
last value will be used"), so a user ``-c`` after Draftwise's would silently serve an unmeasured context.

Arity: llama.cpp takes a flag's value from the next argv word (``check_arg`` in
``common_params_parse_ex``); ``--flag=value`` is not accepted there. So ``--server-arg=-tb=2`` becomes the
two words ``-tb 2``, and for ``--`` flags ``_`` is read as ``-`` as llama.cpp does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tuner.errors import DraftwiseError

#: Options Draftwise itself may write into a profile's ``server_config.extra_args`` (sampling, batching and
#: cache knobs that change neither who can reach the server nor what it can do), with whether each takes a
#: value (b11434 common/arg.cpp). Anything else, above all ``--host``, ``--port``, ``--api-key``,
#: ``--tools``, ``--cors-origins``, ``--path`` or ``--agent``, makes a profile refused.
PROFILE_ARGS: dict[str, bool] = {
    "--temp": True, "--temperature": True, "--top-k": True, "--top-p": True, "--min-p": True,
    "--repeat-penalty": True, "--seed": True, "-b": True, "--batch-size": True, "-ub": True,
    "--ubatch-size": True, "-fa": True, "--flash-attn": True, "--no-mmap": False, "--mlock": False,
    "--cache-reuse": True, "-cram": True, "--cache-ram": True, "--swa-full": False, "--kv-unified": False,
    "--no-warmup": False, "--jinja": False, "--alias": True, "-a": True, "--ctx-checkpoints": True,
    "--cont-batching": False, "--no-cont-batching": False,
    "--spec-draft-sampling": True,  # the probabilistic-drafts candidate of sampled workloads
}
PROFILE_EXTRA_ARGS_ALLOWED = frozenset(PROFILE_ARGS)

#: The few flags a user may add beyond :data:`PROFILE_ARGS`: weight repacking (``--repack`` / ``-nr`` /
#: ``--no-repack``, common/arg.cpp sets ``no_extra_bufts``: off avoids ggml's CPU_REPACK / AMX buffer
#: types), prompt-processing threads (``-tb``) and the model loading mode (``-lm`` / ``--load-mode``, which
#: replaced ``--no-mmap`` / ``--mlock`` in b11434).
USER_ONLY_ARGS: dict[str, bool] = {
    "--repack": False, "--no-repack": False, "-nr": False, "-tb": True, "--threads-batch": True,
    "-lm": True, "--load-mode": True,
}
#: What a saved profile's ``extra_args`` may hold: Draftwise's own options plus the user's flags it was
#: tuned with. The user's ``--server-arg`` list is this set less :data:`REFUSED` below (e.g.
#: ``--spec-draft-sampling``, ``--alias`` and ``--cache-ram`` are Draftwise's own).
SERVER_ARGS_ALLOWED = PROFILE_EXTRA_ARGS_ALLOWED | frozenset(USER_ONLY_ARGS)
_TAKES_VALUE = {**PROFILE_ARGS, **USER_ONLY_ARGS}

_OWN = "Draftwise sets it itself, and a second one would silently override the value it tuned or chose"
#: Refused flags by class: (why, exact names, name prefixes). Aliases from b11434's ``--help``.
REFUSED: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    ("it changes where or to whom llama-server listens (serve --host / the Serve tab's network setting)",
     frozenset({"--host", "--port", "--path", "--api-prefix", "--reuse-port"}), ("--ssl-",)),
    ("it sets the server's API key, which comes from serve --api-key-file or the app's key only",
     frozenset(), ("--api-key",)),
    ("it changes which web pages may call the server (CORS: the Serve tab's Web origin)",
     frozenset(), ("--cors-", "--no-cors-")),
    ("it gives the server tools, an agent or a web UI that can act on this machine",
     frozenset({"-ag", "--agent", "-no-ag", "--no-agent", "--props", "--media-path", "--ui", "--no-ui"}),
     ("--tools", "--mcp-", "--webui", "--no-webui", "--ui-", "--no-ui-")),
    (_OWN,
     frozenset({"-m", "--model", "-md", "-c", "--ctx-size", "-np", "--parallel", "-t", "--threads", "-td",
                "-tbd", "-ngl", "--gpu-layers", "--n-gpu-layers", "-ngld", "-ctkd", "-ctvd", "-devd", "-otd",
                "-cmoed", "-ncmoed", "-hfd", "-hfrd", "-Cd", "-Crd", "-Cbd", "-Crbd", "-mtp",
                "--multi-token-prediction", "--sleep-idle-seconds", "--log-prompts-dir", "-a", "--alias",
                "-cram", "--cache-ram", "--metrics", "--slots", "--no-slots", "--rpc", "-ctk",
                "--cache-type-k", "-ctv", "--cache-type-v", "-fit", "--fit"}),
     ("--spec-", "--draft")),
)
#: Where Draftwise takes the value a refused flag would override, named in the message.
_OWN_HINT = {"-c": "--ctx-size", "--ctx-size": "--ctx-size", "-t": "--threads", "--threads": "--threads",
             "-ngl": "--ngl", "--gpu-layers": "--ngl", "--n-gpu-layers": "--ngl", "-cram": "the cache_ram_mib setting",
             "--cache-ram": "the cache_ram_mib setting", "-m": "--target", "--model": "--target",
             "-md": "--draft", "--spec-draft-model": "--draft", "--model-draft": "--draft"}
_DRAFT_WORD = re.compile(r"^--[a-z0-9-]*-draft(?:-|$)")  # --threads-draft, --n-gpu-layers-draft, ...
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: The value each flag needs, where llama.cpp would refuse another one only at start (b11434 common/arg.cpp:
#: ``common_params_parse_ex`` reads an ``N`` with ``std::stoi``, "bad value for -tb: stoi"; ``--temp``,
#: ``--top-p``, ``--min-p`` read theirs with ``std::stof``; ``--load-mode`` and ``--spec-draft-sampling`` throw
#: for a word off their list). Flags not named here (``-fa``, ``--alias``) are passed as written.
_WHOLE = frozenset({"-tb", "--threads-batch", "-b", "--batch-size", "-ub", "--ubatch-size", "--top-k", "--seed",
                    "--cache-reuse", "--ctx-checkpoints", "-cram", "--cache-ram"})
_NUMBER = frozenset({"--temp", "--temperature", "--top-p", "--min-p", "--repeat-penalty"})
_CHOICES = {"-lm": ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
            "--load-mode": ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
            "--spec-draft-sampling": ("greedy", "probabilistic")}
_WHOLE_RE = re.compile(r"[+-]?\d+")
_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class ServerArgError(DraftwiseError, ValueError):
    """A user llama-server flag is refused. ``flag`` names it; the message is one line naming it and why."""

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(message)


def normalize_flag(flag: str) -> str:
    """The flag as llama.cpp reads it: ``--no_mmap`` → ``--no-mmap`` (common/arg.cpp
    ``common_params_parse_ex`` replaces ``_`` by ``-`` in ``--`` arguments); short flags unchanged."""
    return flag.replace("_", "-") if flag.startswith("--") else flag


def refusal_class(flag: str) -> str | None:
    """The refused class ``flag`` (normalised) belongs to (the reason of :data:`REFUSED`), else None."""
    for why, names, prefixes in REFUSED:
        if flag in names or flag.startswith(prefixes):
            return why
    return REFUSED[-1][0] if _DRAFT_WORD.match(flag) else None


def user_allowed() -> list[str]:
    """The flags a user may pass, sorted: :data:`SERVER_ARGS_ALLOWED` less every refused class."""
    return sorted(f for f in SERVER_ARGS_ALLOWED if refusal_class(f) is None)


def refusal(flag: str) -> str | None:
    """Why a user may not pass ``flag`` (normalised), or None when it is on the user allow-list."""
    why = refusal_class(flag)
    if why is None and flag not in SERVER_ARGS_ALLOWED:
        why = f"it is not on the list of flags Draftwise passes through ({' '.join(user_allowed())})"
    return why


def _label(where: str, flag: str) -> str:
    """``--server-arg=--host`` for a command-line flag, ``server_args: --host`` for a setting, else the flag."""
    if where.startswith("--"):
        return f"{where}={flag}"
    return f"{where}: {flag}" if where else flag


def _example(where: str, flag: str) -> str:
    """How to write ``flag`` where the user wrote it: ``--server-arg=-tb`` on the command line, else ``-tb``."""
    return f"{where}={flag}" if where.startswith("--") else flag


def _check_one(flag: str, value: str | None, shown: str, where: str) -> None:
    """One flag and its value. Raises ServerArgError naming ``shown`` (what the user wrote)."""
    if not flag.startswith("-") or len(flag) < 2:
        raise ServerArgError(flag, f"{_label(where, repr(shown))}: not a llama-server flag (it must start with "
                             "'-', e.g. --server-arg=--no-repack)")
    if any(c.isspace() for c in flag):
        raise ServerArgError(flag, f"{_label(where, repr(shown))}: give a flag's value after '=' "
                             f"({_example(where, flag.split()[0])}=VALUE), not after a space")
    why = refusal(flag)
    if why is not None:
        hint = f" (use {_OWN_HINT[flag]})" if flag in _OWN_HINT else ""
        raise ServerArgError(flag, f"{_label(where, flag)}: refused: {why}{hint}")
    if _TAKES_VALUE[flag] and not value:
        raise ServerArgError(flag, f"{_label(where, flag)}: takes a value: {_example(where, flag)}=VALUE")
    if not _TAKES_VALUE[flag] and value is not None:
        raise ServerArgError(flag, f"{_label(where, flag)}: is a switch and takes no value (got {value!r})")
    if value:
        _check_value(flag, value, where)


def _check_value(flag: str, value: str, where: str) -> None:
    """``value`` is one ``flag`` accepts (:data:`_WHOLE`, :data:`_NUMBER`, :data:`_CHOICES`), else
    ServerArgError, e.g. "Extra llama-server flags: -tb needs a whole number, not 'abc'"."""
    if flag in _WHOLE and not _WHOLE_RE.fullmatch(value):
        raise ServerArgError(flag, f"{_label(where, flag)} needs a whole number, not {value!r}")
    if flag in _NUMBER and not _NUMBER_RE.fullmatch(value):
        raise ServerArgError(flag, f"{_label(where, flag)} needs a number (e.g. 0.8), not {value!r}")
    if flag in _CHOICES and value not in _CHOICES[flag]:
        raise ServerArgError(flag, f"{_label(where, flag)} needs one of {', '.join(_CHOICES[flag])}, not {value!r}")


def parse_server_args(specs: Iterable[str], where: str = "--server-arg") -> tuple[str, ...]:
    """The argv words of the user's flags: each spec is ``FLAG`` or ``FLAG=VALUE`` (``--no-repack``,
    ``-tb=2``), split at the first ``=`` into ``FLAG VALUE``; empty specs are skipped.

    Args:
        specs: what the user wrote (the repeated ``--server-arg`` values, the ``server_args`` setting).
        where: how the user wrote it, for the message (``--server-arg``, ``setting server_args``).

    Returns:
        The words in order, flags normalised (:func:`normalize_flag`), e.g. ``("--no-repack", "-tb", "2")``.

    Raises:
        ServerArgError: not a string, a control character or newline, not a flag, a refused flag (its
            class named: listen address, API key, CORS, tools, or a flag Draftwise sets itself), a flag off
            the allow-list, a value missing from a flag that takes one or given to a switch, a value the
            flag does not take (``-tb=abc``: llama-server would exit with "bad value for -tb: stoi"), or a
            flag given twice. One line naming the flag.
    """
    out: list[str] = []
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, str):
            raise ServerArgError(str(spec), f"{where or 'server flag'}: expected FLAG or FLAG=VALUE text, got {spec!r}")
        if _CONTROL.search(spec):
            raise ServerArgError(spec, f"{_label(where, repr(spec))}: holds a control character or line break")
        text = spec.strip()
        if not text:
            continue
        flag, eq, value = text.partition("=")
        flag = normalize_flag(flag)
        _check_one(flag, value if eq else None, text, where)
        if flag in seen:
            raise ServerArgError(flag, f"{_label(where, flag)}: given twice (llama-server would keep only the last)")
        seen.add(flag)
        out += [flag, value] if eq else [flag]
    return tuple(out)


def check_server_argv(words: Sequence[str], where: str = "server_args") -> tuple[str, ...]:
    """The same rule on argv words already split (``("--no-repack", "-tb", "2")``, what a
    :class:`tuner.calibration.request.TuneRequest` and a profile's staleness keys hold).

    Raises:
        ServerArgError: as :func:`parse_server_args`, or a flag that takes a value at the end.
    """
    for word in words:
        if not isinstance(word, str):
            raise ServerArgError(str(word), f"{where or 'server flag'}: expected text, got {word!r}")
    specs = to_specs([normalize_flag(w) if w.startswith("--") else w for w in words])
    return parse_server_args(specs, where)


def to_specs(words: Sequence[str]) -> list[str]:
    """Argv words back to what the user writes: ``("--no-repack", "-tb", "2")`` → ``["--no-repack", "-tb=2"]``."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if _TAKES_VALUE.get(words[i]) and i + 1 < len(words):
            out.append(f"{words[i]}={words[i + 1]}")
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


def flags_of(words: Sequence[str]) -> list[str]:
    """The flags among the argv words of :func:`parse_server_args` (values left out)."""
    return [spec.partition("=")[0] for spec in to_specs(words)]


#: Flags later builds replaced, with the spelling to suggest when the binary lacks the old one.
_RENAMED = {"--no-mmap": "--load-mode=none", "--mlock": "--load-mode=mlock"}


def check_known(words: Sequence[str], has: Callable[[str], bool], binary: str | Path,
                where: str = "--server-arg") -> None:
    """Refuse a user flag the installed llama-server does not list in its ``--help`` (it would exit 1 with
    "invalid argument": common/arg.cpp ``common_params_parse_ex``).

    Args:
        words: argv words from :func:`parse_server_args`.
        has: the binary's flag predicate (``tuner.server.dialect.Dialect.has``).
        binary: the binary's path, for the message.

    Raises:
        ServerArgError: naming the flag and the binary (and the newer spelling of ``--no-mmap`` /
            ``--mlock`` where the binary has ``--load-mode``).
    """
    for flag in flags_of(words):
        if has(flag):
            continue
        hint = _RENAMED.get(flag)
        tip = f"; this build spells it --server-arg={hint}" if hint and has("--load-mode") else ""
        raise ServerArgError(flag, f"{_label(where, flag)}: {binary} does not know this flag (its --help "
                             f"does not list it){tip}")


def describe(words: Sequence[str]) -> str:
    """The words as one line for messages (``"--no-repack -tb 2"``), ``"none"`` when empty."""
    return " ".join(words) if words else "none"


__all__ = [
    "PROFILE_ARGS",
    "PROFILE_EXTRA_ARGS_ALLOWED",
    "REFUSED",
    "SERVER_ARGS_ALLOWED",
    "USER_ONLY_ARGS",
    "ServerArgError",
    "check_known",
    "check_server_argv",
    "describe",
    "flags_of",
    "normalize_flag",
    "parse_server_args",
    "refusal",
    "refusal_class",
    "to_specs",
    "user_allowed",
]
