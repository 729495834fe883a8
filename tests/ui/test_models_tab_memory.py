"""Models tab memory plan: the context-vs-layers trade, and a cached llama-server cross-check that
disagrees is shown — a click never starts the server."""

from __future__ import annotations

import pytest

from tests.hardware.conftest import gpu_devices

pytestmark = [pytest.mark.gui]


@pytest.mark.server
def test_models_tab_shows_the_trade_and_a_cached_disagreement(make_app, qtbot, models_dir, monkeypatch,
                                                              llama_server_bin):
    from tuner.crosscheck import server_check
    from tuner.hardware.memory import MemoryRequest, load_model_spec
    from tuner.ui import flow

    gpu = gpu_devices(("CUDA0", 8192, 7800))
    monkeypatch.setattr(flow, "detect_devices", lambda *a, **k: gpu)  # where the Models tab's plan looks them up
    monkeypatch.setattr(flow, "find_server_binary", lambda: llama_server_bin)
    target = models_dir / "stories260K.gguf"
    started = []

    def no_server(argv, timeout_s):  # a Models-tab click must never get here
        started.append(argv)
        raise AssertionError("the Models tab started llama-server")

    monkeypatch.setattr(server_check, "run_server_log", no_server)
    app = make_app(tray_available=True)
    tab = app.window.models_tab
    app.controller.selected_target = target
    tab.show_scan(flow.scan(models_dir))
    qtbot.waitUntil(lambda: "Verdict" in tab.plan_label.text(), timeout=20000)
    text = tab.plan_label.text()
    assert "At this context size 6 of 6 layers fit on the GPU" in text
    assert "stays on the GPU up to its training context (2048 tokens)" in text
    assert "Not yet checked against llama-server's own estimate." in text
    # the app's words: no command-line advice, no flags or llama.cpp parameter names
    assert "draftwise" not in text and "--server-check" not in text and "n_ctx" not in text and " ngl" not in text
    assert "Verdict: fits, headroom " in text and "(CUDA0: " in text

    # a server report in the cache (as `draftwise plan --server-check` leaves it) whose compute is far
    # from the plan: the tab says so on the next selection, from the cache
    req = MemoryRequest(target=load_model_spec(target), n_ctx=2048)
    plan = server_check.plan_memory(req, gpu)
    report = ["I common_params_fit_impl: getting device memory data for initial parameters:",
              "I common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute |",
              f"I common_memory_breakdown_print: |   - CUDA0 (Fake) | 8192 = 100 + (999 = "
              f"{plan.devices[0].need.target_weights_bytes // 2**20} + 0 + 900) + 0 |"]
    r = server_check.server_cross_check(req, gpu, llama_server_bin, runner=lambda argv, t: report)
    assert r.ok and not r.cached and r.agrees is False
    tab.plan_label.setText("")
    tab._plan_for = target
    app.controller.plan_memory(next(m for m in flow.scan(models_dir).models if m.path == target))
    qtbot.waitUntil(lambda: "Verdict" in tab.plan_label.text(), timeout=20000)
    text = tab.plan_label.text()
    assert "llama-server DISAGREES with this plan" in text and "target compute on CUDA0" in text, text
    assert started == []
