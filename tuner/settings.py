"""User settings and the API key (core: no Qt).

Settings live in ``tuner.paths.config_dir() / "settings.json"`` and are written atomically
through :mod:`tuner.storage`. The API key lives in ``tuner.paths.data_dir() / "api_key"`` with
owner-only permissions (``0o600``); it is generated once with :mod:`secrets`.

Security default: the server listens on ``127.0.0.1``. ``expose_on_lan=True`` makes it listen
on ``0.0.0.0`` and is only allowed together with an API key (``--api-key`` of llama-server,
tools/server/server-http.cpp checks it on every route except ``/health``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner import paths, storage
from tuner.errors import DraftwiseError
from tuner.options import OptionError, by_setting, check, machine_limits, option

SETTINGS_FILE = "settings.json"
API_KEY_FILE = "api_key"
SCHEMA_VERSION = 1
MAX_SETTINGS_BYTES = 1024 * 1024
"""The largest settings file read (1 MiB; a real one is under 2 KiB): a larger one is refused unread and left
as it is (:class:`tuner.storage.FileTooLargeError`), so a 512 MiB file cannot take a command's memory."""

DEFAULT_TUNE_BUDGET_S = int(option("budget_s").default or 0)
"""The one default time budget of a sweep, whole seconds (``tuner.options``: the app's Settings, ``draftwise
tune --budget``, ``tuner.calibration.request.DEFAULT_BUDGET_S``): see ``DEFAULT_BUDGET_S`` for why 300 s."""
DEFAULT_PORT = int(option("port").default or 0)
DEFAULT_CACHE_RAM_MIB = int(option("cache_ram_mib").default or 0)
DEFAULT_IDLE_SLEEP_S = int(option("idle_sleep_s").default or 0)
"""The app's idle sleep, seconds (15 min; 0 = off; ``tuner.options.IDLE_SLEEP_WHY`` says why)."""
"""Desktop default of llama-server's host-RAM prompt cache (``--cache-ram``, MiB; declared in
:mod:`tuner.options`, which says why: :data:`tuner.options.DEFAULT_CACHE_RAM_WHY`); 0 turns the cache off,
-1 removes the limit."""


class SettingsError(DraftwiseError, ValueError):
    """A setting has a bad value. ``key`` names the setting, ``path`` the file it came from (or None);
    ``names_value``: the reason already ends with the value (``…, got 5``)."""

    def __init__(self, key: str, reason: str, path: Path | None = None, names_value: bool = False) -> None:
        self.key = key
        self.reason = reason
        self.names_value = names_value
        self.path = Path(path) if path is not None else None
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}setting {key!r}: {reason}")


