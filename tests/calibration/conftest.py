"""Fixtures of the calibration tests: an isolated DRAFTWISE_HOME and generated model families."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.synth import SynthFamily, make_family


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Profiles, logs and caches of every calibration test go to a private DRAFTWISE_HOME."""
    home = tmp_path_factory.mktemp("dw-home")
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    for name in [k for k in os.environ if k.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(name)
    return home


@pytest.fixture(scope="session")
def wide_family(tmp_path_factory: pytest.TempPathFactory) -> SynthFamily:
    """The DESIGN.md acceptance-dial family, generated once per session.

    768 wide, 12 blocks, F16 target (~170 MB) whose blocks past the first 2 are scaled by ε = 0.05;
    a good draft made of those first 2 blocks; an unrelated 2-block draft with the same tokenizer.
    """
    return make_family(tmp_path_factory.mktemp("wide-family"), n_embd=768, n_layers=12, draft_layers=2,
                       eps=0.05, dtype="f16")


def link_models(folder: Path, *paths: Path) -> Path:
    """A models folder holding symlinks to ``paths`` (no 170 MB copies)."""
    folder.mkdir(parents=True, exist_ok=True)
    for p in paths:
        (folder / p.name).symlink_to(p)
    return folder
