"""Every numeric option of Draftwise, declared once: its type, bounds, default, unset words and help.

Each front end reads the same :class:`Option`: argparse (``tuner.cli.options``), the settings validation
(:func:`tuner.settings.validate`), :meth:`tuner.calibration.request.TuneRequest.check` and the window's spin
boxes (``tuner.ui.options``); ``--help`` texts and tooltips are rendered from it (:func:`help_text`). The
declarations are read at call time (:func:`option` looks in :data:`OPTIONS`), so changing one bound here
changes every consumer.

Bounds are inclusive. NaN and the infinities are refused everywhere (argparse's ``type=float`` accepts
``"nan"``, ``"inf"`` and ``"1e309"``). Some bounds come from the machine or the model (:class:`Limit`):
threads at most 4 × the logical CPUs, GPU layers at most the model's blocks + 1 (the output layer), the
prompt cache at most the physical RAM; they are checked where the fact is known (:class:`Limits`).

One message rule per consumer: a flag reads ``--n-max 0: must be between 1 and 64`` (:class:`OptionError`'s
text), a setting ``setting 'top_k': must be null (llama-server's default) or between 0 and 1000000, got …``
(:func:`tuner.settings.validate`), a request field ``budget_s 5: must be between 10 and 86400 seconds``.

Neutral module: imports only :mod:`tuner.errors`, :mod:`tuner.rpcaddr` (ggml-rpc-server's port) and
:mod:`tuner.units`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache

from tuner.errors import DraftwiseError
from tuner.rpcaddr import DEFAULT_RPC_PORT
from tuner.units import MIB


class OptionError(DraftwiseError, ValueError):
    """A value outside its option's declaration. ``str()`` is the flag form, ``"<where> <value>: <reason>"``.

    Attributes:
        where: the flag (``--n-max``), setting key or request field that carried the value.
        value: the value refused.
        reason: ``"must be …"``, the declared range in words (:func:`range_words`).
    """

    bad_input = True

    def __init__(self, where: str, value: object, reason: str) -> None:
        self.where = where
        self.value = value
        self.reason = reason
        super().__init__(f"{where} {shown(value)}: {reason}")


@dataclass(frozen=True)
class Limits:
    """Facts that bound some options: ``None`` = unknown, that bound is not checked.

    Attributes:
        logical_cpus: the machine's logical CPUs (``os.cpu_count()``).
        ram_bytes: the machine's physical RAM, bytes.
        blocks: the model's repeating blocks (GGUF ``<arch>.block_count``).
        device_bytes: the largest device's memory, bytes (host RAM on a CPU-only machine).
        model: the model's file name, for the words of a blocks bound.
    """

    logical_cpus: int | None = None
    ram_bytes: int | None = None
    blocks: int | None = None
    device_bytes: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class Limit:
    """An upper bound from a fact of :class:`Limits`: ``fact // per * factor + add``.

    Attributes:
        fact: the :class:`Limits` field (``"logical_cpus"``, ``"ram_bytes"``, ``"blocks"``, ``"device_bytes"``).
        factor: multiplies the fact (threads: 4).
        add: added after (GPU layers: + 1, the output layer).
        per: divides the fact first (bytes to MiB: :data:`tuner.units.MIB`).
        words: the bound in words, formatted with ``n`` (the fact after ``per``) and ``model``.
    """

    fact: str
    factor: int = 1
    add: int = 0
    per: int = 1
    words: str = ""

    def high(self, limits: Limits | None) -> int | None:
        """The bound for ``limits``; None when the fact is unknown."""
        value = getattr(limits, self.fact) if limits is not None else None
        if value is None:
            return None
        return int(value) // self.per * self.factor + self.add

    def describe(self, limits: Limits) -> str:
        """``words`` filled in, e.g. ``"4 × the 2 logical CPUs"``."""
        n = int(getattr(limits, self.fact)) // self.per
        return self.words.format(n=n, model=limits.model or "the model")


@dataclass(frozen=True)
class Option:
    """One numeric option.

    Attributes:
        name: its name in code: the field of ``TuneRequest`` / ``Sampling`` where it has one (``temperature``,
            ``budget_s``), else the ``draftwise`` flag's dest (``n_max``, ``ready_timeout_s``).
        kind: ``int`` or ``float`` (a float option accepts a whole number too; a bool is never a number).
        low, high: inclusive bounds; None = none on that side.
        limit: an upper bound from the machine or the model (:class:`Limit`), on top of ``high``.
        default: the value when nothing is given; None = unset (``unset`` says what then happens).
        unset: words for unset (None allowed only when this is set), e.g. ``"automatic"``.
        special: values allowed outside ``low..high`` with their words, e.g. ``((-1, "no limit"),)``.
        keywords: words some flags accept instead of a number (``--ngl auto``), in the range's words.
        server_default: llama-server b11434's own default (sampling: common/common.h ``common_params_sampling``).
        help, metavar, unit: ``--help`` text, argparse metavar, the unit in words (``"seconds"``, ``"MiB"``).
        step, decimals: the window's spin box step and decimals.
        gui_scale, gui_suffix: the window shows ``value × gui_scale`` with this suffix (the budget in minutes).
        setting: the key in ``settings.json`` (:class:`tuner.settings.Settings`), or None.
        in_request: a field of ``tuner.calibration.request.TuneRequest`` (sampling ones: of its ``sampling``).
    """

    name: str
    kind: type[int] | type[float]
    low: float | None = None
    high: float | None = None
    limit: Limit | None = None
    default: float | None = None
    unset: str | None = None
    special: tuple[tuple[float, str], ...] = ()
    keywords: tuple[str, ...] = ()
    server_default: float | None = None
    help: str = ""
    metavar: str = "N"
    unit: str = ""
    step: float = 1
    decimals: int = 0
    gui_scale: float = 1
    gui_suffix: str = ""
    setting: str | None = None
    in_request: bool = False


_LONGEST_DRAFT = 64  # issue 27: the longest draft n_max a flag, a setting or a profile may ask for
# llama.cpp's own values the declarations below cite:
_LLAMA_MAX_SEQ = 256  # src/llama-cparams.h LLAMA_MAX_SEQ: the most sequences (server slots) a context holds
_NO_LIMIT = -1  # --cache-ram -1: no size limit (common/arg.cpp "--cache-ram"; server-context.cpp sizes the cache)
# --sleep-idle-seconds takes whole seconds >= 1 (common/arg.cpp refuses 0); a week bounds a typo
_WEEK_S = 7 * 24 * 3600
_APP_IDLE_SLEEP_S = 15 * 60  # the app's default, as LM Studio's idle TTL; `draftwise serve` keeps it off


def _tuning_options() -> list[Option]:
    """The sweep's options: its budget and protocol, the context and the sampling the served requests carry."""
    return [
        # -- tuning
        Option("budget_s", float, 10, 24 * 3600, default=300, unit="seconds", metavar="SECONDS",
               help="time budget of one sweep, first launch to decision", setting="tune_budget_s",
               in_request=True, gui_scale=1 / 60, gui_suffix=" min"),
        Option("n_predict", int, 1, default=256, help="tokens generated per measured request", in_request=True),
        Option("repetitions", int, 1, default=3, in_request=True,
               help="repetitions of the finalists (at most 2 × this many adjacent pairs each; two more on a busy machine)"),
        Option("max_prompts", int, 1, unset="all of a prompt file, 5 of the built-in set", in_request=True,
               help="use at most N prompts of the set"),
        Option("threads", int, 1, limit=Limit("logical_cpus", factor=4, words="4 × the {n} logical CPUs"),
               unset="tuned (llama-server's default when untuned)", setting="threads", in_request=True,
               help="CPU threads of llama-server (-t, and -td for a draft model); overrides the thread setting "
               "the tune measures and serves"),
        Option("long_share", float, 0, 1, unset="the prompt set's own", metavar="FRACTION",
               help="share of your requests that are long-context ones", setting="long_share", in_request=True,
               step=1, gui_scale=100, gui_suffix=" %"),
        # -- workload: context and the sampling the served requests carry
        Option("n_ctx", int, 256, 1 << 24, unset="automatic", unit="tokens", step=1024, setting="ctx_size",
               in_request=True, help="context size (-c)"),
        Option("temperature", float, 0, 2, unset="llama-server's default", server_default=0.8, metavar="T",
               help="temperature (0 = greedy)", step=0.05, decimals=2, setting="temperature",
               in_request=True),
        Option("top_p", float, 0, 1, unset="llama-server's default", server_default=0.95, metavar="P",
               help="top_p (1 = off)", step=0.01, decimals=2, setting="top_p", in_request=True),
        Option("top_k", int, 0, 10**6, unset="llama-server's default", server_default=40, metavar="K",
               help="top_k (0 = off)", setting="top_k", in_request=True),
        Option("min_p", float, 0, 1, unset="llama-server's default", server_default=0.05, metavar="P",
               help="min_p (0 = off)", step=0.01, decimals=2, setting="min_p", in_request=True),
    ]


