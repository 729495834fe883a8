"""``draftwise install-desktop-entry [--uninstall]`` and ``draftwise autostart on|off|status``.

Thin CLI over ``tuner.desktop``. A readable report on stdout by default; with ``--json`` one JSON
object on stdout instead. Notes and errors go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from tuner import desktop
from tuner.safetext import safe_text


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
            removed = desktop.uninstall_desktop_entry()
            for note in removed.notes:
                print(note, file=sys.stderr)
            out = {
                "action": "uninstall",
                "installed_before": removed.manifest_found,
                "removed": [str(p) for p in removed.removed_paths],
                "kept": [str(p) for p in removed.kept_paths],
                "missing": [str(p) for p in removed.missing_paths],
            }
        else:
            exec_argv = tuple(args.exec_command) if args.exec_command else None
            problem = _exec_problem(exec_argv)
            if problem:
                print(f"draftwise install-desktop-entry: {problem}", file=sys.stderr)
                return 2
            installed = desktop.install_desktop_entry(exec_argv=exec_argv, force=args.force)
            out = {
                "action": "install",
                "entry": str(installed.entry_path),
                "exec": list(installed.exec_argv),
                "written": [str(p) for p in installed.written_paths],
                "manifest": str(installed.manifest_path),
            }
    except desktop.DesktopInstallError as exc:
        print(f"draftwise: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2) if args.json else _install_report(out))
    return 0


def _exec_problem(exec_argv: tuple[str, ...] | None) -> str | None:
    """One line naming ``--exec`` when one of its words cannot be written in a desktop entry's ``Exec`` key
    (empty, or with a line break: :func:`tuner.desktop.quote_exec_arg`), else None."""
    for word in exec_argv or ():
        try:
            desktop.quote_exec_arg(word)
        except ValueError as exc:
            return f"--exec: {safe_text(exc)} (an empty word or a line break has no form there)"
    return None


def _install_report(out: dict) -> str:
    """The readable form of the ``install-desktop-entry`` JSON object."""
    if out["action"] == "install":
        return "\n".join([
            f"Installed the menu entry {out['entry']}",
            f"  starts:  {' '.join(out['exec'])}",
            f"  wrote {len(out['written'])} files (recorded in {out['manifest']})",
            "It appears in the application menu within a few seconds; undo with: "
            "draftwise install-desktop-entry --uninstall",
        ])
    if not out["installed_before"]:
        lines = ["Nothing to remove: no menu entry installed by draftwise was found."]
    else:
        lines = [f"Removed the menu entry: {len(out['removed'])} files."]
    if out["kept"]:
        lines.append(f"  kept (changed since install or not ours): {', '.join(out['kept'])}")
    if out["missing"]:
        lines.append(f"  already gone: {len(out['missing'])} files")
    return "\n".join(lines)


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
    entry = desktop.autostart_path()
    if args.json:
        print(json.dumps({"autostart": enabled, "entry": str(entry)}))
    elif enabled:
        print(f"Autostart is on: Draftwise starts at login ({entry}).")
    else:
        print("Autostart is off: Draftwise does not start at login. Turn it on with: draftwise autostart on")
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
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.set_defaults(func=_install)

    a = subparsers.add_parser(
        "autostart",
        help="start Draftwise at login: on, off or status (XDG autostart entry)",
    )
    a.add_argument("state", choices=("on", "off", "status"), nargs="?", default="status")
    a.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    a.set_defaults(func=_autostart)