@dataclass(frozen=True)
class Settings:
    """The user's settings. ``None`` means "not chosen yet / find it automatically".

    Attributes:
        models_dir: folder of GGUF files to scan; None until the first run asks for it.
        server_binary: llama-server to use; None = discover (``tuner.server.discovery.find_server``).
        tune_budget_s: wall-clock budget of one calibration sweep, whole seconds.
        port: TCP port of the served llama-server.
        expose_on_lan: listen on 0.0.0.0 instead of 127.0.0.1; requires an API key.
        start_at_login: install the desktop autostart entry (``tuner.desktop.set_autostart``).
        prompts_path: the user's prompt set (JSONL); None = the built-in set.
        cors_origin: one extra web origin (``scheme://host[:port]``, e.g. a browser front end on
            another port) allowed to call the served endpoint; None = pages from localhost only
            (``--cors-origins localhost``). llama-server b11434 sends any value other than
            ``localhost`` verbatim as ``Access-Control-Allow-Origin``, so one origin is the most
            it can admit besides the default (tools/server/server-http.cpp, pre-routing handler).
        cache_ram_mib: limit of llama-server's host prompt cache, MiB (``--cache-ram``; -1 = no
            limit, 0 = off, at most the physical RAM); default :data:`DEFAULT_CACHE_RAM_MIB` (see there for why).
        keep_chat_history: the Chat tab saves conversations to ``data_dir()/chat_history.json``
            (mode 0600); off by default, so chats are not stored.
        ctx_size: context size in tokens for tuning and serving (``-c``); None = automatic: the model's
            training context capped at 8192, never below 4096 unless the model's is smaller
            (:func:`tuner.ctxsize.default_ctx_size`).
        temperature, top_p, top_k, min_p: the sampling settings the user's chat client sends; the sweep
            measures at them. None = the client sends none, so llama-server's own defaults apply
            (b11434, common/common.h ``common_params_sampling``, declared in :mod:`tuner.options`; the sweep
            reads the binary's actual values from ``/props``).
        long_share: fraction of the served requests that are long-context ones (long chats, a
            code file with a question); the sweep picks the configuration fastest over that mix
            (``tune --long-share``, ``tuner.calibration.pairing.Mix``). None = the prompt set's own
            share (every measured request weighs the same: 2 of the built-in set's 7 requests are long).
        rpc_hosts: llama.cpp RPC hosts (``host:port`` strings, each running ``draftwise rpc-host`` /
            ``ggml-rpc-server``) whose devices tune, plan and serve may use (``--rpc``); empty = this
            machine only. The RPC protocol has no authentication (``tuner.hardware.rpc.NO_AUTH_WARNING``).
        server_args: the user's own llama-server flags, each ``FLAG`` or ``FLAG=VALUE`` (``"--no-repack"``,
            ``"-tb=2"``), added to every launch of tune and serve (the Serve tab's "Extra llama-server flags";
            ``--server-arg`` replaces them on the command line). Checked by :func:`tuner.serverargs.parse_server_args`:
            its allow-list only, never a flag that changes where the server listens, its key, CORS or tools,
            or one Draftwise sets itself. A staleness key of the profile.
        idle_sleep_s: idle sleep of the served llama-server, whole seconds (``--sleep-idle-seconds``): after this
            long without a request it unloads the model and frees its memory, and the next request loads it again;
            0 = off. Default :data:`DEFAULT_IDLE_SLEEP_S` (15 min). Passed only where the binary has the flag.
        capture_requests: keep the requests the served model answers (their full prompts, the last 200 and at
            most 64 MiB per model, in a private folder: ``tuner.server.capture``) to re-tune on them; off by
            default. A start-up flag of llama-server (``--log-prompts-dir``): switching it restarts the served
            server, and switching it off deletes what was kept.
        serve_at_start: serve again, when the app starts (at login too), what was served when it last ran:
            ``None`` = not chosen yet (the first time a profile is served it becomes True), True, False (an
            explicit off: later serves leave it off). A stale profile is not served: the app says why and offers
            the re-tune.
        served_target: the target GGUF being served (the one *Serve at start* serves again), None when the
            server was stopped by hand or nothing was served yet.
        threads: CPU threads of llama-server (``-t``; ``-td`` too with a draft model) for tune and serve; None =
            the tune measures the thread settings and serves the one that copes best with other busy programs
            (``tuner.calibration.threads``). A number overrides it: the tune then measures only that count, and
            serving uses it whatever the profile says (``serve --threads`` overrides this setting).
    """

    models_dir: Path | None = None
    server_binary: Path | None = None
    tune_budget_s: int = DEFAULT_TUNE_BUDGET_S
    port: int = DEFAULT_PORT
    expose_on_lan: bool = False
    start_at_login: bool = False
    prompts_path: Path | None = None
    cors_origin: str | None = None
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    keep_chat_history: bool = False
    ctx_size: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    long_share: float | None = None
    rpc_hosts: tuple[str, ...] = ()
    server_args: tuple[str, ...] = ()
    idle_sleep_s: int = DEFAULT_IDLE_SLEEP_S
    capture_requests: bool = False
    serve_at_start: bool | None = None
    served_target: Path | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        validate(self)

    @property
    def host(self) -> str:
        """The listen address for llama-server: ``0.0.0.0`` when exposed on the LAN, else ``127.0.0.1``."""
        return "0.0.0.0" if self.expose_on_lan else "127.0.0.1"

    def endpoint_url(self) -> str:
        """The OpenAI-compatible base URL a local client uses, e.g. ``http://127.0.0.1:8088/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def cors_origins_value(self) -> str:
        """The ``--cors-origins`` value to serve with: ``cors_origin`` or ``"localhost"``."""
        return self.cors_origin or "localhost"

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (validated; raises :class:`SettingsError`)."""
        return dataclasses.replace(self, **changes)


