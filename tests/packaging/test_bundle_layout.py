"""What the bundle relies on, checked without building it (the build itself runs in packaging/ci-checks.sh)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tuner import resources
from tuner.cli import COMMAND_MODULES

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "packaging" / "pyinstaller" / "draftwise.spec"


def test_frozen_app_finds_resources_inside_the_bundle(tmp_path, monkeypatch):
    """In a PyInstaller bundle sys._MEIPASS is the _internal folder; resources/ there wins over the checkout."""
    bundled = tmp_path / "_internal" / "resources"
    (bundled / "icons").mkdir(parents=True)
    (bundled / "icons" / "tray-idle.svg").write_text("<svg/>")
    monkeypatch.delenv("DRAFTWISE_RESOURCES", raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "_internal"), raising=False)
    assert resources.resources_dir() == bundled
    assert resources.resource_path("icons", "tray-idle.svg").read_text() == "<svg/>"


def test_spec_bundles_resources_and_every_command_module():
    """The spec parses, ships resources/ as 'resources', and collects tuner's submodules (the CLI imports
    its command modules by name, which PyInstaller cannot see)."""
    src = SPEC.read_text(encoding="utf-8")
    ast.parse(src)
    assert '(str(REPO / "resources"), "resources")' in src
    assert 'collect_submodules("tuner")' in src
    # collect_submodules("tuner") only covers command modules inside the tuner package
    assert all(name.split(".")[0] == "tuner" for name in COMMAND_MODULES), COMMAND_MODULES
    assert (REPO / "packaging" / "pyinstaller" / "draftwise_entry.py").is_file()
