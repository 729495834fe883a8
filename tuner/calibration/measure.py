"""The measurement protocol: one launch per candidate, a discarded warm-up, greedy fixed-length requests.

DESIGN.md "Calibration method" steps 3–4:

* one server launch per candidate (speculative settings are server-wide);
* after start, ``/slots[].speculative`` must be true for a speculative candidate (an incompatible
  draft leaves the server running without speculation: tools/server/server-context.cpp ``load_model``);
* a warm-up request that is not counted;
* every request greedy (``temperature`` 0, ``top_k`` 1), fixed ``n_predict`` (``ignore_eos``), prompt
  cache off (``cache_prompt: false``) and a fresh prefix per repetition, so repeated prompts cannot
  reuse the prompt cache or drafts;
* record ``predicted_per_second``, ``prompt_per_second``, ``draft_n``, ``draft_n_accepted``
  (server-common.cpp ``server_slot_stats::to_json``; the draft fields are omitted when nothing was
  drafted) and the per-position counters from ``/metrics`` (difference of two scrapes);
* a speculative run without any ``draft_n`` has failed, however fast it ran;
* each output is compared with the baseline's for the same prompt and repetition (reported).

The launch itself is abstracted as a :data:`LaunchFn` so the protocol can be driven by the real
supervisor (``tuner.calibration.engine``) or by a test double.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from .candidates import Candidate
from .predict import PerPositionCounts, parse_spec_metrics
from .prompts import Prompt
from .results import Divergence, Measurement, Sample

WARMUP_PROMPT = "Warm-up request, not measured. Once upon a time"


class Cancelled(Exception):
    """The cancel event was set; the server of the current candidate has been stopped."""


class LaunchError(RuntimeError):
    """A candidate's server could not start. ``evidence`` holds the server's last log lines."""

    def __init__(self, message: str, evidence: Sequence[str] = ()) -> None:
        self.evidence = tuple(evidence)
        super().__init__(message)


class CompletionClient(Protocol):
    """What the protocol needs from ``tuner.server.client.ServerClient``."""

    def completion(self, prompt: str, n_predict: int, timeout_s: float = 120.0, **params: object) -> dict: ...

    def slots(self) -> list[dict]: ...

    def metrics_text(self) -> str: ...


@dataclass
class Launch:
    """A running server for one candidate.

    Attributes:
        client: HTTP client of the server.
        stop: stops the server and its whole process tree (idempotent).
        log_tail: ``log_tail(n)`` → last n log lines (for diagnoses).
        load_s: seconds from start to ready.
        speculation_reason: ``log_lines → str`` explaining inactive speculation, when available.
    """

    client: CompletionClient
    stop: Callable[[], None]
    log_tail: Callable[[int], list[str]]
    load_s: float
    speculation_reason: Callable[[list[str]], str] | None = None


AfterWarmup = Callable[[float, "float | None"], "tuple[Sequence[tuple[int, Prompt]], int] | None"]
"""``after_warmup(load_s, warmup_gen_tokens_per_s) -> (prompts, n_predict) | None`` (see measure_candidate)."""

LaunchFn = Callable[[Candidate, threading.Event], Launch]
"""``launch(candidate, cancel) -> Launch``; raises :class:`LaunchError` or :class:`Cancelled`."""


def repetition_prompt(prompt: Prompt, repetition: int) -> str:
    """The text sent for ``prompt`` at ``repetition``: a fresh prefix per repetition, same for every candidate."""
    return f"Request {repetition + 1}.\n{prompt.text}"


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character of two outputs, ``None`` when equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def request_seed(prompt_index: int, repetition: int) -> int:
    """The sampling seed of request (``prompt_index``, ``repetition``): the same on both sides of every
    pair, different across requests."""
    return 1 + 1000 * repetition + prompt_index


def request_params(n_predict: int, seed: int = 1) -> dict:
    """Body fields of every measured request (greedy, fixed length, no prompt cache)."""
    return {
        "temperature": 0.0,
        "top_k": 1,
        "seed": seed,
        "cache_prompt": False,
        "ignore_eos": True,
        "n_predict": n_predict,
    }


class RequestError(RuntimeError):
    """One measured request failed (HTTP error, or no ``timings.predicted_per_second``)."""


def measure_request(
    client: CompletionClient, idx: int, prompt: Prompt, rep: int, n_predict: int, request_timeout_s: float = 300.0
) -> Sample:
    """One measured request of the protocol: ``prompt`` (index ``idx``) at repetition ``rep``.

    Used by :func:`measure_candidate` and by the search's side-by-side paired rounds, so both sides of
    a pair send exactly the same request.

    Raises:
        RequestError: the request failed or its answer has no ``timings.predicted_per_second``.
    """
    try:
        resp = client.completion(repetition_prompt(prompt, rep), n_predict, timeout_s=request_timeout_s,
                                 **{k: v for k, v in request_params(n_predict, request_seed(idx, rep)).items()
                                    if k != "n_predict"})
    except Exception as exc:  # noqa: BLE001
        raise RequestError(f"request failed (prompt {idx + 1}, repetition {rep + 1}): {exc}") from exc
    t = resp.get("timings") or {}
    content = resp.get("content")
    tps = t.get("predicted_per_second")
    if not tps:
        raise RequestError(f"no timings.predicted_per_second in the answer (prompt {idx + 1})")
    return Sample(
        prompt_index=idx,
        category=prompt.category,
        repetition=rep,
        gen_tokens_per_s=float(tps),
        prompt_tokens_per_s=_f(t.get("prompt_per_second")),
        predicted_n=_i(t.get("predicted_n")),
        predicted_ms=_f(t.get("predicted_ms")),
        draft_n=_i(t.get("draft_n")),
        draft_n_accepted=_i(t.get("draft_n_accepted")),
        content=content if isinstance(content, str) else None,
    )


def measure_candidate(
    launch_fn: LaunchFn,
    candidate: Candidate,
    prompts: Sequence[tuple[int, Prompt]],
    repetitions: Sequence[int],
    n_predict: int,
    cancel: threading.Event,
    baseline_outputs: Mapping[tuple[int, int], str] | None = None,
    on_request: Callable[[Sample], None] | None = None,
    request_timeout_s: float = 300.0,
    stage: str = "probe",
    predicted_gen_tokens_per_s: float | None = None,
    deadline_s: float | None = None,
    stop_if: Callable[[Sequence[Sample]], bool] | None = None,
    after_warmup: AfterWarmup | None = None,
) -> Measurement:
    """Launch ``candidate``, run the protocol, stop the server; never leaves the server running.

    Args:
        launch_fn: starts a server for a candidate (see :data:`LaunchFn`).
        candidate: what to measure.
        prompts: ``(index in the prompt set, prompt)`` pairs.
        repetitions: repetition ids to run (each gets its own prompt prefix; ids are shared with the
            baseline so outputs can be compared).
        n_predict: generated tokens per request.
        cancel: checked before every request.
        baseline_outputs: ``(prompt index, repetition) → text`` of the baseline (lossless check).
        on_request: called after every measured request.
        request_timeout_s: per-request HTTP timeout.
        stage: recorded in the measurement.
        predicted_gen_tokens_per_s: the search's prediction, recorded.
        deadline_s: ``time.monotonic()`` value after which no further repetition is started (the
            first repetition always runs).
        stop_if: called with the samples so far after each request; True stops the run early (a clear
            loser); the measurement keeps its samples and is marked ``stopped_early``.
        after_warmup: called once after the warm-up request with ``(load_s, warm-up tokens/s or
            None)``; may return ``(prompts, n_predict)`` to use instead (the search plans the protocol
            from the first launch's speed, so a slow model gets fewer, shorter requests).

    Returns:
        A :class:`Measurement`; failures (launch error, speculation inactive, nothing drafted, a
        request error) are recorded in ``error`` rather than raised.

    Raises:
        Cancelled: ``cancel`` was set (the server has been stopped).
    """
    if cancel.is_set():
        raise Cancelled()
    try:
        launch = launch_fn(candidate, cancel)
    except LaunchError as exc:
        return Measurement(candidate, error=str(exc), stage=stage, predicted_gen_tokens_per_s=predicted_gen_tokens_per_s,
                           evidence=tuple(str(x) for x in exc.evidence))
    try:
        return _run(launch, candidate, prompts, repetitions, n_predict, cancel, baseline_outputs, on_request,
                    request_timeout_s, stage, predicted_gen_tokens_per_s, deadline_s, stop_if, after_warmup)
    finally:
        launch.stop()


def _run(
    launch: Launch,
    candidate: Candidate,
    prompts: Sequence[tuple[int, Prompt]],
    repetitions: Sequence[int],
    n_predict: int,
    cancel: threading.Event,
    baseline_outputs: Mapping[tuple[int, int], str] | None,
    on_request: Callable[[Sample], None] | None,
    request_timeout_s: float,
    stage: str,
    predicted: float | None,
    deadline_s: float | None,
    stop_if: Callable[[Sequence[Sample]], bool] | None = None,
    after_warmup: AfterWarmup | None = None,
) -> Measurement:
    client = launch.client
    base = dict(candidate=candidate, load_s=launch.load_s, stage=stage, predicted_gen_tokens_per_s=predicted)
    speculative = not candidate.is_baseline
    spec_active: bool | None = None
    try:
        slots = client.slots()
        spec_active = any(bool(s.get("speculative")) for s in slots) if slots else None
    except Exception as exc:  # noqa: BLE001 - /slots may be disabled; recorded, not fatal
        spec_active = None
        if speculative:
            return Measurement(**base, error=f"/slots could not be read to check speculation ({exc})")
    if speculative and spec_active is False:
        why = ""
        if launch.speculation_reason is not None:
            why = ": " + launch.speculation_reason(launch.log_tail(200))
        return Measurement(**base, speculative_active=False,
                           error=f"the server started without speculation (/slots speculative: false){why}")

    try:
        warm = client.completion(WARMUP_PROMPT, min(16, n_predict), timeout_s=request_timeout_s,
                                 **{k: v for k, v in request_params(min(16, n_predict)).items() if k != "n_predict"})
    except Exception as exc:  # noqa: BLE001 - the server's HTTP errors are recorded as the failure
        return Measurement(**base, speculative_active=spec_active, error=f"warm-up request failed: {exc}")
    if after_warmup is not None:
        planned = after_warmup(launch.load_s, _f(((warm or {}).get("timings") or {}).get("predicted_per_second")))
        if planned is not None:
            prompts, n_predict = planned

    before = _scrape(client) if speculative else None
    samples: list[Sample] = []
    divergences: list[Divergence] = []
    compared = 0
    error: str | None = None
    stopped_early = False
    for n_rep, rep in enumerate(repetitions):
        if n_rep > 0 and deadline_s is not None and time.monotonic() > deadline_s:
            break
        for idx, prompt in prompts:
            if cancel.is_set():
                raise Cancelled()
            try:
                s = measure_request(client, idx, prompt, rep, n_predict, request_timeout_s)
            except RequestError as exc:
                error = str(exc)
                break
            samples.append(s)
            if baseline_outputs is not None and s.content is not None and (idx, rep) in baseline_outputs:
                compared += 1
                off = first_divergence(baseline_outputs[(idx, rep)], s.content)
                if off is not None:
                    divergences.append(Divergence(idx, rep, off))
            if on_request is not None:
                on_request(s)
            if stop_if is not None and stop_if(samples):
                stopped_early = True
                break
        if error or stopped_early:
            break

    counts: PerPositionCounts | None = None
    if speculative:
        after = _scrape(client)
        if after is not None:
            counts = after.minus(before)
    if speculative and error is None and samples and not any(s.draft_n for s in samples):
        error = "draft_n absent in every answer: the server never drafted, so this is not a speculative run"
    lossless = None
    if speculative and compared:
        lossless = not divergences
    return Measurement(
        **base,
        samples=tuple(samples),
        speculative_active=spec_active,
        counts=counts,
        error=error,
        lossless=lossless,
        divergences=tuple(divergences),
        stopped_early=stopped_early,
    )


def _scrape(client: CompletionClient) -> PerPositionCounts | None:
    try:
        return parse_spec_metrics(client.metrics_text())
    except Exception:  # noqa: BLE001 - metrics are optional (no --metrics); prediction then unavailable
        return None


def _f(v: object) -> float | None:
    try:
        return float(v) if v is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _i(v: object) -> int | None:
    try:
        return int(v) if v is not None else None  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def needs_fresh_launch_per_repetition(candidate: Candidate) -> bool:
    """True for n-gram types: their n-gram pool lives in the server across requests (common/ngram-*.cpp,
    ``ngram-mod`` keeps one hash pool for all slots), so a repeated prompt would draft from the previous
    repetition's output. Each repetition then gets its own launch."""
    return candidate.spec_type.startswith("ngram")


def measure_repetitions(
    launch_fn: LaunchFn,
    candidate: Candidate,
    prompts: Sequence[tuple[int, Prompt]],
    repetitions: Sequence[int],
    n_predict: int,
    cancel: threading.Event,
    **kw: object,
) -> Measurement:
    """:func:`measure_candidate`, with one launch per repetition where
    :func:`needs_fresh_launch_per_repetition` says so (the launches are pooled into one measurement).

    Same arguments, return value and exceptions as :func:`measure_candidate`.
    """
    if len(repetitions) <= 1 or not needs_fresh_launch_per_repetition(candidate):
        return measure_candidate(launch_fn, candidate, prompts, repetitions, n_predict, cancel, **kw)  # type: ignore[arg-type]
    pooled: Measurement | None = None
    for rep in repetitions:
        m = measure_candidate(launch_fn, candidate, prompts, [rep], n_predict, cancel, **kw)  # type: ignore[arg-type]
        pooled = m if pooled is None else pooled.merged(m)
        if not m.ok or m.stopped_early:
            break
    assert pooled is not None
    return pooled
