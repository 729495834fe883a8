"""The server rule of tests/conftest.py, run on inner pytest sessions (pytester, in a subprocess).

A test without ``@pytest.mark.server`` that starts the real llama-server fails, naming its argv, whether it
starts it itself or through a ``python -m tuner`` subprocess, and so does one that asks for
``llama_server_bin``; the same tests marked ``server`` pass; the fake llama-server of tests/fakes is allowed
unmarked; and ``-m "not server"`` over the inner file starts no llama-server (watched from outside).
"""

from __future__ import annotations

import re
import stat
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests.conftest import is_real_server

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fakes" / "fake_llama_server.py"

HELPERS = '''
import os
import signal
import subprocess
import sys
import time
import urllib.request

REAL, FAKE, MODEL = os.environ["RULE_REAL"], os.environ["RULE_FAKE"], os.environ["RULE_MODEL"]


def free_port():
    from tuner.process import free_port

    return free_port()


def serve_until_healthy(argv, port):
    """Start argv, wait for its /health to answer 200 (at most 60 s), stop it."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and p.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{argv} never became healthy: {p.stderr.read()[-2000:]!r}")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


def version(binary):
    subprocess.run([binary, "--version"], capture_output=True, timeout=60)


def tuner_serve(binary):
    port = free_port()
    serve_until_healthy([sys.executable, "-m", "tuner", "serve", "--target", MODEL, "--port", str(port),
                         "--server", binary], port)
'''

BAD = '''
from inner_helpers import REAL, tuner_serve, version


def test_real_in_process():
    version(REAL)


def test_real_below_tuner():
    tuner_serve(REAL)


def test_fixture_unmarked(llama_server_bin):
    raise AssertionError("never reached: the set-up refuses the fixture")
'''

GOOD = '''
import pytest

from inner_helpers import FAKE, REAL, free_port, serve_until_healthy, tuner_serve, version


@pytest.mark.server
def test_real_in_process_marked():
    version(REAL)


@pytest.mark.server
def test_real_below_tuner_marked():
    tuner_serve(REAL)


def test_fake_unmarked():
    version(FAKE)
    port = free_port()
    serve_until_healthy([FAKE, "--port", str(port)], port)


def test_nothing_unmarked():
    pass
'''

STRICT = '''
import subprocess
import sys


def test_a_probe_below_tuner():
    """`draftwise devices` probes the discovered binary with --list-devices for a few milliseconds."""
    subprocess.run([sys.executable, "-m", "tuner", "devices"], capture_output=True, timeout=120, check=True)
'''

INI = "[pytest]\nmarkers =\n    server: needs a real llama-server binary\n"


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, stories260k: Path,
          llama_server_bin: Path) -> pytest.Pytester:
    """A pytester folder holding the inner test file; the inner session loads tests/conftest.py as a plugin."""
    fake = pytester.path / "fakebin" / "llama-server"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("DRAFTWISE_HOME", str(pytester.path / "dw-home"))
    monkeypatch.setenv("RULE_REAL", str(llama_server_bin))
    monkeypatch.setenv("RULE_FAKE", str(fake))
    monkeypatch.setenv("RULE_MODEL", str(stories260k))
    pytester.makeini(INI)
    pytester.makepyfile(inner_helpers=HELPERS, test_bad=BAD, test_good=GOOD, test_strict=STRICT)
    return pytester


def _watch_servers(stop: threading.Event, seen: list[str]) -> None:
    """Every 20 ms until ``stop``: record the argv of every real llama-server below this process."""
    me = psutil.Process()
    while not stop.wait(0.02):
        for child in me.children(recursive=True):
            try:
                if is_real_server(child.exe()):
                    seen.append(" ".join(child.cmdline()))
            except psutil.Error:
                continue


def _outcome(text: str, test: str) -> set[str]:
    """The outcomes ``-rA`` reports for ``test`` (PASSED, FAILED, ERROR) in either inner file."""
    return set(re.findall(rf"^(PASSED|FAILED|ERROR) test_(?:bad|good|strict)\.py::{test}\b", text, re.M))


@pytest.mark.server
def test_unmarked_tests_that_start_llama_server_fail_naming_the_argv(inner: pytest.Pytester,
                                                                      llama_server_bin: Path) -> None:
    """Unmarked: a start in the pytest process and one below ``python -m tuner serve`` fail with the
    server's argv, asking for llama_server_bin errors at set-up; marked, the same starts pass; the fake
    passes unmarked."""
    result = inner.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider", "-rA", "test_bad.py",
                                        "test_good.py", timeout=300)
    text = result.stdout.str()
    assert _outcome(text, "test_real_in_process") == {"FAILED"}, text
    assert re.search(r"test_real_in_process started llama-server during the test without @pytest.mark.server.*"
                     rf"{re.escape(str(llama_server_bin))} --version", text), text
    assert _outcome(text, "test_real_below_tuner") == {"FAILED"}, text
    # the server's own argv, read from the process tree below the python -m tuner subprocess
    assert re.search(r"test_real_below_tuner started llama-server during the test .*"
                     rf"{re.escape(str(llama_server_bin))} .*--port", text), text
    assert _outcome(text, "test_fixture_unmarked") == {"ERROR"}, text
    assert "uses the fixture llama_server_bin: this test starts llama-server: mark it server" in text, text
    for ok in ("test_real_in_process_marked", "test_real_below_tuner_marked", "test_fake_unmarked",
               "test_nothing_unmarked"):
        assert _outcome(text, ok) == {"PASSED"}, (ok, text)
    result.assert_outcomes(passed=4, failed=2, errors=1)


@pytest.mark.server
def test_not_server_starts_no_llama_server(inner: pytest.Pytester) -> None:
    """``-m "not server"`` over a file whose marked tests start the real binary (in-process and below a
    ``python -m tuner serve``): nothing starts (psutil watches this process's tree from outside), and the
    unmarked tests, the fake server's included, still run."""
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_watch_servers, args=(stop, seen), daemon=True)
    watcher.start()
    try:
        result = inner.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider", "-rA", "-m",
                                            "not server", "test_good.py", timeout=300)
    finally:
        stop.set()
        watcher.join()
    assert not seen, seen
    result.assert_outcomes(passed=2, deselected=2)


@pytest.mark.server
def test_strict_mode_sees_a_short_probe_below_a_subprocess(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                          llama_server_bin: Path) -> None:
    """A ``--list-devices`` probe run by a ``python -m tuner devices`` subprocess lasts a few milliseconds,
    often between two polls; strict mode's tripwire (the discovered binary logs its starts) sees it always."""
    monkeypatch.setenv("DRAFTWISE_SERVER_RULE", "strict")
    monkeypatch.delenv("DRAFTWISE_LLAMA_SERVER", raising=False)
    result = inner.runpytest_subprocess("-p", "tests.conftest", "-p", "no:cacheprovider", "-rA", "test_strict.py",
                                        timeout=300)
    text = result.stdout.str()
    assert _outcome(text, "test_a_probe_below_tuner") == {"FAILED"}, text
    assert re.search(r"test_a_probe_below_tuner started llama-server during the test .*"
                     rf"{re.escape(str(llama_server_bin))} --list-devices", text), text
