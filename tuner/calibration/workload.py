"""The workload a sweep measures: the shape of each request, its sampling, the served context size.

A tuned profile only predicts what the server later gets when the sweep sends the same kind of traffic
(DESIGN.md "Calibration method" step 4):

* **Request shape.** A GGUF with ``tokenizer.chat_template`` is served to chat clients through
  ``/v1/chat/completions``, which wraps every turn in that template (tools/server/server-common.cpp
  ``oaicompat_chat_params_parse``); drafts accept template tokens and role markers differently from raw
  prose, so such a model is measured through that endpoint (llama-server b11434 returns ``timings`` with
  ``draft_n`` / ``draft_n_accepted`` there too: tools/server/server-task.cpp
  ``server_task_result_cmpl_final::to_json_oaicompat_chat`` adds ``timings`` when set). A base model (no template) keeps
  ``/completion``.
* **Sampling.** By default the requests carry no sampling fields, so llama-server's own defaults apply
  (b11434 common/common.h ``common_params_sampling``, declared in :mod:`tuner.options`;
  the values of the binary actually used are read from ``GET /props``
  ``default_generation_settings.params``). The user's client settings (temperature, top_p, top_k, min_p)
  replace them (:class:`tuner.calibration.sampling.Sampling`). Every request carries a seed fixed per
  (prompt, repetition), the same for every candidate, so sampled pairs stay comparable.
* **Lossless check.** Sampled outputs legitimately differ; the check that speculation did not change the
  output is a separate short greedy pass (:attr:`Workload.greedy_check_prompts` prompts,
  :attr:`Workload.greedy_check_n_predict` tokens, temperature 0) on each candidate's first launch,
  compared with the baseline's greedy pass (:class:`GreedyReference`).
* **Depth.** Long-context requests (:func:`long_context_prompts`: a long document and a long code file,
  each with a question) fill at least half of the served context; :func:`fit_long_prompt` sizes them
  with the server's own tokenizer (``POST /tokenize``).

A :class:`Workload` is frozen: what the sweep's launches learn while it runs (the baseline's greedy
outputs, the server's own sampling defaults, whether the long-context requests are kept) is the sweep's
:class:`SweepMemory`, which the search hands to every measurement beside the workload.

Core module: no I/O except reading the built-in long texts from ``resources/prompts/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.resources import resource_path

from .prompts import Prompt, PromptFileError
from .sampling import GREEDY, Sampling
from .sentences import Sentence, Slot

LONG_CONTEXT_FILL = 0.5
"""Long-context requests fill at least this fraction of the served context (prompt tokens ÷ ``n_ctx``)."""

LONG_CONTEXT_HEADROOM_TOKENS = 64
"""Tokens kept free above prompt + generation in a long-context request (chat template, prefix)."""

LONG_DOCUMENT = ("prompts", "long_document.md")
LONG_CODE = ("prompts", "long_code.py.txt")


@dataclass
class GreedyReference:
    """The baseline's greedy-pass outputs of one sweep, ``prompt index → text`` (mutable, shared by every
    launch of the sweep: the baseline's first launch fills it, candidates compare with it)."""

    outputs: dict[int, str] = field(default_factory=dict)


LONG_CONTEXT_BUDGET_SHARE = 0.5
"""The long-context requests are left out when their estimated cost over a minimal sweep (both requests in
:data:`LONG_CONTEXT_MIN_LAUNCHES` launches) exceeds this share of the time budget."""

LONG_CONTEXT_MIN_LAUNCHES = 4
"""Launches a sweep makes at least (baseline twice, a probe, a confirmation), for the estimate above."""


@dataclass
class LongContextPlan:
    """Whether a sweep keeps its long-context requests (mutable, shared by every launch of the sweep).

    Decided once, on the first launch (the baseline) just before its first long request, from the speed of
    the short requests measured so far, so every candidate runs the same requests.

    Attributes:
        budget_s: the sweep's time budget (seconds) the long requests must fit in, as the search's
            ``Budget`` holds it; ``None`` = always kept (a measurement outside a sweep).
        decided: True once decided.
        keep: True to send them.
        left_out: why they were left out, as the decision's sentence (kind ``sweep.long_context_left_out``:
            the estimate's figures), ``None`` when kept.
    """

    budget_s: float | None = None
    decided: bool = False
    keep: bool = True
    left_out: Sentence | None = None

    def decide(self, n_long: int, want_tokens: int, prompt_tokens_per_s: float | None, gen_tokens_per_s: float | None,
               n_predict: int) -> bool:
        """Decide (once) and return :attr:`keep`. Estimate for one long request: ``want_tokens ÷ prompt
        tokens/s + n_predict ÷ generation tokens/s`` (the short requests' speeds; prompt processing of a
        long prompt is usually faster per token, so this errs towards leaving them out on slow machines).
        No budget or no speeds = keep."""
        if self.decided:
            return self.keep
        self.decided = True
        if self.budget_s is None or not prompt_tokens_per_s or not gen_tokens_per_s:
            return self.keep
        one = want_tokens / prompt_tokens_per_s + n_predict / gen_tokens_per_s
        total = one * n_long * LONG_CONTEXT_MIN_LAUNCHES
        if total > LONG_CONTEXT_BUDGET_SHARE * self.budget_s:
            self.keep = False
            self.left_out = Sentence(Slot.SWEEP, "sweep.long_context_left_out", {
                "one_s": one, "prompt_tokens": want_tokens, "prompt_tokens_per_s": prompt_tokens_per_s,
                "n_predict": n_predict, "gen_tokens_per_s": gen_tokens_per_s, "budget_s": self.budget_s})
        return self.keep


