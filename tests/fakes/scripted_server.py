"""An in-process scripted llama-server for the search's tests: no process, no HTTP, a speed per candidate.

The calibration search only sees a server through its :class:`~tuner.calibration.measure.CompletionClient`
and the :data:`~tuner.calibration.measure.LaunchFn` that starts one. Tests that pin the search's *plan*
(which candidates it launches, in what order, when the budget stops it) script both here: each
candidate's generation speed comes from a function the test gives, and every request and model load
either advances a simulated clock (:class:`SimClock`, a sweep of simulated minutes runs in milliseconds),
sleeps in real time, or takes no time at all. The measurement protocol itself is tested against the real
llama-server (tests/calibration/test_measure.py, test_tune_e2e.py).

The answers have llama-server's shapes (tools/server/server-context.cpp: ``/completion``'s ``timings``
with ``predicted_per_second``, ``predicted_n``, ``predicted_ms``, ``draft_n``, ``draft_n_accepted``;
``/slots``' ``speculative``; ``/props``' ``default_generation_settings.params``).

    launch = ScriptedLaunch(lambda c: 100.0 if c.is_baseline else 130.0)
    scripted_search(launch, plan, prompts, settings, budget_s=600).run()
    launch.launched  # the candidates, in launch order
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tuner.calibration.candidates import Candidate, CandidatePlan
from tuner.calibration.measure import Launch, LaunchFn
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import Budget, Emit, Search, SearchSettings
from tuner.calibration.workload import Workload
from tuner.server.client import ServerUnreachableError

TpsOf = Callable[[Candidate], float]
"""``tps_of(candidate) -> tokens/s`` of its generation; called once per request, so a script may vary it
over time (a drifting machine)."""

DraftsOf = Callable[[Candidate, int], "tuple[int, int] | None"]
"""``drafts(candidate, n_predict) -> (draft_n, draft_n_accepted)`` of one answer, ``None`` = the answer
has no draft fields (a server that does not speculate)."""

MetricsOf = Callable[["ScriptedClient"], str]
"""``metrics(client) -> /metrics text`` at this moment (counters that grow with ``client.requests``)."""

PerLaunch = Callable[[Candidate, int], Mapping[str, Any]]
"""``per_launch(candidate, launch) -> ScriptedClient keyword overrides`` for the ``launch``-th server
(1-based, counted over all candidates): a machine that slows down after some launch, or one disturbed
launch."""


def half_accepted(candidate: Candidate, n_predict: int) -> tuple[int, int] | None:
    """The default drafts: a speculative candidate drafts ``n_predict`` tokens and half are accepted."""
    return None if candidate.is_baseline else (n_predict, n_predict // 2)


def spec_metrics(drafts: int, draft_tokens: int, per_pos: list[int] | tuple[int, ...]) -> str:
    """llama-server's speculative counters as ``/metrics`` text (tools/server/server-task.cpp
    ``server_task_result_metrics::to_metrics``): ``drafts`` verification steps, ``draft_tokens`` drafted,
    ``per_pos[i]`` steps that accepted at least ``i + 1`` (their sum: the accepted tokens)."""
    lines = [
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
        f"llamacpp:spec_decode_num_draft_tokens_total {draft_tokens}",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
        f"llamacpp:spec_decode_num_accepted_tokens_total {sum(per_pos)}",
        "# TYPE llamacpp:spec_decode_num_drafts_total counter",
        f"llamacpp:spec_decode_num_drafts_total {drafts}",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def never_drafts(candidate: Candidate, n_predict: int) -> tuple[int, int] | None:
    """No answer carries draft fields (n-gram types that find nothing to look up, run as the model alone)."""
    return None


class SimClock:
    """A simulated ``time.monotonic``: starts at 1000 s and moves only when the script advances it."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class ScriptedClient:
    """Answers like llama-server's client (the whole ``CompletionClient`` protocol) for one candidate.

    Args:
        candidate: the candidate this server runs.
        tps_of: its generation speed in tokens/s (see :data:`TpsOf`); unused when ``sleep_s`` is set.
        clock: a simulated clock advanced by each request's :attr:`request_s`.
        sleep_s: real seconds each request takes whatever ``n_predict`` (its speed is then
            ``n_predict / sleep_s``); a request longer than its ``timeout_s`` waits ``timeout_s`` and
            raises ``ServerUnreachableError`` as the HTTP client does. ``None`` = no real time.
        overhead_s: simulated seconds per request beyond generation (prompt, HTTP).
        request_s: simulated seconds of one request from its ``timings``; default
            ``predicted_n / predicted_per_second + overhead_s``.
        drafts: the draft counts of each answer (see :data:`DraftsOf`).
        content: the generated text of every answer (the same for every candidate: lossless).
        metrics: the ``/metrics`` text (empty: no per-position counters, the search falls back to fixed
            draft lengths), or a function of the client giving it (see :data:`MetricsOf`, :func:`spec_metrics`).
        server_sampling: ``/props``' ``default_generation_settings.params`` (empty: unreadable).
    """

    def __init__(self, candidate: Candidate, tps_of: TpsOf, *, clock: SimClock | None = None,
                 sleep_s: float | None = None, overhead_s: float = 0.05,
                 request_s: Callable[[Mapping[str, float]], float] | None = None, drafts: DraftsOf = half_accepted,
                 content: str = "same", metrics: str | MetricsOf = "", server_sampling: Mapping[str, float] | None = None
                 ) -> None:
        self.candidate = candidate
        self.tps_of = tps_of
        self.clock = clock
        self.sleep_s = sleep_s
        self.overhead_s = overhead_s
        self.request_s = request_s or (lambda t: t["predicted_n"] / t["predicted_per_second"] + overhead_s)
        self.drafts = drafts
        self.content = content
        self.metrics = metrics
        self.server_sampling = dict(server_sampling or {})
        self.requests = 0
        self.prompts: list[str] = []
        """Each raw completion's prompt, in order."""

    def _timings(self, n_predict: int, timeout_s: float) -> dict:
        """One generation of ``n_predict`` tokens: waits or advances the clock, returns llama-server's
        ``timings``."""
        self.requests += 1
        if self.sleep_s is not None:
            if self.sleep_s > timeout_s:
                time.sleep(timeout_s)
                raise ServerUnreachableError("scripted", f"timed out after {timeout_s:.1f} s")
            time.sleep(self.sleep_s)
            tps, ms = n_predict / self.sleep_s, self.sleep_s * 1000
        else:
            tps = self.tps_of(self.candidate)
            ms = (n_predict - 1) / tps * 1000
        t: dict[str, float] = {"predicted_per_second": tps, "predicted_n": n_predict, "predicted_ms": ms}
        if self.clock is not None and self.sleep_s is None:
            self.clock.advance(self.request_s(t))
        drafted = self.drafts(self.candidate, n_predict)
        if drafted is not None:
            t.update(draft_n=drafted[0], draft_n_accepted=drafted[1])
        return t

    def completion(self, prompt: str, n_predict: int, timeout_s: float = 120.0, **params: object) -> dict:
        """``POST /completion``: ``{"content", "timings"}``; the prompt is kept in :attr:`prompts`."""
        self.prompts.append(prompt)
        return {"content": self.content, "timings": self._timings(n_predict, timeout_s)}

    def oai_completion(self, prompt: str, n_predict: int, timeout_s: float = 120.0, **params: object) -> dict:
        """``POST /v1/completions``: ``choices[0].text`` (also as ``content``, as the real client adds it)."""
        return {"choices": [{"text": self.content}], "content": self.content,
                "timings": self._timings(n_predict, timeout_s)}

    def chat(self, messages: list[dict], max_tokens: int, timeout_s: float = 120.0, **params: Any) -> dict:
        """``POST /v1/chat/completions``: ``choices[0].message.content`` and llama.cpp's ``timings``."""
        return {"choices": [{"message": {"role": "assistant", "content": self.content}}],
                "timings": self._timings(max_tokens, timeout_s)}

    def tokenize(self, text: str, timeout_s: float = 60.0) -> list[int]:
        """``POST /tokenize``: one token per whitespace-separated word (enough to size long prompts)."""
        return list(range(len(text.split())))

    def slots(self) -> list[dict]:
        """``GET /slots``: one slot, speculative unless the baseline runs."""
        return [{"speculative": not self.candidate.is_baseline}]

    def metrics_text(self) -> str:
        """``GET /metrics`` (Prometheus text)."""
        return self.metrics(self) if callable(self.metrics) else self.metrics

    def props(self) -> dict:
        """``GET /props``: the server's sampling defaults."""
        return {"default_generation_settings": {"params": dict(self.server_sampling)}}

    def close(self) -> None:
        pass