def _serving_options() -> list[Option]:
    """The options of serving and of the memory plan, and the Chat tab's reply length."""
    gpu_layers = Limit("blocks", add=1, words="{model}'s {n} blocks + 1")
    return [
        # n_max: issue 27's bound; llama.cpp itself refuses only a negative one (common/arg.cpp --spec-draft-n-max)
        Option("n_max", int, 1, _LONGEST_DRAFT, unset="llama-server's default for the type",
               help="draft length n_max (--spec-draft-n-max)"),
        # a saved profile's shortest draft and its draft-probability cut (tuner/calibration/profile_checks.py);
        # common/arg.cpp --spec-draft-n-min, --spec-ngram-mod-n-min and --spec-draft-p-min
        Option("n_min", int, 0, _LONGEST_DRAFT, unset="llama-server's default for the type",
               help="shortest draft kept (--spec-draft-n-min, --spec-ngram-mod-n-min)"),
        Option("p_min", float, 0, 1, unset="llama-server's default", metavar="P", decimals=2, step=0.05,
               help="stop drafting when the draft's top-1 probability is below P (--spec-draft-p-min)"),
        Option("ngl", int, 0, limit=gpu_layers, unset="all", keywords=("auto", "all"), help="target GPU layers"),
        Option("draft_ngl", int, 0, limit=gpu_layers, unset="all", keywords=("auto", "all"),
               help="draft GPU layers"),
        Option("n_cpu_moe", int, 0, limit=Limit("blocks", words="{model}'s {n} blocks"), default=0,
               help="keep the MoE expert tensors of the first N target blocks on the CPU (--n-cpu-moe)"),
        Option("n_parallel", int, 0, _LLAMA_MAX_SEQ, default=1, help="parallel slots (-np); "
               "0 = the server's automatic choice (4, unified KV)"),
        Option("cache_ram_mib", int, 0, limit=Limit("ram_bytes", per=MIB, words="this machine's RAM"),
               default=1024, special=((_NO_LIMIT, "no limit"),), unit="MiB", metavar="MIB", step=256,
               gui_suffix=" MiB", setting="cache_ram_mib",
               help="llama-server's host-RAM prompt cache (--cache-ram; 0 = off)"),
        Option("margin_mib", int, 0, default=1024, unit="MiB", metavar="MIB",
               limit=Limit("device_bytes", per=MIB, words="the largest device's memory"),
               help="free memory kept on every GPU (--fit-target)"),
        Option("port", int, 1, 65535, default=8088, setting="port", help="TCP port"),
        Option("rpc_port", int, 1, 65535, default=DEFAULT_RPC_PORT, help="TCP port of the RPC host"),
        Option("ready_timeout_s", float, 1, 24 * 3600, unset="from the model's size", unit="seconds",
               metavar="S", help="seconds to wait for llama-server to be ready"),
        Option("liveness_timeout_s", float, 4, 3600, default=30, special=((0, "off"),), unit="seconds",
               metavar="S", help="while serving, restart llama-server when it has not answered /health for S "
               "seconds and makes no progress (a server busy with a long prompt is not restarted)"),
        Option("idle_sleep_s", int, 1, _WEEK_S, default=_APP_IDLE_SLEEP_S, special=((0, "off"),), unit="seconds",
               metavar="SECONDS", setting="idle_sleep_s", gui_scale=1 / 60, gui_suffix=" min",
               help="idle sleep: after this many seconds without a request llama-server unloads the model and "
               "frees its memory; the next request loads it again, which takes a few seconds "
               "(--sleep-idle-seconds)"),
        Option("doctor_timeout_s", float, 1, 3600, default=60, unit="seconds", metavar="S",
               help="self-test time limit"),
        Option("chat_max_tokens", int, 1, 32768, default=512, help="most tokens of one chat reply"),
    ]