_PATH_KEYS = ("models_dir", "server_binary", "prompts_path", "served_target")
#: One web origin: http(s)://host[:port], host a name, IPv4 or [IPv6] (no path, no comma list, no '*'); matched
#: whole (``fullmatch``: a ``$`` anchor would admit a trailing newline, which then reached ``--cors-origins``).
_ORIGIN = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))(?::\d{1,5})?")


def validate(settings: Settings, path: Path | None = None) -> None:
    """Check every field of ``settings``.

    Raises:
        SettingsError: naming the first bad key and why.
    """
    s = settings
    for key in _PATH_KEYS:
        v = getattr(s, key)
        if v is not None and not isinstance(v, Path):
            raise SettingsError(key, f"expected a path or null, got {type(v).__name__}", path)
    _validate_numbers(s, path)
    for key in ("expose_on_lan", "start_at_login", "keep_chat_history", "capture_requests"):
        if not isinstance(getattr(s, key), bool):
            raise SettingsError(key, f"expected true or false, got {getattr(s, key)!r}", path)
    if s.serve_at_start is not None and not isinstance(s.serve_at_start, bool):
        raise SettingsError("serve_at_start", f"expected true, false or null (not chosen yet), got "
                            f"{s.serve_at_start!r}", path)
    if s.cors_origin is not None and (not isinstance(s.cors_origin, str) or not _ORIGIN.fullmatch(s.cors_origin)):
        raise SettingsError("cors_origin", f"expected one web origin such as http://localhost:3000 (scheme, "
                            f"host, optional port; no path, no list), got {s.cors_origin!r}", path)
    _validate_rpc_hosts(s, path)
    _validate_server_args(s, path)


def _validate_server_args(s: Settings, path: Path | None) -> None:
    """``server_args``: a list of ``FLAG`` / ``FLAG=VALUE`` strings passing the one user-flag rule
    (:func:`tuner.serverargs.parse_server_args`). Raises SettingsError naming the key and the flag."""
    from tuner.serverargs import ServerArgError, parse_server_args

    if isinstance(s.server_args, str) or not isinstance(s.server_args, (tuple, list)):
        raise SettingsError("server_args", f"expected a list of FLAG or FLAG=VALUE strings, got {s.server_args!r}",
                            path)
    try:
        parse_server_args(list(s.server_args), where="")
    except ServerArgError as exc:
        raise SettingsError("server_args", str(exc), path) from None


def _validate_rpc_hosts(s: Settings, path: Path | None) -> None:
    """``rpc_hosts``: a list of ``host:port`` strings. Raises SettingsError naming the key and entry."""
    from tuner.rpcaddr import RpcHostError, parse_rpc_hosts

    if isinstance(s.rpc_hosts, str) or not isinstance(s.rpc_hosts, (tuple, list)):
        raise SettingsError("rpc_hosts", f"expected a list of host:port strings, got {s.rpc_hosts!r}", path)
    try:
        parse_rpc_hosts(list(s.rpc_hosts), where="rpc_hosts")
    except RpcHostError as exc:
        raise SettingsError("rpc_hosts", str(exc).removeprefix("rpc_hosts: "), path) from None


def _validate_numbers(s: Settings, path: Path | None) -> None:
    """Every numeric key against its declaration in :mod:`tuner.options` (bounds, this machine's RAM for
    ``cache_ram_mib``; NaN and the infinities refused; null where the option may be unset). Raises
    SettingsError naming the key: ``must be <the declared range>, got <value>``."""
    for opt in by_setting():
        key = opt.setting
        assert key is not None
        value = getattr(s, key)
        try:
            check(opt.name, value, where=key, limits=machine_limits(), kind=int if key == "tune_budget_s" else None,
                  say_unset=True)
        except OptionError as exc:
            raise SettingsError(key, f"{exc.reason}, got {value!r}", path, names_value=True) from None


