"""A models folder and a saved profile's shape for the profile-scope tests (tests/calibration/test_profile_checks.py,
tests/cli/test_serve_profile_checks.py, tests/ui/test_profile_refusal.py): one definition of each."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

FOREIGN = "192.0.2.7:50052"  # TEST-NET-1: never this machine


def make_models(tmp_path: Path, stories260k: Path) -> Path:
    """A models folder with a target and a draft (real GGUF files: the GPU-layer bound reads their blocks)."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(stories260k, folder / "target.gguf")
    shutil.copyfile(stories260k, folder / "draft.gguf")
    return folder


def fake_profile(folder: Path, **server_config: object) -> SimpleNamespace:
    """What ``profile_server_config`` reads of a profile of ``folder/target.gguf``, with ``server_config`` changed."""
    target = str((folder / "target.gguf").resolve())
    obj = {"model_path": target, "spec_type": "none", "n_ctx": 4096} | server_config
    return SimpleNamespace(path="/p/profile.json", target_path=target, server_config=obj)
