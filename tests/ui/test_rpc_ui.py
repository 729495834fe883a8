"""RPC hosts in the app (issue 17): the Settings field with its warning, and a lost RPC host while
serving — the supervisor's local fallback reported in the tray. Real llama-server, real ggml-rpc-server
(on this machine's loopback: the app runs in the test's process)."""

from __future__ import annotations

import os

import pytest

from tuner import settings as S
from tuner.hardware.rpc import NO_AUTH_WARNING, rpc_server_binary
from tuner.ui.state import AppState


def test_rpc_hosts_field_saves_the_setting_and_names_a_bad_entry(make_app) -> None:
    a = make_app()
    tab = a.window.serve_tab
    assert NO_AUTH_WARNING in tab.rpc_edit.toolTip()
    tab.rpc_edit.setText("192.168.1.20:50052, 192.168.1.21:50052")
    tab.rpc_edit.editingFinished.emit()
    assert S.load_settings().rpc_hosts == ("192.168.1.20:50052", "192.168.1.21:50052")
    tab.rpc_edit.setText("192.168.1.20")
    tab.rpc_edit.editingFinished.emit()
    assert "rpc_hosts" in tab.settings_msg.text() and "192.168.1.20" in tab.settings_msg.text()
    assert S.load_settings().rpc_hosts == ("192.168.1.20:50052", "192.168.1.21:50052")  # nothing lost


@pytest.mark.server
@pytest.mark.gui
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_lost_rpc_host_falls_back_to_local_and_the_tray_says_so(make_app, qtbot, stories260k, llama_server_bin,
                                                                  free_port) -> None:
    from tuner.hardware.rpchost import RpcHost, RpcHostConfig
    from tuner.process import free_port as new_port
    from tuner.server.config import ServerConfig
    from tuner.ui import flow

    host = RpcHost(RpcHostConfig(rpc_server_binary(llama_server_bin), port=new_port(), threads=1))  # type: ignore[arg-type]
    host.start()
    try:
        app = make_app(tray_available=True)
        c = app.controller
        cfg = ServerConfig(model_path=stories260k, n_ctx=256, port=free_port, ngl=99, rpc=(str(host.cfg.endpoint),))
        from tuner.calibration.serving import rpc_fallback_config

        sup = c.runner.start(cfg, binary=llama_server_bin, ready_timeout_s=120, rpc_fallback=rpc_fallback_config(cfg))
        assert "--rpc" in (sup.argv or [])
        info = flow.ServingInfo(model_name=stories260k.name, target_path=stories260k,
                                endpoint_url=f"{sup.base_url}/v1", base_url=sup.base_url, argv=tuple(sup.argv),
                                pid=sup.pid, spec_label="no speculation")
        c._serving_started(info)
        notes: list[tuple[str, str]] = []
        c.notify.connect(lambda title, msg: notes.append((title, msg)))
        os.kill(host.pid, 9)  # type: ignore[arg-type]
        # the next forward pass crosses the network and finds the host gone
        from tuner.server.client import ServerClient

        try:
            with ServerClient(info.base_url) as client:
                client.completion("Once upon a time", n_predict=8, temperature=0)
        except Exception:  # noqa: BLE001 - the server aborts mid-request
            pass
        qtbot.waitUntil(lambda: any(t == "Draftwise: serving on this machine only" for t, _ in notes), timeout=60_000)
        titles = [t for t, _ in notes]
        assert titles.index("Draftwise: RPC host lost") < titles.index("Draftwise: serving on this machine only")
        assert app.tray.last_notification is not None and str(host.cfg.endpoint) in app.tray.last_notification[1]
        assert c.state is AppState.SERVING
        assert "--rpc" not in (c.runner.supervisor.argv or [])
        with ServerClient(info.base_url) as client:
            assert client.completion("Once upon a time", n_predict=8, temperature=0) is not None
    finally:
        host.stop()