class ScriptedLaunch:
    """A :data:`~tuner.calibration.measure.LaunchFn` starting a :class:`ScriptedClient` per candidate.

    Args:
        tps_of: each candidate's speed (see :data:`TpsOf`).
        clock: a simulated clock, advanced by ``load_s`` at each launch and by each request.
        load_s: seconds a model load takes (reported as ``Launch.load_s``).
        per_launch: keyword overrides of the ``launch``-th client (see :data:`PerLaunch`).
        **client: keywords of every :class:`ScriptedClient` (``sleep_s``, ``overhead_s``, ``drafts``, ...).

    Attributes:
        launched: every candidate launched, in order.
        live: candidates whose server was started and not yet stopped.
        clients: every client handed out, in launch order.
    """

    def __init__(self, tps_of: TpsOf, *, clock: SimClock | None = None, load_s: float = 0.01,
                 per_launch: PerLaunch | None = None, **client: Any) -> None:
        self.tps_of = tps_of
        self.clock = clock
        self.load_s = load_s
        self.per_launch = per_launch
        self.client = client
        self.launched: list[Candidate] = []
        self.live: list[Candidate] = []
        self.clients: list[ScriptedClient] = []

    def __call__(self, candidate: Candidate, cancel: threading.Event) -> Launch:
        self.launched.append(candidate)
        self.live.append(candidate)
        if self.clock is not None:
            self.clock.advance(self.load_s)
        kw = {"clock": self.clock, **self.client}
        if self.per_launch is not None:
            kw.update(self.per_launch(candidate, len(self.launched)))
        client = ScriptedClient(candidate, kw.pop("tps_of", self.tps_of), **kw)
        self.clients.append(client)
        stopped = threading.Event()

        def stop() -> None:
            if not stopped.is_set():
                stopped.set()
                self.live.remove(candidate)

        return Launch(client=client, stop=stop, log_tail=lambda n: [], load_s=self.load_s)


