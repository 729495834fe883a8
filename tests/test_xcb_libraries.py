"""`draftwise` on a desktop that lacks a library Qt's X11 (xcb) plugin links: one line naming it and the
command that installs it, exit 2, Qt never imported (Qt itself aborts with exit 134 and a core dump). And the
one list of those libraries (tuner/app.py XCB_LIBRARIES) matches what PySide6's plugin really links, README's
commands and packaging/linux/install-system-libs.sh use it."""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import app
from tuner.app import (
    XCB_LIBRARIES,
    can_load,
    missing_xcb_libraries,
    package_manager,
    read_os_release,
    uses_xcb,
    xcb_install_plan,
    xcb_problem,
)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "packaging" / "linux" / "install-system-libs.sh"

OS_RELEASES = {
    "debian": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n',
    "ubuntu": 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n',
    "mint": 'NAME="Linux Mint"\nID=linuxmint\nID_LIKE="ubuntu debian"\n',
    "fedora": 'NAME="Fedora Linux"\nVERSION_ID=41\nID=fedora\n',
    "arch": 'NAME="Arch Linux"\nID=arch\n',
}


def os_release(tmp_path: Path, name: str) -> Path:
    p = tmp_path / f"os-release-{name}"
    p.write_text(OS_RELEASES[name])
    return p


def lacks(*sonames: str):
    """A library lookup that finds everything but ``sonames``."""
    return lambda soname: soname not in sonames


@pytest.mark.parametrize(
    ("env", "xcb"),
    [
        ({"DISPLAY": ":0"}, True),
        ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, False),  # Qt 6 tries wayland first
        ({"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}, True),  # no compositor to talk to: xcb
        ({"WAYLAND_DISPLAY": "wayland-0"}, False),
        ({}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "w", "QT_QPA_PLATFORM": "xcb"}, True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "w", "QT_QPA_PLATFORM": "wayland;xcb"}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"}, True),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb:nograb"}, True),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "vnc"}, False),
    ],
)
def test_when_qt_uses_its_x11_plugin(env, xcb):
    assert uses_xcb(env, "linux") is xcb
    assert uses_xcb(env, "win32") is False and uses_xcb(env, "darwin") is False


@pytest.mark.parametrize(
    ("distro", "command"),
    [
        ("debian", "apt-get install libxcb-cursor0`"),
        ("ubuntu", "apt-get install libxcb-cursor0`"),
        ("mint", "apt-get install libxcb-cursor0`"),
        ("fedora", "dnf install xcb-util-cursor`"),
    ],
)
def test_the_line_names_the_library_and_the_install_command(tmp_path, distro, command):
    line = xcb_problem({"DISPLAY": ":0"}, "linux", load=lacks("libxcb-cursor.so.0"),
                       os_release=os_release(tmp_path, distro))
    assert line is not None and "\n" not in line
    assert line.startswith("draftwise: the tray app cannot start:")
    assert "libxcb-cursor.so.0" in line and command in line
    assert ("`sudo " in line) is (os.geteuid() != 0)


def test_an_unknown_distribution_gets_both_package_names(tmp_path):
    line = xcb_problem({"DISPLAY": ":0"}, "linux", load=lacks("libxcb-cursor.so.0", "libxcb-icccm.so.4"),
                       os_release=os_release(tmp_path, "arch"))
    assert line is not None
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4" in line
    assert "Debian/Ubuntu: libxcb-cursor0 libxcb-icccm4" in line and "Fedora: xcb-util-cursor xcb-util-wm" in line
    none = xcb_problem({"DISPLAY": ":0"}, "linux", load=lacks("libxcb-cursor.so.0"),
                       os_release=tmp_path / "no-such-os-release")
    assert none is not None and "Debian/Ubuntu: libxcb-cursor0" in none


