"""Linux desktop integration: the start-menu entry, its icons, and the "Start at login" entry.

Pure core (no Qt). Everything is written under the user's XDG folders, never system-wide:

- ``install_desktop_entry()`` writes ``<XDG_DATA_HOME>/applications/<APP_ID>.desktop`` and the
  app icon into the hicolor icon theme (``<XDG_DATA_HOME>/icons/hicolor/<N>x<N>/apps/<APP_ID>.png``
  and ``.../scalable/apps/<APP_ID>.svg``), then records exactly what it wrote (files with their
  SHA-256, and the folders it had to create) in a manifest,
  ``<XDG_DATA_HOME>/draftwise/desktop-install.json``.
- ``uninstall_desktop_entry()`` reads that manifest and removes those files, the folders it created
  (only when they are empty again) and the manifest itself; nothing else. A file the user changed
  after we wrote it is kept and reported.
- ``set_autostart(enabled)`` writes or removes ``<XDG_CONFIG_HOME>/autostart/<APP_ID>.desktop``
  (freedesktop "Desktop Application Autostart Specification"); ``autostart_enabled()`` reads it back.

The entry text follows the freedesktop Desktop Entry Specification 1.4 (keys, ``Exec`` quoting);
``packaging/linux/<APP_ID>.desktop`` is the same text with ``Exec=draftwise`` (for distribution
packages) and a test keeps the two in step.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner import paths
from tuner.errors import DraftwiseError
from tuner.resources import resource_path
from tuner.storage import atomic_write_bytes, atomic_write_json

#: Reverse-DNS application id: names the .desktop file, the icon and the AppStream component.
APP_ID = "io.github.draftwise.Draftwise"
#: Icon sizes (pixels) rendered under resources/icons/png/ and installed into hicolor.
ICON_SIZES_PX = (16, 22, 24, 32, 48, 64, 128, 256, 512)
#: Manifest format version (bump when the JSON layout changes).
MANIFEST_VERSION = 1

_NAME = "Draftwise"
_GENERIC_NAME = "Speculative Decoding Tuner"
_COMMENT = "Auto-tune speculative decoding for llama.cpp's llama-server and serve it from the tray"
_CATEGORIES = "Development;"
_KEYWORDS = "llama.cpp;llama-server;LLM;speculative decoding;draft model;GGUF;tray;"


class DesktopInstallError(DraftwiseError):
    """Installing or removing a desktop file failed; ``path`` names the file or folder at fault."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class InstallResult:
    """What ``install_desktop_entry`` did.

    ``written_paths``: every file written (entry, icons), in write order; ``created_dirs``: folders
    that did not exist before; ``manifest_path``: the JSON record used by uninstall;
    ``exec_argv``: the command the entry starts; ``entry_path``: the installed ``.desktop`` file.
    """

    entry_path: Path
    written_paths: tuple[Path, ...]
    created_dirs: tuple[Path, ...]
    manifest_path: Path
    exec_argv: tuple[str, ...]


@dataclass(frozen=True)
class UninstallResult:
    """What ``uninstall_desktop_entry`` did.

    ``removed_paths``: files and folders deleted (the manifest included); ``kept_paths``: files kept
    because their content changed since install (with the reason in ``notes``); ``missing_paths``:
    recorded files that were already gone; ``manifest_found``: False when nothing was installed.
    """

    removed_paths: tuple[Path, ...]
    kept_paths: tuple[Path, ...]
    missing_paths: tuple[Path, ...]
    manifest_found: bool
    notes: tuple[str, ...]


# --------------------------------------------------------------------------- locations


def manifest_path(data_home: Path | None = None) -> Path:
    """The install record, ``<XDG_DATA_HOME>/draftwise/desktop-install.json``."""
    return (data_home or paths.xdg_data_home()) / "draftwise" / "desktop-install.json"


def entry_path(data_home: Path | None = None) -> Path:
    """Where the start-menu entry goes: ``<XDG_DATA_HOME>/applications/<APP_ID>.desktop``."""
    return (data_home or paths.xdg_data_home()) / "applications" / f"{APP_ID}.desktop"


def autostart_path(config_home: Path | None = None) -> Path:
    """Where the login entry goes: ``<XDG_CONFIG_HOME>/autostart/<APP_ID>.desktop``."""
    return (config_home or paths.xdg_config_home()) / "autostart" / f"{APP_ID}.desktop"