def scripted_search(launch: LaunchFn, plan: CandidatePlan, prompts: list[tuple[int, Prompt]],
                    settings: SearchSettings, budget_s: float, *, clock: SimClock | None = None,
                    emit: Emit | None = None, busy: Callable[[], bool] | None = None,
                    cancel: threading.Event | None = None, workload: Workload | None = None) -> Search:
    """A :class:`~tuner.calibration.search.Search` over ``launch`` with a time budget of ``budget_s`` seconds
    on ``clock`` (``None``: real time), starting now; ``workload``: greedy ``/completion`` requests unless
    given, ``emit``: events dropped unless given."""
    budget = Budget(budget_s, clock if clock is not None else time.monotonic)
    return Search(launch, plan, prompts, settings, workload or Workload(), budget, cancel or threading.Event(),
                  emit or (lambda *a, **k: None), busy=busy)


def side_by_side_sweep(launch: ScriptedLaunch, plan: CandidatePlan, budget_s: float,
                       clock: SimClock, side_by_side: bool = True, busy: bool = False) -> tuple[Any, list[tuple[str, str]]]:
    """One side-by-side sweep of ``plan`` over ``launch`` on five code prompts of 32 tokens, with a budget of
    ``budget_s`` simulated seconds: ``(the sweep's outcome, its events as (kind, message))``;
    ``side_by_side=False``: the alternating launches of a GPU placement instead; ``busy``: the load watcher says
    other programs use the CPU."""
    events: list[tuple[str, str]] = []
    search = scripted_search(launch, plan, [(i, Prompt(f"p{i}", "code")) for i in range(5)],
                             SearchSettings(n_predict=32, side_by_side=side_by_side), budget_s, clock=clock,
                             emit=lambda kind, msg, **kw: events.append((kind, msg)), busy=lambda: busy)
    return search.run(), events


def decided_side_by_side(per_launch: Callable[[Candidate, int], dict], plan: CandidatePlan, budget_s: float,
                         side_by_side: bool = True, busy: bool = False) -> tuple[Any, list[tuple[str, str]], list[Any]]:
    """:func:`side_by_side_sweep` on a scripted 100 tokens/s target whose speeds ``per_launch`` sets per launch,
    then decided: ``(the decision, the events, the measurements)``."""
    from tuner.calibration.decide import decide

    clock = SimClock()
    launch = ScriptedLaunch(lambda c: 100.0, content="same text", clock=clock, load_s=1.0, per_launch=per_launch)
    outcome, events = side_by_side_sweep(launch, plan, budget_s, clock, side_by_side, busy)
    return decide(outcome), events, outcome.measurements


def paired_count(measurements: list[Any], c: Candidate) -> int:
    """Adjacent pairs of ``c`` against the baseline in ``measurements`` (as the decision's final look counts them)."""
    from tuner.calibration.pairing import compare

    cmp_ = compare(measurements, c, 0.03, final=True)
    return len(cmp_.pairs) if cmp_ is not None and cmp_.paired else 0


def by_launch(tps: Callable[[Candidate, bool], float]) -> Callable[[Candidate, int], dict]:
    """A ``per_launch`` for :class:`ScriptedLaunch` from ``tps(candidate, first)``: each request's tokens/s, with
    ``first`` true in the first launch of the launched candidate (a screening run) and false after."""
    from collections import Counter

    launches: Counter[Candidate] = Counter()

    def per_launch(c: Candidate, _n: int) -> dict:
        launches[c] += 1
        first = launches[c] == 1
        return {"tps_of": lambda x: tps(x, first)}

    return per_launch
