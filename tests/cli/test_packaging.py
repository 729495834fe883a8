"""``draftwise install-desktop-entry`` and ``autostart`` as a user runs them: reports, ``--json``, exit codes,
the installed console script (the desktop module itself: tests/packaging/test_desktop.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.conftest import png_size, tree, validate
from tuner import desktop
from tuner.cli import main as cli_main


def test_cli_install_writes_entry_and_icons_then_uninstall_removes_them(xdg_homes, capsys):
    data_home, _ = xdg_homes
    assert cli_main(["install-desktop-entry", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    entry_file = data_home / "applications" / "io.github.draftwise.Draftwise.desktop"
    assert Path(out["entry"]) == entry_file

    entry = desktop.read_desktop_entry(entry_file)
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Draftwise"
    assert entry["Icon"] == desktop.APP_ID
    # Exec is the absolute path of an executable that really starts this draftwise
    exec_argv = desktop.resolve_exec_argv()
    assert out["exec"] == list(exec_argv)
    assert os.path.isabs(exec_argv[0]) and os.access(exec_argv[0], os.X_OK)
    assert entry["Exec"].replace("\\\\", "\\").strip('"').startswith(exec_argv[0])
    validate(entry_file)

    for size in desktop.ICON_SIZES_PX:
        icon = data_home / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{desktop.APP_ID}.png"
        assert png_size(icon) == (size, size)
    svg = data_home / "icons" / "hicolor" / "scalable" / "apps" / f"{desktop.APP_ID}.svg"
    assert svg.read_bytes() == desktop.app_icon_svg().read_bytes()
    assert set(map(Path, out["written"])) == set(desktop.installed_files())

    assert cli_main(["install-desktop-entry", "--uninstall", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["installed_before"] is True and res["kept"] == []
    assert tree(data_home) == set(), "uninstall left something behind"


def test_console_script_installs_for_a_new_user(tmp_path):
    """The installed ``draftwise`` command, run as a user would, with a fresh HOME."""
    exe = shutil.which("draftwise")
    if exe is None:
        pytest.skip("draftwise console script not on PATH (pip install -e . first)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "DRAFTWISE_"))}
    env["HOME"] = str(tmp_path)
    res = subprocess.run([exe, "install-desktop-entry", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    written = [Path(p) for p in json.loads(res.stdout)["written"]]
    entry_file = tmp_path / ".local" / "share" / "applications" / f"{desktop.APP_ID}.desktop"
    assert entry_file in written and all(p.is_file() for p in written)
    exec_value = desktop.read_desktop_entry(entry_file)["Exec"]
    started = exec_value.split(" ")[0].strip('"')
    assert os.path.isabs(started) and os.access(started, os.X_OK)
    validate(entry_file)
    res = subprocess.run([exe, "install-desktop-entry", "--uninstall"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert not any(p.exists() for p in written)
    # folders the install created go too (other code may keep its own data under ~/.local/share)
    assert not (tmp_path / ".local" / "share" / "applications").exists()
    assert not (tmp_path / ".local" / "share" / "icons").exists()


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_commands_refuse_politely_where_there_is_no_xdg_desktop(platform, xdg_homes, monkeypatch, capsys):
    data_home, config_home = xdg_homes
    monkeypatch.setattr(sys, "platform", platform)
    assert cli_main(["install-desktop-entry"]) == 2
    assert cli_main(["autostart", "on"]) == 2
    assert "docs/packaging.md" in capsys.readouterr().err
    assert tree(data_home) == set() and tree(config_home) == set()


def test_install_prints_a_readable_report_by_default(xdg_homes, capsys):
    """README: every command prints a readable report by default; --json puts one JSON object on stdout."""
    data_home, _ = xdg_homes
    assert cli_main(["install-desktop-entry"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Installed the menu entry ") and "{" not in out
    assert str(data_home / "applications" / f"{desktop.APP_ID}.desktop") in out and "--uninstall" in out
    assert cli_main(["install-desktop-entry", "--uninstall"]) == 0
    assert capsys.readouterr().out.startswith("Removed the menu entry:")
    assert cli_main(["install-desktop-entry", "--uninstall"]) == 0
    assert capsys.readouterr().out.startswith("Nothing to remove")
