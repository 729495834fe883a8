"""Deterministic synthetic Llama GGUFs: the "acceptance dial" family (DESIGN.md, synthetic families).

Writes real, loadable Llama GGUFs (gguf-py's writer through :mod:`tuner.catalog.gguf_adapter`, numpy
weights) that reuse a real tokenizer (:func:`read_tokenizer`), so llama-server loads them. Weights are
random but deterministic: every tensor is drawn from a generator seeded with ``(seed, crc32(tensor
name))``, so two files written with the same ``seed`` and shapes share identical tensors by name. That
gives the acceptance dial:

- target: ``L`` blocks; blocks past the first ``k`` have ``attn_output``/``ffn_down`` scaled by ``eps``
  (they nudge the residual stream by a small amount);
- draft: the same first ``k`` blocks, embeddings, norms and output (same seed, ``k`` blocks).

Output rows of non-normal tokens (token_type != 1: unknown, control, byte) are zeroed so a random model
never emits byte tokens (invalid UTF-8 makes llama-server answer HTTP 500) nor EOS.

The product generates its demo models with it (:mod:`tuner.catalog.demo`); the tests' and benches'
generator (tests/synth.py) builds its families on the same functions. Tensors are streamed to the file
one at a time (gguf-py ``add_tensor_info`` + ``write_tensor_data``), which gives the same bytes as
adding them all first, holds one tensor in memory at a time and lets a caller follow the progress.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tuner.catalog import gguf_adapter

TOKEN_TYPE_NORMAL = 1
# Standard deviation of the token embeddings. The blocks' outputs do not depend on it (each block
# normalizes its input), so it sets how much the eps-scaled blocks move the residual stream relative to
# the first blocks: a larger value → the draft agrees more often at a given eps. 2.0 makes eps 0.05
# match DESIGN.md's dial.
EMBD_STD = 2.0

#: ``progress(bytes_written, bytes_total)``, called after each tensor; an exception it raises (e.g.
#: ``tuner.errors.Cancelled``) stops the writing and the partial file is removed.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer to write into a GGUF.

    ``add_bos`` / ``add_eos`` / ``pre`` / ``bos_id`` / ``eos_id`` set to ``None`` leave the key out
    (llama.cpp then applies its per-vocab-type defaults: src/llama-vocab.cpp ``llama_vocab::impl::load``).
    ``merges`` is needed for BPE (``gpt2``).
    """

    model: str
    pre: str | None
    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    token_types: tuple[int, ...]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool | None
    add_eos: bool | None
    merges: tuple[str, ...] = ()

    @property
    def n_tokens(self) -> int:
        """Vocabulary size."""
        return len(self.tokens)

    def with_token(self, token_id: int, text: str) -> TokenizerSpec:
        """A copy whose token ``token_id`` has text ``text`` (keep texts unique: llama.cpp refuses duplicates)."""
        tokens = list(self.tokens)
        tokens[token_id] = text
        return replace(self, tokens=tuple(tokens))

    def with_extra_tokens(self, n: int, prefix: str = "<extra_", token_type: int = TOKEN_TYPE_NORMAL) -> TokenizerSpec:
        """A copy with ``n`` more tokens appended (``<extra_0>``, ``<extra_1>``, ...) of ``token_type``.

        Use a non-normal type (e.g. 5, unused) for a *draft* whose vocabulary is larger than the
        target's: its output rows are then zero, so it never proposes an id the target lacks
        (llama-server b11434 aborts in ``common_batch::get_sub_batch`` when a draft does).
        """
        extra = tuple(f"{prefix}{i}>" for i in range(n))
        return replace(
            self,
            tokens=self.tokens + extra,
            scores=self.scores + (0.0,) * n,
            token_types=self.token_types + (token_type,) * n,
        )

    def truncated(self, n_tokens: int) -> TokenizerSpec:
        """A copy with only the first ``n_tokens`` tokens."""
        return replace(
            self,
            tokens=self.tokens[:n_tokens],
            scores=self.scores[:n_tokens],
            token_types=self.token_types[:n_tokens],
        )