def settings_path() -> Path:
    """``config_dir()/settings.json``."""
    return paths.config_dir() / SETTINGS_FILE


def to_json(settings: Settings) -> dict[str, Any]:
    """The JSON object saved for ``settings`` (paths as strings, ``schema_version`` added)."""
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for f in dataclasses.fields(Settings):
        v = getattr(settings, f.name)
        out[f.name] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
    return out


def from_json(obj: Any, path: Path | None = None) -> Settings:
    """Build :class:`Settings` from a parsed JSON object; unknown keys are ignored, missing keys default.

    Raises:
        SettingsError: the object is not a mapping or a value has the wrong type/range (names the key).
    """
    if not isinstance(obj, dict):
        raise SettingsError("<root>", f"expected a JSON object, got {type(obj).__name__}", path)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        if f.name not in obj:
            continue
        v = obj[f.name]
        if f.name in _PATH_KEYS:
            if v is None or v == "":
                v = None
            elif isinstance(v, str):
                v = Path(v).expanduser()
            else:
                raise SettingsError(f.name, f"expected a path string or null, got {v!r}", path)
        elif f.name in ("rpc_hosts", "server_args") and isinstance(v, list):
            v = tuple(v)
        kwargs[f.name] = v
    try:
        return Settings(**kwargs)
    except SettingsError as exc:
        raise SettingsError(exc.key, exc.reason, path, exc.names_value) from None


def load_settings() -> Settings:
    """Load the settings file; defaults when it does not exist.

    Raises:
        SettingsError: a value is bad (names the file and key).
        tuner.storage.CorruptFileError: the file is not JSON (it is kept aside as ``*.corrupt-<time>``).
    """
    p = settings_path()
    obj = storage.load_json(p, limit_bytes=MAX_SETTINGS_BYTES, what="a settings file")
    if obj is None:
        return Settings()
    return from_json(obj, p)


@dataclass(frozen=True)
class LoadedSettings:
    """What :func:`load_settings_keeping_valid` found.

    Attributes:
        settings: the valid keys of the file, defaults for the rest.
        problems: one :class:`SettingsError` per bad key (or one for the whole file), in file order.
        kept_aside: where the original file was copied when it had problems (never overwritten
            silently), else None.
    """

    settings: Settings
    problems: tuple[SettingsError, ...] = ()
    kept_aside: Path | None = None

    def message(self) -> str | None:
        """One line for people (which keys, which values, where the original is), or None."""
        if not self.problems:
            return None
        if self.problems[0].key in ("<file>", "<root>"):  # the whole file: none of its keys were used
            where = f"; the original file is kept as {self.kept_aside}" if self.kept_aside else ""
            return f"{settings_path()}: {self.problems[0].reason} (using the default settings){where}"
        parts = "; ".join(f"{e.key!r}: {e.reason}" for e in self.problems)
        where = f"; the original file is kept as {self.kept_aside}" if self.kept_aside else ""
        return f"{settings_path()}: {parts} (using the defaults for {'that key' if len(self.problems) == 1 else 'those keys'}){where}"