OPTIONS: dict[str, Option] = {o.name: o for o in [*_tuning_options(), *_serving_options()]}
"""Every option by name. Read through :func:`option` at call time, so a test may replace one entry."""

DEFAULT_CACHE_RAM_WHY = (
    "llama-server b11434's own default, 8192 MiB, suits a server; on a 16 GiB desktop that is half the RAM, "
    "taken bit by bit as conversations accumulate. 1024 MiB still keeps the prompts of a few recent "
    "conversations for reuse.")
"""Why the prompt cache's default is 1024 MiB (a Llama-3-8B-shaped KV cache in f16 is 128 KiB per token, so
about two full 4096-token contexts; a small model many more). Shown by the Serve tab."""


IDLE_SLEEP_WHY = (
    "A desktop app keeps running while you use other programs: after 15 minutes without a request the model's "
    "memory (RAM, and VRAM on a GPU) is given back, and the next request waits a few seconds while the model "
    "loads again. `draftwise serve` keeps the model loaded unless --idle-sleep is given.")
"""Why the app sleeps after 15 minutes by default and ``serve`` does not (the Serve tab and README say it)."""


def option(name: str) -> Option:
    """The declaration of ``name``. Raises KeyError for an unknown name (a bug)."""
    return OPTIONS[name]


def by_setting() -> Iterator[Option]:
    """The options that are settings (:attr:`Option.setting`), in declaration order."""
    return (o for o in OPTIONS.values() if o.setting is not None)