@lru_cache(maxsize=4)
def read_tokenizer(path: Path) -> TokenizerSpec:
    """The tokenizer of the GGUF at ``path`` (``tokenizer.ggml.model``, tokens, scores, token types, BOS and
    EOS ids; ``pre`` and the add flags are left to llama.cpp's defaults). Read once per path.

    Raises:
        OSError: the file cannot be read; KeyError: it has no tokenizer keys;
        tuner.catalog.gguf_adapter.GGUFPackageError: the gguf package is missing.
    """
    reader = gguf_adapter.open_reader(path)
    fields = reader.fields
    tok_field = fields["tokenizer.ggml.tokens"]
    tokens = tuple(bytes(tok_field.parts[i]).decode("utf-8") for i in tok_field.data)
    sc = fields["tokenizer.ggml.scores"]
    tt = fields["tokenizer.ggml.token_type"]
    model_f = fields["tokenizer.ggml.model"]

    def scalar(name: str) -> int | None:
        f = fields.get(name)
        return None if f is None else int(f.parts[f.data[0]][0])

    return TokenizerSpec(
        model=bytes(model_f.parts[model_f.data[0]]).decode("utf-8"),
        pre=None,
        tokens=tokens,
        scores=tuple(float(sc.parts[i][0]) for i in sc.data),
        token_types=tuple(int(tt.parts[i][0]) for i in tt.data),
        bos_id=scalar("tokenizer.ggml.bos_token_id"),
        eos_id=scalar("tokenizer.ggml.eos_token_id"),
        add_bos=None,
        add_eos=None,
    )


def weight_rng(seed: int, name: str) -> np.random.Generator:
    """The generator of tensor ``name`` under ``seed``: numpy's PCG64 seeded with ``(seed, crc32(name))``."""
    return np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(name.encode("utf-8"))])


