"""The one-click flow with the real llama-server on stories260K: Tune & serve, live graphs from the
serving session, the GUI event loop never stalls, and Cancel in the middle leaves no child process."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from tuner.server.client import ServerClient
from tuner.settings import Settings
from tuner.ui.state import AppState

from .conftest import STALL_LIMIT_MS

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.slow, pytest.mark.timeout(300)]

QUICK_TUNE = dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2)


def llama_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "llama-server" in " ".join(p.cmdline()[:1]) or "llama-server" in p.name():
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def gone_or_zombie(proc: psutil.Process) -> bool:
    """True when ``proc`` has exited (a zombie awaiting its parent counts as exited)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def configure(app, models_dir, port, budget_s=60, **tune):
    c = app.controller
    c.settings = Settings(models_dir=models_dir, port=port, tune_budget_s=budget_s)
    c.tune_options = dict(QUICK_TUNE, **tune)
    c.poll_interval_s = 0.5


def test_tune_and_serve_then_live_graphs(make_app, qtbot, models_dir, free_port, llama_server_bin, monkeypatch, loop_latency):
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    app = make_app(tray_available=True)
    configure(app, models_dir, free_port)
    w = app.window
    w.show()
    qtbot.waitExposed(w)
    w.tabs.setCurrentWidget(w.tune_tab)
    events = []
    app.controller.tune_event.connect(events.append)
    notes = []
    app.controller.notify.connect(lambda title, msg: notes.append((title, msg)))

    from PySide6.QtCore import Qt

    qtbot.mouseClick(w.tune_tab.start_btn, Qt.MouseButton.LeftButton)
    assert app.controller.state is AppState.TUNING
    qtbot.waitUntil(lambda: app.controller.state in (AppState.SERVING, AppState.ERROR), timeout=180_000)
    assert app.controller.state is AppState.SERVING, app.controller.last_error

    # Tune tab: progress, chart of candidates against the baseline, decision in words
    kinds = [getattr(e, "kind", None) for e in events]
    assert "measured" in kinds and "decision" in kinds
    qtbot.waitUntil(lambda: w.tune_tab.decision_label.text() not in ("", "No decision yet."), timeout=5000)
    assert w.tune_tab.progress.value() == 1000
    assert any(row[3] for row in w.tune_tab.chart.rows), "baseline bar missing"
    qtbot.waitUntil(lambda: any("tuning finished" in t for t, _m in notes), timeout=5000)
    assert any(("speculation" in m.lower() or "×" in m) for _t, m in notes)

    # Serve tab + tray: endpoint, exact command line, menu
    info = app.controller.serving
    assert info.endpoint_url == f"http://127.0.0.1:{free_port}/v1"
    # the friendly model id and the desktop prompt-cache limit are on the served command line
    assert info.model_id == "stories260K" and info.argv[info.argv.index("-a") + 1] == "stories260K"
    assert info.cache_ram_mib == 1024 and info.argv[info.argv.index("-cram") + 1] == "1024"
    with ServerClient(info.base_url) as probe:
        assert probe.models() == ["stories260K"]
    assert w.serve_tab.model_id_label.text() == "stories260K"
    assert w.serve_tab.endpoint_edit.text() == info.endpoint_url
    assert f"--port {free_port}" in w.serve_tab.cmd_edit.toPlainText()
    assert "--metrics" in w.serve_tab.cmd_edit.toPlainText()
    app.tray.menu.aboutToShow.emit()
    assert app.tray.actions()["Stop server"].isEnabled()
    pid = info.pid
    assert pid and psutil.pid_exists(pid)
    proc = psutil.Process(pid)

    # graphs receive samples from the real serving session
    switch_t = time.monotonic()
    w.tabs.setCurrentWidget(w.monitor_tab)  # a user action: its first full repaints (2 s) are not background work
    stop = threading.Event()

    def load():
        with ServerClient(info.base_url) as client:
            i = 0
            while not stop.is_set():
                client.completion(f"Once upon a time {i}", n_predict=64, temperature=0, cache_prompt=False)
                i += 1

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        qtbot.waitUntil(lambda: w.monitor_tab.tps_plot.point_count() >= 2, timeout=60_000)
        qtbot.waitUntil(lambda: w.monitor_tab.mem_plot.point_count("llama-server RAM") >= 2, timeout=10_000)
        qtbot.waitUntil(lambda: w.monitor_tab.req_plot.point_count() >= 2, timeout=10_000)
    finally:
        stop.set()
        qtbot.waitUntil(lambda: not t.is_alive(), timeout=30_000)  # never join() on the GUI thread
    tps = app.controller.collector.series["gen_tokens_per_s"].last_value()
    assert tps is not None and tps > 0
    assert "tokens/s" in w.monitor_tab.summary.text()  # not "idle": requests ran a moment ago
    assert f"{tps:.1f} tokens/s" in app.controller.tooltip() or "tokens/s" in app.controller.tooltip()
    switch2_t = time.monotonic()
    w.tabs.setCurrentWidget(w.serve_tab)
    # The tail holds the newest lines only: under load they are all per-request "slot" lines.
    qtbot.waitUntil(lambda: any(k in w.serve_tab.log.toPlainText() for k in (" srv ", " slot ", "llama_server")), timeout=5000)

    # GUI thread never stalled during the sweep and serving
    stalls = loop_latency.stalls(STALL_LIMIT_MS, exclude=((switch_t, switch_t + 2.0), (switch2_t, switch2_t + 2.0)))
    print("gaps over 50 ms (t, wall, cpu):", [(round(t - switch_t, 2), round(g), round(c)) for t, g, c in loop_latency.gaps if g > 50])
    assert len(loop_latency.gaps_ms) > 100
    assert stalls == [], (
        f"GUI event loop stalled: {stalls} ms (max gap {loop_latency.max_gap_ms:.0f} ms)\n"
        + loop_latency.stall_stacks(STALL_LIMIT_MS, exclude=((switch_t, switch_t + 2.0), (switch2_t, switch2_t + 2.0)))
    )

    # Stop server: the whole process tree goes
    app.controller.stop_server()
    qtbot.waitUntil(lambda: app.controller.state is AppState.IDLE, timeout=30_000)
    assert gone_or_zombie(proc), f"llama-server pid {pid} still running"
    assert llama_children() == []


