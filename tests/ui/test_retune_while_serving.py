"""Re-tune while serving (issue 10): the served llama-server is stopped for the sweep (it would compete
for CPU, GPU and memory) and, when the sweep is cancelled, the previous configuration comes back on the
same port. Real llama-server on stories260K."""

from __future__ import annotations

import threading

import psutil
import pytest

from tuner.calibration.request import TuneEvent
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.state import AppState

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(240)]


def test_served_server_pauses_for_the_sweep_and_comes_back_after_cancel(models_dir, free_port, llama_server_bin,
                                                                        monkeypatch):
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    settings = Settings(models_dir=models_dir, port=free_port, tune_budget_s=60)
    runner = flow.ServerRunner()
    served = ServerConfig(model_path=str(models_dir / "stories260K.gguf"), port=free_port, n_ctx=256)
    sup = runner.start(served)
    old_pid = sup.pid
    url = f"http://127.0.0.1:{free_port}"
    assert ServerClient(url).health().status_code == 200

    cancel = threading.Event()
    seen: list[str] = []
    during: dict[str, object] = {}

    def on_event(ev: TuneEvent) -> None:
        assert isinstance(ev, TuneEvent)  # one type: the flow's own steps are kind="status"
        kind = ev.kind
        seen.append(ev.message if kind == "status" else kind)
        if kind == "progress" and not during:
            # the sweep is measuring: the served server is gone and its port does not answer
            during["old_alive"] = psutil.pid_exists(old_pid) and psutil.Process(old_pid).status() != psutil.STATUS_ZOMBIE
            during["port_answers"] = ServerClient(url).health(timeout_s=0.5).status_code is not None
            cancel.set()

    try:
        with pytest.raises(flow.Cancelled):
            flow.tune_and_serve(folder=models_dir, target=None, settings=settings, prompts_path=None, runner=runner,
                                on_event=on_event, cancel=cancel, force_retune=True,
                                tune_options=dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2))
        assert during == {"old_alive": False, "port_answers": False}, during
        assert any(s.startswith("Serving paused for re-tune") for s in seen)
        assert any("previous configuration is serving again" in s for s in seen)
        # the previous configuration, on the same port, in a new process
        sup2 = runner.supervisor
        assert sup2.state.value == "ready" and sup2.config.port == free_port
        assert sup2.config.model_path == served.model_path and sup2.config.spec_type == served.spec_type
        assert sup2.pid != old_pid
        assert ServerClient(url).health().status_code == 200
    finally:
        runner.stop()


def test_tray_tooltip_and_serve_tab_say_paused_for_retune(make_app):
    from types import SimpleNamespace

    app = make_app(tray_available=False)
    c = app.controller
    c.serving = SimpleNamespace(model_name="m.gguf", endpoint_url="http://127.0.0.1:1/v1", spec_label="x", spec_words="", argv=())
    try:
        c.paused_for_retune = True
        c.set_state(AppState.TUNING)
        assert "serving paused for re-tune" in c.tooltip()
        tab = app.window.serve_tab
        tab.refresh()
        assert "paused for re-tune" in tab.state_label.text()
    finally:
        c.paused_for_retune = False
        c.serving = None
        c.set_state(AppState.IDLE)
