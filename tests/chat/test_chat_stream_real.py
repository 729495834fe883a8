"""Streaming chat against a real llama-server on stories260K, through tuner/server/client.py: text
arrives in pieces, the last event carries timings (with draft figures when speculating), cancel
closes the stream and the server stops generating, the alias is the model id (also for the
official OpenAI client), and the API key is required and sent."""

from __future__ import annotations

import threading

import pytest

from tuner.server.client import ServerClient, ServerHTTPError
from tuner.server.config import ServerConfig, default_alias
from tuner.server.supervisor import Supervisor

pytestmark = [pytest.mark.server, pytest.mark.timeout(240)]

HELLO = [{"role": "user", "content": "Once upon a time"}]


@pytest.fixture(scope="module")
def spec_server(llama_server_bin, stories260k_session):
    """stories260K drafting for itself (draft-simple, n_max 4), served under its alias."""
    cfg = ServerConfig(model_path=stories260k_session, draft_path=stories260k_session, spec_type="draft-simple",
                       n_max=4, n_ctx=2048, threads=1, alias=default_alias(stories260k_session), cache_ram_mib=64)
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        yield sup
    finally:
        sup.stop()


def test_stream_text_and_final_timings(spec_server):
    assert "-a" in spec_server.argv and "stories260K" in spec_server.argv
    with spec_server.client() as c:
        deltas = list(c.chat_stream(HELLO, max_tokens=48, temperature=0, seed=1, model="stories260K"))
    texts = [d.text for d in deltas if d.text]
    assert len(texts) > 3, "the reply did not arrive in pieces"
    final = [d for d in deltas if d.timings]
    assert final, "no timings in the stream"
    tm = final[-1].timings
    assert tm["predicted_n"] > 0 and tm["predicted_per_second"] > 0
    assert tm["draft_n"] > 0 and 0 <= tm["draft_n_accepted"] <= tm["draft_n"]
    assert any(d.finish_reason in ("stop", "length") for d in deltas)
    assert {d.model for d in deltas if d.model} == {"stories260K"}


def test_cancel_stops_the_generation(spec_server):
    cancel = threading.Event()
    got = []
    with spec_server.client() as c:
        before = c.metrics_text()
        for d in c.chat_stream(HELLO, max_tokens=1900, temperature=1.0, seed=3, cancel=cancel,
                               ignore_eos=True):
            got.append(d)
            if sum(1 for x in got if x.text) >= 5:
                cancel.set()
        assert not any(d.timings for d in got), "the stream ran to its end"
        # the slot is released well before 1900 tokens: the server stopped, not just our reading
        import time

        from tuner.telemetry.prom import parse_metrics

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            slots = c.slots()
            if not any(s.get("is_processing") for s in slots):
                break
            time.sleep(0.1)
        assert not any(s.get("is_processing") for s in c.slots())
        gen = parse_metrics(c.metrics_text()).tokens_predicted_total - parse_metrics(before).tokens_predicted_total
    assert gen < 1900, f"{gen} tokens generated after cancel"


def test_openai_client_sees_the_alias(spec_server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{spec_server.base_url}/v1", api_key="none", max_retries=0, timeout=30)
    ids = [m.id for m in client.models.list()]
    assert ids == ["stories260K"], ids
    out = client.chat.completions.create(model="stories260K", messages=HELLO, max_tokens=8, temperature=0)
    assert out.model == "stories260K"
    with ServerClient(spec_server.base_url) as c:
        assert c.models() == ["stories260K"]


def test_api_key_is_required_and_sent(llama_server_bin, stories260k_session):
    key = "dw-test-key-123"
    cfg = ServerConfig(model_path=stories260k_session, n_ctx=256, threads=1, api_key=key,
                       alias=default_alias(stories260k_session))
    sup = Supervisor(llama_server_bin)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=120)
        with ServerClient(sup.base_url) as anon, pytest.raises(ServerHTTPError) as ei:
            list(anon.chat_stream(HELLO, max_tokens=4))
        assert ei.value.status_code == 401
        with ServerClient(sup.base_url, api_key=key) as c:
            text = "".join(d.text for d in c.chat_stream(HELLO, max_tokens=8, temperature=0))
        assert text
    finally:
        sup.stop()
