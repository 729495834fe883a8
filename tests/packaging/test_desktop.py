"""Desktop integration: install / uninstall of the menu entry and icons, autostart on / off."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.conftest import tree
from tuner import desktop
from tuner.cli import main as cli_main

VALIDATOR = shutil.which("desktop-file-validate")


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def validate(path: Path) -> None:
    if VALIDATOR is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have desktop-file-validate (Debian package desktop-file-utils)")
        return
    res = subprocess.run([VALIDATOR, str(path)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr


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


def test_uninstall_removes_what_it_wrote_and_nothing_else(xdg_homes):
    data_home, _ = xdg_homes
    # The user already has other apps' entries and icons, and Draftwise data (profiles) in the same tree.
    unrelated = {
        data_home / "applications" / "org.example.Other.desktop": b"[Desktop Entry]\nName=Other\n",
        data_home / "icons" / "hicolor" / "48x48" / "apps" / "org.example.Other.png": b"not-really-a-png",
        data_home / "draftwise" / "profiles" / "x.json": b"{}",
    }
    for p, data in unrelated.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    before = tree(data_home)

    res = desktop.install_desktop_entry()
    after_install = tree(data_home)
    assert len(res.written_paths) == len(desktop.ICON_SIZES_PX) + 2
    assert all(p.is_file() for p in res.written_paths)
    assert after_install > before

    un = desktop.uninstall_desktop_entry()
    assert un.manifest_found and not un.kept_paths and not un.missing_paths
    assert set(res.written_paths) <= set(un.removed_paths)
    assert tree(data_home) == before
    for p, data in unrelated.items():
        assert p.read_bytes() == data

    again = desktop.uninstall_desktop_entry()
    assert again.manifest_found is False and again.removed_paths == ()


def test_reinstall_then_single_uninstall_leaves_nothing(xdg_homes):
    data_home, _ = xdg_homes
    first = desktop.install_desktop_entry(exec_argv=("/opt/old/draftwise",))
    second = desktop.install_desktop_entry(exec_argv=("/opt/new place/draftwise",))
    assert first.entry_path == second.entry_path
    assert desktop.read_desktop_entry(second.entry_path)["Exec"] == '"/opt/new place/draftwise"'
    desktop.uninstall_desktop_entry()
    assert tree(data_home) == set()


def test_user_edited_entry_is_kept_on_uninstall(xdg_homes):
    res = desktop.install_desktop_entry()
    res.entry_path.write_text(res.entry_path.read_text() + "NoDisplay=true\n")
    un = desktop.uninstall_desktop_entry()
    assert un.kept_paths == (res.entry_path,)
    assert res.entry_path.is_file()
    assert any("changed since" in n for n in un.notes)
    assert not any(p.exists() for p in res.written_paths if p != res.entry_path)


def test_install_refuses_a_file_it_did_not_write_unless_forced(xdg_homes, capsys):
    data_home, _ = xdg_homes
    foreign = data_home / "applications" / f"{desktop.APP_ID}.desktop"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("[Desktop Entry]\nName=Hand made\n")
    with pytest.raises(desktop.DesktopInstallError) as err:
        desktop.install_desktop_entry()
    assert err.value.path == foreign
    assert foreign.read_text() == "[Desktop Entry]\nName=Hand made\n"
    assert cli_main(["install-desktop-entry"]) == 1
    assert str(foreign) in capsys.readouterr().err
    assert cli_main(["install-desktop-entry", "--force"]) == 0
    assert desktop.read_desktop_entry(foreign)["Name"] == "Draftwise"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (("/usr/bin/draftwise",), "/usr/bin/draftwise"),
        (("/home/a b/venv/bin/draftwise",), '"/home/a b/venv/bin/draftwise"'),
        (("/x/python", "-m", "tuner"), "/x/python -m tuner"),
        (("/we$ird/100%/dr\"aft",), '"/we\\\\$ird/100%%/dr\\\\"aft"'),
    ],
)
def test_exec_key_quoting_follows_the_spec(argv, expected, tmp_path):
    text = desktop.desktop_entry_text(argv)
    path = tmp_path / f"{desktop.APP_ID}.desktop"
    path.write_text(text)
    assert desktop.read_desktop_entry(path)["Exec"] == expected
    validate(path)


def test_exec_resolution_prefers_the_frozen_bundle(monkeypatch, tmp_path):
    exe = tmp_path / "bundle dir" / "draftwise"
    exe.parent.mkdir()
    exe.write_text("")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(exe))
    assert desktop.resolve_exec_argv() == (str(exe.resolve()),)


def test_autostart_on_off(xdg_homes, capsys):
    _, config_home = xdg_homes
    path = config_home / "autostart" / f"{desktop.APP_ID}.desktop"
    assert desktop.autostart_enabled() is False

    assert desktop.set_autostart(True) == path
    assert desktop.autostart_enabled() is True
    entry = desktop.read_desktop_entry(path)
    assert entry["Exec"] == " ".join(desktop.quote_exec_arg(a) for a in desktop.resolve_exec_argv())
    assert entry["X-GNOME-Autostart-enabled"] == "true"
    validate(path)

    # what GNOME's settings write to switch an entry off, and the spec's Hidden key
    path.write_text(path.read_text().replace("X-GNOME-Autostart-enabled=true", "X-GNOME-Autostart-enabled=false"))
    assert desktop.autostart_enabled() is False
    desktop.set_autostart(True)
    path.write_text(path.read_text() + "Hidden=true\n")
    assert desktop.autostart_enabled() is False

    desktop.set_autostart(False)
    assert not path.exists() and desktop.autostart_enabled() is False
    desktop.set_autostart(False)  # already off: not an error

    assert cli_main(["autostart", "on", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["autostart"] is True
    assert cli_main(["autostart", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["autostart"] is True
    assert cli_main(["autostart"]) == 0
    assert capsys.readouterr().out.startswith("Autostart is on: Draftwise starts at login")
    assert cli_main(["autostart", "off"]) == 0
    assert capsys.readouterr().out.startswith("Autostart is off")
    assert cli_main(["autostart", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["autostart"] is False
    assert tree(config_home) == {"autostart/"}


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
