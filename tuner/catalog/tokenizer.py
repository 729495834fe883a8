"""Tokenizer identity from GGUF keys, with llama.cpp's defaults applied.

llama.cpp fills in BOS/EOS ids and the add_bos/add_eos flags from the vocab type (and, for BPE,
the pre-tokenizer) when the GGUF does not set them; draft compatibility compares the values
*after* those defaults, so we reproduce them here. Source: src/llama-vocab.cpp
``llama_vocab::impl::load`` (vocab type from ``tokenizer.ggml.model``, default special ids per
type, ``add_bos`` per pre-tokenizer, the "out of vocab range" rules, the Gemma 4 override).
"""

from __future__ import annotations

import hashlib

from tuner.catalog.header import GGUFHeader, StringArray
from tuner.catalog.model import TokenizerInfo

KEY_MODEL = "tokenizer.ggml.model"
KEY_PRE = "tokenizer.ggml.pre"
KEY_TOKENS = "tokenizer.ggml.tokens"
KEY_BOS = "tokenizer.ggml.bos_token_id"
KEY_EOS = "tokenizer.ggml.eos_token_id"
KEY_ADD_BOS = "tokenizer.ggml.add_bos_token"
KEY_ADD_EOS = "tokenizer.ggml.add_eos_token"

# tokenizer.ggml.model → llama_vocab_type (llama-vocab.cpp, "determine vocab type")
VOCAB_TYPES = {
    "no_vocab": "NONE",
    "none": "NONE",
    "llama": "SPM",
    "bert": "WPM",
    "gpt2": "BPE",
    "hybriddna": "BPE",
    "whitespace": "BPE",
    "gemma4": "BPE",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLAMO2",
}

# Default (bos, eos) ids per tokenizer model before the GGUF keys are read; None = LLAMA_TOKEN_NULL.
_DEFAULT_SPECIAL = {
    "llama": (1, 2),
    "bert": (101, None),
    "gpt2": (11, 11),
    "hybriddna": (11, 11),
    "whitespace": (11, 11),
    "t5": (None, 1),
    "rwkv": (None, None),
    "plamo2": (1, 2),
    "gemma4": (None, None),
}

# BPE pre-tokenizers for which llama.cpp sets add_bos = true.
_BPE_PRE_ADD_BOS = frozenset(
    {
        "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "jina-v5-nano", "tekken", "chameleon",
    }
)
# BPE pre-tokenizers that clear the default BOS id.
_BPE_PRE_NO_BOS = frozenset({"glm4", "chatglm-bpe"})
# Pre-tokenizers of llama.cpp's GEMMA4 pre type: add_bos is forced to true.
_GEMMA4_PRE = frozenset({"gemma4", "granite-embed-multi-311m"})


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    return None


def _as_id(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def tokenizer_info(header: GGUFHeader) -> TokenizerInfo | None:
    """The effective tokenizer of a GGUF, or ``None`` when ``tokenizer.ggml.model`` is absent.

    ``fingerprint`` is a BLAKE2b-128 hex digest over the tokenizer model, pre, the raw
    ``tokenizer.ggml.tokens`` region (every token's bytes), the effective BOS/EOS ids and the
    effective add flags. Reads the token region once from the file (a few MB for 150k tokens).

    Raises:
        tuner.catalog.header.GGUFError: the token region cannot be read.
    """
    model = header.kv.get(KEY_MODEL)
    if not isinstance(model, str):
        return None
    pre = header.kv.get(KEY_PRE)
    pre = pre if isinstance(pre, str) else None
    vocab_type = VOCAB_TYPES.get(model)
    tokens = header.kv.get(KEY_TOKENS)
    if isinstance(tokens, StringArray):
        n_tokens = tokens.count
    else:
        n_tokens = 0
        arch = header.architecture
        if vocab_type == "NONE" and arch:
            size = header.kv.get(f"{arch}.vocab_size")
            n_tokens = size if isinstance(size, int) and not isinstance(size, bool) else 0

    if vocab_type == "NONE":
        bos, eos = None, None
        add_bos, add_eos = False, False
    else:
        bos, eos = _DEFAULT_SPECIAL.get(model, (1, 2))
        if model == "gemma4":
            pre = "gemma4"  # llama.cpp overwrites tokenizer_pre for this model
        add_bos, add_eos = False, False
        if vocab_type == "BPE":
            if pre in _BPE_PRE_ADD_BOS:
                add_bos = True
            if pre in _BPE_PRE_NO_BOS:
                bos = None
        elif vocab_type in ("SPM", "WPM"):
            add_bos = True
        elif vocab_type == "UGM":
            add_eos = True
        # default ids beyond the vocabulary are disabled; key values beyond it are ignored
        if bos is not None and bos >= n_tokens:
            bos = None
        if eos is not None and eos >= n_tokens:
            eos = None
        key_bos = _as_id(header.kv.get(KEY_BOS))
        if key_bos is not None and 0 <= key_bos < n_tokens:
            bos = key_bos
        key_eos = _as_id(header.kv.get(KEY_EOS))
        if key_eos is not None and 0 <= key_eos < n_tokens:
            eos = key_eos
        flag = _as_bool(header.kv.get(KEY_ADD_BOS))
        if flag is not None:
            add_bos = flag
        flag = _as_bool(header.kv.get(KEY_ADD_EOS))
        if flag is not None:
            add_eos = flag
        if vocab_type == "BPE" and pre in _GEMMA4_PRE:
            add_bos = True

    digest = hashlib.blake2b(digest_size=16)
    for part in (model, pre or "", str(bos), str(eos), str(add_bos), str(add_eos), str(n_tokens)):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    if isinstance(tokens, StringArray):
        digest.update(tokens.raw())
    return TokenizerInfo(
        model=model,
        pre=pre,
        n_tokens=n_tokens,
        bos_id=bos,
        eos_id=eos,
        add_bos=add_bos,
        add_eos=add_eos,
        fingerprint=digest.hexdigest(),
        vocab_type=vocab_type,
    )