def app_icon_svg() -> Path:
    """The scalable app icon shipped in ``resources/icons/draftwise.svg``."""
    return resource_path("icons", "draftwise.svg")


def app_icon_png(size_px: int) -> Path:
    """The PNG render of the app icon at ``size_px`` (one of ``ICON_SIZES_PX``)."""
    return resource_path("icons", "png", f"draftwise-{size_px}.png")


def tray_icon_svg(state: str) -> Path:
    """Tray icon for ``state`` in ``idle``, ``tuning``, ``serving``, ``error``.

    Raises:
        ValueError: unknown state.
    """
    if state not in ("idle", "tuning", "serving", "error"):
        raise ValueError(f"unknown tray icon state {state!r} (idle, tuning, serving, error)")
    return resource_path("icons", f"tray-{state}.svg")


# --------------------------------------------------------------------------- entry text


def resolve_exec_argv() -> tuple[str, ...]:
    """The command line a launcher should run to start Draftwise, as absolute paths.

    Desktop launchers (GNOME Shell, KDE's menu, the autostart runner) start programs with the
    session's PATH, which usually does not contain a virtualenv's ``bin/`` or ``~/.local/bin``, so
    a bare ``Exec=draftwise`` often fails there although it works in a terminal. We therefore
    write the absolute path of the executable that is running now, in this order:

    1. a PyInstaller bundle (``sys.frozen``): the bundle's own executable (``sys.executable``);
    2. the ``draftwise`` console script next to this interpreter (same virtualenv / prefix);
    3. ``draftwise`` found on PATH (``shutil.which``);
    4. as a last resort this interpreter with ``-m tuner`` (always starts the same code).
    """
    if getattr(sys, "frozen", False):
        return (str(Path(sys.executable).resolve()),)
    exe_dir = Path(sys.executable).parent
    for name in ("draftwise", "draftwise.exe"):
        candidate = exe_dir / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return (str(candidate.absolute()),)
    found = shutil.which("draftwise")
    if found:
        return (str(Path(found).absolute()),)
    return (str(Path(sys.executable).absolute()), "-m", "tuner")


def quote_exec_arg(arg: str) -> str:
    """Quote one argument for a desktop entry's ``Exec`` key (Desktop Entry Spec, "The Exec key").

    Arguments with a reserved character are put in double quotes, inside which ``"``, `````, ``$``
    and ``\\`` get a backslash; a literal ``%`` becomes ``%%``. The result is then escaped once more
    as a string value (``\\`` → ``\\\\``), as the spec requires for the whole key.

    Raises:
        ValueError: the argument contains a newline or is empty (no way to express it).
    """
    if not arg or "\n" in arg or "\r" in arg:
        raise ValueError(f"cannot put {arg!r} in a desktop entry Exec key")
    reserved = set(" \t\"'\\><~|&;$*?#()`=")
    arg = arg.replace("%", "%%")
    if any(ch in reserved for ch in arg):
        inner = "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg)
        arg = f'"{inner}"'
    return arg.replace("\\", "\\\\")


def desktop_entry_text(exec_argv: tuple[str, ...] | list[str] = ("draftwise",), *, autostart: bool = False) -> str:
    """The ``.desktop`` file text for Draftwise.

    ``exec_argv``: the command to run (see ``resolve_exec_argv``); with a single absolute path a
    ``TryExec`` key is added so the menu hides the entry if the program disappears.
    ``autostart``: add the keys an autostart entry uses (``X-GNOME-Autostart-enabled``).
    """
    exec_line = " ".join(quote_exec_arg(a) for a in exec_argv)
    lines = [
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",
        f"Name={_NAME}",
        f"GenericName={_GENERIC_NAME}",
        f"Comment={_COMMENT}",
        f"Icon={APP_ID}",
        f"Exec={exec_line}",
    ]
    if len(exec_argv) == 1 and os.path.isabs(exec_argv[0]):
        lines.append(f"TryExec={quote_exec_arg(exec_argv[0])}")
    lines += [
        "Terminal=false",
        f"Categories={_CATEGORIES}",
        f"Keywords={_KEYWORDS}",
        "StartupNotify=false",
        # X11: lets GNOME/KDE match the window to this entry (Qt sets WM_CLASS to
        # ("draftwise", applicationName "Draftwise")); on Wayland the app id is
        # QGuiApplication.desktopFileName, which tuner/app.py sets to APP_ID.
        "StartupWMClass=Draftwise",
    ]
    if autostart:
        lines += ["X-GNOME-Autostart-enabled=true"]
    return "\n".join(lines) + "\n"


