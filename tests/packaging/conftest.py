"""Fixtures for the packaging tests: a private set of XDG folders per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def xdg_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Point XDG_DATA_HOME, XDG_CONFIG_HOME and DRAFTWISE_HOME at empty temp folders.

    Returns ``(data_home, config_home)``.
    """
    data_home = tmp_path / "xdg-data"
    config_home = tmp_path / "xdg-config"
    data_home.mkdir()
    config_home.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "draftwise-home"))
    return data_home, config_home


def tree(root: Path) -> set[str]:
    """Every file and folder under ``root``, as paths relative to it (folders end with '/')."""
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        out.add(rel + "/" if p.is_dir() else rel)
    return out
