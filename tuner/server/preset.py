"""llama-server's router preset (``--models-preset FILE.ini``), written by Draftwise alone (pure: no I/O).

In router mode (``llama-server`` without ``-m``) each ``[section]`` of the preset is one model a request can
name in its ``model`` field; ``[*]`` holds the defaults every section inherits (common/preset.cpp
``common_preset_context::load_from_ini``, ``cascade``). Keys are flag names without their dashes, a flag
without a value is ``key = true`` (``common_preset::to_args`` renders the long form, and ``false`` turns a
switch into its ``--no-`` form); the router's own command line is merged over every section
(tools/server/server-models.cpp ``server_models::load_models``), so per-model flags are never on it.

What the format cannot carry, and why this module refuses it (one line naming the key and the file):

- a value ends at the first ``;`` or ``#`` and has no escaping (the ``value`` rule of
  ``parse_ini_from_file``); a newline ends the line; leading and trailing blanks are dropped;
- a section name must not hold ``]``; a ``:`` in it has its tag upper-cased (``canonical_tag``), so a
  request spelled as the file was would miss it. Model ids are therefore made of ``[A-Za-z0-9._-]`` only
  (:func:`model_id`);
- an unknown key makes the router refuse the whole file at start (``option 'x' not recognized``), so
  every key written comes from :data:`FLAG_KEYS` (and ``tags``) — a fixed set — and is a flag the
  installed binary lists.

What a section must never widen (the router removes ``--api-key*``, ``--ssl-*`` and the ``--models-*``
flags from every child and forces ``--host 127.0.0.1 --port <free>``: ``unset_reserved_args``,
``server_model_meta::update_args``): the listen address, the port, the key, CORS origins and RPC hosts are
refused here anyway (:data:`REFUSED_FLAGS`), so nothing in a profile reaches them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import DraftwiseError
from tuner.server.argv import UnsupportedConfigError, tuned_argv
from tuner.server.config import ServerConfig, default_alias
from tuner.server.dialect import CAPTURE_FLAG, IDLE_SLEEP_FLAG, Dialect
from tuner.serverargs import PROFILE_ARGS, USER_ONLY_ARGS

#: The preset format's version line (common/preset.cpp skips ``version``; reserved for later formats).
PRESET_VERSION = 1
#: The section every model inherits (common/preset.cpp ``load_from_ini``: ``[*]`` is the global preset).
DEFAULTS = "*"
#: Tags a section carries (listed by ``GET /v1/models`` as ``tags``).
TUNED_TAG, UNTUNED_TAG = "tuned", "untuned"

#: Flags the tuned argv may hold → ``(preset key, takes a value)``. The keys are b11434's own flag names
#: without dashes (common/arg.cpp; tests/server/test_router_preset.py checks each against its ``--help``).
#: ``--repack`` / ``--no-repack`` / ``-nr`` are one switch (the last one wins, as on a command line).
FLAG_KEYS: dict[str, tuple[str, bool]] = {
    "-m": ("model", True), "--model": ("model", True),
    "-c": ("ctx-size", True), "--ctx-size": ("ctx-size", True),
    "-np": ("parallel", True), "--parallel": ("parallel", True),
    "-ngl": ("gpu-layers", True), "--gpu-layers": ("gpu-layers", True), "--n-gpu-layers": ("gpu-layers", True),
    "-t": ("threads", True), "--threads": ("threads", True),
    "-td": ("spec-draft-threads", True), "--spec-draft-threads": ("spec-draft-threads", True),
    "--threads-draft": ("spec-draft-threads", True), "--poll": ("poll", True),
    "-ctk": ("cache-type-k", True), "--cache-type-k": ("cache-type-k", True),
    "-ctv": ("cache-type-v", True), "--cache-type-v": ("cache-type-v", True),
    "-fit": ("fit", True), "--fit": ("fit", True),
    "-cram": ("cache-ram", True), "--cache-ram": ("cache-ram", True),
    IDLE_SLEEP_FLAG: ("sleep-idle-seconds", True),
    "--metrics": ("metrics", False), "--slots": ("slots", False),
    "--spec-type": ("spec-type", True),
    "-md": ("spec-draft-model", True), "--model-draft": ("spec-draft-model", True),
    "--spec-draft-model": ("spec-draft-model", True),
    "--spec-draft-n-max": ("spec-draft-n-max", True), "--spec-draft-n-min": ("spec-draft-n-min", True),
    "--spec-draft-p-min": ("spec-draft-p-min", True), "--draft-p-min": ("spec-draft-p-min", True),
    "--spec-draft-ngl": ("spec-draft-ngl", True), "-ngld": ("spec-draft-ngl", True),
    "--spec-ngram-simple-size-m": ("spec-ngram-simple-size-m", True),
    "--spec-ngram-map-k-size-m": ("spec-ngram-map-k-size-m", True),
    "--spec-ngram-map-k4v-size-m": ("spec-ngram-map-k4v-size-m", True),
    "--spec-ngram-mod-n-max": ("spec-ngram-mod-n-max", True),
    "--spec-ngram-mod-n-min": ("spec-ngram-mod-n-min", True),
    CAPTURE_FLAG: ("log-prompts-dir", True),  # per section: each model's own capture folder (issue 28)
    **{flag: (flag.lstrip("-"), takes) for flag, takes in {**PROFILE_ARGS, **USER_ONLY_ARGS}.items()
       if flag not in ("-a", "--alias", "--repack", "--no-repack", "-nr", "-cram", "--cache-ram")},
}
#: Switches whose negation is the same key (``key = false`` renders the ``--no-`` form).
_SWITCHES: dict[str, tuple[str, str]] = {
    "--repack": ("repack", "true"), "--no-repack": ("repack", "false"), "-nr": ("repack", "false"),
    "--cont-batching": ("cont-batching", "true"), "--no-cont-batching": ("cont-batching", "false"),
}
#: The key of a section's tags (``--tags``: informational, listed by ``GET /v1/models``; common/arg.cpp).
TAGS_KEY = "tags"
#: Flags that never go into a section: where and to whom the server listens, its key, CORS, RPC hosts
#: (the router sets or removes them itself, and RPC placements stay single-model), the alias (the section
#: name is the model's id: ``update_args`` sets ``--alias`` to it).
REFUSED_FLAGS = frozenset({"--host", "--port", "--api-key", "--api-key-file", "--cors-origins", "--rpc", "-a",
                           "--alias"})
#: Characters of a model id (a section name); anything else becomes ``-`` (:func:`model_id`).
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
#: What ends or breaks a preset value (common/preset.cpp ``parse_ini_from_file``: comments start at
#: ``;`` / ``#`` anywhere, a line ends at CR or LF) and control characters.
_BAD_VALUE = re.compile(r"[;#\x00-\x1f\x7f]")


class PresetError(DraftwiseError, ValueError):
    """A model cannot be written into the router preset; the message is one line naming the model, the key
    and why. ``model`` is the model's id (or path)."""

    bad_input = True

    def __init__(self, model: str, message: str) -> None:
        self.model = model
        super().__init__(message)


