"""The measurement protocol: one launch per candidate, a discarded warm-up, greedy fixed-length requests.

DESIGN.md "Calibration method" steps 3–4:

* one server launch per candidate (speculative settings are server-wide);
* after start, ``/slots[].speculative`` must be true for a speculative candidate (an incompatible
  draft leaves the server running without speculation: tools/server/server-context.cpp ``load_model``);
  ik_llama.cpp's slots have no such field, so there the supervisor's start-up log check stands in
  (``Launch.speculative_active``) and raw completions go to ``/v1/completions``, the endpoint whose
  answer carries its draft counts (``tuner.server.dialect.Dialect.draft_counts_endpoint``);
* a warm-up request that is not counted;
* every request in the shape the server will see (:class:`tuner.calibration.workload.Workload`:
  ``/v1/chat/completions`` for a model with a chat template, else ``/completion``), at the served
  sampling with a seed fixed per (prompt, repetition), fixed ``n_predict`` (``ignore_eos``), prompt
  cache off (``cache_prompt: false``) and a fresh prefix per repetition, so repeated prompts cannot
  reuse the prompt cache or drafts; long-context prompts are sized to the served context with the
  server's tokenizer; without a workload (tests) every request is greedy (``temperature`` 0, ``top_k`` 1)
  through ``/completion``;
* at sampled settings a separate short greedy pass on the candidate's first launch is the lossless check;
* record ``predicted_per_second``, ``prompt_per_second``, ``draft_n``, ``draft_n_accepted``
  (server-common.cpp ``server_slot_stats::to_json``; the draft fields are omitted when nothing was
  drafted) and the per-position counters from ``/metrics`` (difference of two scrapes);
* a speculative run without any ``draft_n`` has failed, however fast it ran;
* each output is compared with the baseline's for the same prompt and repetition (reported) when the
  workload is greedy; at sampled settings the greedy pass is compared instead.

The launch itself is abstracted as a :data:`LaunchFn` so the protocol can be driven by the real
supervisor (``tuner.calibration.engine``) or by a test double.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tuner.errors import Cancelled, DraftwiseError

from .candidates import Candidate
from .predict import PerPositionCounts, parse_spec_metrics
from .prompts import Prompt
from .results import Divergence, Measurement, Sample
from .sampling import GREEDY, Sampling
from .workload import (
    Workload,
    chat_messages,
    fit_long_prompt,
    request_seed,
)

log = logging.getLogger(__name__)


WARMUP_PROMPT = "Warm-up request, not measured. Once upon a time"




class LaunchError(DraftwiseError, RuntimeError):
    """A candidate's server could not start. ``evidence`` holds the server's last log lines."""

    def __init__(self, message: str, evidence: Sequence[str] = ()) -> None:
        self.evidence = tuple(evidence)
        super().__init__(message)


class CompletionClient(Protocol):
    """What the protocol needs from ``tuner.server.client.ServerClient``."""

    def completion(self, prompt: str, n_predict: int, timeout_s: float = 120.0, **params: object) -> dict: ...

    def slots(self) -> list[dict]: ...

    def metrics_text(self) -> str: ...

    # Called only by workloads that need them (chat models, long-context prompts): a test double for other
    # workloads may leave them out.
    def chat(self, messages: list[dict], max_tokens: int, timeout_s: float = 120.0, **params: Any) -> dict: ...

    def tokenize(self, text: str, timeout_s: float = 60.0) -> list[int]: ...

    # Optional (read with getattr, for sampled workloads): def props(self) -> dict


@dataclass
class Launch:
    """A running server for one candidate.

    Attributes:
        client: HTTP client of the server.
        stop: stops the server and its whole process tree (idempotent).
        log_tail: ``log_tail(n)`` → last n log lines (for diagnoses).
        load_s: seconds from start to ready.
        speculation_reason: ``log_lines → str`` explaining inactive speculation, when available.
        workload: what the requests look like (endpoint, sampling, served context); ``None`` = greedy
            ``/completion`` requests (the launch function of a sweep sets it, so the search need not
            know about it).
        speculative_active: whether speculation was confirmed at start-up by other means than
            ``/slots[].speculative`` (used only when the server's slots lack that field, as
            ik_llama.cpp's do; ``None`` = unknown).
    """

    client: CompletionClient
    stop: Callable[[], None]
    log_tail: Callable[[int], list[str]]
    load_s: float
    speculation_reason: Callable[[list[str]], str] | None = None
    workload: Workload | None = None
    speculative_active: bool | None = None


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


def request_params(n_predict: int, seed: int = 1, sampling: Sampling | None = None) -> dict:
    """Body fields of every measured request: the sampling fields (greedy ``temperature`` 0 / ``top_k`` 1
    by default; only the set ones of ``sampling`` otherwise, so the server's defaults apply to the rest),
    ``seed``, fixed length (``n_predict``, ``ignore_eos``), no prompt cache (``cache_prompt`` false).
    llama-server reads the same fields from a chat body (tools/server/server-schema.cpp declares them;
    tools/server/server-common.cpp ``oaicompat_chat_params_parse`` copies the body's other fields through
    and maps ``max_tokens`` to ``n_predict``)."""
    body = (sampling or GREEDY).body()
    body.update({"seed": seed, "cache_prompt": False, "ignore_eos": True, "n_predict": n_predict})
    return body


def send_request(
    client: CompletionClient,
    workload: Workload,
    prompt: Prompt,
    repetition: int,
    n_predict: int,
    seed: int,
    timeout_s: float,
    greedy: bool = False,
    text: str | None = None,
) -> tuple[dict, str | None]:
    """One measured request of ``prompt`` at ``repetition`` in the workload's shape.

    Args:
        client: the server's client (``chat`` is needed for a chat workload).
        workload: endpoint and sampling.
        prompt: the prompt (a conversation goes to a chat model as it is, flattened to a base model).
        repetition: its repetition id (the fresh prefix ``"Request N."``).
        n_predict: tokens to generate.
        seed: the sampling seed.
        timeout_s: HTTP timeout.
        greedy: use greedy sampling whatever the workload says (the lossless pass).
        text: the prompt text to use instead of ``prompt.text`` (a sized long-context prompt).

    Returns:
        ``(timings dict, generated text or None)``; for chat, ``choices[0].message.content``.

    Raises:
        Whatever the client raises (``ServerHTTPError``, ``ServerUnreachableError``).
    """
    params = request_params(n_predict, seed, GREEDY if greedy else workload.sampling)
    params.pop("n_predict")
    if workload.chat:
        p = prompt if text is None else Prompt(text=text, category=prompt.category)
        resp = client.chat(chat_messages(p, repetition), n_predict, timeout_s=timeout_s, **params)
        try:
            content = resp["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = None
    else:
        body = text if text is not None else prompt.text
        send = client.completion
        if workload.raw_endpoint == "/v1/completions":
            send = client.oai_completion  # type: ignore[attr-defined]
        resp = send(repetition_prompt(Prompt(text=body), repetition), n_predict, timeout_s=timeout_s, **params)
        content = resp.get("content")
    return (resp.get("timings") or {}), (content if isinstance(content, str) else None)


class RequestError(DraftwiseError, RuntimeError):
    """One measured request failed (HTTP error, or no ``timings.predicted_per_second``)."""


def bounded_timeout(request_timeout_s: float, hard_deadline_s: float | None) -> float:
    """The HTTP timeout (seconds) of the next request: ``request_timeout_s``, never past
    ``hard_deadline_s`` (a ``time.monotonic()`` value; ``None`` = no deadline), and at least 1 s."""
    if hard_deadline_s is None:
        return request_timeout_s
    return max(1.0, min(request_timeout_s, hard_deadline_s - time.monotonic()))


def measure_request(
    client: CompletionClient, idx: int, prompt: Prompt, rep: int, n_predict: int, request_timeout_s: float = 300.0,
    workload: Workload | None = None, sized: dict[int, str] | None = None, greedy: bool = False,
) -> Sample:
    """One measured request of the protocol: ``prompt`` (index ``idx``) at repetition ``rep``, in the
    workload's shape (endpoint, sampling, seed :func:`request_seed` of ``(idx, rep)``; a long-context prompt
    sized to the served context with the server's tokenizer, cached in ``sized``).

    Used by :func:`measure_candidate` and by the search's side-by-side paired rounds, so both sides of
    a pair send exactly the same request (the same model sizes a long prompt to the same text).

    Args:
        workload: request shape and sampling; ``None`` = ``/completion``, greedy.
        sized: per-launch cache of sized long-context texts (prompt index → text).
        greedy: greedy whatever the workload says (warm-ups, the lossless pass).

    Raises:
        RequestError: the request failed or its answer has no ``timings.predicted_per_second``.
    """
    wl = workload or Workload()
    try:
        text = _sized_text(client, wl, idx, prompt, n_predict, sized if sized is not None else {})
        t, content = send_request(client, wl, prompt, rep, n_predict, request_seed(idx, rep), request_timeout_s,
                                  greedy=greedy, text=text)
    except Exception as exc:  # noqa: BLE001
        raise RequestError(f"request failed (prompt {idx + 1}, repetition {rep + 1}): {exc}") from exc
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
        content=content,
        prompt_n=_i(t.get("prompt_n")),
        endpoint=wl.endpoint,
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
    hard_deadline_s: float | None = None,
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
        hard_deadline_s: ``time.monotonic()`` value at which the run ends whatever it is doing (the
            sweep's hard time limit): no request starts after it, the one in flight is given up when it
            passes (each request's HTTP timeout is bounded by it), and the measurement keeps the
            complete requests so far, marked ``cut_short``. (The launch itself is bounded by the
            ``cancel`` the caller passes: see ``tuner.calibration.search``.)

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
                    request_timeout_s, stage, predicted_gen_tokens_per_s, deadline_s, stop_if, after_warmup,
                    hard_deadline_s)
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
    hard_deadline_s: float | None = None,
) -> Measurement:
    client = launch.client

    def past_hard() -> bool:
        return hard_deadline_s is not None and time.monotonic() >= hard_deadline_s

    def timeout() -> float:
        return bounded_timeout(request_timeout_s, hard_deadline_s)

    # every result of this run starts as this one (checks and samples replaced below)
    base = Measurement(candidate=candidate, load_s=launch.load_s, stage=stage, predicted_gen_tokens_per_s=predicted)
    speculative = not candidate.is_baseline
    spec_active: bool | None = None
    try:
        slots = client.slots()
        if slots and not any("speculative" in s for s in slots):
            # ik_llama.cpp's /slots has no such field; its supervisor checked the start-up log instead
            spec_active = launch.speculative_active
        else:
            spec_active = any(bool(s.get("speculative")) for s in slots) if slots else None
    except Exception as exc:  # noqa: BLE001 - /slots may be disabled; recorded, not fatal
        log.debug("/slots unavailable", exc_info=True)
        spec_active = None
        if speculative:
            return replace(base, error=f"/slots could not be read to check speculation ({exc})")
    if speculative and spec_active is False:
        why = ""
        if launch.speculation_reason is not None:
            why = ": " + launch.speculation_reason(launch.log_tail(200))
        return replace(base, speculative_active=False,
                       error=f"the server started without speculation (/slots speculative: false){why}")

    wl = launch.workload or Workload()
    sampled = not wl.sampling.is_greedy
    if sampled and not wl.server_sampling:
        _read_server_sampling(client, wl)
    if past_hard():
        return replace(base, speculative_active=spec_active, cut_short=True)
    try:
        warm_t, _ = send_request(client, wl, Prompt(text=WARMUP_PROMPT), -1, min(16, n_predict), 1,
                                 timeout(), greedy=True)
    except Exception as exc:  # noqa: BLE001 - the server's HTTP errors are recorded as the failure
        log.debug("warm-up request failed", exc_info=True)
        if past_hard():
            return replace(base, speculative_active=spec_active, cut_short=True)
        return replace(base, speculative_active=spec_active, error=f"warm-up request failed: {exc}")
    if after_warmup is not None:
        planned = after_warmup(launch.load_s, _f((warm_t or {}).get("predicted_per_second")))
        if planned is not None:
            prompts, n_predict = planned

    sized: dict[int, str] = {}
    before = _scrape(client) if speculative else None
    samples: list[Sample] = []
    divergences: list[Divergence] = []
    compared = 0
    error: str | None = None
    stopped_early = False
    cut = False
    for n_rep, rep in enumerate(repetitions):
        if n_rep > 0 and deadline_s is not None and time.monotonic() > deadline_s:
            break
        for idx, prompt in prompts:
            if past_hard():
                cut = True
                break
            if cancel.is_set():
                raise Cancelled()
            if prompt.fill is not None and not _keep_long(wl, prompts, samples, n_predict):
                continue
            try:
                s = measure_request(client, idx, prompt, rep, n_predict, timeout(), workload=wl, sized=sized)
            except RequestError as exc:
                if past_hard():  # given up at the hard deadline: not a failure of the candidate
                    cut = True
                    break
                error = str(exc)
                break
            samples.append(s)
            if (not sampled and baseline_outputs is not None and s.content is not None
                    and (idx, rep) in baseline_outputs):
                compared += 1
                off = first_divergence(baseline_outputs[(idx, rep)], s.content)
                if off is not None:
                    divergences.append(Divergence(idx, rep, off))
            if on_request is not None:
                on_request(s)
            if stop_if is not None and stop_if(samples):
                stopped_early = True
                break
        if error or stopped_early or cut:
            break

    counts: PerPositionCounts | None = None
    if speculative:
        after = _scrape(client)
        if after is not None:
            counts = after.minus(before)
    greedy_draft_n: int | None = None
    if (sampled and error is None and not cut and wl.greedy_check_prompts > 0 and repetitions
            and min(repetitions) == 0):
        try:
            greedy_draft_n, n_cmp, divs = _greedy_pass(client, wl, prompts, candidate.is_baseline, request_timeout_s,
                                                       cancel)
            compared += n_cmp
            divergences.extend(divs)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001
            log.debug("greedy lossless check failed", exc_info=True)
            error = f"greedy lossless check failed: {exc}"
    no_drafts_at: str | None = None
    if speculative and error is None and not cut and samples and not any(s.draft_n for s in samples):
        if candidate.spec_type.startswith("ngram"):
            # A finding, not a broken run: n-gram lookup drafts only where the text so far repeats an
            # n-gram (common/ngram-*.cpp); sampled text often never does.
            no_drafts_at = wl.sampling.describe(wl.server_sampling or None)
            if sampled and greedy_draft_n:
                why = f", although it drafted {greedy_draft_n} tokens at greedy settings (the lossless check)"
            elif sampled and greedy_draft_n == 0:
                why = ", nor at greedy settings (the lossless check): these prompts repeat no n-gram"
            elif not sampled:
                why = ": these prompts repeat no n-gram it could continue"
            else:
                why = ""
            error = (f"{candidate.spec_type} never drafted at the served sampling ({no_drafts_at}){why}; "
                     "no speedup is possible for these requests")
        else:
            error = "draft_n absent in every answer: the server never drafted, so this is not a speculative run"
    lossless = None
    if speculative and compared:
        lossless = not divergences
    return replace(
        base,
        samples=tuple(samples),
        speculative_active=spec_active,
        counts=counts,
        error=error,
        lossless=lossless,
        divergences=tuple(divergences),
        stopped_early=stopped_early,
        greedy_draft_n=greedy_draft_n,
        no_drafts_at=no_drafts_at,
        cut_short=cut,
    )


def _read_server_sampling(client: CompletionClient, wl: Workload) -> None:
    """Fill ``wl.server_sampling`` from ``GET /props`` ``default_generation_settings.params``
    (tools/server/server-context.cpp, the ``/props`` handler); left empty when unreadable."""
    props = getattr(client, "props", None)
    if props is None:
        return
    try:
        params = (props().get("default_generation_settings") or {}).get("params") or {}
    except Exception:  # noqa: BLE001 - wording only
        log.debug("sampling wording unavailable", exc_info=True)
        return
    for k in ("temperature", "top_k", "top_p", "min_p"):
        if isinstance(params.get(k), (int, float)):
            wl.server_sampling[k] = round(float(params[k]), 4) if k != "top_k" else int(params[k])


def _keep_long(wl: Workload, prompts: Sequence[tuple[int, Prompt]], samples: Sequence[Sample],
               n_predict: int) -> bool:
    """Whether the sweep sends its long-context requests (decided once, from the short requests so far:
    :meth:`tuner.calibration.workload.LongContextPlan.decide`)."""
    if wl.long_plan.decided:
        return wl.long_plan.keep
    longs = [p for _, p in prompts if p.fill is not None]
    pp = [s.prompt_tokens_per_s for s in samples if s.prompt_tokens_per_s]
    gen = [s.gen_tokens_per_s for s in samples if s.gen_tokens_per_s]
    if not pp or not gen:
        return True  # nothing measured yet to decide from (decided at a later launch)
    want = int((longs[0].fill or 0.5) * (wl.n_ctx or 4096))
    return wl.long_plan.decide(len(longs), want, sum(pp) / len(pp), sum(gen) / len(gen), n_predict, wl.budget_s)


def _sized_text(client: CompletionClient, wl: Workload, idx: int, prompt: Prompt, n_predict: int,
                cache: dict[int, str]) -> str | None:
    """The sized text of a long-context prompt (``prompt.fill`` set), ``None`` for an ordinary prompt.

    Sized with the server's tokenizer (``POST /tokenize``), so it is the same request for every candidate
    of a target. Raises whatever the client raises."""
    if prompt.fill is None:
        return None
    if idx not in cache:
        n_ctx = wl.n_ctx or 4096
        count = lambda text: len(client.tokenize(text))  # noqa: E731
        cache[idx] = fit_long_prompt(prompt, n_ctx, n_predict, count)
    return cache[idx]


def _greedy_pass(
    client: CompletionClient,
    wl: Workload,
    prompts: Sequence[tuple[int, Prompt]],
    is_baseline: bool,
    timeout_s: float,
    cancel: threading.Event,
) -> tuple[int, int, list[Divergence]]:
    """The separate greedy lossless pass: the first ``wl.greedy_check_prompts`` short prompts at
    temperature 0, ``wl.greedy_check_n_predict`` tokens each. The baseline records its outputs in
    ``wl.reference``; a candidate compares with them.

    Returns:
        ``(drafted tokens, outputs compared, divergences)``; divergences carry repetition 0.
    """
    short = [(i, p) for i, p in prompts if p.fill is None][: wl.greedy_check_prompts]
    drafted = 0
    compared = 0
    divs: list[Divergence] = []
    for idx, prompt in short:
        if cancel.is_set():
            raise Cancelled()
        t, content = send_request(client, wl, prompt, 0, wl.greedy_check_n_predict, request_seed(idx, 0),
                                  timeout_s, greedy=True)
        drafted += _i(t.get("draft_n")) or 0
        if content is None:
            continue
        if is_baseline:
            wl.reference.outputs.setdefault(idx, content)
        elif idx in wl.reference.outputs:
            compared += 1
            off = first_divergence(wl.reference.outputs[idx], content)
            if off is not None:
                divs.append(Divergence(idx, 0, off))
    return drafted, compared, divs


def _scrape(client: CompletionClient) -> PerPositionCounts | None:
    try:
        return parse_spec_metrics(client.metrics_text())
    except Exception:  # noqa: BLE001 - metrics are optional (no --metrics); prediction then unavailable
        log.debug("/metrics unavailable: no prediction", exc_info=True)
        return None


def _f(v: object) -> float | None:
    """A JSON number (or numeric string) as a float; ``None`` for anything else."""
    if not isinstance(v, int | float | str):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _i(v: object) -> int | None:
    """A JSON number (or integer string) as an int; ``None`` for anything else."""
    if not isinstance(v, int | float | str):
        return None
    try:
        return int(v)
    except (ValueError, OverflowError):
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
    **kw: Any,
) -> Measurement:
    """:func:`measure_candidate`, with one launch per repetition where
    :func:`needs_fresh_launch_per_repetition` says so (the launches are pooled into one measurement).

    Same arguments, return value and exceptions as :func:`measure_candidate`.
    """
    if len(repetitions) <= 1 or not needs_fresh_launch_per_repetition(candidate):
        return measure_candidate(launch_fn, candidate, prompts, repetitions, n_predict, cancel, **kw)
    pooled: Measurement | None = None
    for rep in repetitions:
        m = measure_candidate(launch_fn, candidate, prompts, [rep], n_predict, cancel, **kw)
        pooled = m if pooled is None else pooled.merged(m)
        if not m.ok or m.stopped_early:
            break
    assert pooled is not None
    return pooled
