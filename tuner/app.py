"""Composition root: ``draftwise`` with no arguments starts the tray app.

The Qt application (tray, window, single-instance hand-over, no-tray fallback, the
``DRAFTWISE_SMOKE_QUIT_MS`` smoke mode) lives in :mod:`tuner.ui.app`, because only
``tuner/ui/`` may import PySide6. This module keeps ``tuner.app.main`` as the one
documented entry point and re-exports ``build`` for tests and benchmarks.

Before Qt is loaded, :func:`main` checks what would make Qt abort the process (SIGABRT, exit 134,
a core dump): no display (:func:`missing_display`), or a system library that Qt's X11 platform
plugin links missing (:func:`missing_xcb_libraries`). Both end in one line and exit 2.

This module imports only the standard library at import time:
``packaging/linux/install-system-libs.sh`` runs :func:`xcb_install_plan` from a checkout before
anything is installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Qt platform plugins that draw without a display server (``QT_QPA_PLATFORM`` values).
HEADLESS_QPA = frozenset({"offscreen", "minimal", "minimalegl", "eglfs", "linuxfb", "vnc", "vkkhrdisplay"})

NO_DISPLAY_HINT = (
    "draftwise: no display found ({why}); the tray app needs one. Without a desktop use "
    "`draftwise tune --models DIR` and `draftwise serve --models DIR` (see `draftwise --help`)."
)

#: System libraries Qt's X11 platform plugin loads, as ``(soname, Debian/Ubuntu package, Fedora package)``:
#: the ``NEEDED`` entries of PySide6's ``plugins/platforms/libqxcb.so`` and ``lib/libQt6XcbQpa.so.6``
#: (Qt 6.5+: ``libxcb-cursor.so.0`` is new), plus those of ``libQt6Gui`` / ``libQt6DBus`` that both load
#: (EGL, fontconfig, freetype, D-Bus), less the C/C++ runtime every system has. One missing and Qt aborts
#: (Could not load the Qt platform plugin "xcb"). The one list: the install script reads it too.
XCB_LIBRARIES: tuple[tuple[str, str, str], ...] = (
    ("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    ("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    ("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    ("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    ("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    ("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    ("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    ("libxcb-randr.so.0", "libxcb-randr0", "libxcb"),
    ("libxcb-render.so.0", "libxcb-render0", "libxcb"),
    ("libxcb-shape.so.0", "libxcb-shape0", "libxcb"),
    ("libxcb-shm.so.0", "libxcb-shm0", "libxcb"),
    ("libxcb-sync.so.1", "libxcb-sync1", "libxcb"),
    ("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb"),
    ("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb"),
    ("libxcb.so.1", "libxcb1", "libxcb"),
    ("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    ("libX11.so.6", "libx11-6", "libX11"),
    ("libGL.so.1", "libgl1", "libglvnd-glx"),
    ("libEGL.so.1", "libegl1", "libglvnd-egl"),
    ("libfontconfig.so.1", "libfontconfig1", "fontconfig"),
    ("libfreetype.so.6", "libfreetype6", "freetype"),
    ("libglib-2.0.so.0", "libglib2.0-0", "glib2"),
    ("libgthread-2.0.so.0", "libglib2.0-0", "glib2"),
    ("libdbus-1.so.3", "libdbus-1-3", "dbus-libs"),
)

XCB_HINT = (
    "draftwise: the tray app cannot start: Qt's X11 plugin needs {libs}, not found on this system; {fix}. "
    "Meanwhile `draftwise tune --models DIR` and `draftwise serve --models DIR` work without it."
)

#: ``load(soname) -> bool``: can the dynamic loader open this library?
LibraryLoader = Callable[[str], bool]


def missing_display(environ: Mapping[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why the tray app cannot open a window here, or None when it can (or may: non-Linux).

    On Linux Qt needs ``DISPLAY`` (X11) or ``WAYLAND_DISPLAY``, unless ``QT_QPA_PLATFORM`` names a
    plugin that needs no display server (:data:`HEADLESS_QPA`, e.g. ``offscreen``); without one,
    Qt aborts the process (SIGABRT, exit 134) with a message about the xcb plugin. Windows and
    macOS always have a display session for a desktop app, so they return None.

    Args:
        environ: the environment (default ``os.environ``); platform: ``sys.platform`` by default.

    Returns:
        e.g. ``"DISPLAY and WAYLAND_DISPLAY are not set"``, or None.
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    if not plat.startswith("linux"):
        return None
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    plugins = _qpa_plugins(env)
    if any(p in HEADLESS_QPA for p in plugins):
        return None
    has_x = bool(env.get("DISPLAY"))
    has_wl = bool(env.get("WAYLAND_DISPLAY"))
    if plugins:
        if any(p == "xcb" for p in plugins) and has_x:
            return None
        if any(p.startswith("wayland") for p in plugins) and has_wl:
            return None
        if not any(p == "xcb" or p.startswith("wayland") for p in plugins):
            return None  # another plugin we do not know: let Qt decide
        return f"QT_QPA_PLATFORM={qpa} but " + ("DISPLAY is not set" if "xcb" in plugins else "WAYLAND_DISPLAY is not set")
    if has_x or has_wl:
        return None
    return "DISPLAY and WAYLAND_DISPLAY are not set"


def _qpa_plugins(env: Mapping[str, str]) -> list[str]:
    """``QT_QPA_PLATFORM`` as plugin names, lower case: ``"wayland;xcb"`` is a fallback list,
    ``"offscreen:fontengine=..."`` carries options after ``:``."""
    qpa = env.get("QT_QPA_PLATFORM", "").strip()
    return [p.split(":", 1)[0].strip().lower() for p in qpa.split(";") if p.strip()]


def uses_xcb(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """True when Qt will load its X11 (xcb) platform plugin here.

    Linux only. With ``QT_QPA_PLATFORM`` set, Qt tries its plugins in order: xcb is used when it comes
    before any plugin that starts (a headless one such as ``offscreen`` always does, ``wayland*`` when
    ``WAYLAND_DISPLAY`` is set). Without it Qt 6 tries wayland first when ``WAYLAND_DISPLAY`` is set or
    ``XDG_SESSION_TYPE`` is ``wayland``, then xcb when ``DISPLAY`` is set (qtbase
    src/gui/kernel/qguiapplication.cpp ``QGuiApplicationPrivate::createPlatformIntegration``).

    Args:
        environ: the environment (default ``os.environ``); platform: ``sys.platform`` by default.
    """
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    if not plat.startswith("linux"):
        return False
    has_x, has_wl = bool(env.get("DISPLAY")), bool(env.get("WAYLAND_DISPLAY"))
    plugins = _qpa_plugins(env)
    if not plugins:
        wayland_session = has_wl or env.get("XDG_SESSION_TYPE", "").strip().lower() == "wayland"
        plugins = (["wayland"] if wayland_session else []) + ["xcb"]
    for plugin in plugins:
        if plugin == "xcb":
            return has_x
        if plugin.startswith("wayland") and not has_wl:
            continue  # Qt moves on to the next plugin
        return False  # wayland with a display, a headless plugin, or one we do not know
    return False


def _qt_library_dirs() -> list[Path]:
    """Where Qt's plugin finds libraries besides the loader's own search: its ``RUNPATH``
    (``$ORIGIN/../../lib``: PySide6's ``Qt/lib``) and, in a PyInstaller bundle, the bundle's folder.
    Locates PySide6 without importing it."""
    import importlib.util

    dirs = [Path(sys._MEIPASS)] if hasattr(sys, "_MEIPASS") else []
    spec = importlib.util.find_spec("PySide6")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) / "Qt" / "lib" for p in spec.submodule_search_locations]
    return dirs


def can_load(soname: str) -> bool:
    """True when ``soname`` (e.g. ``"libxcb-cursor.so.0"``) opens here as it will for Qt's X11 plugin: a
    real ``dlopen`` through ``ctypes`` (``LD_LIBRARY_PATH``, the loader's cache and default folders count),
    else from the folders of :func:`_qt_library_dirs`."""
    import ctypes

    for name in [soname] + [str(d / soname) for d in _qt_library_dirs() if (d / soname).is_file()]:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def missing_xcb_libraries(load: LibraryLoader | None = None) -> tuple[str, ...]:
    """The sonames of :data:`XCB_LIBRARIES` that ``load`` (default :func:`can_load`) cannot open, in
    the table's order; empty when Qt's X11 plugin has all it needs."""
    loader = can_load if load is None else load
    return tuple(soname for soname, _deb, _fed in XCB_LIBRARIES if not loader(soname))


def read_os_release(path: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """``/etc/os-release`` (else ``/usr/lib/os-release``) as a dict (``ID``, ``ID_LIKE``, ...; quotes
    removed); empty when there is none or it cannot be read."""
    paths = [Path(path)] if path is not None else [Path("/etc/os-release"), Path("/usr/lib/os-release")]
    for p in paths:
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key and not key.startswith("#"):
                out[key] = value.strip().strip("\"'")
        return out
    return {}


def package_manager(os_release: Mapping[str, str]) -> str | None:
    """``"apt"`` (Debian, Ubuntu and their derivatives), ``"dnf"`` (Fedora, RHEL-likes) or None, from
    the os-release ``ID`` and ``ID_LIKE`` words."""
    words = {w.lower() for w in (os_release.get("ID", "") + " " + os_release.get("ID_LIKE", "")).split()}
    if words & {"debian", "ubuntu"}:
        return "apt"
    if words & {"fedora", "rhel"}:
        return "dnf"
    return None


def xcb_packages(missing: Sequence[str], manager: str) -> list[str]:
    """The ``manager`` (``"apt"`` / ``"dnf"``) packages that provide the sonames ``missing``, each once."""
    column = 1 if manager == "apt" else 2
    wanted = [row[column] for row in XCB_LIBRARIES if row[0] in missing]
    return list(dict.fromkeys(wanted))


def xcb_install_plan(load: LibraryLoader | None = None,
                     os_release: str | os.PathLike[str] | None = None) -> tuple[str, list[str]]:
    """What ``packaging/linux/install-system-libs.sh`` installs: ``("", [])`` when nothing is missing,
    ``("apt" | "dnf", packages)`` on a distribution we know, else ``("?", missing sonames)``."""
    missing = missing_xcb_libraries(load)
    if not missing:
        return "", []
    manager = package_manager(read_os_release(os_release))
    return (manager, xcb_packages(missing, manager)) if manager else ("?", list(missing))


def xcb_problem(environ: Mapping[str, str] | None = None, platform: str | None = None,
                load: LibraryLoader | None = None, os_release: str | os.PathLike[str] | None = None) -> str | None:
    """The one line to print when Qt would use its X11 plugin (:func:`uses_xcb`) and a library it links
    is missing (:func:`missing_xcb_libraries`), naming them and, on a distribution we know, the command
    that installs them; None when nothing is in the way. Imports no Qt."""
    if not uses_xcb(environ, platform):
        return None
    missing = missing_xcb_libraries(load)
    if not missing:
        return None
    manager = package_manager(read_os_release(os_release))
    sudo = "sudo " if hasattr(os, "geteuid") and os.geteuid() != 0 else ""
    if manager == "apt":
        fix = f"install it with `{sudo}apt-get install {' '.join(xcb_packages(missing, 'apt'))}`"
    elif manager == "dnf":
        fix = f"install it with `{sudo}dnf install {' '.join(xcb_packages(missing, 'dnf'))}`"
    else:
        fix = ("install the packages that provide it (Debian/Ubuntu: " + " ".join(xcb_packages(missing, "apt"))
               + "; Fedora: " + " ".join(xcb_packages(missing, "dnf")) + ")")
    return XCB_HINT.format(libs=", ".join(missing), fix=fix)


def main(argv: list[str] | None = None, *, load_library: LibraryLoader | None = None,
         os_release: str | os.PathLike[str] | None = None) -> int:
    """Start the tray app and run its event loop; returns the exit status (see :func:`tuner.ui.app.main`).

    Returns 2 without importing Qt, after printing one line, when there is no usable display
    (:func:`missing_display`: names what is missing and the headless commands) or when Qt would use
    its X11 plugin and a library it needs is missing (:func:`xcb_problem`: names the libraries and the
    install command). ``load_library`` and ``os_release`` replace the library lookup and
    ``/etc/os-release`` (tests).
    """
    why = missing_display()
    if why is not None:
        print(NO_DISPLAY_HINT.format(why=why), file=sys.stderr)
        return 2
    problem = xcb_problem(load=load_library, os_release=os_release)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from tuner.logs import setup_logging
    from tuner.ui.app import main as ui_main

    setup_logging()
    return ui_main(argv)


def build(single_instance: bool = True, tray_available: bool | None = None):
    """Build the app without running the event loop (see :func:`tuner.ui.app.build`)."""
    from tuner.ui.app import build as ui_build

    return ui_build(single_instance=single_instance, tray_available=tray_available)
