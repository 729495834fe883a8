"""Fixtures of the command-line tests: every test gets a private DRAFTWISE_HOME.

The tests call ``tuner.cli.main`` in-process or run ``python -m tuner`` as a user would; the fixtures they share
with other folders (the real and the fake llama-server, stories260K, private XDG folders) are in tests/conftest.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import seed_cpu_buffers


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                    request: pytest.FixtureRequest) -> Path:
    """Settings, profiles, logs and caches of every command go to a private DRAFTWISE_HOME (outside the test's
    ``tmp_path``, so a command that scans ``tmp_path`` never meets them; a ``server`` test's seeded with the
    session's probe of the build's CPU buffers), and no ``LLAMA_ARG_*`` variable of the caller reaches
    llama-server."""
    home = tmp_path_factory.mktemp("dw-home")
    seed_cpu_buffers(request, home)
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    for name in [k for k in os.environ if k.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(name)
    return home