@dataclass
class SweepMemory:
    """What the launches of one sweep learn and share (mutable; the :class:`Workload` they send is not).

    Attributes:
        reference: the baseline's greedy outputs (the greedy lossless pass compares with them).
        server_sampling: the server's own sampling defaults as read from ``/props`` (filled by the first
            launch of a sampled workload; for wording).
        long_plan: whether the long-context requests are sent (decided once, :class:`LongContextPlan`).
    """

    reference: GreedyReference = field(default_factory=GreedyReference)
    server_sampling: dict[str, Any] = field(default_factory=dict)
    long_plan: LongContextPlan = field(default_factory=LongContextPlan)


@dataclass(frozen=True)
class Workload:
    """What every measured request of one sweep looks like (frozen: what a sweep learns as it runs is its
    :class:`SweepMemory`).

    Attributes:
        chat: send ``/v1/chat/completions`` (the target has a chat template) instead of ``/completion``.
        sampling: the served sampling settings.
        n_ctx: the served context size (tokens); long-context prompts are sized to it (``None``: not sized).
        greedy_check_prompts: prompts in the separate greedy lossless pass (0 = no pass); only used when
            ``sampling`` is not greedy (a greedy workload compares its measured outputs directly).
        greedy_check_n_predict: tokens generated per greedy-check request.
        raw_endpoint: where a raw completion (no chat template) goes: ``/completion``, or
            ``/v1/completions`` on a build whose ``/completion`` answer lacks the draft counts
            (ik_llama.cpp: ``tuner.server.dialect.Dialect.draft_counts_endpoint``).
        captured: the prompts are requests captured while serving: each is sent exactly as llama-server
            logged it (already templated; a token array as token ids), as a raw completion (``chat`` False),
            with no per-repetition prefix (``cache_prompt`` is off, so the server reuses nothing).
    """

    chat: bool = False
    sampling: Sampling = GREEDY
    n_ctx: int | None = None
    greedy_check_prompts: int = 2
    greedy_check_n_predict: int = 32
    raw_endpoint: str = "/completion"
    captured: bool = False

    @property
    def endpoint(self) -> str:
        """``/v1/chat/completions``, or :attr:`raw_endpoint` (``/completion`` by default)."""
        return "/v1/chat/completions" if self.chat else self.raw_endpoint

    def describe(self, server_sampling: Mapping[str, Any] | None = None) -> str:
        """One line for the decision, e.g. ``"chat requests (/v1/chat/completions) at temperature T, ...,
        context 8192"`` (:meth:`tuner.calibration.sampling.Sampling.describe`; ``server_sampling``: the
        server's own defaults as ``/props`` gave them, :attr:`SweepMemory.server_sampling`)."""
        shape = "chat requests (/v1/chat/completions)" if self.chat else f"raw completions ({self.raw_endpoint})"
        if self.captured:
            shape = f"captured requests replayed as raw completions ({self.raw_endpoint})"
        ctx = f", context {self.n_ctx}" if self.n_ctx else ""
        return f"{shape} at {self.sampling.describe(server_sampling or None)}{ctx}"

    def key(self) -> str:
        """Stable string for profile staleness (request shape and sampling; the context has its own key)."""
        shape = "captured-completion" if self.captured else "chat" if self.chat else "completion"
        return f"{shape};{self.sampling.key()}"


def long_prompt_tokens(n_ctx: int | None) -> int | None:
    """Prompt tokens from which a captured request counts as a long-context one: :data:`LONG_CONTEXT_FILL`
    of the served context, as the built-in long-context requests are sized (``None`` without a context)."""
    return int(math.ceil(LONG_CONTEXT_FILL * n_ctx)) if n_ctx else None


def request_seed(prompt_index: int, repetition: int) -> int:
    """The sampling seed of one (prompt, repetition): the same for every candidate of a sweep."""
    return 1 + 1000 * repetition + prompt_index