def load_settings_keeping_valid(repair: bool = True) -> LoadedSettings:
    """Load the settings file key by key: a bad value costs only its own key.

    A file with a bad value (or unparsable JSON, or a non-object) is first copied aside as
    ``settings.json.invalid-<unix time>`` (or renamed ``.corrupt-<time>`` when not JSON), then
    ``settings.json`` is rewritten with the valid keys, so the next save cannot lose them. Each
    key is checked alone (a ``Settings`` with only that key set), so validation stays per key
    whatever keys are added. A UTF-8 byte-order mark is accepted. With ``repair`` False (read-only
    commands such as ``serve``) nothing is copied, renamed or rewritten.

    Returns:
        :class:`LoadedSettings`. Raises nothing for a bad file; OSError only when the config
        folder cannot be read at all (a FIFO or device as settings.json is a problem, not a hang).
    """
    p = settings_path()
    try:
        obj = storage.load_json(p, keep_aside=repair, limit_bytes=MAX_SETTINGS_BYTES, what="a settings file")
    except storage.CorruptFileError as exc:
        return LoadedSettings(Settings(), (SettingsError("<file>", exc.reason, p),), exc.moved_to)
    except storage.FileTooLargeError as exc:  # left as it is: not read, copied or rewritten
        return LoadedSettings(Settings(), (SettingsError("<file>", exc.reason, p),), None)
    except OSError as exc:
        return LoadedSettings(Settings(), (SettingsError("<file>", f"cannot read it ({exc})", p),), None)
    if obj is None:
        return LoadedSettings(Settings())
    if not isinstance(obj, dict):
        moved = _keep_copy(p) if repair else None
        return LoadedSettings(Settings(), (SettingsError("<root>", f"expected a JSON object, got "
                                                         f"{type(obj).__name__}", p),), moved)
    good: dict[str, Any] = {}
    problems: list[SettingsError] = []
    for f in dataclasses.fields(Settings):
        if f.name not in obj:
            continue
        try:
            one = from_json({f.name: obj[f.name]}, p)
        except SettingsError as exc:
            said = "" if exc.names_value else f" (value {obj[f.name]!r})"
            problems.append(SettingsError(exc.key, exc.reason + said, p, names_value=True))
            continue
        good[f.name] = getattr(one, f.name)
    settings = Settings(**good)
    if not problems or not repair:
        return LoadedSettings(settings, tuple(problems))
    moved = _keep_copy(p)
    try:
        storage.atomic_write_json(p, {**to_json(settings), **{k: v for k, v in obj.items()
                                                              if k not in good and k not in
                                                              {e.key for e in problems}}})
    except OSError:
        pass  # the valid keys are still in memory; the copy aside keeps the original
    return LoadedSettings(settings, tuple(problems), moved)


def threads_value() -> int | None:
    """The ``threads`` setting (None = tuned), for the command line's tune and serve when no ``--threads`` is
    given. A bad or unreadable settings file gives None. Never raises."""
    try:
        return load_settings_keeping_valid(repair=False).settings.threads
    except Exception:  # noqa: BLE001 - the tuned setting is the safe default
        return None


def served_values() -> tuple[str, int]:
    """What serving takes from the user's settings, whichever front end serves or plans (``draftwise
    serve``, ``draftwise plan``, the app): the ``--cors-origins`` value (the ``cors_origin`` setting, default
    ``localhost``) and the prompt-cache limit ``--cache-ram`` in MiB (``cache_ram_mib``, default
    :data:`DEFAULT_CACHE_RAM_MIB`; -1 = no limit, 0 = off). A bad or unreadable settings file gives these
    defaults (the locked-down origin, the desktop cache limit). Never raises."""
    try:
        st = load_settings_keeping_valid(repair=False).settings
        return st.cors_origins_value(), st.cache_ram_mib
    except Exception:  # never let a settings problem open the endpoint
        import logging

        logging.getLogger(__name__).warning(
            "settings unreadable: serving with the safe defaults (CORS localhost, default --cache-ram)", exc_info=True)
        return "localhost", DEFAULT_CACHE_RAM_MIB


def _keep_copy(p: Path) -> Path | None:
    """Copy ``p`` to a new ``<name>.invalid-<time>`` (owner-only), keeping only the newest
    :data:`tuner.storage.KEEP_COPIES` such copies; None when that fails."""
    try:
        data = storage.read_regular_bytes(p, limit_bytes=MAX_SETTINGS_BYTES, what="a settings file")
        aside = storage.aside_name(p, "invalid")
        storage.atomic_write_bytes(aside, data, mode=0o600)
        storage.prune_copies(p, "invalid")
        return aside
    except OSError:
        return None


def save_settings(settings: Settings) -> Path:
    """Validate and write ``settings`` atomically; returns the file written.

    Raises:
        SettingsError: LAN exposure without an API key on disk (key ``expose_on_lan``), or a bad value.
        OSError: the config folder is not writable.
    """
    validate(settings)
    if settings.expose_on_lan and read_api_key() is None:
        raise SettingsError(
            "expose_on_lan", "exposing the server on the LAN requires an API key; generate one first"
        )
    p = settings_path()
    storage.atomic_write_json(p, to_json(settings), mode=0o600)
    return p


