"""The Chat tab against a real llama-server on stories260K (pytest-qt, offscreen): a streamed reply
with its tokens/s and draft accepted / drafted under it, Stop ends the stream and the server stops
generating, LAN mode sends the API key; the tray's "Chat…" opens the tab."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tuner import chat_history
from tuner import settings as settings_mod
from tuner.server.client import ServerClient
from tuner.server.config import ServerConfig, default_alias
from tuner.server.supervisor import Supervisor
from tuner.settings import Settings
from tuner.telemetry.prom import parse_metrics
from tuner.ui.controller import AppController
from tuner.ui.flow import ServingInfo
from tuner.ui.tab_chat import ChatTab

from .conftest import STALL_LIMIT_MS

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.timeout(300)]


def serving_info(sup: Supervisor, model: Path, spec_label: str, api_key: str | None = None) -> ServingInfo:
    return ServingInfo(model_name=model.name, target_path=model, endpoint_url=f"{sup.base_url}/v1",
                       base_url=sup.base_url, argv=tuple(sup.argv), pid=sup.pid, spec_label=spec_label,
                       api_key=api_key, model_id=default_alias(model))


@pytest.fixture
def spec_server(llama_server_bin, stories260k_session):
    cfg = ServerConfig(model_path=stories260k_session, draft_path=stories260k_session, spec_type="draft-simple",
                       n_max=4, n_ctx=4096, threads=1, alias=default_alias(stories260k_session))
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        yield sup
    finally:
        sup.stop()


def make_tab(qtbot, info: ServingInfo | None, settings: Settings | None = None):
    c = AppController(settings or Settings())
    tab = ChatTab(c)
    qtbot.addWidget(tab)
    tab.resize(900, 600)
    tab.show()
    c.serving = info
    c.server_changed.emit(info)
    return c, tab


def test_streams_a_reply_with_its_figures(qtbot, spec_server, stories260k_session):
    c, tab = make_tab(qtbot, serving_info(spec_server, stories260k_session, "draft-simple stories260K.gguf n_max 4"))
    assert "stories260K" in tab.header.text() and tab.send_btn.isEnabled() and not tab.stop_btn.isEnabled()
    pieces = []
    orig = tab._on_text
    tab._on_text = lambda t: (pieces.append(t), orig(t))
    tab.temp_spin.setValue(0.0)
    tab.max_tokens_spin.setValue(64)
    tab.input.setPlainText("Once upon a time")
    with qtbot.waitSignal(tab.reply_done, timeout=60_000) as sig:
        qtbot.mouseClick(tab.send_btn, Qt.MouseButton.LeftButton)
        assert tab.streaming and tab.stop_btn.isEnabled() and not tab.send_btn.isEnabled()
    r = sig.args[0]
    assert r["error"] is None and not r["stopped"]
    assert len(pieces) > 3, "the reply was not streamed"
    assert r["text"] == "".join(pieces) and r["text"].strip()
    tm = r["timings"]
    assert tm["draft_n"] > 0
    expected = (f"{tm['predicted_n']} tokens · {tm['predicted_per_second']:.1f} tokens/s · "
                f"draft tokens accepted {tm['draft_n_accepted']} / drafted {tm['draft_n']}")
    assert r["figures"] == expected
    shown = tab.transcript.toPlainText()
    assert expected in shown and r["text"].strip()[:20] in shown
    assert "speedup" not in shown.lower() and "×" not in shown  # one reply is not a speedup
    assert "not a speedup measurement" in tab.note.text()
    assert [m["role"] for m in tab.messages] == ["user", "assistant"]
    assert not chat_history.history_path().exists(), "chats must not be stored unless asked"
    # the conversation goes on: the second request carries the first exchange
    with qtbot.waitSignal(tab.reply_done, timeout=60_000):
        assert tab.send("And then?")
    assert [m["role"] for m in tab.messages] == ["user", "assistant", "user", "assistant"]
    assert tab.transcript.toPlainText().count("tokens/s") == 2


def test_a_long_streamed_reply_never_stalls_the_gui(qtbot, spec_server, stories260k_session, loop_latency):
    c, tab = make_tab(qtbot, serving_info(spec_server, stories260k_session, "draft-simple stories260K.gguf n_max 4"))
    tab.max_tokens_spin.setValue(160)
    for i in range(2):  # the second reply re-renders a transcript that already holds the first
        with qtbot.waitSignal(tab.reply_done, timeout=120_000) as sig:
            assert tab.send(f"Once upon a time {i}")
        assert sig.args[0]["error"] is None and len(sig.args[0]["text"]) > 100
    stalls = loop_latency.stalls(STALL_LIMIT_MS)
    assert stalls == [], f"GUI stalled while streaming: {stalls} ms\n{loop_latency.stall_stacks(STALL_LIMIT_MS)}"


def test_stop_ends_the_stream_and_the_generation(qtbot, spec_server, stories260k_session):
    c, tab = make_tab(qtbot, serving_info(spec_server, stories260k_session, "draft-simple stories260K.gguf n_max 4"))
    with ServerClient(spec_server.base_url) as probe:
        before = parse_metrics(probe.metrics_text()).tokens_predicted_total
    tab.max_tokens_spin.setValue(4000)
    tab.temp_spin.setValue(1.0)
    with qtbot.waitSignal(tab.reply_done, timeout=60_000) as sig:
        assert tab.send("Once upon a time")
        qtbot.waitUntil(lambda: bool(tab._reply), timeout=30_000)
        qtbot.mouseClick(tab.stop_btn, Qt.MouseButton.LeftButton)
        assert not tab.stop_btn.isEnabled()
    r = sig.args[0]
    assert r["stopped"] and r["timings"] is None
    assert r["figures"].startswith("stopped after ")
    assert "tokens/s" not in r["figures"]
    with ServerClient(spec_server.base_url) as probe:
        deadline = time.monotonic() + 20
        while any(s.get("is_processing") for s in probe.slots()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(s.get("is_processing") for s in probe.slots())
        after = parse_metrics(probe.metrics_text()).tokens_predicted_total
    assert after - before < 4000, "the server generated the whole reply after Stop"
    assert tab.send_btn.isEnabled() and not tab.streaming


def test_lan_mode_sends_the_api_key_and_history_is_opt_in(qtbot, llama_server_bin, stories260k_session, free_port):
    settings_mod.generate_api_key()
    st = Settings(expose_on_lan=True, port=free_port, keep_chat_history=True)
    key = settings_mod.server_api_key(st)
    assert key
    cfg = ServerConfig(model_path=stories260k_session, n_ctx=256, threads=1, host=st.host, port=st.port,
                       api_key=key, alias=default_alias(stories260k_session))
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        # without the key the server refuses: the tab must be sending it
        c0, anon = make_tab(qtbot, serving_info(sup, stories260k_session, "no speculation", api_key=None))
        with qtbot.waitSignal(anon.reply_done, timeout=30_000) as sig:
            anon.send("Once upon a time")
        assert sig.args[0]["error"] and "401" in sig.args[0]["error"]
        c, tab = make_tab(qtbot, serving_info(sup, stories260k_session, "no speculation", api_key=key), st)
        assert "API key sent" in tab.header.text()
        assert tab.history_check.isChecked()
        with qtbot.waitSignal(tab.reply_done, timeout=30_000) as sig:
            tab.send("Once upon a time")
        r = sig.args[0]
        assert r["error"] is None and r["text"]
        assert r["figures"].endswith("no speculation")
        # kept because the user asked: a private file with this conversation
        p = chat_history.history_path()
        assert p.stat().st_mode & 0o777 == 0o600
        conv = chat_history.load_history()[-1]
        assert conv["model"] == "stories260K" and conv["messages"][-1]["content"] == r["text"]
        tab.history_check.setChecked(False)
        assert not p.exists()
    finally:
        sup.stop()


def test_tray_chat_entry_opens_the_chat_tab(make_app, qtbot, tmp_path):
    app = make_app(tray_available=True)
    c = app.controller
    app.tray.rebuild_menu()
    acts = app.tray.actions()
    assert not acts["Chat…"].isEnabled(), "nothing to chat with before serving"
    assert not acts["Re-tune"].isEnabled(), "nothing to re-tune before a first sweep"
    model = tmp_path / "m.gguf"
    c.serving = ServingInfo(model_name="m.gguf", target_path=model, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=("llama-server",), pid=None,
                            spec_label="no speculation", model_id="m")
    app.tray.rebuild_menu()
    acts = app.tray.actions()
    assert acts["Chat…"].isEnabled() and acts["Re-tune"].isEnabled()
    acts["Chat…"].trigger()
    assert app.window.tabs.currentWidget() is app.window.chat_tab
    assert app.window.isVisible()
    c.serving = None
