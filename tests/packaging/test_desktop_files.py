"""The committed Linux desktop files: validators, and consistency with tuner.desktop."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tuner
from tuner import desktop

REPO = Path(__file__).resolve().parents[2]
LINUX = REPO / "packaging" / "linux"
DESKTOP_FILE = LINUX / f"{desktop.APP_ID}.desktop"
METAINFO = LINUX / f"{desktop.APP_ID}.metainfo.xml"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {tool} (Debian packages desktop-file-utils / appstream)")
        pytest.skip(f"{tool} not installed here")
    return path


def test_desktop_file_validates():
    res = subprocess.run([need("desktop-file-validate"), str(DESKTOP_FILE)], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0 and "error" not in res.stdout, res.stdout + res.stderr


def test_metainfo_validates():
    res = subprocess.run([need("appstreamcli"), "validate", "--no-net", str(METAINFO)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "E:" not in res.stdout and "W:" not in res.stdout, res.stdout


def test_committed_desktop_file_is_the_generated_one():
    """packaging/linux/*.desktop is tuner.desktop's text with a bare Exec=draftwise (for distro packages)."""
    assert DESKTOP_FILE.read_text(encoding="utf-8") == desktop.desktop_entry_text(("draftwise",))


def test_metainfo_matches_the_desktop_entry_and_version():
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == desktop.APP_ID
    assert root.find("launchable").text == DESKTOP_FILE.name
    assert root.find("provides/binary").text == "draftwise"
    versions = [r.get("version") for r in root.findall("releases/release")]
    assert tuner.__version__ in versions, f"{METAINFO}: no <release> for version {tuner.__version__}"
    entry = desktop.read_desktop_entry(DESKTOP_FILE)
    assert entry["Name"] == root.findtext("name")
    # the Icon= name resolves to icons we ship (hicolor lookup by APP_ID after install)
    assert entry["Icon"] == desktop.APP_ID
    assert desktop.app_icon_svg().is_file()
