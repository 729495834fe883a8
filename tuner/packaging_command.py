"""``draftwise install-desktop-entry [--uninstall]`` and ``draftwise autostart on|off|status``.

Thin CLI over ``tuner.desktop``. Machine-readable output (one JSON object) goes to stdout,
human-readable progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from tuner import desktop


def _unsupported_platform() -> str | None:
    """A message when this OS has no freedesktop menus / XDG autostart (Windows, macOS), else None."""
    if sys.platform == "win32":
        return ("desktop entries are a Linux (freedesktop) feature; on Windows the installer adds the "
                "Start Menu shortcut and the start-at-login option (docs/packaging.md)")
    if sys.platform == "darwin":
        return ("desktop entries are a Linux (freedesktop) feature; on macOS copy Draftwise.app to "
                "Applications and add it under Login Items (docs/packaging.md)")
    return None


def _install(args: argparse.Namespace) -> int:
    msg = _unsupported_platform()
    if msg:
        print(f"draftwise: {msg}", file=sys.stderr)
        return 2
    try:
        if args.uninstall:
            res = desktop.uninstall_desktop_entry()
            for note in res.notes:
                print(note, file=sys.stderr)
            if res.manifest_found:
                print(f"removed {len(res.removed_paths)} paths", file=sys.stderr)
            out = {
                "action": "uninstall",
                "installed_before": res.manifest_found,
                "removed": [str(p) for p in res.removed_paths],
                "kept": [str(p) for p in res.kept_paths],
                "missing": [str(p) for p in res.missing_paths],
            }
        else:
            exec_argv = tuple(args.exec_command) if args.exec_command else None
            res = desktop.install_desktop_entry(exec_argv=exec_argv, force=args.force)
            print(f"installed {res.entry_path} (starts: {' '.join(res.exec_argv)})", file=sys.stderr)
            print("it appears in the application menu within a few seconds; "
                  "undo with: draftwise install-desktop-entry --uninstall", file=sys.stderr)
            out = {
                "action": "install",
                "entry": str(res.entry_path),
                "exec": list(res.exec_argv),
                "written": [str(p) for p in res.written_paths],
                "manifest": str(res.manifest_path),
            }
    except desktop.DesktopInstallError as exc:
        print(f"draftwise: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2))
    return 0


def _autostart(args: argparse.Namespace) -> int:
    msg = _unsupported_platform()
    if msg:
        print(f"draftwise: {msg}", file=sys.stderr)
        return 2
    try:
        if args.state in ("on", "off"):
            desktop.set_autostart(args.state == "on")
    except desktop.DesktopInstallError as exc:
        print(f"draftwise: {exc}", file=sys.stderr)
        return 1
    enabled = desktop.autostart_enabled()
    print(json.dumps({"autostart": enabled, "entry": str(desktop.autostart_path())}))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``install-desktop-entry`` and ``autostart`` to the ``draftwise`` command."""
    p = subparsers.add_parser(
        "install-desktop-entry",
        help="add Draftwise to the application menu (Linux, current user)",
        description="Write the .desktop entry and app icons under $XDG_DATA_HOME "
        "(~/.local/share by default) and record them, so --uninstall removes exactly those files.",
    )
    p.add_argument("--uninstall", action="store_true", help="remove every file a previous install wrote")
    p.add_argument("--force", action="store_true",
                   help="replace files in the way that draftwise did not write")
    p.add_argument("--exec", dest="exec_command", nargs="+", metavar="ARG",
                   help="command the entry runs (default: the absolute path of this draftwise)")
    p.set_defaults(func=_install)

    a = subparsers.add_parser(
        "autostart",
        help="start Draftwise at login: on, off or status (XDG autostart entry)",
    )
    a.add_argument("state", choices=("on", "off", "status"), nargs="?", default="status")
    a.set_defaults(func=_autostart)