@cache
def machine_limits() -> Limits:
    """This machine's :class:`Limits` (logical CPUs, physical RAM), read once with :mod:`os`; an unknown
    fact is None (its bound is then not checked)."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        ram = None
    return Limits(logical_cpus=os.cpu_count(), ram_bytes=ram if ram and ram > 0 else None)


def shown(value: object) -> str:
    """A value as a message shows it: numbers plainly (``0.5``, ``1e+23``, ``inf``, ``nan``), else ``repr``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def high_of(opt: Option, limits: Limits | None = None) -> float | None:
    """The upper bound in force: ``high``, lowered by the limit when its fact is known."""
    bound = opt.limit.high(limits) if opt.limit is not None else None
    if bound is None:
        return opt.high
    return bound if opt.high is None else min(opt.high, bound)


def range_words(opt: Option, limits: Limits | None = None, *, unset: bool = False, keywords: bool = False,
                whole: bool = False) -> str:
    """The allowed values in words, after "must be": ``"between 1 and 64"``, ``"-1 (no limit) or between 0
    and 15995 MiB (this machine's RAM)"``, ``"null (automatic) or between 256 and 16777216 tokens"``.

    Args:
        opt: the option.
        limits: facts for its limit (None: the declared ``high`` only).
        unset: name null (a settings value) as allowed, with the ``unset`` words.
        keywords: name the option's keywords (``auto``, ``all``) as allowed.
        whole: say "a whole number" (a value of the wrong type was given).
    """
    hi = high_of(opt, limits)
    unit = f" {opt.unit}" if opt.unit else ""
    lo_w = _num(opt.low) if opt.low is not None else None
    hi_w = _num(hi) if hi is not None else None
    if hi is not None and opt.limit is not None and limits is not None and hi != opt.high:
        hi_w = f"{hi_w}{unit} ({opt.limit.describe(limits)})"
        unit = ""
    if lo_w is not None and hi_w is not None:
        span = f"between {lo_w} and {hi_w}{unit}"
    elif lo_w is not None:
        span = f"at least {lo_w}{unit}"
    else:
        span = f"at most {hi_w}{unit}" if hi_w is not None else "a finite number"
    if whole:
        span = f"a whole number {span}" if hi_w is not None or lo_w is not None else "a whole number"
    first = [f"{_num(v)} ({w})" for v, w in opt.special]
    if unset and opt.unset is not None:
        first.insert(0, f"null ({opt.unset})")
    text = " or ".join([*first, span]) if first else span
    if keywords and opt.keywords:
        text += ", " + " or ".join(opt.keywords)
    return text


