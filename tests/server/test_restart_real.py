"""`draftwise serve` is never abandoned: four kill -9 of its llama-server, 30 s apart, each after the restarted
server was ready again, leave it serving (restart 4), and each restart is said in plain words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tuner.server.client import ServerClient

REPO = Path(__file__).resolve().parent.parent.parent
#: Seconds each restarted server is ready before the next kill (under the policy's 60 s: quick repeats).
READY_FOR_S = 30.0

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(420)]


def _server_pid(serve_pid: int) -> int | None:
    try:
        kids = psutil.Process(serve_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    live = [k.pid for k in kids if "llama-server" in (k.name() or "") and k.status() != psutil.STATUS_ZOMBIE]
    return live[0] if live else None


def _wait_for(pred, within_s: float, what: str) -> None:
    t_end = time.monotonic() + within_s
    while time.monotonic() < t_end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {within_s:g} s: {what}")


def test_four_kills_30_s_apart_leave_serve_serving(llama_server_bin: Path, stories260k_session: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--target", str(stories260k_session),
                          "--ctx-size", "256", "--server", str(llama_server_bin)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                         start_new_session=True)
    err: list[str] = []
    threading.Thread(target=lambda: err.extend(iter(p.stderr.readline, "")), daemon=True).start()
    try:
        url = p.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), "".join(err)

        def ready_count() -> int:
            return sum(1 for line in err if "] ready: serving" in line)

        for n in range(1, 5):
            time.sleep(READY_FOR_S)
            pid = _server_pid(p.pid)
            assert pid is not None, "".join(err)
            os.kill(pid, signal.SIGKILL)
            _wait_for(lambda n=n: ready_count() == n + 1, 90, f"ready again after kill {n}\n" + "".join(err))
        assert p.poll() is None, "".join(err)
        with ServerClient(url.removesuffix("/v1")) as c:
            assert c.completion("Once upon a time", 4, temperature=0.0)["content"] is not None
        restarts = [line for line in err if "llama-server crashed (" in line]
        assert len(restarts) == 4, "".join(err)
        for i, line in enumerate(restarts, 1):
            assert "killed by the" in line  # the system (or the OOM killer: the counter is system-wide)
            assert f"(restart {i})" in line
        # quick repeats (ready 30 s < 60 s) back off 1, 2, 4, 8 s; none gives up
        assert [line.split("restarting in ")[1].split(" s")[0] for line in restarts] == ["1", "2", "4", "8"]
        assert not any("gave up" in line for line in err)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
    assert p.returncode == 0, "".join(err)