def test_cancel_mid_sweep_leaves_no_child(make_app, qtbot, models_dir, free_port, llama_server_bin, monkeypatch):
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    app = make_app(tray_available=True)
    # a longer sweep (more tokens and repetitions) so Cancel lands in the middle of it
    configure(app, models_dir, free_port, budget_s=300, n_predict=256, repetitions=3, max_prompts=None)
    seen: dict[int, psutil.Process] = {}  # Process objects: is_running() is safe against pid reuse
    kinds: list[str] = []

    def on_event(ev):
        kinds.append(getattr(ev, "kind", ""))
        seen.update((p.pid, p) for p in llama_children())

    app.controller.tune_event.connect(on_event)
    app.controller.tune_and_serve()
    qtbot.waitUntil(lambda: "measured" in kinds or "progress" in kinds, timeout=120_000)
    seen.update((p.pid, p) for p in llama_children())
    assert seen, "no llama-server was running during the sweep"
    app.controller.cancel()
    t0 = time.monotonic()
    qtbot.waitUntil(lambda: app.controller.state is not AppState.TUNING, timeout=60_000)
    assert time.monotonic() - t0 < 60
    assert app.controller.state is AppState.IDLE, (app.controller.state, app.controller.last_error, kinds)
    assert "decision" not in kinds, kinds  # it really stopped in the middle
    assert app.controller.serving is None
    left = [p.pid for p in seen.values() if gone_or_zombie(p) is False]
    assert left == [], f"llama-server still running after Cancel: pids {left}"
    assert llama_children() == []


def test_quit_stops_the_server(make_app, qtbot, stories260k, llama_server_bin, free_port, monkeypatch):
    from tuner.server.config import ServerConfig

    app = make_app()
    exits = []
    # the real exit() would end the test session's shared QApplication loop for every later test
    monkeypatch.setattr(app.qapp, "exit", lambda code=0: exits.append(code))
    cfg = ServerConfig(model_path=stories260k, n_ctx=256, port=free_port)
    sup = app.controller.runner.start(cfg, binary=llama_server_bin, ready_timeout_s=120)
    pid = sup.pid
    assert pid and psutil.pid_exists(pid)
    proc = psutil.Process(pid)
    app.quit()
    assert app._quitting and exits == [0]
    assert gone_or_zombie(proc), f"llama-server pid {pid} still running"
    assert llama_children() == []
