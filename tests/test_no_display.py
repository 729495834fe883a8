"""`draftwise` without a usable display: one line naming what is missing and the headless
commands, exit 2, Qt never imported (Qt itself would abort with exit 134)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.app import missing_display

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, True),
        ({"DISPLAY": ":0"}, False),
        ({"WAYLAND_DISPLAY": "wayland-0"}, False),
        ({"QT_QPA_PLATFORM": "offscreen"}, False),
        ({"QT_QPA_PLATFORM": "minimal"}, False),
        ({"QT_QPA_PLATFORM": "offscreen:fontengine=freetype"}, False),
        ({"QT_QPA_PLATFORM": "xcb"}, True),
        ({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":1"}, False),
        ({"QT_QPA_PLATFORM": "wayland", "DISPLAY": ":1"}, True),
        ({"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":1"}, False),
        ({"DISPLAY": ""}, True),
    ],
)
def test_missing_display_rules_on_linux(env, missing):
    assert (missing_display(env, "linux") is not None) is missing


def test_other_platforms_are_unaffected():
    assert missing_display({}, "win32") is None
    assert missing_display({}, "darwin") is None


def test_draftwise_without_display_exits_2_with_one_line():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["PYTHONPATH"] = str(REPO)
    code = "import sys; from tuner.cli import main; rc = main([]); " \
           "assert 'PySide6' not in sys.modules, 'Qt was imported'; sys.exit(rc)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    if not sys.platform.startswith("linux"):
        pytest.skip("the display rule is Linux-only")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "DISPLAY" in lines[0] and "draftwise tune" in lines[0] and "draftwise serve" in lines[0]
    assert proc.stdout == ""
