"""The flag dialect of one llama-server binary, read from its ``--help`` text.

llama.cpp renamed the speculative flags in 2026 (common/arg.cpp: ``--draft-max`` →
``--spec-draft-n-max``, ``-ngld`` → ``--spec-draft-ngl``, new ``--spec-type``) and keeps the old
names only as "removed" stubs that make the server exit 1 (arg.cpp ``add_opt`` of the removed
flags, "the argument has been removed. <hint>"). Builds also differ in smaller flags
(``--log-jsonl``, ``--spec-draft-sampling`` exist in b11434, not b10434). So nothing is assumed:
:func:`parse_help` turns a ``--help`` text into a :class:`Dialect`, and :func:`probe_dialect` runs
the binary once per (path, size, mtime) and caches the text on disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from tuner import paths
from tuner.errors import DraftwiseError
from tuner.spectypes import NGRAM_TYPES

log = logging.getLogger(__name__)


#: llama-server's idle-sleep flag (b11434 common/arg.cpp ``--sleep-idle-seconds``: an int ≥ 1, or -1 = off).
IDLE_SLEEP_FLAG = "--sleep-idle-seconds"
#: llama-server's flag that writes each completion's prompt to a folder (b11434 common/arg.cpp
#: ``--log-prompts-dir``; tools/server/server-context.cpp, the ``path_prompts_log_dir`` block of
#: ``server_routes::handle_completions_impl``): Draftwise's opt-in capture of served requests.
CAPTURE_FLAG = "--log-prompts-dir"

#: llama-server's router-mode flag (b11434 common/arg.cpp ``--models-preset``: an INI file of model sections).
ROUTER_FLAG = "--models-preset"

#: Description column of llama.cpp's help printer (common/arg.cpp ``common_arg::to_string``).
_REMOVED_MARK = "the argument has been removed"


@dataclass(frozen=True)
class HelpEntry:
    """One option of the ``--help`` text: all its names, its argument word and description."""

    names: tuple[str, ...]
    arg: str | None
    description: str


@dataclass(frozen=True)
class Dialect:
    """What one llama-server binary accepts.

    Fields:
        spec_style: ``"current"`` (``--spec-type`` + ``--spec-draft-*``), ``"legacy"``
            (``--draft-max`` / ``-ngld``, ``-md`` alone turns draft speculation on), ``"ik"``
            (ik_llama.cpp: legacy draft flags plus a single-valued n-gram ``--spec-type``, ``-mtp``
            and ``--spec-autotune``) or ``"none"`` (no speculative flags at all).
        spec_types: values ``--spec-type`` accepts, in help order; legacy builds report
            ``("none", "draft-simple")`` (what ``-md`` gives them); empty for ``"none"``.
        flags: every accepted flag name (short and long aliases), removed stubs excluded.
        removed_flags: ``(flag, hint)`` for flags the binary lists as removed, e.g.
            ``("--draft-max", "use --spec-draft-n-max or --spec-ngram-mod-n-max")``.
        has_fit / has_metrics / has_slots / has_list_devices: convenience booleans.
        help_sha256: hash of the help text this was parsed from (a staleness key for profiles).
    """

    spec_style: str
    spec_types: tuple[str, ...]
    flags: frozenset[str]
    removed_flags: tuple[tuple[str, str], ...]
    has_fit: bool
    has_metrics: bool
    has_slots: bool
    has_list_devices: bool
    help_sha256: str

    def has(self, flag: str) -> bool:
        """True when ``flag`` (e.g. ``"--spec-draft-n-max"`` or ``"-ngld"``) is accepted."""
        return flag in self.flags

    def first(self, *names: str) -> str | None:
        """The first of ``names`` this binary accepts, or None."""
        for n in names:
            if n in self.flags:
                return n
        return None

    def removed_hint(self, flag: str) -> str | None:
        """The replacement hint for a removed flag (``"use --spec-draft-n-max …"``), or None."""
        for name, hint in self.removed_flags:
            if name == flag:
                return hint
        return None

    @property
    def has_spec_autotune(self) -> bool:
        """True when the binary can adapt the draft length at run time (ik_llama.cpp ``--spec-autotune``)."""
        return "--spec-autotune" in self.flags

    @property
    def has_idle_sleep(self) -> bool:
        """True when the binary can unload an idle model (:data:`IDLE_SLEEP_FLAG` in its ``--help``)."""
        return IDLE_SLEEP_FLAG in self.flags

    def idle_sleep_problem(self) -> str | None:
        """Why this binary cannot unload an idle model, in words for the Serve tab and ``serve --idle-sleep``;
        None when it can. ik_llama.cpp and builds before the 2026 flag rename have no
        ``--sleep-idle-seconds``."""
        if self.has_idle_sleep:
            return None
        which = {"ik": "ik_llama.cpp's llama-server", "legacy": "this older llama.cpp build"}.get(
            self.spec_style, "this llama-server build")
        return (f"{which} has no {IDLE_SLEEP_FLAG}, so it cannot unload an idle model (current llama.cpp "
                "builds can)")

    @property
    def has_capture(self) -> bool:
        """True when the binary can keep the requests it serves (:data:`CAPTURE_FLAG` in its ``--help``)."""
        return CAPTURE_FLAG in self.flags

    def capture_problem(self) -> str | None:
        """Why this binary cannot keep the requests it serves, in words for the Serve tab and ``serve
        --capture-requests``; None when it can. ik_llama.cpp and builds before the 2026 flag rename have no
        ``--log-prompts-dir``."""
        if self.has_capture:
            return None
        which = {"ik": "ik_llama.cpp's llama-server", "legacy": "this older llama.cpp build"}.get(
            self.spec_style, "this llama-server build")
        return f"{which} has no {CAPTURE_FLAG}, so it cannot keep the requests it serves (current llama.cpp builds can)"

    @property
    def has_router(self) -> bool:
        """True when the binary can serve several models from one endpoint: llama-server's router mode,
        ``llama-server`` without ``-m`` and with :data:`ROUTER_FLAG` (b11434 tools/server/server.cpp
        ``llama_server``, tools/server/server-models.cpp ``server_models::load_models``). ik_llama.cpp and
        older builds have no router."""
        return ROUTER_FLAG in self.flags and "--models-max" in self.flags

    def router_problem(self) -> str | None:
        """Why this binary cannot serve several models from one endpoint, in words; None when it can."""
        if self.has_router:
            return None
        which = {"ik": "ik_llama.cpp's llama-server", "legacy": "this older llama.cpp build"}.get(
            self.spec_style, "this llama-server build")
        return f"{which} has no {ROUTER_FLAG} (llama-server's router mode), so it serves one model at a time"

    @property
    def draft_counts_endpoint(self) -> str:
        """The raw-completion endpoint whose answer carries ``timings.draft_n`` / ``draft_n_accepted``.

        Mainline: ``/completion`` (tools/server/server-common.cpp ``server_slot_stats::to_json``).
        ik_llama.cpp: ``/v1/completions``. Its ``/completion`` answer takes ``timings`` from
        examples/server/server-context.cpp ``server_slot::get_formated_timings``, which has no draft
        fields, while the OpenAI-shaped answers use ``server_slot::get_timings`` →
        examples/server/server-task.cpp ``result_timings::to_json``, which adds them when something was
        drafted (``/v1/completions``: ``server_task_result_cmpl_final::to_json_oaicompat_final``; the chat
        endpoint likewise). ik's ``/v1/completions`` handler (examples/server/server.cpp
        ``handle_completions_oai`` → server-common.cpp ``oaicompat_chat_params_parse``) copies the body's
        other fields (``n_predict``, ``seed``, ``ignore_eos``, ``cache_prompt``, sampling) through.
        """
        return "/v1/completions" if self.spec_style == "ik" else "/completion"

    @property
    def spec_on_slots(self) -> bool:
        """True when ``GET /slots`` says per slot whether a speculator runs (``speculative``: mainline
        tools/server/server-context.cpp). ik_llama.cpp's slot JSON has no such field
        (examples/server/server-context.cpp: the ``SERVER_TASK_TYPE_METRICS`` task builds each slot from
        ``get_formated_generation``); it logs per slot
        ``speculative decoding context initialized`` instead (``server_context::init``), see
        :func:`tuner.server.diagnosis.speculators_initialized`."""
        return self.spec_style != "ik"

    def supports_spec_type(self, spec_type: str) -> bool:
        """True when every comma-separated type in ``spec_type`` is launchable on this binary, and the
        combination too: ik_llama.cpp takes one n-gram type, and its ``-mtp`` replaces ``--spec-type``
        (so no n-gram + MTP chain); legacy builds have only ``draft-simple``."""
        parts = [p.strip() for p in spec_type.split(",") if p.strip() and p.strip() != "none"]
        if not all(p in self.spec_types for p in parts):
            return False
        if self.spec_style == "ik":
            ngram = [p for p in parts if p.startswith("ngram-")]
            if len(ngram) > 1 or (ngram and "draft-mtp" in parts):
                return False
        return True


def parse_help_entries(text: str) -> list[HelpEntry]:
    """Split a llama.cpp ``--help`` text into options.

    An option starts on a line beginning with ``-``; its names are the leading comma-separated
    ``-x`` / ``--xx`` words, then an optional argument word, then the description, which continues
    on indented lines (common/arg.cpp ``common_arg::to_string``).
    """
    entries: list[HelpEntry] = []
    names: list[str] = []
    arg: str | None = None
    desc: list[str] = []

    def flush() -> None:
        if names:
            entries.append(HelpEntry(tuple(names), arg, " ".join(d for d in desc if d).strip()))

    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("-") and not line.startswith("-----"):
            flush()
            names, arg, desc = [], None, []
            tokens = line.split()
            i = 0
            while i < len(tokens) and tokens[i].startswith("-"):
                tok = tokens[i]
                names.append(tok.rstrip(","))
                i += 1
                if not tok.endswith(","):
                    break
            # an argument word follows the names when it is separated by one space only
            rest = line
            for n in names:
                rest = rest.split(n, 1)[1] if n in rest else rest
            rest = rest.lstrip(",")
            m = re.match(r"^ (\S+)(?:\s{2,}(.*))?$", rest)
            if m:
                arg = m.group(1)
                desc = [m.group(2) or ""]
            else:
                desc = [rest.strip()]
        elif names and raw.startswith(" "):
            desc.append(line.strip())
        elif names and not line.strip():
            continue
        else:
            flush()
            names, arg, desc = [], None, []
    flush()
    return entries


_IK_OPTION = re.compile(r"^ {2,31}(-\S.*)$")  # option rows; description rows are indented 34


def parse_ik_help_entries(text: str) -> list[HelpEntry]:
    """Split an ik_llama.cpp ``--help`` text into options.

    ik_llama.cpp prints its own table (common/common.cpp ``gpt_params_print_usage``): two spaces,
    the names and argument words padded to 32 columns (``-ngld, --gpu-layers-draft N``), then the
    description, continued on lines indented by 34 spaces. Names are the leading ``-x``/``--xx``
    words separated by commas; the rest of the column is the argument text.
    """
    entries: list[HelpEntry] = []
    for raw in text.splitlines():
        m = _IK_OPTION.match(raw.rstrip())
        if not m:
            if entries and raw.startswith(" " * 34) and raw.strip():
                e = entries[-1]
                entries[-1] = HelpEntry(e.names, e.arg, (e.description + " " + raw.strip()).strip())
            continue
        line = raw.rstrip()
        if len(line) > 34 and line[32:34] == "  ":
            spec, desc = line[2:34].strip(), line[34:].strip()
        else:  # names + argument longer than 30 columns: the description starts on the next line
            spec, desc = line[2:].strip(), ""
        names: list[str] = []
        rest = spec
        while True:
            mm = re.match(r"^(-[\w-]+)(,\s*)?", rest)
            if not mm:
                break
            names.append(mm.group(1))
            rest = rest[mm.end():]
            if not mm.group(2):
                break
        arg = rest.strip() or None
        if names:
            entries.append(HelpEntry(tuple(names), arg, desc))
    return entries


def _is_ik_help(text: str) -> bool:
    lines = text.splitlines()
    flat = [ln for ln in lines if ln.startswith("-") and not ln.startswith("-----")]
    indented = [ln for ln in lines if _IK_OPTION.match(ln.rstrip())]
    return not flat and len(indented) > 10


def _ik_dialect(text: str) -> Dialect:
    """The dialect of an ik_llama.cpp ``llama-server`` (see :func:`parse_help`)."""
    entries = parse_ik_help_entries(text)
    flags: set[str] = set()
    ngram: tuple[str, ...] = ()
    for e in entries:
        flags.update(e.names)
        if "--spec-type" in e.names and e.arg and "[" in e.arg:
            inner = e.arg[e.arg.index("[") + 1:e.arg.rindex("]") if "]" in e.arg else None]
            listed = [re.sub(r"\s*-\s*", "-", t).strip() for t in inner.split("|")]
            ngram = tuple(dict.fromkeys(t for t in listed if t in NGRAM_TYPES))  # the help's order
    types = ["none"]
    if "-md" in flags or "--model-draft" in flags:
        types.append("draft-simple")
    if "-mtp" in flags or "--multi-token-prediction" in flags:
        types.append("draft-mtp")
    types += list(ngram)
    return Dialect(
        spec_style="ik",
        spec_types=tuple(types),
        flags=frozenset(flags),
        removed_flags=(),
        has_fit="--fit" in flags,
        has_metrics="--metrics" in flags,
        has_slots="--slots" in flags,
        has_list_devices="--list-devices" in flags,
        help_sha256=_help_digest(text),
    )


def parse_help(text: str) -> Dialect:
    """Build a :class:`Dialect` from a ``llama-server --help`` text (pure).

    Three layouts are recognised: mainline llama.cpp with ``--spec-type`` (``current``), mainline
    before the 2026 rename (``legacy``), and ik_llama.cpp (``ik``: its own help table, a single-valued
    ``--spec-type`` for the n-gram types only, a draft model switched on by ``-md`` alone, MTP by the
    ``-mtp`` flag, lengths by ``--draft-max``/``--draft-min`` and ``--spec-ngram-size-m``, and an
    optional run-time ``--spec-autotune``; common/common.cpp ``gpt_params_find_arg`` and
    common/speculative.cpp ``common_speculative_init`` of ik_llama.cpp).

    Raises:
        ValueError: the text has no options at all (not a llama.cpp help text).
    """
    if _is_ik_help(text):
        return _ik_dialect(text)
    entries = parse_help_entries(text)
    if not entries:
        raise ValueError("not a llama-server --help text: no options found")
    flags: set[str] = set()
    removed: list[tuple[str, str]] = []
    spec_types: tuple[str, ...] = ()
    for e in entries:
        if _REMOVED_MARK in e.description:
            hint = e.description.split(_REMOVED_MARK, 1)[1].lstrip(". ")
            hint = re.sub(r"\s*\(env: [^)]*\)", "", hint).strip()
            removed.extend((n, hint) for n in e.names)
            continue
        flags.update(e.names)
        if "--spec-type" in e.names and e.arg:
            spec_types = tuple(t for t in e.arg.split(",") if t)
    if "--spec-type" in flags:
        style = "current"
        if not spec_types:
            spec_types = ("none", "draft-simple")
    elif "--draft-max" in flags or "-md" in flags or "--model-draft" in flags:
        style = "legacy"
        spec_types = ("none", "draft-simple")
    else:
        style = "none"
        spec_types = ()
    return Dialect(
        spec_style=style,
        spec_types=spec_types,
        flags=frozenset(flags),
        removed_flags=tuple(removed),
        has_fit="--fit" in flags,
        has_metrics="--metrics" in flags,
        has_slots="--slots" in flags,
        has_list_devices="--list-devices" in flags,
        help_sha256=_help_digest(text),
    )


def _help_digest(text: str) -> str:
    """SHA-256 of the help text with line endings and trailing blanks normalised."""
    norm = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return hashlib.sha256(norm.encode("utf-8", "replace")).hexdigest()


_memory_cache: dict[tuple[str, int, int], Dialect] = {}


def _cache_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def read_help_text(path: Path, timeout_s: float = 30.0) -> str:
    """Run ``<path> --help`` and return its text (stdout + stderr).

    Raises:
        DialectError: the binary cannot be run, times out, or prints no options.
    """
    from tuner import process

    try:
        rc, out = process.run_capture([str(path), "--help"], timeout_s=timeout_s)
    except (OSError, TimeoutError) as exc:
        raise DialectError(f"{path}: could not run --help: {exc}") from exc
    if "--" not in out:
        raise DialectError(f"{path}: --help printed no options (rc {rc}): {out[-300:]!r}")
    return out


def _cache_file(key: tuple[str, int, int]) -> Path:
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
    return paths.cache_dir() / "dialect" / f"{digest}.json"


def _cached_help(key: tuple[str, int, int]) -> str | None:
    """The ``--help`` text kept on disk for ``key`` (path, size, mtime), or None (none, or damaged)."""
    cache_file = _cache_file(key)
    if not cache_file.is_file():
        return None
    from tuner.storage import DEFAULT_JSON_LIMIT_BYTES, parse_json_bytes, read_regular_bytes

    try:
        data = parse_json_bytes(read_regular_bytes(cache_file, DEFAULT_JSON_LIMIT_BYTES, "a cache file"))
    except (OSError, ValueError):
        return None  # a damaged cache entry: ask the binary again
    if isinstance(data, dict) and data.get("key") == list(key) and isinstance(data.get("help"), str):
        return data["help"]
    return None


def cached_dialect(path: str | Path) -> Dialect | None:
    """The :class:`Dialect` of the binary at ``path`` from the caches only (memory, then disk); None when it
    was never probed, or the binary changed since. Never runs the binary and never raises (the window asks
    this while it builds, where running ``--help`` would stall it)."""
    try:
        key = _cache_key(Path(path))
    except OSError:
        return None
    if key in _memory_cache:
        return _memory_cache[key]
    text = _cached_help(key)
    if text is None:
        return None
    try:
        dialect = parse_help(text)
    except ValueError:
        return None
    _memory_cache[key] = dialect
    return dialect


def probe_dialect(path: str | Path, use_cache: bool = True) -> Dialect:
    """The :class:`Dialect` of the binary at ``path``.

    Cached in memory and under ``tuner.paths.cache_dir()/dialect/`` keyed by the binary's
    resolved path, size and mtime, so a rebuilt binary is probed again.

    Raises:
        DialectError: the binary is missing, cannot run ``--help``, or the text is unreadable.
    """
    path = Path(path)
    try:
        key = _cache_key(path)
    except OSError as exc:
        raise DialectError(f"{path}: llama-server binary not found: {exc}") from exc
    if use_cache and key in _memory_cache:
        return _memory_cache[key]
    text = _cached_help(key) if use_cache else None
    if text is None:
        text = read_help_text(path)
        try:
            from tuner.storage import atomic_write_json

            atomic_write_json(_cache_file(key), {"key": list(key), "help": text})
        except Exception:  # a cache that cannot be written is not an error
            log.debug("cannot write the help-text cache for %s", path, exc_info=True)
    try:
        dialect = parse_help(text)
    except ValueError as exc:
        raise DialectError(f"{path}: {exc}") from exc
    _memory_cache[key] = dialect
    return dialect


class DialectError(DraftwiseError, RuntimeError):
    """The flag dialect of a binary could not be determined (message names the binary)."""
