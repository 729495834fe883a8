"""Draftwise's own log file (tuner/logs.py) is owner-only: mode 0600 in its 0700 folder, rotated copies too,
whatever the umask, also when an older version left it 0644."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner import __version__

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_real_command_writes_its_log_0600_under_umask_022(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_llama_gguf(tmp_path / "m" / "t.gguf", n_embd=64, n_layers=2)
    env = {**os.environ, "DRAFTWISE_HOME": str(home), "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "tuner", "scan", str(tmp_path / "m")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0o022))
    assert p.returncode == 0, p.stderr
    log = home / "logs" / "draftwise.log"
    assert f"draftwise {__version__} scan" in log.read_text()
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700


def test_rotated_files_and_an_old_0644_log_are_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner import logs

    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    folder = home / "logs"
    folder.mkdir(parents=True, mode=0o700)
    old = folder / "draftwise.log"
    old.write_text("from an older version\n")
    (folder / "draftwise.log.1").write_text("older still\n")
    os.chmod(old, 0o644)
    os.chmod(folder / "draftwise.log.1", 0o644)
    previous = os.umask(0o022)
    try:
        path = logs.setup_logging()
        assert path == old and _mode(old) == 0o600 and _mode(folder / "draftwise.log.1") == 0o600
        handler = logs._file_handler
        assert isinstance(handler, logging.handlers.RotatingFileHandler)
        monkeypatch.setattr(handler, "maxBytes", 2000)
        log = logging.getLogger("tuner.test_log_file")
        for i in range(200):  # about 20 kB: several rollovers
            log.warning("line %d %s", i, "x" * 60)
        handler.flush()
    finally:
        os.umask(previous)
    rotated = sorted(folder.glob("draftwise.log.*"))
    assert len(rotated) == logs.BACKUP_COUNT, rotated
    assert "line 199" in old.read_text()
    for f in [old, *rotated]:
        assert _mode(f) == 0o600, (f, oct(_mode(f)))
