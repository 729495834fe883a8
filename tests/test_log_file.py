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


@pytest.mark.server
def test_verbose_without_an_nvidia_driver_is_one_line_and_the_traceback_is_in_the_file(tmp_path: Path) -> None:
    """A new user's --verbose printed a 25-line NVML traceback on a machine without an NVIDIA driver."""
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVIDIA driver (libnvidia-ml)")
    home = tmp_path / "home"
    env = {**os.environ, "DRAFTWISE_HOME": str(home), "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "tuner", "devices", "--verbose"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    nvml = [line for line in p.stderr.splitlines() if "NVML" in line or "nvml" in line]
    assert len(nvml) == 1, p.stderr
    assert "no NVIDIA driver: NVML not available (" in nvml[0] and "(traceback in the log file)" in nvml[0]
    assert "Traceback" not in p.stderr
    text = (home / "logs" / "draftwise.log").read_text()
    assert "no NVIDIA driver: NVML not available" in text and "Traceback (most recent call last)" in text
    assert "NVMLError" in text or "libnvidia-ml" in text


def test_verbose_warnings_keep_their_traceback_on_the_terminal(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Only debug/info tracebacks (handled, expected failures) are left to the file; a warning's stays."""
    from tuner import logs

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    logger = logging.getLogger("tuner")
    before, level_before = list(logger.handlers), logger.level
    try:
        logs.setup_logging(verbose=True)
        log = logging.getLogger("tuner.test_log_file")
        for level in (logging.DEBUG, logging.WARNING):
            try:
                raise RuntimeError(f"boom at {logging.getLevelName(level)}")
            except RuntimeError:
                log.log(level, "handled %s", logging.getLevelName(level), exc_info=True)
    finally:
        for h in list(logger.handlers):
            if h not in before and getattr(h, "_draftwise_stderr", False):
                logger.removeHandler(h)
        logger.setLevel(level_before)
    err = capsys.readouterr().err
    debug = [line for line in err.splitlines() if "handled DEBUG" in line]
    assert debug and debug[0].endswith("(traceback in the log file)")
    assert err.count("Traceback (most recent call last)") == 1 and "boom at WARNING" in err
    assert "boom at DEBUG" not in err
    text = (tmp_path / "home" / "logs" / "draftwise.log").read_text()
    assert "boom at DEBUG" in text and "boom at WARNING" in text
