"""The served llama-server (real, stories260K) is SIGKILLed: the supervisor restarts it, the tray
gets the "crashed and was restarted" notification, and the app keeps serving on the same endpoint."""

from __future__ import annotations

import os
import shlex
import signal

import psutil
import pytest

from tuner.server.client import ServerClient
from tuner.ui import flow
from tuner.ui.state import AppState

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.slow, pytest.mark.timeout(240)]


def test_served_server_killed_is_restarted_and_notified(make_app, qtbot, stories260k, llama_server_bin, free_port):
    from tuner.server.config import ServerConfig

    app = make_app(tray_available=True)
    c = app.controller
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, port=free_port)
    sup = c.runner.start(cfg, binary=llama_server_bin, ready_timeout_s=120)
    assert sup.auto_restart, "the served llama-server must be restarted after a crash"
    info = flow.ServingInfo(
        model_name=stories260k.name, target_path=stories260k, endpoint_url=f"{sup.base_url}/v1",
        base_url=sup.base_url, argv=tuple(sup.argv), pid=sup.pid, spec_label="no speculation")
    c._serving_started(info)
    assert c.state is AppState.SERVING
    notes: list[tuple[str, str]] = []
    c.notify.connect(lambda title, msg: notes.append((title, msg)))
    served: list[object] = []
    c.server_changed.connect(served.append)

    old_pid = sup.pid
    os.kill(old_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: any("crashed" in t for t, _m in notes), timeout=30_000)
    qtbot.waitUntil(lambda: any("restarted" in t for t, _m in notes), timeout=120_000)

    titles = [t for t, _m in notes]
    assert titles.index("Draftwise: llama-server crashed") < titles.index("Draftwise: llama-server restarted"), titles
    assert app.tray.last_notification is not None and "restarted" in app.tray.last_notification[0]
    assert "crashed and was restarted" in app.tray.last_notification[1]
    assert c.state is AppState.SERVING, c.last_error
    new_pid = c.runner.pid
    assert new_pid and new_pid != old_pid and psutil.pid_exists(new_pid)
    # the views were told, and show the new process's command line read from the supervisor
    assert served and served[-1] is c.serving
    serve_tab = app.window.serve_tab
    serve_tab.refresh()
    assert c.runner.argv and serve_tab.cmd_edit.toPlainText() == shlex.join(c.runner.argv)
    # the same endpoint answers again
    with ServerClient(info.base_url) as client:
        out = client.completion("Once upon a time", n_predict=8, temperature=0)
    assert out is not None

