"""Fixtures of the calibration tests: an isolated DRAFTWISE_HOME and generated model families."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import seed_cpu_buffers
from tests.synth import SynthFamily, make_family


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                    request: pytest.FixtureRequest) -> Path:
    """Profiles, logs and caches of every calibration test go to a private DRAFTWISE_HOME (a ``server`` test's
    seeded with the session's probe of the build's CPU buffers)."""
    home = tmp_path_factory.mktemp("dw-home")
    seed_cpu_buffers(request, home)
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    for name in [k for k in os.environ if k.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(name)
    return home


@pytest.fixture(scope="session")
def wide_family(tmp_path_factory: pytest.TempPathFactory) -> SynthFamily:
    """The DESIGN.md acceptance-dial family, generated once per session.

    768 wide, 12 blocks, F16 target (~170 MB) whose blocks past the first 2 are scaled by ε; a good
    draft made of those first 2 blocks; an unrelated 2-block draft with the same tokenizer.
    ε = 0.02 (DESIGN.md measured ε = 0.05 at ≈1.4× on an idle 2-core CPU; on a loaded machine with one
    server thread that shrinks to ≈1.15×, so the tests dial acceptance up: ≈80 % at n_max 4, ≈1.5×).
    """
    return make_family(tmp_path_factory.mktemp("wide-family"), n_embd=768, n_layers=12, draft_layers=2,
                       eps=0.02, dtype="f16")


TUNE_THREADS = 1
"""Server threads in the tests: one thread stays steady when other processes share the CPU (two
threads spin-wait on each other and collapse under load)."""


def link_models(folder: Path, *paths: Path) -> Path:
    """A models folder holding symlinks to ``paths`` (no 170 MB copies)."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in paths:
        (folder / p.name).symlink_to(p)
    return folder
