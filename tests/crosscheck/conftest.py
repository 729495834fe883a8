"""Fixtures of the cross-check tests: every test's caches and machine facts (the server reports, the build's
CPU buffers, a recorded CPU workaround) go to a private DRAFTWISE_HOME, never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("dw-home")
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home

