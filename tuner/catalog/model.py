"""Catalog value types: what a scanned GGUF file is, and its tokenizer identity.

Everything here is a frozen dataclass; ``None`` means "unknown / not in the file".
Sizes are in bytes, counts are plain integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The kinds a scanned file can have (``ModelFile.kind``).
KIND_LLM = "llm"
KIND_MMPROJ = "mmproj"
KIND_VOCAB_ONLY = "vocab-only"
KIND_EMBEDDING = "embedding"
KIND_DRAFT_HEAD = "draft-head"
KIND_UNSUPPORTED = "unsupported"
KIND_BROKEN = "broken"
KINDS = (
    KIND_LLM,
    KIND_MMPROJ,
    KIND_VOCAB_ONLY,
    KIND_EMBEDDING,
    KIND_DRAFT_HEAD,
    KIND_UNSUPPORTED,
    KIND_BROKEN,
)


@dataclass(frozen=True)
class TokenizerInfo:
    """Identity of a model's tokenizer, as llama.cpp will see it after loading.

    Attributes:
        model: ``tokenizer.ggml.model`` (``llama``, ``gpt2``, ``bert``, ``t5``, ...).
        pre: ``tokenizer.ggml.pre`` or ``None`` when absent.
        n_tokens: length of ``tokenizer.ggml.tokens`` (llama.cpp's ``n_vocab``).
        bos_id: effective BOS id (the GGUF key, else llama.cpp's default for the vocab type;
            ``None`` = LLAMA_TOKEN_NULL). Rules from src/llama-vocab.cpp ``llama_vocab::impl::load``.
        eos_id: effective EOS id, same rules as ``bos_id``.
        add_bos: effective ``add_bos`` (``tokenizer.ggml.add_bos_token`` or the vocab-type / pre default).
        add_eos: effective ``add_eos`` (``tokenizer.ggml.add_eos_token`` or the vocab-type default).
        fingerprint: hex digest over model, pre, every token text, BOS/EOS ids and add flags. Equal
            fingerprints mean identical tokenizers (and so compatible for draft-simple).
        vocab_type: llama.cpp's vocab type name (``SPM``, ``BPE``, ``WPM``, ``UGM``, ``RWKV``,
            ``PLAMO2``, ``NONE``) or ``None`` for a tokenizer model llama.cpp does not know.
    """

    model: str
    pre: str | None
    n_tokens: int
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    fingerprint: str
    vocab_type: str | None = None


@dataclass(frozen=True)
class ModelFile:
    """One model found by a scan: a single GGUF file or a complete split set.

    Attributes:
        path: the file (for a split set: its first shard, ``...-00001-of-0000N.gguf``).
        kind: one of :data:`KINDS`.
        error: why the file is ``broken`` or ``unsupported`` (names the file, key or shard); else ``None``.
        shards: every file of the model, in order (one element for a single file).
        size_bytes: summed size of all shards.
        architecture: ``general.architecture`` (``None`` when unreadable).
        name: ``general.name`` or ``None``.
        n_layers: ``<arch>.block_count`` (includes MTP blocks when the file has them).
        n_params: parameter count (sum of tensor elements over all shards).
        quantization: ``general.file_type`` as a name (e.g. ``Q4_K_M``, ``F16``), else the GGML type
            holding most bytes among the 2-D tensors (e.g. ``Q4_K``).
        context_length: ``<arch>.context_length`` (training context, tokens).
        mtp_layers: ``<arch>.nextn_predict_layers`` or the number of blocks that have
            ``blk.N.nextn.*`` tensors, whichever is larger; 0 when none.
        n_embd, n_head, n_head_kv, key_length, value_length: attention shape keys of ``<arch>.*``, read
            by ``tuner.catalog.hparams`` as llama.cpp reads them: ``n_head`` / ``n_head_kv`` are the largest
            per-layer counts (missing KV heads = each layer's head count), key/value length default to
            ``n_embd // `` layer 0's head count (src/llama-model.cpp ``llama_model_base::load_hparams``).
        tokenizer: tokenizer identity, ``None`` when the file has no tokenizer.
        mtime_ns: modification time of ``path`` (for cache keys and profile staleness).
        detail: extra facts for display (e.g. ``pooling_type``, ``spec_type`` of a draft head).
    """

    path: Path
    kind: str
    error: str | None = None
    shards: tuple[Path, ...] = ()
    size_bytes: int = 0
    architecture: str | None = None
    name: str | None = None
    n_layers: int | None = None
    n_params: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    mtp_layers: int = 0
    n_embd: int | None = None
    n_head: int | None = None
    n_head_kv: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    tokenizer: TokenizerInfo | None = None
    mtime_ns: int | None = None
    detail: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def is_llm(self) -> bool:
        """True for a loadable text-generation model (kind ``llm``)."""
        return self.kind == KIND_LLM