def test_no_check_where_qt_will_not_use_xcb(tmp_path):
    nothing = lacks(*(row[0] for row in XCB_LIBRARIES))
    rel = os_release(tmp_path, "debian")
    assert xcb_problem({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, "linux", load=nothing, os_release=rel) is None
    assert xcb_problem({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", load=nothing, os_release=rel) is None
    assert xcb_problem({"DISPLAY": ":0"}, "darwin", load=nothing, os_release=rel) is None
    assert xcb_problem({"DISPLAY": ":0"}, "linux", load=lambda s: True, os_release=rel) is None


def test_os_release_and_package_manager(tmp_path):
    assert read_os_release(os_release(tmp_path, "mint"))["ID_LIKE"] == "ubuntu debian"
    assert read_os_release(tmp_path / "absent") == {}
    assert package_manager({"ID": "debian"}) == "apt"
    assert package_manager({"ID": "pop", "ID_LIKE": "ubuntu debian"}) == "apt"
    assert package_manager({"ID": "almalinux", "ID_LIKE": "rhel centos fedora"}) == "dnf"
    assert package_manager({"ID": "opensuse-tumbleweed", "ID_LIKE": "opensuse suse"}) is None


def test_install_plan_names_each_package_once(tmp_path):
    rel = os_release(tmp_path, "fedora")
    # four sonames of Fedora's one libxcb package, glib's two sonames of one package each distribution
    missing = ("libxcb-randr.so.0", "libxcb-shm.so.0", "libxcb.so.1", "libglib-2.0.so.0", "libgthread-2.0.so.0")
    assert xcb_install_plan(lacks(*missing), rel) == ("dnf", ["libxcb", "glib2"])
    assert xcb_install_plan(lacks(*missing), os_release(tmp_path, "debian")) == (
        "apt", ["libxcb-randr0", "libxcb-shm0", "libxcb1", "libglib2.0-0"])
    assert xcb_install_plan(lacks("libEGL.so.1"), os_release(tmp_path, "arch")) == ("?", ["libEGL.so.1"])
    assert xcb_install_plan(lambda s: True, rel) == ("", [])


def test_the_real_lookup_opens_libraries_as_the_loader_does():
    if not sys.platform.startswith("linux"):
        pytest.skip("sonames are Linux's")
    assert can_load("libc.so.6")
    assert not can_load("libdraftwise-no-such-library.so.7")
    if importlib.util.find_spec("PySide6") is not None:  # only in PySide6's Qt/lib, the plugin's RUNPATH
        assert can_load("libQt6XcbQpa.so.6")
    assert missing_xcb_libraries(lambda s: s.startswith("libxcb-c")) == tuple(
        row[0] for row in XCB_LIBRARIES if not row[0].startswith("libxcb-c"))


def test_draftwise_without_libxcb_cursor_exits_2_with_one_line(tmp_path):
    """The whole path of `draftwise` (tuner.cli.main with no command) on an X11 desktop whose loader cannot
    open libxcb-cursor.so.0, on Debian: one line naming it and the apt-get command, exit 2, no Qt."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the xcb plugin is Linux-only")
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}
    env.update(DISPLAY=":0", PYTHONPATH=str(REPO), DRAFTWISE_HOME=str(tmp_path / "home"))
    code = ("import sys; import tuner.app as a\n"
            "real = a.read_os_release\n"
            "a.can_load = lambda soname: soname != 'libxcb-cursor.so.0'\n"
            "a.read_os_release = lambda path=None: real(sys.argv[1])\n"
            "from tuner.cli import main\n"
            "rc = main([])\n"
            "assert 'PySide6' not in sys.modules, 'Qt was imported'\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(os_release(tmp_path, "debian"))], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "libxcb-cursor.so.0" in lines[0] and "apt-get install libxcb-cursor0`" in lines[0]
    assert "draftwise tune" in lines[0] and "draftwise serve" in lines[0]
    assert proc.stdout == ""


def test_main_takes_the_lookup_and_os_release(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DISPLAY", ":0")
    for var in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    rc = app.main([], load_library=lacks("libxkbcommon-x11.so.0"), os_release=os_release(tmp_path, "fedora"))
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "libxkbcommon-x11.so.0" in err[0] and "dnf install libxkbcommon-x11`" in err[0]


# --- the list is what PySide6's xcb plugin really links ---------------------------------------------------------

_RUNTIME = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
            "librt.so.1", "libz.so.1"}


def elf_needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of a 64-bit little-endian ELF file (its dynamic section, via the section headers)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit little-endian ELF"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = next(s for s in sections if s[1] == 6)  # SHT_DYNAMIC
    strtab_offset = sections[dynamic[6]][4]
    needed = []
    for off in range(dynamic[4], dynamic[4] + dynamic[5], 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == 0:  # DT_NULL
            break
        if tag == 1:  # DT_NEEDED
            start = strtab_offset + value
            needed.append(data[start:data.index(b"\0", start)].decode())
    return needed


def test_the_list_is_what_pyside6s_xcb_plugin_links():
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations or not sys.platform.startswith("linux"):
        pytest.skip("needs PySide6 on Linux")
    qt = Path(list(spec.submodule_search_locations)[0]) / "Qt"
    files = [qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6XcbQpa.so.6",
             qt / "lib" / "libQt6Gui.so.6", qt / "lib" / "libQt6DBus.so.6"]
    needed = {name for f in files for name in elf_needed(f)}
    system = {n for n in needed if not n.startswith(("libQt6", "libicu"))} - _RUNTIME
    assert system == {row[0] for row in XCB_LIBRARIES}


def test_readme_commands_and_ci_use_the_script_and_the_readme_names_every_package():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for marker in ("run-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```\n(.*?)\n```\n<!-- /{marker} -->", readme, re.S)
        assert block is not None and block.group(1).startswith("bash packaging/linux/install-system-libs.sh && ")
    apt = re.search(r"^sudo apt-get install (.*?)\s+# Debian, Ubuntu$", readme, re.M)
    dnf = re.search(r"^sudo dnf install (.*?)\s+# Fedora$", readme, re.M)
    assert apt is not None and dnf is not None
    assert apt.group(1).split() == list(dict.fromkeys(row[1] for row in XCB_LIBRARIES))
    assert dnf.group(1).split() == list(dict.fromkeys(row[2] for row in XCB_LIBRARIES))
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash packaging/linux/install-system-libs.sh" in ci
    assert "libxcb" not in ci, ".ci/run keeps a second list of Qt's libraries"


# --- the install script -------------------------------------------------------------------------------------------


def fake_bin(tmp_path: Path, plans: list[str]) -> tuple[Path, Path]:
    """A folder with a ``python`` that answers the script's question with ``plans`` in turn (what is missing
    before and after the install), and ``apt-get``/``dnf``/``sudo`` that only record their argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for i, plan in enumerate(plans):
        (tmp_path / f"plan{i}").write_text(plan + "\n")
    (bin_dir / "python").write_text(
        f'#!/bin/sh\nn=$(cat "{tmp_path}/n" 2>/dev/null || echo 0)\necho $((n + 1)) > "{tmp_path}/n"\n'
        f'cat "{tmp_path}/plan$n"\n')
    for tool in ("apt-get", "dnf"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
    (bin_dir / "sudo").write_text(f'#!/bin/sh\necho "sudo" >> "{calls}"\nexec "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir, calls


def run_script(bin_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=str(bin_dir / "python"))
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script acts on Linux only")
def test_script_installs_what_is_missing_with_the_distributions_tool(tmp_path):
    bin_dir, calls = fake_bin(tmp_path, ["apt libxcb-cursor0 libxcb-icccm4", ""])
    proc = run_script(bin_dir)
    assert proc.returncode == 0, proc.stderr
    recorded = [line for line in calls.read_text().splitlines() if line != "sudo"]
    assert recorded == ["apt-get update -qq",
                        "apt-get install -y -qq --no-install-recommends libxcb-cursor0 libxcb-icccm4"]
    assert ("sudo" in calls.read_text()) is (os.geteuid() != 0)

    fedora = tmp_path / "fedora"
    fedora.mkdir()
    bin_dir, calls = fake_bin(fedora, ["dnf xcb-util-cursor", ""])
    assert run_script(bin_dir).returncode == 0
    assert [line for line in calls.read_text().splitlines() if line != "sudo"] == ["dnf install -y xcb-util-cursor"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script acts on Linux only")
def test_script_fails_when_the_install_did_not_help_and_only_names_an_unknown_distributions(tmp_path):
    bin_dir, calls = fake_bin(tmp_path, ["apt libxcb-cursor0", "apt libxcb-cursor0"])
    proc = run_script(bin_dir)
    assert proc.returncode == 1 and "still missing after the install: libxcb-cursor0" in proc.stderr
    other = tmp_path / "other"
    other.mkdir()
    bin_dir, calls = fake_bin(other, ["? libxcb-cursor.so.0"])
    proc = run_script(bin_dir)
    assert proc.returncode == 0 and "libxcb-cursor.so.0" in proc.stderr and not calls.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script acts on Linux only")
def test_script_on_this_machine_asks_the_real_list_and_is_a_no_op_when_all_are_present(tmp_path):
    """The real question (tuner.app from this checkout, the real loader): where everything is present (CI
    installs it) the script installs nothing, runs no package tool, and says so; twice the same."""
    if missing_xcb_libraries():
        pytest.skip(f"this machine lacks {missing_xcb_libraries()}: the script would install them")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("apt-get", "dnf", "sudo"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=sys.executable)
    for _ in range(2):
        proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "all present" in proc.stdout
    assert not calls.exists()
