"""Write ``resources/selftest/selftest-q4_0.gguf``: the doctor's tiny *quantized* self-test model.

Run from the repository root (it reuses the test generator's real 512-token stories tokenizer)::

    python packaging/make_selftest_model.py [OUT.gguf]

Why this model exists: the demo model (stories260K, F32) never reaches ggml's repacked CPU kernels, so a
llama-server build whose quantized kernels crash on this CPU would pass a self-test with it. This model is
a 2-block Llama with the stories tokenizer (so it can draft for itself, ``draft-simple``) whose matrices
ggml does take into its extra CPU buffer types on x86, and in two groups that tell those types apart:

- ``attn_q`` / ``attn_k`` / ``attn_v`` / ``attn_output`` and ``output`` (Q4_0, rows and columns multiples
  of 32): taken by the **AMX** buffer type on a build with AMX kernels (ggml/src/ggml-cpu/amx/amx.cpp
  ``extra_buffer_type::supports_op``: rows ``% (TILE_N * 2)`` = 32, columns ``% TILE_K`` = 32 for
  Q4_0; ``qtype_has_amx_kernels``), else by **CPU_REPACK** (ggml/src/ggml-cpu/repack.cpp
  ``ggml_repack_get_optimal_repack_type``: Q4_0 with rows ``% 8`` on an AVX2 build);
- ``ffn_gate`` / ``ffn_up`` (Q4_0, 680 rows: a multiple of 8, not of 32): AMX refuses them, CPU_REPACK
  takes them, so an AMX build shows both buffers in its load log;
- ``ffn_down`` (F16, 680 columns: not a multiple of 16, so AMX's F16 path refuses it too) and the
  token embeddings (Q4_0, read by ``GET_ROWS``: no extra buffer type supports it) stay in the plain
  CPU buffer.

Per-tensor choice: src/llama-model-loader.cpp ``select_weight_buft`` (the first buffer type in the CPU
list whose ``supports_op`` accepts the tensor's op; src/llama-model.cpp ``make_cpu_buft_list`` puts AMX
before CPU_REPACK). Weights are random but deterministic (seeded per tensor name), so running this script
again writes the same bytes (tests/test_selftest_model.py checks it). Output rows of non-normal tokens are
zeroed, as in tests/synth.py, so the model never emits byte tokens or EOS.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.synth import TOKEN_TYPE_NORMAL, _add_tokenizer, _normal, stories_tokenizer  # noqa: E402

OUT = REPO / "resources" / "selftest" / "selftest-q4_0.gguf"
N_EMBD = 256
N_LAYERS = 2
N_HEAD = 8
N_HEAD_KV = 4
N_FF = 680  # a multiple of 8 (CPU_REPACK's Q4_0 rows), not of 32 (AMX's rows)
SEED = 23


def _q4_0(writer, name: str, rows: int, cols: int, std: float) -> None:
    import gguf
    from gguf.quants import quantize

    arr = _normal(SEED, name, (rows, cols), std)
    writer.add_tensor(name, quantize(arr, gguf.GGMLQuantizationType.Q4_0), raw_dtype=gguf.GGMLQuantizationType.Q4_0)


def write_selftest_model(path: Path = OUT) -> Path:
    """Write the self-test GGUF to ``path`` (1.4 MB) and return it."""
    import gguf

    tok = stories_tokenizer()
    head_dim = N_EMBD // N_HEAD
    inv = 1.0 / np.sqrt(N_EMBD)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("Draftwise self-test (Q4_0)")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYERS)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    _add_tokenizer(w, tok)
    _q4_0(w, "token_embd.weight", tok.n_tokens, N_EMBD, 2.0)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    out = _normal(SEED, "output.weight", (tok.n_tokens, N_EMBD), 3.0 * inv)
    out[np.array([t != TOKEN_TYPE_NORMAL for t in tok.token_types], dtype=bool), :] = 0.0
    w.add_tensor("output.weight", gguf.quants.quantize(out, gguf.GGMLQuantizationType.Q4_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        _q4_0(w, p + "attn_q.weight", N_EMBD, N_EMBD, inv)
        _q4_0(w, p + "attn_k.weight", N_HEAD_KV * head_dim, N_EMBD, inv)
        _q4_0(w, p + "attn_v.weight", N_HEAD_KV * head_dim, N_EMBD, inv)
        _q4_0(w, p + "attn_output.weight", N_EMBD, N_EMBD, inv)
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        _q4_0(w, p + "ffn_gate.weight", N_FF, N_EMBD, inv)
        _q4_0(w, p + "ffn_up.weight", N_FF, N_EMBD, inv)
        down = _normal(SEED, p + "ffn_down.weight", (N_EMBD, N_FF), 2.0 / np.sqrt(N_FF))
        w.add_tensor(p + "ffn_down.weight", down.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    print(write_selftest_model(target))
