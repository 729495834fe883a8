"""Desktop integration: install / uninstall of the menu entry and icons, autostart on / off (the commands'
output and exit codes: tests/cli/test_packaging.py)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.packaging.conftest import tree, validate
from tuner import desktop
from tuner.cli import main as cli_main


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
