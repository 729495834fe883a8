"""Helpers of the packaging tests: a folder's tree, a PNG's size, the desktop-file validator (the private XDG
folders, ``xdg_homes``, are a fixture of tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

VALIDATOR = shutil.which("desktop-file-validate")


def tree(root: Path) -> set[str]:
    """Every file and folder under ``root``, as paths relative to it (folders end with '/')."""
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        out.add(rel + "/" if p.is_dir() else rel)
    return out


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def validate(path: Path) -> None:
    """``desktop-file-validate`` accepts ``path`` (skipped where the tool is missing, except in CI)."""
    if VALIDATOR is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have desktop-file-validate (Debian package desktop-file-utils)")
        return
    res = subprocess.run([VALIDATOR, str(path)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
