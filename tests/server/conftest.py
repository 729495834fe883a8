"""Fixtures of the server tests: an isolated DRAFTWISE_HOME, captured ``--help`` texts, an incompatible draft
(the fake llama-server, ``fake_server_bin``, is in tests/conftest.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every server test writes logs and caches under a private DRAFTWISE_HOME."""
    home = tmp_path_factory.mktemp("dw-home")
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def help_text(name: str) -> str:
    """A captured ``--help`` text: ``b11434``, ``b10434`` or ``legacy-4227c9b``."""
    return (DATA / f"llama-server-help-{name}.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def incompatible_draft(stories260k_session: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stories260K with another BOS id (3 instead of 1): llama.cpp's vocab check
    (common_speculative_are_compatible, rule "bos tokens must match") refuses it as a draft."""
    import shutil

    from gguf import GGUFReader

    dst = tmp_path_factory.mktemp("incompat") / "stories-bos3.gguf"
    shutil.copyfile(stories260k_session, dst)
    reader = GGUFReader(dst, "r+")
    field = reader.fields["tokenizer.ggml.bos_token_id"]
    field.parts[-1][0] = 3
    reader.data.flush()
    del reader
    return dst


def wait_gone(pid: int, within_s: float = 10.0) -> bool:
    """True once no process ``pid`` exists (polled every 50 ms), False after ``within_s`` seconds."""
    from tuner import process

    t_end = time.monotonic() + within_s
    while time.monotonic() < t_end:
        if not process.process_exists(pid):
            return True
        time.sleep(0.05)
    return False