def _in_range(opt: Option, value: float, limits: Limits | None) -> bool:
    if not math.isfinite(value):
        return False
    if any(value == v for v, _ in opt.special):
        return True
    hi = high_of(opt, limits)
    return (opt.low is None or value >= opt.low) and (hi is None or value <= hi)


def check(name: str, value: object, *, where: str, limits: Limits | None = None,
          kind: type[int] | type[float] | None = None, keywords: bool = False,
          say_unset: bool = False) -> int | float | str | None:
    """``value`` checked against the declaration of ``name``; returns it (a float option's as ``float``).

    ``None`` passes when the option may be unset (:attr:`Option.unset`); a keyword (``"auto"``) passes when
    ``keywords`` and the option declares it.

    Args:
        name: the option (:data:`OPTIONS`).
        value: what was given.
        where: the flag, key or field that gave it (named by the error).
        limits: facts for the option's :class:`Limit` (None: that bound is not checked).
        kind: a stricter type than declared (a setting of whole seconds: ``int``).
        keywords: the consumer accepts the option's keywords.
        say_unset: the reason names null as allowed (a settings value).

    Raises:
        OptionError: not a number of the kind, NaN or infinite, outside the bounds (the reason says them).
    """
    opt = option(name)
    if value is None and opt.unset is not None:
        return None
    if keywords and isinstance(value, str) and value in opt.keywords:
        return value
    want = kind or opt.kind
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (want is int and not isinstance(value, int)):
        raise OptionError(where, value, "must be " + range_words(opt, limits, keywords=keywords, unset=say_unset,
                                                                  whole=want is int))
    assert isinstance(value, (int, float))
    if not _in_range(opt, value, limits):
        raise OptionError(where, value, "must be " + range_words(opt, limits, keywords=keywords, unset=say_unset))
    return float(value) if want is float else value


def default_words(opt: Option) -> str:
    """What happens when the option is not given: ``"default 300"``, ``"default: automatic"``."""
    if opt.default is not None:
        unit = f" {opt.unit}" if opt.unit else ""
        return f"default {_num(opt.default)}{unit}"
    if opt.unset is not None:
        extra = f", {_num(opt.server_default)}" if opt.server_default is not None else ""
        return f"default: {opt.unset}{extra}"
    return ""


def help_text(name: str, *, keywords: bool = False, limits: Limits | None = None, words: str | None = None,
              default: str | None = None) -> str:
    """``--help`` text and tooltip of ``name``: its help (or ``words``), the allowed values and the default
    (or ``default``, the words of a consumer's own default),
    e.g. ``"draft length n_max (--spec-draft-n-max); between 1 and 64; default: llama-server's default for the
    type"``."""
    opt = option(name)
    allowed = range_words(opt, limits, keywords=keywords)
    if opt.limit is not None and (limits is None or opt.limit.high(limits) is None):
        allowed += f", at most {opt.limit.words.format(n='N', model='the model')}"
    said = default_words(opt) if default is None else default
    return "; ".join(p for p in (opt.help if words is None else words, allowed, said) if p)


class _ServerDefaults(Mapping[str, float]):
    """The sampling options' ``server_default`` by name, read from :data:`OPTIONS` on every access."""

    _KEYS = ("temperature", "top_k", "top_p", "min_p")

    def __getitem__(self, key: str) -> float:
        if key not in self._KEYS:
            raise KeyError(key)
        value = option(key).server_default
        assert value is not None
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def __repr__(self) -> str:
        return repr(dict(self))


SERVER_DEFAULT_SAMPLING: Mapping[str, float] = _ServerDefaults()
"""llama-server b11434's sampling defaults by name (temperature, top_k, top_p, min_p): a view of the
options' ``server_default`` (common/common.h ``common_params_sampling``; ``--help`` says the same)."""


def server_defaults_text() -> str:
    """llama-server's sampling defaults in words, ``"temperature T, top_k K, top_p P, min_p M"``."""
    return ", ".join(f"{k} {v:g}" for k, v in SERVER_DEFAULT_SAMPLING.items())


__all__ = ["IDLE_SLEEP_WHY", "OPTIONS", "SERVER_DEFAULT_SAMPLING", "Limit", "Limits", "Option", "OptionError", "by_setting",
           "check", "default_words", "help_text", "high_of", "machine_limits", "option",
           "range_words", "server_defaults_text", "shown"]