@dataclass(frozen=True)
class RouterModel:
    """One model of the router's preset.

    Fields:
        model_id: its section name, the ``model`` requests send (:func:`model_id`).
        config: what the section launches (its tuned :class:`ServerConfig`, or the model alone); listen
            address, port, key and CORS are the router's and are ignored here.
        tuned: a saved profile gave ``config``; False = the model alone, untuned (tagged so).
        label: the speculation in words ("no speculation", "draft-simple d.gguf n_max 8", …).
        words: the tuning decision in a few words for menus ("draft model d.gguf, 1.6× faster"), or "".
        break_even_rate: acceptance rate below which its speculation loses (0..1), None when unknown.
    """

    model_id: str
    config: ServerConfig
    tuned: bool
    label: str = "no speculation"
    words: str = ""
    break_even_rate: float | None = None


@dataclass(frozen=True)
class RouterPlan:
    """Everything one router launch serves (the router's counterpart of a :class:`ServerConfig`).

    Fields:
        models: the preset's sections, in menu order (tuned first).
        models_max: ``--models-max``: models loaded at once (≥ 1; from the memory plan).
        models_max_why: that number in words (for the Serve tab).
        host / port: where the router listens (loopback only: see :mod:`tuner.server.router`); ``port`` None
            = a free one.
        api_key: the key every route requires (handed over in the router's environment, never on its argv).
        cors_origins: ``--cors-origins`` of the router (it sets CORS for every proxied answer).
        sleep_idle_s: ``--sleep-idle-seconds`` for every model (``[*]``), None = off.
        left_out: ``(model path, why)`` of the folder's models that could not be sections.
    """

    models: tuple[RouterModel, ...]
    models_max: int = 1
    models_max_why: str = ""
    host: str = "127.0.0.1"
    port: int | None = None
    api_key: str | None = None
    cors_origins: str | None = "localhost"
    sleep_idle_s: int | None = None
    left_out: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def model(self, model: str) -> RouterModel | None:
        """The section named ``model``, or None."""
        return next((m for m in self.models if m.model_id == model), None)

    def model_for(self, path: Path | str) -> RouterModel | None:
        """The section serving the GGUF ``path`` (compared as resolved paths), or None."""
        want = _resolved(path)
        return next((m for m in self.models if _resolved(m.config.model_path) == want), None)

    def with_port(self, port: int) -> RouterPlan:
        """A copy listening on ``port``."""
        from dataclasses import replace

        return replace(self, port=port)