def allow_rpc_hosts(hosts: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Add ``hosts`` (``host:port`` strings, as ``--rpc`` parsed them) to the ``rpc_hosts`` setting: the hosts a
    saved profile may send the model's layers to (``tuner.calibration.profile_checks``), and the ones a tune
    without ``--rpc`` and the app use. ``draftwise tune --rpc H`` calls it, since the user named H.

    Returns:
        The hosts added (in the given order; empty when each was there already, compared as parsed endpoints).

    Raises:
        SettingsError: the settings file has a bad value (named), or cannot be saved as it is (LAN exposure
            without an API key); nothing is written.
        tuner.storage.CorruptFileError: the settings file is not JSON (kept aside).
        OSError: the settings file cannot be read or written.
        tuner.rpcaddr.RpcHostError: an entry of ``hosts`` is not ``host:port`` (named as ``--rpc``).
    """
    from tuner.rpcaddr import parse_rpc_hosts

    current = load_settings()
    have = set(parse_rpc_hosts(list(current.rpc_hosts), where="rpc_hosts"))
    added: list[str] = []
    for ep in parse_rpc_hosts(list(hosts)):
        if ep not in have:
            have.add(ep)
            added.append(str(ep))
    if added:
        save_settings(dataclasses.replace(current, rpc_hosts=(*current.rpc_hosts, *added)))
    return tuple(added)


# ---------------------------------------------------------------- API key


def api_key_path() -> Path:
    """``data_dir()/api_key`` (mode 0o600)."""
    return paths.data_dir() / API_KEY_FILE


def read_api_key() -> str | None:
    """The stored API key, or None when none was generated.

    Raises:
        SettingsError: the key file is readable by group/others (key ``api_key``; fix with chmod 600)
            or is empty.
    """
    p = api_key_path()
    try:
        key = read_private_key_file(p)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SettingsError("api_key", str(exc)) from None  # a readable file's message says "chmod 600 it"
    if not key:
        raise SettingsError("api_key", f"{p} is empty")
    return key


def read_private_key_file(path: Path | str) -> str:
    """The first non-empty, non-comment line of a key file, checked first: a regular file (no
    FIFO can block), owned by this user's eyes only (no group/other permission bits, checked on
    the open descriptor), at most 64 KiB, UTF-8. ``""`` when it holds no key.

    Raises:
        FileNotFoundError: missing.
        tuner.storage.NotRegularFileError: a FIFO, socket, device or folder.
        ValueError: readable by group or others (the mode is named), too large, or not UTF-8.
        OSError: cannot be read.
    """
    path = Path(path)
    with storage.open_regular(path) as fh:
        st = os.fstat(fh.fileno())
        if os.name == "posix" and st.st_mode & 0o077:
            raise ValueError(f"{path} is readable by group or others (mode {st.st_mode & 0o777:o}); "
                             "a key file must be private: chmod 600 it")
        data = fh.read(64 * 1024 + 1)
    if len(data) > 64 * 1024:
        raise ValueError(f"{path} is larger than 64 KiB: not a key file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    return next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")


def generate_api_key() -> str:
    """Create a new random API key (``secrets.token_urlsafe(32)``, 43 characters), store it with mode
    0o600 (replacing any old one) and return it. The UI shows it once.

    Raises:
        OSError: the data folder is not writable.
    """
    key = "dw-" + secrets.token_urlsafe(32)
    storage.atomic_write_text(api_key_path(), key + "\n", mode=0o600)
    return key


def delete_api_key() -> bool:
    """Remove the stored key; True when one existed."""
    try:
        api_key_path().unlink()
        return True
    except FileNotFoundError:
        return False


def server_api_key(settings: Settings) -> str | None:
    """The key to pass to llama-server's ``--api-key``: the stored key when exposed on the LAN,
    None when listening on 127.0.0.1 only.

    Raises:
        SettingsError: ``expose_on_lan`` is set but no key exists (key ``expose_on_lan``).
    """
    key = read_api_key()
    if settings.expose_on_lan and key is None:
        raise SettingsError("expose_on_lan", "exposing the server on the LAN requires an API key")
    return key if settings.expose_on_lan else None