def read_desktop_entry(path: Path) -> dict[str, str]:
    """Parse the ``[Desktop Entry]`` group of a ``.desktop`` file into ``{key: value}``.

    Values are returned raw (no unescaping). Raises ``DesktopInstallError`` when the file is missing
    or has no ``[Desktop Entry]`` group.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DesktopInstallError(path, f"cannot read desktop entry: {exc.strerror or exc}") from exc
    group: str | None = None
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
            continue
        if group == "Desktop Entry" and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    if group is None and not out:
        raise DesktopInstallError(path, "no [Desktop Entry] group")
    return out


# --------------------------------------------------------------------------- install / uninstall


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_manifest(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DesktopInstallError(path, f"install record unreadable: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise DesktopInstallError(path, "install record has no 'files' list")
    return data


def _planned_files(data_home: Path, exec_argv: tuple[str, ...]) -> list[tuple[Path, bytes]]:
    icons = data_home / "icons" / "hicolor"
    planned: list[tuple[Path, bytes]] = []
    for size in ICON_SIZES_PX:
        src = app_icon_png(size)
        try:
            planned.append((icons / f"{size}x{size}" / "apps" / f"{APP_ID}.png", src.read_bytes()))
        except OSError as exc:
            raise DesktopInstallError(src, f"icon missing from resources: {exc.strerror or exc}") from exc
    svg = app_icon_svg()
    try:
        planned.append((icons / "scalable" / "apps" / f"{APP_ID}.svg", svg.read_bytes()))
    except OSError as exc:
        raise DesktopInstallError(svg, f"icon missing from resources: {exc.strerror or exc}") from exc
    planned.append((entry_path(data_home), desktop_entry_text(exec_argv).encode("utf-8")))
    return planned


def _write_bytes(path: Path, data: bytes) -> None:
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise DesktopInstallError(path, f"cannot write: {exc.strerror or exc}") from exc


def _make_dirs(folder: Path, created: list[Path]) -> None:
    """``mkdir -p folder``, appending every folder actually created (outermost first)."""
    missing: list[Path] = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise DesktopInstallError(d, f"cannot create folder: {exc.strerror or exc}") from exc
        created.append(d)


def install_desktop_entry(
    data_home: Path | None = None,
    exec_argv: tuple[str, ...] | list[str] | None = None,
    *,
    force: bool = False,
) -> InstallResult:
    """Install the start-menu entry and app icons under ``data_home`` (default: XDG data home).

    Re-installing over an earlier install is fine: its files are replaced, and files it recorded
    that are no longer part of the install are removed. A file in the way that we did not write
    (not in the manifest) is only replaced with ``force=True``; it is then recorded as ours.

    Raises:
        DesktopInstallError: a file is in the way (without ``force``), a resource icon is missing,
            or a write failed; ``.path`` names the file.
    """
    data_home = Path(data_home) if data_home is not None else paths.xdg_data_home()
    argv = tuple(exec_argv) if exec_argv is not None else resolve_exec_argv()
    mpath = manifest_path(data_home)
    old = _load_manifest(mpath)
    old_files = {Path(f["path"]) for f in old["files"]} if old else set()
    old_dirs = [Path(d) for d in old.get("created_dirs", [])] if old else []

    planned = _planned_files(data_home, argv)
    if not force:
        for dst, _ in planned:
            if dst.exists() and dst not in old_files:
                raise DesktopInstallError(
                    dst, "exists and was not written by draftwise; remove it or use --force"
                )

    created: list[Path] = [d for d in old_dirs if d.is_dir()]
    records: list[dict] = []
    written: list[Path] = []
    for dst, data in planned:
        _make_dirs(dst.parent, created)
        _write_bytes(dst, data)
        written.append(dst)
        records.append({"path": str(dst), "sha256": hashlib.sha256(data).hexdigest()})

    # Files an earlier install wrote that this one no longer does (e.g. a dropped icon size).
    for stale in sorted(old_files - set(written)):
        if stale.is_file():
            stale.unlink()

    _make_dirs(mpath.parent, created)
    atomic_write_json(
        mpath,
        {
            "version": MANIFEST_VERSION,
            "app_id": APP_ID,
            "exec_argv": list(argv),
            "files": records,
            "created_dirs": [str(d) for d in created],
        },
    )
    return InstallResult(
        entry_path=entry_path(data_home),
        written_paths=tuple(written),
        created_dirs=tuple(created),
        manifest_path=mpath,
        exec_argv=argv,
    )


def installed_files(data_home: Path | None = None) -> tuple[Path, ...]:
    """Files recorded by the last install under ``data_home`` (empty when not installed)."""
    data = _load_manifest(manifest_path(data_home))
    return tuple(Path(f["path"]) for f in data["files"]) if data else ()


def uninstall_desktop_entry(data_home: Path | None = None) -> UninstallResult:
    """Remove every file ``install_desktop_entry`` recorded under ``data_home``, and nothing else.

    Folders the install created are removed only when empty (deepest first); the manifest goes
    last. A recorded file whose content changed since install is kept and reported.

    Raises:
        DesktopInstallError: the manifest is unreadable, or a recorded file cannot be removed.
    """
    data_home = Path(data_home) if data_home is not None else paths.xdg_data_home()
    mpath = manifest_path(data_home)
    data = _load_manifest(mpath)
    if data is None:
        return UninstallResult((), (), (), False, (f"nothing installed: no {mpath}",))
    removed: list[Path] = []
    kept: list[Path] = []
    missing: list[Path] = []
    notes: list[str] = []
    for rec in data["files"]:
        p = Path(rec["path"])
        if not p.is_file():
            missing.append(p)
            continue
        if rec.get("sha256") and _sha256(p) != rec["sha256"]:
            kept.append(p)
            notes.append(f"{p}: changed since draftwise wrote it; kept")
            continue
        try:
            p.unlink()
        except OSError as exc:
            raise DesktopInstallError(p, f"cannot remove: {exc.strerror or exc}") from exc
        removed.append(p)
    try:
        mpath.unlink()
    except OSError as exc:
        raise DesktopInstallError(mpath, f"cannot remove install record: {exc.strerror or exc}") from exc
    removed.append(mpath)
    for d in sorted((Path(x) for x in data.get("created_dirs", [])), key=lambda x: len(x.parts), reverse=True):
        try:
            d.rmdir()  # only succeeds when empty: never removes anything we did not write
        except OSError:
            continue
        removed.append(d)
    return UninstallResult(tuple(removed), tuple(kept), tuple(missing), True, tuple(notes))


# --------------------------------------------------------------------------- autostart


def set_autostart(
    enabled: bool,
    config_home: Path | None = None,
    exec_argv: tuple[str, ...] | list[str] | None = None,
) -> Path:
    """Turn "Start at login" on (write the autostart entry) or off (remove it); returns its path.

    Turning it off when it is already off is not an error.

    Raises:
        DesktopInstallError: the entry cannot be written or removed.
    """
    path = autostart_path(config_home)
    if not enabled:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise DesktopInstallError(path, f"cannot remove autostart entry: {exc.strerror or exc}") from exc
        return path
    argv = tuple(exec_argv) if exec_argv is not None else resolve_exec_argv()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DesktopInstallError(path.parent, f"cannot create folder: {exc.strerror or exc}") from exc
    _write_bytes(path, desktop_entry_text(argv, autostart=True).encode("utf-8"))
    return path


def autostart_enabled(config_home: Path | None = None) -> bool:
    """True when the autostart entry exists and is not disabled.

    Disabled means ``Hidden=true`` (Autostart Spec) or ``X-GNOME-Autostart-enabled=false`` (what
    GNOME's settings write). An unreadable entry counts as disabled.
    """
    path = autostart_path(config_home)
    if not path.is_file():
        return False
    try:
        entry = read_desktop_entry(path)
    except DesktopInstallError:
        return False
    if entry.get("Hidden", "").lower() == "true":
        return False
    if entry.get("X-GNOME-Autostart-enabled", "true").lower() == "false":
        return False
    return True
