"""Chat tests use their own DRAFTWISE_HOME (the history file, the API key) and offscreen Qt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def draftwise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dwhome"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home
