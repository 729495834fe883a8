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
supervisor (``tuner.calibration.pipeline.launchers``) or by a test double. A :class:`Launch` is only the running
server: what the requests look like (:class:`~tuner.calibration.workload.Workload`) and what the sweep's
launches share (:class:`~tuner.calibration.workload.SweepMemory`) are parameters of every measuring
function.
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
from .results import Divergence, Measurement, NoDrafts, Sample
from .sampling import GREEDY, Sampling
from .wording import no_drafts_error
from .workload import (
    SweepMemory,
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

    def completion(self, prompt: str | list[int], n_predict: int, timeout_s: float = 120.0, **params: object) -> dict: ...

    def slots(self) -> list[dict]: ...

    def metrics_text(self) -> str: ...

    # Called only by workloads that need them (chat models, long-context prompts): a test double for other
    # workloads may leave them out.
    def chat(self, messages: list[dict], max_tokens: int, timeout_s: float = 120.0, **params: Any) -> dict: ...

    def tokenize(self, text: str, timeout_s: float = 60.0) -> list[int]: ...

    # Called only for a sampled workload, once per sweep (the server's own sampling defaults, for wording).
    def props(self) -> dict: ...


@dataclass
class Launch:
    """A running server for one candidate.

    Attributes:
        client: HTTP client of the server.
        stop: stops the server and its whole process tree (idempotent).
        log_tail: ``log_tail(n)`` → last n log lines (for diagnoses).
        load_s: seconds from start to ready.
        speculation_reason: ``log_lines → str`` explaining inactive speculation, when available.
        speculative_active: whether speculation was confirmed at start-up by other means than
            ``/slots[].speculative`` (used only when the server's slots lack that field, as
            ik_llama.cpp's do; ``None`` = unknown).
    """

    client: CompletionClient
    stop: Callable[[], None]
    log_tail: Callable[[int], list[str]]
    load_s: float
    speculation_reason: Callable[[list[str]], str] | None = None
    speculative_active: bool | None = None


AfterWarmup = Callable[[float, "float | None"], "tuple[Sequence[tuple[int, Prompt]], int] | None"]
"""``after_warmup(load_s, warmup_gen_tokens_per_s) -> (prompts, n_predict) | None`` (see measure_candidate)."""

BeforeRequest = Callable[[int, Prompt, int], None]
"""``before_request(prompt_index, prompt, repetition)``: called right before a measured request (see measure_candidate)."""

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
        sent: str | list[int] = repetition_prompt(Prompt(text=body), repetition)
        if prompt.captured_unix_s is not None:  # as the server logged it: templated, or token ids
            sent = list(prompt.token_ids) if prompt.token_ids is not None else prompt.text
        resp = send(sent, n_predict, timeout_s=timeout_s, **params)
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
    *,
    workload: Workload | None = None,
    memory: SweepMemory | None = None,
    baseline_outputs: Mapping[tuple[int, int], str] | None = None,
    on_request: Callable[[Sample], None] | None = None,
    request_timeout_s: float = 300.0,
    stage: str = "probe",
    predicted_gen_tokens_per_s: float | None = None,
    deadline_s: float | None = None,
    stop_if: Callable[[Sequence[Sample]], bool] | None = None,
    after_warmup: AfterWarmup | None = None,
    hard_deadline_s: float | None = None,
    before_request: BeforeRequest | None = None,
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
        workload: what every request looks like (endpoint, sampling, served context); ``None`` = greedy
            ``/completion`` requests.
        memory: what the sweep's launches share (the baseline's greedy outputs, the server's sampling
            defaults, the long-context verdict and the budget it is made against); ``None`` = this
            launch's own (nothing shared, long-context requests always kept).
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
            None)`` (the faster of the warm-up and a second 16-token request: ``_planning_speed``); may return
            ``(prompts, n_predict)`` to use instead (the search plans the protocol from the first launch's
            speed, so a slow model gets fewer, shorter requests).
        hard_deadline_s: ``time.monotonic()`` value at which the run ends whatever it is doing (the
            sweep's hard time limit): no request starts after it, the one in flight is given up when it
            passes (each request's HTTP timeout is bounded by it), and the measurement keeps the
            complete requests so far, marked ``cut_short``. (The launch itself is bounded by the
            ``cancel`` the caller passes: see ``tuner.calibration.search.budget.Budget.until_deadline``.)
        before_request: called with ``(prompt index, prompt, repetition)`` right before each measured
            request is sent (after a long-context request was kept): the side-by-side paired rounds send the
            same request to the baseline's server first there, every other request.

    Returns:
        A :class:`Measurement`; failures (launch error, speculation inactive, nothing drafted, a
        request error) are recorded in ``error`` rather than raised; an n-gram type that never drafted
        also has ``no_drafts`` (the facts) and ``no_drafts_at``.

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
    run = _Run(launch, candidate, workload or Workload(), memory if memory is not None else SweepMemory(), cancel,
               request_timeout_s, hard_deadline_s)
    base = Measurement(candidate=candidate, load_s=launch.load_s, stage=stage,
                       predicted_gen_tokens_per_s=predicted_gen_tokens_per_s)
    try:
        failed, spec_active = _speculation_check(run, base)
        if failed is not None:
            return failed
        base = replace(base, speculative_active=spec_active)
        warmed = _warm_up(run, base, n_predict, after_warmup)
        if isinstance(warmed, Measurement):
            return warmed
        if warmed is not None:
            prompts, n_predict = warmed
        loop = _Loop(run)
        loop.run(prompts, repetitions, n_predict, baseline_outputs, on_request, stop_if, deadline_s, before_request)
        return loop.result(base)
    finally:
        launch.stop()


@dataclass
class _Run:
    """One launch being measured: its server, the sweep's workload and memory, and the time limits."""

    launch: Launch
    candidate: Candidate
    workload: Workload
    memory: SweepMemory
    cancel: threading.Event
    request_timeout_s: float
    hard_deadline_s: float | None

    @property
    def sampled(self) -> bool:
        return not self.workload.sampling.is_greedy

    def past_hard(self) -> bool:
        return self.hard_deadline_s is not None and time.monotonic() >= self.hard_deadline_s

    def timeout(self) -> float:
        return bounded_timeout(self.request_timeout_s, self.hard_deadline_s)


def _speculation_check(run: _Run, base: Measurement) -> tuple[Measurement | None, bool | None]:
    """``(a failed measurement or None, speculation active per /slots)``: a speculative candidate whose
    server runs without speculation (or whose ``/slots`` cannot be read) has failed.
    tools/server/server-context.cpp ``load_model`` leaves an incompatible draft's server running without it."""
    client = run.launch.client
    speculative = not run.candidate.is_baseline
    try:
        slots = client.slots()
    except Exception as exc:  # noqa: BLE001 - /slots may be disabled; recorded, not fatal
        log.debug("/slots unavailable", exc_info=True)
        failed = replace(base, error=f"/slots could not be read to check speculation ({exc})") if speculative else None
        return failed, None
    if slots and not any("speculative" in s for s in slots):
        # ik_llama.cpp's /slots has no such field; its supervisor checked the start-up log instead
        spec_active = run.launch.speculative_active
    else:
        spec_active = any(bool(s.get("speculative")) for s in slots) if slots else None
    if speculative and spec_active is False:
        why = ""
        if run.launch.speculation_reason is not None:
            why = ": " + run.launch.speculation_reason(run.launch.log_tail(200))
        return replace(base, speculative_active=False,
                       error=f"the server started without speculation (/slots speculative: false){why}"), False
    return None, spec_active


def _warm_up(run: _Run, base: Measurement, n_predict: int,
             after_warmup: AfterWarmup | None) -> Measurement | tuple[Sequence[tuple[int, Prompt]], int] | None:
    """The discarded warm-up request (greedy); reads the server's sampling defaults first for a sampled
    workload. Returns a measurement when the run ends here (cut by the time limit, or a failed warm-up),
    else what ``after_warmup`` planned (``(prompts, n_predict)`` or ``None``)."""
    if run.sampled and not run.memory.server_sampling:
        _read_server_sampling(run.launch.client, run.memory)
    if run.past_hard():
        return replace(base, cut_short=True)
    try:
        first_tps = _warmup_tps(run, min(16, n_predict))
    except Exception as exc:  # noqa: BLE001 - the server's HTTP errors are recorded as the failure
        log.debug("warm-up request failed", exc_info=True)
        if run.past_hard():
            return replace(base, cut_short=True)
        return replace(base, error=f"warm-up request failed: {exc}")
    if after_warmup is None:
        return None
    return after_warmup(run.launch.load_s, _planning_speed(run, first_tps))


def warm_up(client: CompletionClient, n_tokens: int, request_timeout_s: float, workload: Workload | None) -> Sample:
    """One discarded greedy request of ``n_tokens`` tokens of :data:`WARMUP_PROMPT` (a fresh llama-server's first
    request runs far below its speed; its answer is not a measured prompt's, so it seeds no n-gram pool with
    one): the sample, for its speed.

    Raises:
        RequestError: the request failed or its answer has no ``timings.predicted_per_second``.
    """
    return measure_request(client, 0, Prompt(WARMUP_PROMPT), -1, n_tokens, request_timeout_s, workload, greedy=True)


def _warmup_tps(run: _Run, n_tokens: int) -> float | None:
    """One discarded greedy warm-up request of ``n_tokens``; its generation speed (tokens/s; ``None`` when the
    server reports none). Raises what the request raises."""
    t, _ = send_request(run.launch.client, run.workload, Prompt(text=WARMUP_PROMPT), -1, n_tokens, 1, run.timeout(),
                        greedy=True)
    return _f((t or {}).get("predicted_per_second"))


SECOND_WARMUP_BELOW_S = 1.0
"""The planning launch sends a second warm-up request when the first one's 16 tokens took less (seconds)."""


def _planning_speed(run: _Run, first_tps: float | None) -> float | None:
    """The speed the protocol is planned from (tokens/s): the faster of the warm-up and a second 16-token request
    (greedy, discarded too) when the warm-up took under :data:`SECOND_WARMUP_BELOW_S`. A fresh server's first
    request can run far below its speed (issue 28, quality family, idle: 98.8 tokens/s warm-up, 192.8 measured
    right after — about 80 ms more for its 16 tokens; the plan cut a 33 s tune to 2 prompts × 32 tokens); that
    is a fixed cost, which a slow target's warm-up hides and a second request there would cost seconds.
    ``first_tps`` when the second request is not sent or fails, or the time limit has passed."""
    if run.past_hard() or not first_tps or 16 / first_tps >= SECOND_WARMUP_BELOW_S:
        return first_tps
    try:
        second = _warmup_tps(run, 16)
    except Exception:  # noqa: BLE001 - the plan falls back to the first warm-up's speed
        log.debug("second warm-up request failed", exc_info=True)
        return first_tps
    return max(first_tps, second or 0.0)


class _Loop:
    """The measured requests of one launch and what they found (:meth:`run`, then :meth:`result`)."""

    def __init__(self, run: _Run) -> None:
        self.r = run
        self.samples: list[Sample] = []
        self.divergences: list[Divergence] = []
        self.compared = 0
        self.error: str | None = None
        self.stopped_early = False
        self.cut = False
        self.counts: PerPositionCounts | None = None
        self.greedy_draft_n: int | None = None

    def run(self, prompts: Sequence[tuple[int, Prompt]], repetitions: Sequence[int], n_predict: int,
            baseline_outputs: Mapping[tuple[int, int], str] | None, on_request: Callable[[Sample], None] | None,
            stop_if: Callable[[Sequence[Sample]], bool] | None, deadline_s: float | None,
            before_request: BeforeRequest | None = None) -> None:
        """Every prompt of every repetition in turn, until a stop (deadline, time limit, error, loser); then
        the ``/metrics`` counters and, for a sampled workload, the greedy lossless pass."""
        speculative = not self.r.candidate.is_baseline
        before = _scrape(self.r.launch.client) if speculative else None
        sized: dict[int, str] = {}
        for n_rep, rep in enumerate(repetitions):
            if n_rep > 0 and deadline_s is not None and time.monotonic() > deadline_s:
                break
            for idx, prompt in prompts:
                measured = self._one(idx, prompt, rep, prompts, n_predict, sized, baseline_outputs, before_request)
                if self.error or self.cut:
                    break
                if not measured:
                    continue
                if on_request is not None:
                    on_request(self.samples[-1])
                if stop_if is not None and stop_if(self.samples):
                    self.stopped_early = True
                    break
            if self.error or self.stopped_early or self.cut:
                break
        if speculative:
            after = _scrape(self.r.launch.client)
            if after is not None:
                self.counts = after.minus(before)
        self._greedy_check(prompts, repetitions)

    def _one(self, idx: int, prompt: Prompt, rep: int, prompts: Sequence[tuple[int, Prompt]], n_predict: int,
             sized: dict[int, str], baseline_outputs: Mapping[tuple[int, int], str] | None,
             before_request: BeforeRequest | None = None) -> bool:
        """One measured request; False when none was measured (a long one left out; or the loop ends,
        :attr:`cut` or :attr:`error` set)."""
        r = self.r
        if r.past_hard():
            self.cut = True
            return False
        if r.cancel.is_set():
            raise Cancelled()
        if prompt.fill is not None and not _keep_long(r.memory, r.workload, prompts, self.samples, n_predict):
            return False
        if before_request is not None:
            before_request(idx, prompt, rep)
        try:
            s = measure_request(r.launch.client, idx, prompt, rep, n_predict, r.timeout(), workload=r.workload,
                                sized=sized)
        except RequestError as exc:
            if r.past_hard():  # given up at the hard deadline: not a failure of the candidate
                self.cut = True
            else:
                self.error = str(exc)
            return False
        self.samples.append(s)
        if not r.sampled and baseline_outputs is not None and s.content is not None and (idx, rep) in baseline_outputs:
            self.compared += 1
            off = first_divergence(baseline_outputs[(idx, rep)], s.content)
            if off is not None:
                self.divergences.append(Divergence(idx, rep, off))
        return True

    def _greedy_check(self, prompts: Sequence[tuple[int, Prompt]], repetitions: Sequence[int]) -> None:
        """The separate greedy lossless pass of a sampled workload, on the launch that runs repetition 0."""
        r = self.r
        if not (r.sampled and self.error is None and not self.cut and r.workload.greedy_check_prompts > 0
                and repetitions and min(repetitions) == 0):
            return
        try:
            self.greedy_draft_n, n_cmp, divs = _greedy_pass(r, prompts)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001
            log.debug("greedy lossless check failed", exc_info=True)
            self.error = f"greedy lossless check failed: {exc}"
            return
        self.compared += n_cmp
        self.divergences.extend(divs)

    def _no_drafts(self) -> NoDrafts | None:
        """Why an n-gram type that ran proposed no token, ``None`` when it drafted (or is no n-gram type)."""
        r = self.r
        if (r.candidate.is_baseline or self.error is not None or self.cut or not self.samples
                or any(s.draft_n for s in self.samples) or not r.candidate.spec_type.startswith("ngram")):
            return None
        # A finding, not a broken run: n-gram lookup drafts only where the text so far repeats an n-gram
        # (common/ngram-*.cpp); sampled text often never does.
        return NoDrafts(r.workload.sampling.describe(r.memory.server_sampling or None), r.sampled, self.greedy_draft_n)

    def result(self, base: Measurement) -> Measurement:
        """The launch's :class:`Measurement` from ``base`` (its candidate, load time, stage, checks)."""
        speculative = not self.r.candidate.is_baseline
        no_drafts = self._no_drafts()
        error = self.error
        if no_drafts is not None:
            error = no_drafts_error(self.r.candidate.spec_type, no_drafts)
        elif speculative and error is None and not self.cut and self.samples and not any(s.draft_n for s in self.samples):
            error = "draft_n absent in every answer: the server never drafted, so this is not a speculative run"
        return replace(
            base,
            samples=tuple(self.samples),
            counts=self.counts,
            error=error,
            lossless=(not self.divergences) if speculative and self.compared else None,
            divergences=tuple(self.divergences),
            stopped_early=self.stopped_early,
            greedy_draft_n=self.greedy_draft_n,
            no_drafts_at=no_drafts.sampling if no_drafts is not None else None,
            no_drafts=no_drafts,
            cut_short=self.cut,
        )


def _read_server_sampling(client: CompletionClient, memory: SweepMemory) -> None:
    """Fill ``memory.server_sampling`` from ``GET /props`` ``default_generation_settings.params``
    (tools/server/server-context.cpp, the ``/props`` handler); left empty when unreadable."""
    try:
        params = (client.props().get("default_generation_settings") or {}).get("params") or {}
    except Exception:  # noqa: BLE001 - wording only
        log.debug("sampling wording unavailable", exc_info=True)
        return
    for k in ("temperature", "top_k", "top_p", "min_p"):
        if isinstance(params.get(k), (int, float)):
            memory.server_sampling[k] = round(float(params[k]), 4) if k != "top_k" else int(params[k])


def _keep_long(memory: SweepMemory, wl: Workload, prompts: Sequence[tuple[int, Prompt]], samples: Sequence[Sample],
               n_predict: int) -> bool:
    """Whether the sweep sends its long-context requests (decided once, from the short requests so far:
    :meth:`tuner.calibration.workload.LongContextPlan.decide`)."""
    plan = memory.long_plan
    if plan.decided:
        return plan.keep
    longs = [p for _, p in prompts if p.fill is not None]
    pp = [s.prompt_tokens_per_s for s in samples if s.prompt_tokens_per_s]
    gen = [s.gen_tokens_per_s for s in samples if s.gen_tokens_per_s]
    if not pp or not gen:
        return True  # nothing measured yet to decide from (decided at a later launch)
    want = int((longs[0].fill or 0.5) * (wl.n_ctx or 4096))
    return plan.decide(len(longs), want, sum(pp) / len(pp), sum(gen) / len(gen), n_predict)


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


def _greedy_pass(run: _Run, prompts: Sequence[tuple[int, Prompt]]) -> tuple[int, int, list[Divergence]]:
    """The separate greedy lossless pass: the first ``greedy_check_prompts`` short prompts at temperature 0,
    ``greedy_check_n_predict`` tokens each (with the full request timeout). The baseline records its outputs
    in the sweep's ``memory.reference``; a candidate compares with them.

    Returns:
        ``(drafted tokens, outputs compared, divergences)``; divergences carry repetition 0.
    """
    wl, reference = run.workload, run.memory.reference.outputs
    short = [(i, p) for i, p in prompts if p.fill is None][: wl.greedy_check_prompts]
    drafted = 0
    compared = 0
    divs: list[Divergence] = []
    for idx, prompt in short:
        if run.cancel.is_set():
            raise Cancelled()
        t, content = send_request(run.launch.client, wl, prompt, 0, wl.greedy_check_n_predict, request_seed(idx, 0),
                                  run.request_timeout_s, greedy=True)
        drafted += _i(t.get("draft_n")) or 0
        if content is None:
            continue
        if run.candidate.is_baseline:
            reference.setdefault(idx, content)
        elif idx in reference:
            compared += 1
            off = first_divergence(reference[idx], content)
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
