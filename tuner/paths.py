"""Where Draftwise keeps its files (the one adapter over ``platformdirs``).

All folders can be redirected with ``DRAFTWISE_HOME`` (tests and portable installs):
then config, data, cache and logs live in ``$DRAFTWISE_HOME/{config,data,cache,logs}``.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "draftwise"


def _base(kind: str) -> Path:
    home = os.environ.get("DRAFTWISE_HOME")
    if home:
        return Path(home) / kind
    if kind == "config":
        return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
    if kind == "data":
        return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    if kind == "cache":
        return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
    if kind == "logs":
        return Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))
    raise ValueError(f"unknown folder kind {kind!r}")


def config_dir() -> Path:
    """Settings folder, e.g. ``~/.config/draftwise`` (not created)."""
    return _base("config")


def data_dir() -> Path:
    """Data folder for profiles and the API key, e.g. ``~/.local/share/draftwise`` (not created)."""
    return _base("data")


def cache_dir() -> Path:
    """Cache folder for scan and ``--help`` caches, e.g. ``~/.cache/draftwise`` (not created)."""
    return _base("cache")


def log_dir() -> Path:
    """Log folder for llama-server logs, e.g. ``~/.local/state/draftwise/log`` (not created)."""
    return _base("logs")


def profiles_dir() -> Path:
    """Folder of saved tuning profiles (one JSON per target)."""
    return data_dir() / "profiles"


def xdg_data_home() -> Path:
    """The user's XDG data home (``$XDG_DATA_HOME`` or ``~/.local/share``), for desktop entries."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def xdg_config_home() -> Path:
    """The user's XDG config home (``$XDG_CONFIG_HOME`` or ``~/.config``), for autostart entries."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def ensure_private_dir(folder: Path, fix_existing: bool = True) -> Path:
    """Create ``folder`` (and missing parents) owner-only: mode 0700 for every folder created, and
    with ``fix_existing`` for ``folder`` itself when it already exists and we own it. Draftwise's
    state (settings, key, profiles, caches, logs) is readable by its user only.

    Returns ``folder``. Raises OSError when it cannot be created.
    """
    folder = Path(folder)
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    if fix_existing and os.name == "posix":
        try:
            st = folder.stat()
            if st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(folder, st.st_mode & 0o700 | 0o700)
        except OSError:
            pass
    return folder