def _resolved(path: Path | str) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return str(path)


def model_id(path: Path | str, taken: Iterable[str] = ()) -> str:
    """The model id a router section gets for the GGUF ``path``: the single-model id
    (:func:`tuner.server.config.default_alias`, the file stem) with every run of characters outside
    ``[A-Za-z0-9._-]`` turned into ``-``; ``-2``, ``-3`` … appended when ``taken`` holds it already.
    Never empty (``model``)."""
    base = _ID_CHARS.sub("-", default_alias(path)).strip("-.") or "model"
    taken = set(taken)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def check_value(model: str, key: str, value: str) -> str:
    """``value`` when the preset format can carry it for ``key`` of section ``model``.

    Raises:
        PresetError: empty, a leading or trailing blank, or a ``;``, ``#`` or control character (named).
    """
    bad = _BAD_VALUE.search(value)
    if bad is not None or not value or value != value.strip():
        what = (f"the character {bad.group()!r}" if bad is not None else
                "an empty value" if not value else "a leading or trailing blank")
        raise PresetError(model, f"{model}: {key} = {value!r} cannot be written into llama-server's model preset "
                          f"({what}: the preset format ends a value at ';' or '#', has no escaping and drops "
                          "blanks around it); rename the file or its folder")
    return value


def flag_pairs(model: str, words: Sequence[str], dialect: Dialect) -> list[tuple[str, str]]:
    """The preset ``(key, value)`` pairs of argv ``words`` (flags and their values, no binary), in argv order
    with a later duplicate replacing the earlier (llama.cpp keeps the last of a repeated flag).

    Raises:
        PresetError: a flag outside :data:`FLAG_KEYS` or refused (:data:`REFUSED_FLAGS`), one the binary does
            not list, a missing value, or a value the format cannot carry (:func:`check_value`).
    """
    pairs: dict[str, str] = {}
    i = 0
    while i < len(words):
        flag = words[i]
        if flag in REFUSED_FLAGS or (flag not in FLAG_KEYS and flag not in _SWITCHES):
            raise PresetError(model, f"{model}: {flag} cannot go into llama-server's model preset (Draftwise writes a "
                              "fixed set of keys; the listen address, key, CORS and RPC hosts are the router's)")
        if not dialect.has(flag):
            raise PresetError(model, f"{model}: this llama-server does not list {flag}")
        if flag in _SWITCHES:
            key, value = _SWITCHES[flag]
        else:
            key, takes = FLAG_KEYS[flag]
            if takes and i + 1 >= len(words):
                raise PresetError(model, f"{model}: {flag} has no value")
            value = words[i + 1] if takes else "true"
            i += 1 if takes else 0
        pairs.pop(key, None)  # a repeated flag: the last one counts, in its own place
        pairs[key] = check_value(model, key, value)
        i += 1
    return list(pairs.items())


#: Flags of the tuned argv the router sets for every model itself (``[*]`` or its command line).
_GLOBAL_FLAGS = {"--metrics": False, "--slots": False, "--cors-origins": True, IDLE_SLEEP_FLAG: True, "-a": True,
                 "--alias": True}


