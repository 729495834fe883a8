"""The context size (``n_ctx``, llama-server ``-c`` / ``--ctx-size``) that tune, plan and serve use.

One rule for every front end (``draftwise tune``, ``draftwise plan``, ``draftwise serve`` and the app):
the user's setting when given (``--ctx-size N`` or the ``ctx_size`` setting), otherwise the model's
training context (GGUF ``<arch>.context_length``) capped at :data:`DEFAULT_CTX_CAP` (8192 tokens), never
below :data:`DEFAULT_CTX_FLOOR` (4096 tokens) unless the model's own context is smaller. A model without
``context_length`` gets the floor.

Why: llama-server b11434 defaults ``-c`` to 0 = the training context (common/arg.cpp ``--ctx-size``), which
for a 32k–128k model sizes a KV cache that may push target layers off the GPU; chat clients expect at
least 4096 (LM Studio, Ollama). Above the training context quality degrades: llama.cpp warns
(src/llama-context.cpp ``llama_context::llama_context``, "n_ctx_seq > n_ctx_train").

The sizes a user may choose (256 … 2^24 tokens: smaller leaves no room for a prompt and an answer) are
declared with the other options, :data:`tuner.options.OPTIONS` ``"n_ctx"``.

Core module (no Qt, no I/O).
"""

from __future__ import annotations

from tuner.options import check

DEFAULT_CTX_CAP = 8192
"""The automatic context size is at most this many tokens."""

DEFAULT_CTX_FLOOR = 4096
"""The automatic context size is at least this many tokens, unless the model's own context is smaller."""


def default_ctx_size(context_length: int | None) -> int:
    """The automatic context size for a model whose training context is ``context_length`` tokens.

    ``min(context_length, 8192)``; 4096 when ``context_length`` is unknown (None or ≤ 0). A model trained
    on fewer than 4096 tokens gets its own context (the floor never exceeds the model).
    """
    if not context_length or context_length <= 0:
        return DEFAULT_CTX_FLOOR
    return min(int(context_length), DEFAULT_CTX_CAP)


def resolve_ctx_size(requested: int | None, context_length: int | None, flag: str = "--ctx-size") -> tuple[int, str | None]:
    """The context size to launch with, and a note for the user (``None`` when there is nothing to say).

    Args:
        requested: the user's ``--ctx-size`` / setting; ``None`` = automatic (:func:`default_ctx_size`).
        context_length: the model's training context in tokens (``None`` when the GGUF does not say).
        flag: how the note names the setting.

    Returns:
        ``(n_ctx, note)``. An explicit size above the training context is kept (the user asked for it) and
        the note warns that quality degrades beyond it.

    Raises:
        tuner.options.OptionError: (a ValueError) ``requested`` is outside the declared range (the message
            names ``flag``).
    """
    if requested is None:
        n = default_ctx_size(context_length)
        if context_length and context_length < DEFAULT_CTX_FLOOR:
            return n, (f"context size {n}: the model's own training context (below the usual "
                       f"{DEFAULT_CTX_FLOOR}); {flag} changes it")
        return n, None
    check("n_ctx", requested, where=flag)
    if context_length and requested > context_length:
        return requested, (f"{flag} {requested} exceeds the model's training context {context_length} "
                           "(context_length): quality degrades beyond it")
    return requested, None


__all__ = ["DEFAULT_CTX_CAP", "DEFAULT_CTX_FLOOR", "default_ctx_size", "resolve_ctx_size"]
