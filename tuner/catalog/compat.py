"""Draft/target tokenizer compatibility, exactly as llama.cpp decides it.

Rules (common/speculative.cpp ``common_speculative_are_compatible``, checked in this order):

1. ``vocab-type``: same llama.cpp vocab type (``tokenizer.ggml.model`` mapped as in
   src/llama-vocab.cpp: ``llama``→SPM, ``gpt2``/``hybriddna``/``whitespace``/``gemma4``→BPE, ...).
2. ``bos``: same ``add_bos``; when BOS is added, the same BOS id.
3. ``eos``: same ``add_eos``; when EOS is added, the same EOS id.
4. ``vocab-size``: token counts differ by at most 128 (``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``).
5. ``token-text``: identical token text for every id from 5 (``SPEC_VOCAB_CHECK_START_TOKEN_ID``)
   up to the smaller vocabulary.

``tokenizer.ggml.pre``, merges, scores and token types are not compared. llama.cpp prints
"draft model vocab type must match" for every failure; our verdict names the rule and values.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.model import ModelFile

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

RULES = ("vocab-type", "bos", "eos", "vocab-size", "token-text")


@dataclass(frozen=True)
class CompatVerdict:
    """Whether ``draft`` can draft for ``target`` with ``--spec-type draft-simple``.

    Attributes:
        compatible: True when every rule passes.
        rule: the first rule that failed (one of :data:`RULES`), ``None`` when compatible
            or when a file could not be judged (then ``message`` says why).
        message: plain-words explanation with the concrete values.
    """

    compatible: bool
    rule: str | None
    message: str


def check_compatible(target: ModelFile, draft: ModelFile) -> CompatVerdict:
    """Apply llama.cpp's draft-compatibility rules to two scanned models.

    Token texts are compared on the raw bytes of the ``tokenizer.ggml.tokens`` regions of the
    two files (re-read from disk only when the fingerprints differ).

    Raises:
        tuner.catalog.header.GGUFError: a file needed for the token-text rule cannot be read.
    """
    raise NotImplementedError