def normal_weights(seed: int, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    """A float32 array of ``shape`` drawn from N(0, ``std``²) by :func:`weight_rng` (same arguments, same values)."""
    return (weight_rng(seed, name).standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)


def _gguf_value_type(value: Any) -> tuple[Any, Any]:
    """``(GGUFValueType, array sub-type or None)`` for a Python value (bool, int, float, str, list/tuple)."""
    vt = gguf_adapter.value_type
    if isinstance(value, bool):
        return vt("BOOL"), None
    if isinstance(value, int):
        return (vt("UINT32") if 0 <= value < 2**32 else vt("INT64")), None
    if isinstance(value, float):
        return vt("FLOAT32"), None
    if isinstance(value, str):
        return vt("STRING"), None
    if isinstance(value, (list, tuple)):
        if not value:
            return vt("ARRAY"), vt("INT32")
        first = value[0]
        sub = "STRING" if isinstance(first, str) else "FLOAT32" if isinstance(first, float) else "INT32"
        return vt("ARRAY"), vt(sub)
    raise TypeError(f"cannot write {type(value).__name__} as a GGUF value")


def add_tokenizer(writer: Any, tok: TokenizerSpec) -> None:
    """Write ``tok``'s ``tokenizer.ggml.*`` keys into a gguf-py writer (keys set to None are left out)."""
    writer.add_tokenizer_model(tok.model)
    if tok.pre is not None:
        writer.add_tokenizer_pre(tok.pre)
    writer.add_token_list(list(tok.tokens))
    writer.add_token_scores(list(tok.scores))
    writer.add_token_types(list(tok.token_types))
    if tok.merges:
        writer.add_token_merges(list(tok.merges))
    if tok.bos_id is not None:
        writer.add_bos_token_id(tok.bos_id)
    if tok.eos_id is not None:
        writer.add_eos_token_id(tok.eos_id)
    if tok.add_bos is not None:
        writer.add_add_bos_token(tok.add_bos)
    if tok.add_eos is not None:
        writer.add_add_eos_token(tok.add_eos)


def add_extra_kv(writer: Any, extra_kv: Mapping[str, Any] | None) -> None:
    """Write more keys (types inferred: bool, uint32/int64, float32, string, arrays; None values skipped)."""
    for key, value in (extra_kv or {}).items():
        if value is None:
            continue
        vtype, sub = _gguf_value_type(value)
        writer.add_key_value(key, list(value) if isinstance(value, tuple) else value, vtype, sub_type=sub)


def write_gguf(
    path: Path | str,
    *,
    architecture: str = "llama",
    kv: Mapping[str, Any] | None = None,
    tensors: Mapping[str, np.ndarray] | None = None,
    tokenizer: TokenizerSpec | None = None,
    general_name: str | None = None,
) -> Path:
    """Write an arbitrary GGUF: ``general.architecture``, optional tokenizer, ``kv`` (see :func:`add_extra_kv`)
    and ``tensors`` (numpy, float32 → F32, float16 → F16). Not necessarily loadable by llama.cpp.

    Returns ``path``. Raises OSError when the file cannot be written, TypeError for a value of another type.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf_adapter.new_writer(path, architecture)
    if general_name:
        writer.add_name(general_name)
    if tokenizer is not None:
        add_tokenizer(writer, tokenizer)
    add_extra_kv(writer, kv)
    for name, arr in (tensors or {}).items():
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass(frozen=True)
class LlamaShape:
    """The shape and dial of a synthetic Llama (see :func:`write_llama_gguf` for each field)."""

    n_embd: int = 64
    n_layers: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int | None = None
    ctx_train: int = 2048
    dtype: str = "f32"
    seed: int = 0
    eps: float = 0.0
    keep_blocks: int | None = None
    nextn_layers: int = 0
    output_scale: float = 3.0
    tied_output: bool = False
    embd_std: float | None = None

    def check(self) -> None:
        """Raises ValueError for a ``dtype`` other than f32/f16 or a width the heads do not divide."""
        if self.dtype not in ("f32", "f16"):
            raise ValueError(f"dtype must be 'f32' or 'f16', not {self.dtype!r}")
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError(f"n_embd {self.n_embd} / n_head {self.n_head} / n_head_kv {self.n_head_kv} do not divide")


@dataclass(frozen=True)
class _Planned:
    """One tensor to write: its name, numpy shape and dtype, and how to make it."""

    name: str
    shape: tuple[int, ...]
    dtype: Any
    make: Callable[[], np.ndarray]

    @property
    def n_bytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


def _tensor_plan(s: LlamaShape, tok: TokenizerSpec, source: Mapping[str, np.ndarray]) -> list[_Planned]:
    """The tensors of a synthetic Llama in file order, each made on demand (one in memory at a time)."""
    n_vocab, n_ff = tok.n_tokens, s.n_ff or 3 * s.n_embd
    n_embd_kv = s.n_embd // s.n_head * s.n_head_kv
    keep = s.n_layers if s.keep_blocks is None else s.keep_blocks
    wd = np.float16 if s.dtype == "f16" else np.float32
    inv = 1.0 / np.sqrt(s.n_embd)

    def weight(name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        src = source.get(name)
        if src is not None and src.shape == shape:
            return src.copy()
        return normal_weights(s.seed, name, shape, std)

    def w(name: str, shape: tuple[int, ...], std: float, scale: float | None = None) -> _Planned:
        if scale is None:
            return _Planned(name, shape, wd, lambda: weight(name, shape, std).astype(wd))
        return _Planned(name, shape, wd, lambda: (weight(name, shape, std) * np.float32(scale)).astype(wd))

    def ones(name: str) -> _Planned:
        return _Planned(name, (s.n_embd,), np.float32, lambda: np.ones(s.n_embd, dtype=np.float32))

    def output() -> np.ndarray:
        out = weight("output.weight", (n_vocab, s.n_embd), s.output_scale * inv)
        out[np.array([t != TOKEN_TYPE_NORMAL for t in tok.token_types], dtype=bool), :] = 0.0
        return out.astype(wd)

    plan = [w("token_embd.weight", (n_vocab, s.n_embd), 1.0, EMBD_STD if s.embd_std is None else s.embd_std),
            ones("output_norm.weight")]
    if not s.tied_output:
        plan.append(_Planned("output.weight", (n_vocab, s.n_embd), wd, output))
    for i in range(s.n_layers):
        p, scale = f"blk.{i}.", 1.0 if i < keep else float(s.eps)
        plan += [ones(p + "attn_norm.weight"), w(p + "attn_q.weight", (s.n_embd, s.n_embd), inv),
                 w(p + "attn_k.weight", (n_embd_kv, s.n_embd), inv), w(p + "attn_v.weight", (n_embd_kv, s.n_embd), inv),
                 w(p + "attn_output.weight", (s.n_embd, s.n_embd), inv, scale), ones(p + "ffn_norm.weight"),
                 w(p + "ffn_gate.weight", (n_ff, s.n_embd), inv), w(p + "ffn_up.weight", (n_ff, s.n_embd), inv),
                 w(p + "ffn_down.weight", (s.n_embd, n_ff), 2.0 / np.sqrt(n_ff), scale)]
    for j in range(s.nextn_layers):
        p = f"blk.{s.n_layers + j}."
        plan += [ones(p + "attn_norm.weight"), w(p + "nextn.eh_proj.weight", (s.n_embd, 2 * s.n_embd), inv),
                 ones(p + "nextn.enorm.weight"), ones(p + "nextn.hnorm.weight"),
                 ones(p + "nextn.shared_head_norm.weight")]
    return plan


def _llama_keys(writer: Any, s: LlamaShape, tok: TokenizerSpec, name: str, extra_kv: Mapping[str, Any] | None) -> None:
    """The hyper-parameter and tokenizer keys of a synthetic Llama (llama.cpp src/llama-model.cpp
    ``load_hparams`` reads them under the architecture's prefix)."""
    writer.add_name(name)
    writer.add_context_length(s.ctx_train)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(s.n_layers + s.nextn_layers)
    writer.add_feed_forward_length(s.n_ff or 3 * s.n_embd)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_dimension_count(s.n_embd // s.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1 if s.dtype == "f16" else 0)
    if s.nextn_layers:
        writer.add_nextn_predict_layers(s.nextn_layers)
    add_tokenizer(writer, tok)
    add_extra_kv(writer, extra_kv)


def _source_tensors(weights_from: Path | str | None) -> dict[str, np.ndarray]:
    """The F16/F32 tensors of ``weights_from`` as float32 (empty without one)."""
    if weights_from is None:
        return {}
    reader = gguf_adapter.open_reader(Path(weights_from))
    out = {}
    for t in reader.tensors:
        arr = np.asarray(t.data)
        if arr.dtype in (np.float16, np.float32):
            out[t.name] = arr.astype(np.float32)
    return out


def write_llama_gguf(
    path: Path | str,
    shape: LlamaShape,
    tokenizer: TokenizerSpec,
    *,
    general_name: str | None = None,
    architecture: str = "llama",
    weights_from: Path | str | None = None,
    extra_kv: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write a real, loadable Llama GGUF with deterministic random weights.

    ``shape`` fields: ``n_embd``, ``n_layers``, ``n_head``, ``n_head_kv`` (``n_embd`` divisible by ``n_head``);
    ``n_ff`` feed-forward width (default ``3 * n_embd``); ``ctx_train`` (``<arch>.context_length``); ``dtype``
    ``"f32"``/``"f16"`` for the 2-D weights (norms stay F32); ``seed`` (same seed + same shapes = identical
    tensors by name); ``eps`` scales ``attn_output``/``ffn_down`` of the blocks past ``keep_blocks`` (default:
    all blocks unscaled); ``nextn_layers`` appends MTP/NextN blocks (catalog tests only: llama.cpp's
    ``llama`` loader refuses them); ``output_scale`` is the standard deviation of the logits before the final
    norm's gain (how peaked the next-token distribution is: greedy choices do not depend on it, sampled ones
    do); ``tied_output`` leaves out ``output.weight`` (llama.cpp then uses ``token_embd``); ``embd_std`` is
    the standard deviation of ``token_embd`` (default :data:`EMBD_STD`).

    Args:
        path: output file (its folder is created).
        tokenizer: the tokenizer written into the file (its size is the vocabulary's).
        general_name: ``general.name`` (default: the file's stem).
        architecture: ``general.architecture`` (keys are written under this prefix).
        weights_from: an existing GGUF whose tensors of the same name and shape are copied (before the
            ``eps`` scaling) instead of drawn.
        extra_kv: more keys (``None`` values skipped), after the tokenizer's.
        progress: see :data:`Progress`.

    Returns ``path``. Raises ValueError for a bad shape or dtype, OSError when the file cannot be
    written; whatever ``progress`` raises propagates (the partial file is removed).
    """
    shape.check()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = _tensor_plan(shape, tokenizer, _source_tensors(weights_from))
    writer = gguf_adapter.new_writer(path, architecture)
    _llama_keys(writer, shape, tokenizer, general_name or path.stem, extra_kv)
    for t in plan:
        writer.add_tensor_info(t.name, t.shape, np.dtype(t.dtype), t.n_bytes)
    total, done = sum(t.n_bytes for t in plan), 0
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in plan:
            writer.write_tensor_data(t.make())
            done += t.n_bytes
            if progress is not None:
                progress(done, total)
    except BaseException:
        writer.close()
        path.unlink(missing_ok=True)
        raise
    writer.close()
    return path


def llama_file_bytes(shape: LlamaShape, tokenizer: TokenizerSpec) -> int:
    """Bytes of tensor data :func:`write_llama_gguf` writes for ``shape`` (the file is this plus its header)."""
    return sum(t.n_bytes for t in _tensor_plan(shape, tokenizer, {}))


def replace_file(tmp: Path, final: Path) -> None:
    """Move a finished ``tmp`` over ``final`` atomically (same folder), after flushing it to disk."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
