"""HTTP client for llama-server (the one adapter over ``httpx``).

Endpoints (registered in tools/server/server.cpp, handled by ``server_routes`` in
tools/server/server-context.cpp): ``/health`` (503 while loading, 200 when ready), ``/props``
(``model_path``, ``build_info``, …), ``/slots`` (``speculative`` per slot; 501 when disabled),
``/metrics`` (Prometheus text; 501 without ``--metrics``), ``/completion``, ``/v1/completions`` and
``/v1/chat/completions`` (final answer carries ``timings``).
Proxy variables are ignored (``trust_env=False``): the server is local.

Router mode (``llama-server --models-preset FILE``, :mod:`tuner.server.router`): the router proxies ``/props``,
``/metrics`` and ``/slots`` to the model named by ``?model=ID`` (tools/server/server-models.cpp
``server_models_routes::init_routes``, ``proxy_get``); a GET for a model that is not loaded would load it
(``is_autoload``), so every request this client makes with ``model=`` adds ``autoload=false`` (a model not
loaded answers 400 "model is not loaded"). ``/models`` lists the router's models with their status;
``POST /models/load`` / ``/models/unload`` load and unload one.

Idle sleep (``--sleep-idle-seconds``): only :data:`NON_WAKING_PATHS` are answered without waking a sleeping
server; every other route loads the model again first. A client made with ``paths=NON_WAKING_PATHS`` (the
telemetry, liveness and sleep pollers) refuses any other path, so a poller cannot wake the model by mistake.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from tuner.errors import DraftwiseError

#: The routes llama-server answers while asleep without loading the model again: their handlers call
#: ``create_response(true)`` (``bypass_sleep``) and answer from cached responses while sleeping
#: (tools/server/server-context.cpp ``server_routes::init_routes``: ``get_health``, ``get_metrics``,
#: ``get_props``, ``get_models`` for ``/models`` and ``/v1/models``; ``update_cached_responses``). Every other
#: route, ``/slots`` included, waits in ``server_queue::wait_until_no_sleep`` until the model is loaded again.
NON_WAKING_PATHS: frozenset[str] = frozenset({"/health", "/metrics", "/props", "/models", "/v1/models"})


class ServerClientError(DraftwiseError, RuntimeError):
    """Base of client errors; ``url`` names the request."""

    def __init__(self, url: str, message: str) -> None:
        self.url = url
        super().__init__(f"{url}: {message}")


class ServerUnreachableError(ServerClientError):
    """No HTTP answer (connection refused/reset, timeout)."""


class ServerHTTPError(ServerClientError):
    """An HTTP answer other than 200. ``status_code`` and ``message`` (the server's
    ``error.message`` when it sent one) tell why."""

    def __init__(self, url: str, status_code: int, message: str) -> None:
        self.status_code = status_code
        self.message = message
        super().__init__(url, f"HTTP {status_code}: {message}")


@dataclass(frozen=True)
class Health:
    """Answer of ``GET /health``: ``status_code`` (200 ready, 503 loading, None unreachable),
    ``ok``, and ``message`` (``"Loading model"``, ``"ok"``, or the connection error)."""

    status_code: int | None
    ok: bool
    message: str


@dataclass(frozen=True)
class ChatDelta:
    """One server-sent event of a streamed ``/v1/chat/completions`` answer.

    Attributes:
        text: the content added by this chunk (``""`` for chunks without content).
        finish_reason: ``"stop"`` / ``"length"`` on the last choice chunk, else None.
        timings: llama.cpp's ``timings`` dict (``predicted_n``, ``predicted_per_second`` in
            tokens/s, ``draft_n`` / ``draft_n_accepted`` only when drafts were made:
            server-common.cpp ``server_slot_stats::to_json``); b11434 sends it with the final chunk.
        model: the ``model`` field (the served ``--alias``), or None.
    """

    text: str
    finish_reason: str | None = None
    timings: dict | None = None
    model: str | None = None


def _error_message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300]
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
    return resp.text[:300]


class ServerClient:
    """Synchronous client for one llama-server.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080``.
        api_key: sent as ``Authorization: Bearer …`` when set.
        timeout_s: default timeout of short requests (completions get their own).
        paths: when given, the only paths this client may request (e.g. :data:`NON_WAKING_PATHS`); any
            other raises :class:`ServerClientError` before anything is sent.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 10.0,
                 paths: frozenset[str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.paths = paths
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, timeout_s: float | None = None, **kw: Any) -> httpx.Response:
        url = self.base_url + path
        if self.paths is not None and path.split("?", 1)[0] not in self.paths:
            raise ServerClientError(url, f"{method} {path} is not allowed on this client (allowed: "
                                    f"{', '.join(sorted(self.paths))}): it would wake a sleeping server")
        try:
            if timeout_s is not None:
                kw["timeout"] = timeout_s
            try:
                return self._http.request(method, path, **kw)
            except httpx.RemoteProtocolError:
                if method != "GET":
                    raise
                # the server closed a kept-alive connection as the request went out ("Server disconnected without
                # sending a response": the router, right after a completion): a GET is safe to send again, once
                return self._http.request(method, path, **kw)
        except httpx.TimeoutException as exc:
            raise ServerUnreachableError(url, f"timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(url, f"{type(exc).__name__}: {exc}") from exc

    def _json(self, method: str, path: str, timeout_s: float | None = None, **kw: Any) -> Any:
        resp = self._request(method, path, timeout_s=timeout_s, **kw)
        if resp.status_code != 200:
            raise ServerHTTPError(self.base_url + path, resp.status_code, _error_message(resp))
        try:
            return resp.json()
        except ValueError as exc:
            raise ServerHTTPError(self.base_url + path, resp.status_code, f"not JSON: {resp.text[:200]!r}") from exc

    def health(self, timeout_s: float = 2.0) -> Health:
        """``GET /health``; never raises (unreachable → ``status_code`` None)."""
        try:
            resp = self._request("GET", "/health", timeout_s=timeout_s)
        except ServerUnreachableError as exc:
            return Health(None, False, str(exc))
        if resp.status_code == 200:
            return Health(200, True, "ok")
        return Health(resp.status_code, False, _error_message(resp))

    def props(self, timeout_s: float | None = None, model: str | None = None) -> dict:
        """``GET /props`` as a dict (``model_path``, ``build_info``, ``total_slots``, ``is_sleeping``, …);
        ``timeout_s`` None = the client's default. ``model``: on a router, that model's own ``/props``
        (never loading it: :func:`model_query`); None on a router = the router's own stub (``role`` "router").

        Raises: ServerUnreachableError, ServerHTTPError (400 on a router: no such model, or not loaded).
        """
        return self._json("GET", "/props" + model_query(model), timeout_s=timeout_s)

    def slots(self, model: str | None = None) -> list[dict]:
        """``GET /slots``: one dict per slot (``speculative`` bool, ``n_ctx``, ``params``); ``model``: on a
        router, that loaded model's slots. ``/slots`` wakes a sleeping server: never a poller's request.

        Raises: ServerUnreachableError, ServerHTTPError (501 when the server has slots disabled).
        """
        path = "/slots" + model_query(model)
        data = self._json("GET", path)
        if not isinstance(data, list):
            raise ServerHTTPError(self.base_url + path, 200, f"expected a list, got {type(data).__name__}")
        return data

    def metrics_text(self, model: str | None = None) -> str:
        """``GET /metrics`` Prometheus text (``llamacpp:`` metrics); ``model``: on a router, that loaded
        model's own counters (a model not loaded answers 400, it is never loaded for this).

        Raises: ServerUnreachableError, ServerHTTPError (501 without ``--metrics``).
        """
        path = "/metrics" + model_query(model)
        resp = self._request("GET", path)
        if resp.status_code != 200:
            raise ServerHTTPError(self.base_url + path, resp.status_code, _error_message(resp))
        return resp.text

    def router_models(self, reload: bool = False) -> list[dict]:
        """``GET /models`` of a router: one dict per model (``id``, ``aliases``, ``tags``, ``status`` with
        ``value`` — ``unloaded``, ``loading``, ``loaded``, ``sleeping`` —, ``args``, and ``failed`` /
        ``exit_code`` after a crash; tools/server/server-models.cpp ``get_router_models``). ``reload``:
        ``?reload=1``, the router reads its preset file again first (``server_models::load_models``: a
        changed or removed section's running model is unloaded, a new one becomes servable).

        Raises: ServerUnreachableError, ServerHTTPError (500 when a reloaded preset is refused: the router
        keeps its old list).
        """
        data = self._json("GET", "/models?reload=1" if reload else "/models")
        rows = data.get("data") if isinstance(data, dict) else None
        return [r for r in rows or () if isinstance(r, dict)]

    def load_model(self, model: str) -> None:
        """``POST /models/load`` on a router: start loading ``model`` (the answer comes at once; the least
        recently used idle model is unloaded first when ``--models-max`` are loaded).

        Raises: ServerUnreachableError, ServerHTTPError (404 unknown model, 400 already running).
        """
        self._json("POST", "/models/load", json={"model": model})

    def unload_model(self, model: str) -> None:
        """``POST /models/unload`` on a router: stop ``model``'s process.

        Raises: ServerUnreachableError, ServerHTTPError (400 not running).
        """
        self._json("POST", "/models/unload", json={"model": model})

    def completion(self, prompt: str | list[int], n_predict: int, timeout_s: float = 120.0, **params: Any) -> dict:
        """``POST /completion`` (not streamed); returns the answer with ``content`` and ``timings``
        (``predicted_per_second``, and ``draft_n`` / ``draft_n_accepted`` only when drafts were
        made: server-common.cpp ``server_slot_stats::to_json``).

        Extra ``params`` go into the request body (e.g. ``temperature=0``, ``cache_prompt=False``,
        ``seed=1``). A list ``prompt`` is sent as a token array (tools/server/server-common.cpp
        ``tokenize_input_prompts`` takes token ids as they are).

        Raises: ServerUnreachableError (also when the server dies mid-request), ServerHTTPError.
        """
        body = {"prompt": prompt, "n_predict": int(n_predict), "stream": False}
        body.update(params)
        return self._json("POST", "/completion", timeout_s=timeout_s, json=body)

    def oai_completion(self, prompt: str | list[int], n_predict: int, timeout_s: float = 120.0, **params: Any) -> dict:
        """``POST /v1/completions`` (OpenAI shape, not streamed) with the same body fields as
        :meth:`completion`; the answer dict with ``content`` set to ``choices[0].text`` (so callers read
        it like a ``/completion`` answer) and llama.cpp's ``timings``. ik_llama.cpp reports
        ``draft_n`` only here (see ``tuner.server.dialect.Dialect.draft_counts_endpoint``).

        Raises: ServerUnreachableError, ServerHTTPError.
        """
        body = {"prompt": prompt, "max_tokens": int(n_predict), "n_predict": int(n_predict), "stream": False}
        body.update(params)
        data = self._json("POST", "/v1/completions", timeout_s=timeout_s, json=body)
        try:
            text = data["choices"][0]["text"]
        except (KeyError, IndexError, TypeError):
            text = None
        if isinstance(data, dict) and isinstance(text, str):
            data.setdefault("content", text)
        return data

    def chat(self, messages: list[dict], max_tokens: int, timeout_s: float = 120.0, **params: Any) -> dict:
        """``POST /v1/chat/completions`` (OpenAI shape, not streamed); the answer dict
        (``choices``, ``usage``, and llama.cpp's ``timings``).

        Raises: ServerUnreachableError, ServerHTTPError.
        """
        body = {"messages": messages, "max_tokens": int(max_tokens), "stream": False}
        body.update(params)
        return self._json("POST", "/v1/chat/completions", timeout_s=timeout_s, json=body)

    def chat_stream(self, messages: list[dict], max_tokens: int, timeout_s: float = 120.0,
                    cancel: threading.Event | None = None, **params: Any) -> Iterator[ChatDelta]:
        """``POST /v1/chat/completions`` with ``"stream": true``: yields one :class:`ChatDelta` per
        server-sent ``data:`` event until ``data: [DONE]`` (tools/server/server-http.cpp streams
        them; the last choice chunk carries ``finish_reason`` and ``timings``).

        Stopping: when ``cancel`` is set (checked after every event) or the caller stops iterating
        (``close()`` on the generator), the HTTP connection is closed; llama-server notices the
        closed connection and releases the slot (server-http.cpp ``is_connection_closed``), so the
        generation stops instead of running on to ``max_tokens``.

        Args:
            messages: OpenAI-shaped ``[{"role": "user", "content": "…"}, …]``.
            max_tokens: most tokens to generate.
            timeout_s: the longest wait for the connection and for each next event, seconds.
            cancel: optional event that stops the stream.
            params: extra body fields (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``model``, …).

        Raises:
            ServerUnreachableError: no connection, a timeout, or the server went away mid-stream.
            ServerHTTPError: a non-200 answer (401 without the right API key) or an ``error``
                event in the stream.
        """
        path = "/v1/chat/completions"
        url = self.base_url + path
        if self.paths is not None and path not in self.paths:
            raise ServerClientError(url, f"POST {path} is not allowed on this client: it would wake a sleeping server")
        body = {"messages": messages, "max_tokens": int(max_tokens), "stream": True}
        body.update(params)
        try:
            with self._http.stream("POST", path, json=body, timeout=timeout_s) as resp:
                if resp.status_code != 200:
                    resp.read()
                    raise ServerHTTPError(url, resp.status_code, _error_message(resp))
                for line in resp.iter_lines():
                    if cancel is not None and cancel.is_set():
                        return
                    if not line.startswith("data:"):
                        continue  # blank separators, ": ping" comments
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        obj = json.loads(data)
                    except ValueError as exc:
                        raise ServerHTTPError(url, 200, f"stream event is not JSON: {data[:200]!r}") from exc
                    err = obj.get("error") if isinstance(obj, dict) else None
                    if err:
                        msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                        code = err.get("code", 500) if isinstance(err, dict) else 500
                        raise ServerHTTPError(url, int(code) if isinstance(code, int) else 500, str(msg))
                    yield _chat_delta(obj)
                    if cancel is not None and cancel.is_set():
                        return
        except httpx.TimeoutException as exc:
            raise ServerUnreachableError(url, f"timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(url, f"{type(exc).__name__}: {exc}") from exc

    def models(self) -> list[str]:
        """``GET /v1/models``: the ids the server reports (the ``--alias`` when one was given).

        Raises: ServerUnreachableError, ServerHTTPError (401 without the right API key).
        """
        data = self._json("GET", "/v1/models")
        rows = data.get("data") if isinstance(data, dict) else None
        return [str(r.get("id")) for r in rows or () if isinstance(r, dict)]

    def tokenize(self, text: str, timeout_s: float = 60.0) -> list[int]:
        """``POST /tokenize`` with ``add_special`` false: the token ids of ``text`` in the loaded model's
        vocabulary (tools/server/server-context.cpp, the ``/tokenize`` handler). Used to size long-context
        prompts to the served context.

        Raises: ServerUnreachableError, ServerHTTPError, ServerClientError (no ``tokens`` list).
        """
        data = self._json("POST", "/tokenize", timeout_s=timeout_s, json={"content": text, "add_special": False})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ServerClientError(self.base_url + "/tokenize", "answer has no 'tokens' list")
        return [int(t) if not isinstance(t, dict) else int(t.get("id", 0)) for t in tokens]


def model_query(model: str | None) -> str:
    """The query string that names ``model`` on a router without loading it: ``?model=ID&autoload=false``
    (tools/server/server-models.cpp ``is_autoload``, ``router_validate_model``); ``""`` for None."""
    return "" if model is None else f"?model={quote(model, safe='')}&autoload=false"


def _chat_delta(obj: dict) -> ChatDelta:
    """One parsed stream event → :class:`ChatDelta` (tolerates chunks without ``choices``)."""
    text = ""
    finish = None
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if isinstance(content, str):
            text += content
        if choice.get("finish_reason"):
            finish = str(choice["finish_reason"])
    timings = obj.get("timings")
    return ChatDelta(text=text, finish_reason=finish, timings=timings if isinstance(timings, dict) else None,
                     model=obj.get("model") if isinstance(obj.get("model"), str) else None)