def section_words(binary: Path | str, config: ServerConfig, dialect: Dialect) -> list[str]:
    """The argv words of ``config``'s section: :func:`tuner.server.argv.tuned_argv` (one source of truth with a
    single-model launch) without the binary and what the router sets for all models (``--metrics``,
    ``--slots``, ``--cors-origins``, ``--sleep-idle-seconds``, ``--alias``). The key and the listen address
    are left out of ``config`` first.

    Raises:
        UnsupportedConfigError: as :func:`tuned_argv`.
    """
    from dataclasses import replace

    bare = replace(config, api_key=None, host="127.0.0.1", port=None, cors_origins=None, alias=None,
                   sleep_idle_s=None)
    words = tuned_argv(binary, bare, dialect)[1:]
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in _GLOBAL_FLAGS:
            i += 2 if _GLOBAL_FLAGS[w] else 1
            continue
        out.append(w)
        i += 1
    return out


def section_pairs(model: RouterModel, binary: Path | str, dialect: Dialect) -> list[tuple[str, str]]:
    """The ``(key, value)`` lines of ``model``'s section: its flags (:func:`flag_pairs` of :func:`section_words`),
    then ``tags`` (``tuned`` / ``untuned``, where the binary lists ``--tags``).

    Raises:
        PresetError: as :func:`flag_pairs`, or an id that is not a plain model id; an unsupported flag
            (:class:`tuner.server.argv.UnsupportedConfigError`) as a PresetError too.
    """
    mid = model.model_id
    if not mid or _ID_CHARS.search(mid) or mid[0] in "-." or mid[-1] in "-.":
        raise PresetError(model.model_id, f"{model.model_id!r} is not a model id a preset section can carry")
    if model.config.rpc:
        raise PresetError(model.model_id, f"{model.model_id}: a placement over RPC hosts is served as one model "
                          "(the router cannot switch it to its local fallback when a host is lost)")
    try:
        words = section_words(binary, model.config, dialect)
    except UnsupportedConfigError as exc:
        raise PresetError(model.model_id, f"{model.model_id}: {exc}") from exc
    tags = [(TAGS_KEY, TUNED_TAG if model.tuned else UNTUNED_TAG)] if dialect.has("--tags") else []
    return [*flag_pairs(model.model_id, words, dialect), *tags]


def defaults_pairs(dialect: Dialect, sleep_idle_s: int | None) -> list[tuple[str, str]]:
    """The ``[*]`` section: ``--metrics`` and ``--slots`` (telemetry and the readiness checks need them) and idle
    sleep for every model, each where the binary lists it."""
    pairs = [("metrics", "true")] if dialect.has_metrics else []
    pairs += [("slots", "true")] if dialect.has_slots else []
    if sleep_idle_s and dialect.has_idle_sleep:
        pairs.append(("sleep-idle-seconds", str(int(sleep_idle_s))))
    return pairs


def render_preset(plan: RouterPlan, binary: Path | str, dialect: Dialect) -> str:
    """The preset text for ``plan`` (``version``, ``[*]``, then one section per model in plan order).

    Raises:
        PresetError: a model cannot be written (see :func:`section_pairs`), two models share an id, or the
            plan has no model.
    """
    if not plan.models:
        raise PresetError("*", "the router preset would hold no model")
    lines = ["; llama-server model preset written by Draftwise; it is rewritten whenever Draftwise serves",
             f"version = {PRESET_VERSION}", "", f"[{DEFAULTS}]"]
    lines += [f"{k} = {v}" for k, v in defaults_pairs(dialect, plan.sleep_idle_s)]
    seen: set[str] = set()
    for m in plan.models:
        if m.model_id in seen:
            raise PresetError(m.model_id, f"two models of the router preset are both named {m.model_id!r}")
        seen.add(m.model_id)
        lines += ["", f"[{m.model_id}]"] + [f"{k} = {v}" for k, v in section_pairs(m, binary, dialect)]
    return "\n".join(lines) + "\n"


__all__ = ["DEFAULTS", "FLAG_KEYS", "TAGS_KEY", "PRESET_VERSION", "REFUSED_FLAGS", "TUNED_TAG", "UNTUNED_TAG",
           "PresetError", "RouterModel", "RouterPlan", "check_value", "defaults_pairs", "flag_pairs", "model_id",
           "render_preset", "section_pairs", "section_words"]
