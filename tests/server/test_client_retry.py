"""A GET sent on a kept-alive connection the server closed at that moment is sent once more.

llama-server's router closed a kept-alive connection right after a completion, and the next ``GET /models``
on it failed with "Server disconnected without sending a response" (tests/server/test_router_real.py, once in a
full run). A real server does not drop a connection on demand: ``httpx.MockTransport`` stands in for it."""

from __future__ import annotations

import httpx
import pytest

from tuner.server.client import ServerClient, ServerUnreachableError


def _client(fail_first: int) -> tuple[ServerClient, list[str]]:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if len(seen) <= fail_first:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, json={"data": [{"id": "target"}], "status": "ok"})

    client = ServerClient("http://127.0.0.1:9")
    client._http = httpx.Client(base_url=client.base_url, transport=httpx.MockTransport(handler))
    return client, seen


def test_a_get_on_a_closed_keep_alive_connection_is_sent_once_more() -> None:
    client, seen = _client(fail_first=1)
    with client:
        assert [m["id"] for m in client.router_models()] == ["target"]
    assert seen == ["GET /models", "GET /models"]


def test_a_second_disconnect_and_a_post_are_not_retried() -> None:
    client, seen = _client(fail_first=2)
    with client, pytest.raises(ServerUnreachableError, match="RemoteProtocolError"):
        client.router_models()
    assert len(seen) == 2
    client, seen = _client(fail_first=1)
    with client, pytest.raises(ServerUnreachableError):
        client.completion("p", 4)
    assert seen == ["POST /completion"]
