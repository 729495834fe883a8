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


@pytest.fixture
def plain_server(llama_server_bin, stories260k_session):
    """stories260K without speculation, on one thread: with llama-server's default (every core) on the shared
    2-core box single requests ran anywhere from 20 to 2,400 tokens/s while other work ran, and no speed
    comparison held; on one thread they stay within a few times of each other."""
    cfg = ServerConfig(model_path=stories260k_session, n_ctx=2048, threads=1, alias=default_alias(stories260k_session))
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        yield sup
    finally:
        sup.stop()


def test_the_chat_tabs_speed_is_the_servers(qtbot, plain_server, stories260k_session):
    """The Chat tab's tokens/s (the server's ``timings`` of its reply, as the tab shows it) against the server's own
    ``timings`` for the same request sent by a plain client without a GUI, interleaved (tab, client, client, tab,
    …): the tab's fastest reply at least 0.8× the client's fastest. The fastest of several, because other programs
    only ever slow a request down; the tab's own cost is in every one of its replies. One-sided: a tab reply faster
    than the plain client's is no cost of the tab (a quiet full-suite run had the tab at 1.20× the client, replies of
    ~0.2 s; a run alone 0.95×; another full-suite run 0.86×, the tab's medians 0.90× the client's: on 2 cores the
    tab's stream and GUI threads share the CPU with the server's one thread, so a tenth is within what this box
    does, while issue 26's fault was 0.02–0.2×). Issue 26: replies showed 34–95 tokens/s while
    other clients got 440–1,800 at the same moments. (That the tab no longer lays the transcript out again while
    a reply streams is checked by the next test, which does not depend on the machine's load.)"""
    c, tab = make_tab(qtbot, serving_info(plain_server, stories260k_session, "no speculation"))
    tab.temp_spin.setValue(0.0)
    tab.max_tokens_spin.setValue(N_TOKENS)
    prompt = "Once upon a time"
    params = dict(tab.sampling(), model=default_alias(stories260k_session))

    def direct() -> float:
        timings = None
        with ServerClient(plain_server.base_url) as client:
            for d in client.chat_stream([{"role": "user", "content": prompt}], N_TOKENS, **params):
                if d.timings is not None:
                    timings = d.timings
        assert timings and timings["predicted_n"] > 100, timings
        return float(timings["predicted_per_second"])

    def in_tab() -> float:
        tab.new_chat()
        with qtbot.waitSignal(tab.reply_done, timeout=60_000) as sig:
            assert tab.send(prompt)
        r = sig.args[0]
        assert r["error"] is None and r["timings"]["predicted_n"] > 100, r
        shown = f"{r['timings']['predicted_per_second']:.1f} tokens/s"
        assert shown in r["figures"] and shown in tab.transcript.toPlainText()  # the figure the tab shows
        return float(r["timings"]["predicted_per_second"])

    direct(), in_tab()  # warm-up: the first requests fill caches
    tab_tps: list[float] = []
    client_tps: list[float] = []
    for i in range(ROUNDS):
        for side in ((tab_tps, in_tab), (client_tps, direct))[:: 1 if i % 2 == 0 else -1]:
            side[0].append(side[1]())
    ratio = max(tab_tps) / max(client_tps)
    print(f"fastest reply: Chat tab {max(tab_tps):.0f}, plain client {max(client_tps):.0f} tokens/s ({ratio:.2f}×); "
          f"tab {sorted(round(x) for x in tab_tps)}, client {sorted(round(x) for x in client_tps)}")
    assert ratio >= 0.80, f"the Chat tab's replies ran at {ratio:.2f}× a plain client's"


#: Tokens per reply of the speed check (stories260K on one thread: about 0.2 s at the model's speed here).
N_TOKENS = 300
#: Replies of each side in the speed check.
ROUNDS = 15


def test_a_streamed_reply_is_appended_not_laid_out_again(qtbot, plain_server, stories260k_session):
    """While a reply streams, the transcript only grows at its end: no change before the new turn (the tab used to
    set the whole transcript's HTML again every 60 ms, a layout of every earlier turn, on the CPU llama-server
    needed). The text shown is the text received, the figures line under it."""
    c, tab = make_tab(qtbot, serving_info(plain_server, stories260k_session, "no speculation"))
    tab.max_tokens_spin.setValue(200)
    with qtbot.waitSignal(tab.reply_done, timeout=60_000):
        assert tab.send("Once upon a time")
    doc = tab.transcript.document()
    before = doc.characterCount()
    shown_before = tab.transcript.toPlainText()
    changes: list[tuple[int, int, int]] = []
    doc.contentsChange.connect(lambda pos, removed, added: changes.append((pos, removed, added)))
    with qtbot.waitSignal(tab.reply_done, timeout=60_000) as sig:
        assert tab.send("And then?")
    reply = sig.args[0]["text"]
    assert len(changes) > 3, "the reply was not streamed in pieces"
    early = [ch for ch in changes if ch[0] < before - 1]
    assert early == [], f"the transcript was laid out again before the new turn: {early[:5]}"
    assert sum(removed for _, removed, _ in changes) <= 1  # only the "…" that stood for the coming text
    text = tab.transcript.toPlainText()
    assert text.startswith(shown_before) and reply.strip()[:30] in text
    assert text.rstrip().endswith(tab.figures[-1])
    tab.new_chat()  # a new chat lays the (empty) transcript out once
    assert tab.transcript.toPlainText() == ""
