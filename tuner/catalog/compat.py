"""Draft/target tokenizer compatibility, exactly as llama.cpp decides it.

Rules (common/speculative.cpp ``common_speculative_are_compatible``, checked in this order):

1. ``vocab-type``: same llama.cpp vocab type (``tokenizer.ggml.model`` mapped as in
   src/llama-vocab.cpp: ``llama``→SPM, ``gpt2``/``hybriddna``/``whitespace``/``gemma4``→BPE, ...).
2. ``bos``: same ``add_bos``; when BOS is added, the same BOS id.
3. ``eos``: same ``add_eos``; when EOS is added, the same EOS id.
4. ``vocab-size``: token counts differ by at most 128 (``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``).
5. ``token-text``: identical token text for every id from 5 (``SPEC_VOCAB_CHECK_START_TOKEN_ID``)
   up to the smaller vocabulary (``strcmp`` of ``llama_vocab_get_text``; llama.cpp stores an
   empty token as ``[EMPTY_<id>]``, llama-vocab.cpp ``load``).

``tokenizer.ggml.pre``, merges, scores and token types are not compared. llama.cpp prints
"draft model vocab type must match" for every failure; our verdict names the rule and values.
The add flags and ids are the effective ones (llama.cpp's defaults applied, see
:mod:`tuner.catalog.tokenizer`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tuner.catalog.header import GGUFError, StringArray, read_header
from tuner.catalog.model import ModelFile, TokenizerInfo
from tuner.catalog.tokenizer import KEY_TOKENS

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

RULES = ("vocab-type", "bos", "eos", "vocab-size", "token-text")

_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class CompatVerdict:
    """Whether ``draft`` can draft for ``target`` with ``--spec-type draft-simple``.

    Attributes:
        compatible: True when every rule passes.
        rule: the first rule that failed (one of :data:`RULES`), ``None`` when compatible
            or when a model has no tokenizer at all (then ``message`` says so).
        message: plain-words explanation with the concrete values.
    """

    compatible: bool
    rule: str | None
    message: str


def _fail(rule: str | None, message: str) -> CompatVerdict:
    return CompatVerdict(False, rule, message)


def _type_label(t: TokenizerInfo) -> str:
    return f"{t.vocab_type or 'unknown'} (tokenizer.ggml.model '{t.model}')"


def check_tokenizers(target: TokenizerInfo, draft: TokenizerInfo) -> CompatVerdict | None:
    """Rules 1-4 (``vocab-type``, ``bos``, ``eos``, ``vocab-size``) of common/speculative.cpp
    ``common_speculative_are_compatible`` on tokenizer identities alone; reads no file, never raises.

    Returns:
        The failing verdict, or ``None`` when rules 1-4 pass (rule 5 still needs the token texts).
    """
    t, d = target, draft
    t_type = t.vocab_type or f"?{t.model}"
    d_type = d.vocab_type or f"?{d.model}"
    if t_type != d_type:
        return _fail("vocab-type", f"vocab type differs: target {_type_label(t)}, draft {_type_label(d)}")
    if t.add_bos != d.add_bos:
        return _fail("bos", f"add_bos differs: target {str(t.add_bos).lower()}, draft {str(d.add_bos).lower()}")
    if t.add_bos and t.bos_id != d.bos_id:
        return _fail("bos", f"BOS token id differs (BOS is added): target {t.bos_id}, draft {d.bos_id}")
    if t.add_eos != d.add_eos:
        return _fail("eos", f"add_eos differs: target {str(t.add_eos).lower()}, draft {str(d.add_eos).lower()}")
    if t.add_eos and t.eos_id != d.eos_id:
        return _fail("eos", f"EOS token id differs (EOS is added): target {t.eos_id}, draft {d.eos_id}")
    diff = abs(t.n_tokens - d.n_tokens)
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return _fail(
            "vocab-size",
            f"vocab sizes differ by {diff}: target {t.n_tokens}, draft {d.n_tokens} "
            f"(llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})",
        )
    return None


def _token_region(path: Path) -> StringArray:
    header = read_header(path, check_data=False)
    tokens = header.kv.get(KEY_TOKENS)
    if not isinstance(tokens, StringArray):
        raise GGUFError(path, f"no '{KEY_TOKENS}' string array")
    return tokens


def _offsets(buf: bytes, count: int, start_id: int, stop_id: int) -> tuple[int, int]:
    """Byte offsets (in ``buf``, a region of ``count`` strings) where elements ``start_id`` and
    ``stop_id`` begin. Only the length prefixes up to ``stop_id`` are walked, and none past
    ``start_id`` when ``stop_id`` is the end of the region."""
    unpack = _U64.unpack_from
    pos = 0
    walk_to = start_id if stop_id >= count else stop_id
    start = None
    for i in range(walk_to):
        if i == start_id:
            start = pos
        pos += 8 + unpack(buf, pos)[0]
    if start is None:
        start = pos
    stop = len(buf) if stop_id >= count else pos
    return start, stop


def _load_region(path: Path, memo: dict | None) -> tuple[int, bytes]:
    """(count, raw bytes) of a file's ``tokenizer.ggml.tokens`` region, from ``memo`` when given
    (``group_families`` shares one per call so that each vocabulary is read once)."""
    key = str(path)
    if memo is not None and key in memo:
        return memo[key]
    tokens = _token_region(path)
    value = (tokens.count, tokens.raw())
    if memo is not None:
        memo[key] = value
    return value


def _text(raw: bytes, token_id: int) -> bytes:
    return raw if raw else f"[EMPTY_{token_id}]".encode()


def _first_text_difference(a: bytes, b: bytes, a_pos: int, b_pos: int, first_id: int, stop_id: int):
    """Walk both regions element by element from ``first_id``; return (id, text_a, text_b) of the
    first token whose llama.cpp text differs, or ``None``."""
    unpack = _U64.unpack_from
    for i in range(first_id, stop_id):
        (na,) = unpack(a, a_pos)
        (nb,) = unpack(b, b_pos)
        ta = a[a_pos + 8 : a_pos + 8 + na]
        tb = b[b_pos + 8 : b_pos + 8 + nb]
        a_pos += 8 + na
        b_pos += 8 + nb
        if ta != tb and _text(ta, i) != _text(tb, i):
            return i, ta, tb
    return None


def compare_token_texts(
    target_path: Path, draft_path: Path, n_target: int, n_draft: int, regions: dict | None = None
) -> CompatVerdict | None:
    """Rule 5 on the files: compare the raw ``tokenizer.ggml.tokens`` bytes from id 5 up to the
    smaller vocabulary; only when they differ is the first differing id located.
    ``regions`` is an optional memo of token regions by path, shared between calls.

    Returns:
        The ``token-text`` failure, or ``None`` when the texts match.

    Raises:
        GGUFError: a file or its token array cannot be read.
    """
    a_count, a = _load_region(target_path, regions)
    b_count, b = _load_region(draft_path, regions)
    n = min(a_count, b_count, n_target, n_draft)
    if n <= SPEC_VOCAB_CHECK_START_TOKEN_ID:
        return None
    a_start, a_stop = _offsets(a, a_count, SPEC_VOCAB_CHECK_START_TOKEN_ID, n)
    b_start, b_stop = _offsets(b, b_count, SPEC_VOCAB_CHECK_START_TOKEN_ID, n)
    if a[a_start:a_stop] == b[b_start:b_stop]:
        return None
    found = _first_text_difference(a, b, a_start, b_start, SPEC_VOCAB_CHECK_START_TOKEN_ID, n)
    if found is None:
        return None  # differences only between empty tokens and their [EMPTY_i] stand-ins
    i, x, y = found
    xs = x.decode("utf-8", errors="replace")
    ys = y.decode("utf-8", errors="replace")
    return _fail("token-text", f"token text differs at id {i}: target {xs!r}, draft {ys!r}")


def check_compatible(target: ModelFile, draft: ModelFile, *, regions: dict | None = None) -> CompatVerdict:
    """Apply llama.cpp's draft-compatibility rules to two scanned models.

    Token texts are compared on the raw bytes of the ``tokenizer.ggml.tokens`` regions of the
    two files, read again from disk only when the tokenizer fingerprints differ (equal
    fingerprints mean identical token texts, ids and flags). ``regions``: optional memo of
    token regions by path for many calls over the same files (files must not change meanwhile).

    Raises:
        tuner.catalog.header.GGUFError: a file needed for the token-text rule cannot be read.
    """
    t, d = target.tokenizer, draft.tokenizer
    if t is None or d is None:
        which = "target" if t is None else "draft"
        path = target.path if t is None else draft.path
        return _fail(None, f"{which} {path} has no tokenizer ('tokenizer.ggml.model' missing)")
    failed = check_tokenizers(t, d)
    if failed is not None:
        return failed
    if t.fingerprint != d.fingerprint:
        failed = compare_token_texts(target.path, draft.path, t.n_tokens, d.n_tokens, regions)
        if failed is not None:
            return failed
    note = ""
    if t.n_tokens != d.n_tokens:
        note = f"; vocab sizes differ by {abs(t.n_tokens - d.n_tokens)} (allowed up to {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})"
    elif t.pre != d.pre:
        note = f"; pre-tokenizers differ ({t.pre!r} vs {d.pre!r}), which llama.cpp does not compare"
    return CompatVerdict(True, None, f"compatible: same {t.vocab_type or t.model} vocabulary{note}")