def chat_messages(prompt: Prompt, repetition: int) -> list[dict[str, str]]:
    """The ``messages`` of a chat request for ``prompt`` at ``repetition``: its conversation (or one user
    turn), with the per-repetition prefix ``"Request N."`` in front of the first turn's content (a fresh
    prefix per repetition, as for raw completions)."""
    turns = list(prompt.messages) if prompt.messages else [("user", prompt.text)]
    out = [{"role": r, "content": c} for r, c in turns]
    out[0] = {"role": out[0]["role"], "content": f"Request {repetition + 1}.\n{out[0]['content']}"}
    return out


def _read_resource(parts: tuple[str, str]) -> str:
    try:
        return resource_path(*parts).read_text(encoding="utf-8")
    except (OSError, FileNotFoundError) as exc:
        raise PromptFileError("/".join(parts), None, f"built-in long-context text missing ({exc})") from exc


LONG_QUESTIONS = {
    "long document": "Question about the document above: which three facts does the calibration method rest "
    "on, and why does the baseline have to be measured in the same sweep? Answer in a few paragraphs.",
    "long code": "Question about the code above: explain what happens, step by step, when the supervised "
    "server crashes while it is ready, and suggest one improvement with a code sketch.",
}


def long_context_prompts() -> tuple[Prompt, ...]:
    """The built-in long-context requests: a long document (the project's own design notes and README)
    and a long code file (three of its modules), each followed by a question. Their text is sized to the
    served context at launch time by :func:`fit_long_prompt` (``Prompt.fill`` = 0.5).

    Raises:
        PromptFileError: a built-in text is missing (an installation problem).
    """
    return (
        Prompt(text=_read_resource(LONG_DOCUMENT), category="long document", fill=LONG_CONTEXT_FILL,
               question=LONG_QUESTIONS["long document"]),
        Prompt(text=_read_resource(LONG_CODE), category="long code", fill=LONG_CONTEXT_FILL,
               question=LONG_QUESTIONS["long code"]),
    )


def _compose(source: str, n_chars: int, question: str) -> str:
    """The first ``n_chars`` characters of ``source`` repeated as needed (cut at a line end), then the
    question. Repetition only happens when the context is larger than the text."""
    body: list[str] = []
    left = n_chars
    part = 1
    while left > 0:
        chunk = source[:left]
        if len(chunk) < len(source):
            cut = chunk.rfind("\n")
            chunk = chunk[: cut + 1] if cut > 0 else chunk
        if part > 1:
            body.append(f"\n(continued, part {part})\n")
        body.append(chunk)
        left -= max(1, len(chunk))
        part += 1
        if len(chunk) < len(source):
            break
    return "".join(body).rstrip() + "\n\n" + question


def fit_long_prompt(prompt: Prompt, n_ctx: int, n_predict: int, count_tokens: Callable[[str], int]) -> str:
    """The text of a long-context ``prompt`` sized for a served context of ``n_ctx`` tokens.

    Aim: prompt tokens ≥ ``prompt.fill × n_ctx`` and ≤ ``n_ctx − n_predict −``
    :data:`LONG_CONTEXT_HEADROOM_TOKENS` (the answer and the chat template must still fit). When the
    context is too small for both, the upper limit wins (the request must not fail).

    Args:
        prompt: a prompt with ``fill`` set (its ``text`` is the source, ``question`` is appended).
        n_ctx: served context size in tokens.
        n_predict: tokens the request generates.
        count_tokens: ``text → token count`` with the target's tokenizer (``POST /tokenize``).

    Returns:
        The prompt text (deterministic for a given tokenizer, so every candidate gets the same request).
    """
    fill = prompt.fill or LONG_CONTEXT_FILL
    upper = n_ctx - n_predict - LONG_CONTEXT_HEADROOM_TOKENS
    want = min(int(math.ceil(fill * n_ctx)) + 16, upper)
    source = prompt.text
    question = prompt.question or ""
    per_char = max(1e-3, count_tokens(source) / max(1, len(source)))
    n_chars = max(64, int((want - count_tokens(question)) / per_char))
    text = _compose(source, n_chars, question)
    for _ in range(6):
        n = count_tokens(text)
        if n < want:
            n_chars += int((want - n) / per_char * 1.05) + 32
        elif n > upper:
            n_chars -= int((n - upper) / per_char * 1.05) + 32
        else:
            break
        text = _compose(source, max(64, n_chars), question)
    return text


__all__ = [
    "GreedyReference",
    "LongContextPlan",
    "LONG_CONTEXT_FILL",
    "SweepMemory",
    "Workload",
    "chat_messages",
    "fit_long_prompt",
    "long_prompt_tokens",
    "long_context_prompts",
    "request_seed",
]
