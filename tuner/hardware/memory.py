"""Memory plan for one launch configuration: does it fit, where does every byte go.

Rules follow llama.cpp b11434:
- layer placement by ``-ngl``: src/llama-model.cpp ``llama_model::load_tensors`` (``i_gpu_start =
  max(n_layer + 1 - ngl, 0)``, the output layer counting as layer ``n_layer``, so it is the FIRST
  layer offloaded: ngl 1 = output only, ngl k = output + the last k-1 blocks; the input layer —
  token embeddings — always on the CPU; layers split over GPUs in proportion to free memory unless
  a tensor split is given);
- context size: src/llama-context.cpp ``llama_context::llama_context`` (``n_ctx`` padded to 256; with
  a non-unified KV cache every slot gets ``n_ctx / n_parallel`` cells, padded to 256);
- KV cache bytes: src/llama-kv-cache.cpp (per layer ``n_ctx × n_embd_k_gqa`` K and ``n_ctx × n_embd_v_gqa`` V
  elements of the cache type; each layer's KV lives on that layer's device);
- draft: common/speculative.cpp (draft context ``n_ctx`` = target ``n_ctx``, ``n_seq_max`` = n_parallel,
  KV types from ``-ctkd/-ctvd``, default f16); MTP: weights shared with the target (count 0), its own
  KV for the MTP layers at the same ``n_ctx`` (common/fit.h, reference S10);
- compute buffers: see :func:`compute_buffer_bytes` (src/llama-context.cpp ``sched_reserve`` /
  ``graph_reserve``; tools/server/server-context.cpp ``server_output_limits``);
- MoE expert offload: ``--cpu-moe`` / ``--n-cpu-moe N`` (common/arg.cpp, common/common.h
  ``LLM_FFN_EXPS_REGEX`` / ``llm_add_n_cpu_ffn_overrides``) keep the tensors matching
  ``blk.<i>.ffn_(up|down|gate|gate_up)_(ch|)exps`` of the first N blocks in host memory
  (a CPU buffer-type override applied in src/llama-model.cpp ``load_tensors``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsInt

from tuner.catalog.hparams import HyperParams, read_hparams
from tuner.spectypes import DRAFT_MODEL_TYPES
from tuner.units import GIB as GIB  # re-exported: the plan's callers and tests use it
from tuner.units import MIB, format_bytes

if TYPE_CHECKING:
    from tuner.hardware.buffers import CpuBuffers
    from tuner.hardware.devices import Device, Devices

# bytes per element of a KV cache type (ggml type traits: block bytes / block size)
KV_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}

DEFAULT_MARGIN_BYTES = 1024 * MIB  # llama.cpp --fit-target default (common/common.h)


@dataclass(frozen=True)
class ModelMemorySpec:
    """What the memory plan needs to know about one GGUF model (built from its header).

    ``block_bytes[i]`` = bytes of all ``blk.i.*`` tensors; ``input_bytes`` = token embeddings and other
    tensors the input layer owns (always on the CPU); ``output_bytes`` = ``output.weight``,
    ``output_norm`` and any other non-block tensor (on the GPU only when ngl > n_layer).
    ``n_embd_k_gqa`` / ``n_embd_v_gqa`` per layer = n_head_kv × key_length / value_length (0 for a
    layer without KV: recurrent layers of hybrid models). ``mtp_layers`` = trailing MTP blocks
    (``nextn_predict_layers``). ``swa_window`` = sliding-window size for layers listed in
    ``swa_layers`` (their KV holds only the window). ``recurrent_layer_bytes[i]``: recurrent
    (SSM / linear-attention) state of layer i per sequence, f32 (empty = none).
    ``expert_bytes[i]``: bytes of ``blk.i``'s MoE expert tensors (included in ``block_bytes[i]``;
    empty = dense model); ``n_expert`` / ``n_expert_used`` / ``n_ff_exp`` = ``<arch>.expert_count`` /
    ``expert_used_count`` / ``expert_feed_forward_length``.
    ``extra_buffer_weights``: the matrix weights ggml's extra CPU buffer types may copy (see
    :func:`extra_buffer_class`), grouped ``(layer, CPU_REPACK build flag or "", AMX copy bytes or -1,
    bytes, bytes that leave the plain CPU buffer)``; layer -1 = the output layer (a tied output's
    ``token_embd`` duplicate leaves nothing: the input layer keeps it).
    """

    name: str
    path: str | None
    n_layer: int
    block_bytes: tuple[int, ...]
    input_bytes: int
    output_bytes: int
    n_embd: int
    n_vocab: int
    n_embd_k_gqa: tuple[int, ...]
    n_embd_v_gqa: tuple[int, ...]
    n_ff: int | None = None
    n_head: int | None = None
    mtp_layers: int = 0
    swa_window: int | None = None
    swa_layers: tuple[int, ...] = ()
    recurrent_layer_bytes: tuple[int, ...] = ()
    context_length: int | None = None
    tied_output: bool = False
    architecture: str | None = None
    notes: tuple[str, ...] = ()
    expert_bytes: tuple[int, ...] = ()
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int | None = None
    n_embd_head_k: int | None = None
    extra_buffer_weights: tuple[tuple[int, str, int, int, int], ...] = ()
    tied_embd_bytes: int = 0

    @property
    def weights_bytes(self) -> int:
        """All tensor bytes of the file (blocks + input + output), each tensor once: a tied output's
        ``token_embd`` copy (in ``output_bytes`` for GPU placement) is not counted twice."""
        dup = min(self.output_bytes, self.tied_embd_bytes) if self.tied_output else 0
        return sum(self.block_bytes) + self.input_bytes + self.output_bytes - dup


@dataclass(frozen=True)
class MemoryRequest:
    """One candidate launch configuration to plan.

    ``ngl``/``draft_ngl``: GPU layers as llama.cpp counts them (the output layer is offloaded first;
    ``n_layer + 1`` or more = everything; None or negative = all). ``spec_type``: the ``--spec-type`` value (``none``,
    ``draft-simple``, ``draft-mtp``, ``ngram-*``...). ``n_parallel``: slots (``-np``; None = server
    auto = 4 slots with a unified KV). ``kv_unified`` None = llama-server's rule (True for auto -np,
    False for an explicit -np). ``margin_bytes``: free memory left on every GPU (``--fit-target``).
    ``tensor_split``: relative split over GPUs (``-ts``), None = by free memory.
    ``n_max``: draft length (``--spec-draft-n-max``, or the n-gram type's own size flag); None = the
    server's default for the type (:func:`spec_draft_n_max`); it sets how many logits rows the
    target's reserve graph holds. ``n_cpu_moe`` / ``cpu_moe``: ``--n-cpu-moe N`` / ``--cpu-moe``
    (the target's expert tensors of the first N blocks / of all blocks stay in host memory).
    ``n_outputs_max``: override of the target context's ``n_outputs_max`` (None = llama-server's rule,
    :func:`reserve_outputs`; ``llama-fit-params`` leaves it at n_batch).
    ``no_repack``: the launch has ``--no-repack``: no extra CPU buffer type (``CpuBuffers``) copies weights.
    ``prompt_cache_bytes``: the limit of llama-server's host-RAM prompt cache while serving
    (``--cache-ram`` MiB × 2^20; tools/server/server-context.cpp keeps finished prompts' KV state there up
    to that limit); counted in the host's need as a ceiling it can grow to. 0 = not counted (the sweep,
    which sends ``cache_prompt`` false).
    """

    target: ModelMemorySpec
    draft: ModelMemorySpec | None = None
    spec_type: str = "none"
    ngl: int | None = None
    draft_ngl: int | None = None
    n_ctx: int = 4096
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_parallel: int | None = 1
    cache_type_k_draft: str = "f16"
    cache_type_v_draft: str = "f16"
    kv_unified: bool | None = None
    n_batch: int = 2048
    n_ubatch: int = 512
    flash_attn: bool | None = None
    margin_bytes: int = DEFAULT_MARGIN_BYTES
    tensor_split: tuple[float, ...] | None = None
    n_max: int | None = None
    n_cpu_moe: int = 0
    cpu_moe: bool = False
    n_outputs_max: int | None = None
    prompt_cache_bytes: int = 0
    no_repack: bool = False


@dataclass(frozen=True)
class PlacementBytes:
    """Bytes one place (a GPU or the host) must hold, by purpose."""

    target_weights_bytes: int = 0
    target_kv_bytes: int = 0
    draft_weights_bytes: int = 0
    draft_kv_bytes: int = 0
    mtp_kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    prompt_cache_bytes: int = 0

    # KV fields include the recurrent state of SSM / linear-attention layers (hybrid models)

    @property
    def total_bytes(self) -> int:
        """Sum of all parts (the margin is not included)."""
        return (
            self.target_weights_bytes
            + self.target_kv_bytes
            + self.draft_weights_bytes
            + self.draft_kv_bytes
            + self.mtp_kv_bytes
            + self.compute_bytes
            + self.output_bytes
            + self.prompt_cache_bytes
        )


@dataclass(frozen=True)
class DevicePlan:
    """The plan for one GPU (llama.cpp's order): needs vs budget.

    ``budget_bytes`` = the device's budget (free memory); ``margin_bytes`` = the reserve kept free;
    ``headroom_bytes`` = budget − margin − need (negative = short by that much; None if the budget is
    unknown). ``target_layers``/``draft_layers`` = repeating blocks placed here.
    """

    device_index: int
    device_name: str
    need: PlacementBytes
    budget_bytes: int | None
    margin_bytes: int
    headroom_bytes: int | None
    fits: bool | None
    target_layers: int
    draft_layers: int
    output_on_device: bool


@dataclass(frozen=True)
class HostPlan:
    """The plan for host RAM: weights not offloaded, their KV, CPU compute buffers."""

    need: PlacementBytes
    ram_available_bytes: int | None
    headroom_bytes: int | None
    fits: bool | None


@dataclass(frozen=True)
class MemoryPlan:
    """Answer of :func:`plan_memory`.

    ``fits`` = every GPU and the host fit (a place whose budget is unknown counts as fitting, with a
    note). ``margin_bytes`` = the smallest headroom over every place (GPUs and host RAM); negative =
    short by that much; None when no budget is known. ``n_ctx`` / ``n_ctx_slot`` = the sizes llama.cpp will use after padding.
    ``expert_host_bytes``: MoE expert bytes of GPU-placed target blocks kept in host memory
    (``--n-cpu-moe`` / ``--cpu-moe``; included in the host's target weights). ``target_outputs``: logits
    rows of the target's reserve graph (:func:`reserve_outputs`). ``repack_host_bytes``: weights the CPU
    backend also keeps repacked for this CPU's instructions in ggml's extra CPU buffer types, included in
    the host's target and draft weights: why "target W" can exceed the file's tensors; per type in
    ``extra_buffers`` = ``((type, copy bytes, bytes that left the plain CPU buffer), ...)`` (``AMX``:
    ggml/src/ggml-cpu/amx/amx.cpp; ``CPU_REPACK``: ggml/src/ggml-cpu/repack.cpp). The mapped file still
    spans those tensors (the ``CPU_Mapped`` buffer), while a no-alloc measurement (``llama-fit-params``, the
    start-up projection) counts them only in their extra type. ``cpu_buffers``: the build fact the plan
    used (``tuner.hardware.buffers.CpuBuffers``; its ``source`` says whether it was read or guessed).
    """

    fits: bool
    margin_bytes: int | None
    devices: tuple[DevicePlan, ...]
    host: HostPlan
    target_ngl: int
    draft_ngl: int | None
    n_ctx: int
    n_ctx_slot: int
    n_parallel: int
    kv_unified: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    expert_host_bytes: int = 0
    target_outputs: int = 1
    repack_host_bytes: int = 0
    extra_buffers: tuple[tuple[str, int, int], ...] = ()
    cpu_buffers: CpuBuffers | None = None

    @property
    def extra_moved_bytes(self) -> int:
        """Bytes of the file's tensors that sit in an extra CPU buffer type instead of the plain one."""
        return sum(moved for _, _, moved in self.extra_buffers)

    @property
    def total_bytes(self) -> int:
        """Everything the configuration allocates, all places together."""
        return self.host.need.total_bytes + sum(d.need.total_bytes for d in self.devices)

    @property
    def verdict(self) -> str:
        """The verdict in the one wording ``draftwise plan`` and the app's Models tab share, naming the place
        with the least room (a GPU: its budget less the margin kept free; host RAM: the RAM available when the
        devices were read), e.g. ``"fits, headroom 21.5 GiB (host RAM: 1.3 GiB of 22.8 GiB available)"``,
        ``"does NOT fit, short by 2.1 GiB (CUDA0: 9.9 GiB of 7.8 GiB available after a 512 MiB margin)"``;
        ``"fits (no memory budget known)"`` when no place has one."""
        places = [(d.headroom_bytes, d.device_name, d.need.total_bytes, d.budget_bytes, d.margin_bytes)
                  for d in self.devices if d.headroom_bytes is not None]
        if self.host.headroom_bytes is not None:
            places.append((self.host.headroom_bytes, "host RAM", self.host.need.total_bytes,
                           self.host.ram_available_bytes, 0))
        if not places:
            return "fits (no memory budget known)" if self.fits else "does NOT fit"
        head, name, need, budget, margin = min(places, key=lambda x: x[0])
        room = (f"{name}: {format_bytes(need)} of {format_bytes(budget)} available"
                + (f" after a {format_bytes(margin)} margin" if margin else "") + ")")
        if head >= 0:
            return f"fits, headroom {format_bytes(head)} ({room}"
        return f"does NOT fit, short by {format_bytes(-head)} ({room}"

    @property
    def summary(self) -> str:
        """One or two sentences for the UI: where things go and the verdict (:attr:`verdict`)."""
        def mib(n: int | None) -> str:
            return format_bytes(n, "unknown", smallest="MiB", decimals={"MiB": 0})

        parts = []
        for d in self.devices:
            parts.append(f"{d.device_name}: {d.target_layers} target layers"
                         + (f", {d.draft_layers} draft layers" if d.draft_layers else "")
                         + f", {mib(d.need.total_bytes)} of {mib(d.budget_bytes)}")
        cache = self.host.need.prompt_cache_bytes
        parts.append(f"host RAM: {mib(self.host.need.total_bytes)} (KV "
                     f"{mib(self.host.need.target_kv_bytes + self.host.need.draft_kv_bytes)}"
                     + (f", prompt cache up to {mib(cache)}" if cache else "") + ")")
        return f"n_ctx {self.n_ctx}, target ngl {self.target_ngl}. " + "; ".join(parts) + f". Verdict: {self.verdict}."


# --------------------------------------------------------------------------------------------------
# Building a ModelMemorySpec from a GGUF header

_INPUT_TENSORS = ("token_embd.", "pos_embd.", "per_layer_token_embd.", "token_types.")
_BLOCK = re.compile(r"^blk\.(\d+)\.")
# ggml type ids (ggml/include/ggml.h enum ggml_type) of the weights ggml's extra CPU buffer types take
_F16, _Q4_0, _Q4_1, _Q8_0, _Q2_K, _Q4_K, _Q5_K, _Q6_K, _IQ4_NL, _IQ4_XS, _MXFP4 = 1, 2, 3, 8, 10, 12, 13, 14, 20, 23, 39

#: CPU_REPACK on x86 (ggml/src/ggml-cpu/repack.cpp ``ggml_repack_get_optimal_repack_type``): weight type ->
#: the build feature it needs (``system_info`` name: ``ggml_cpu_has_avx2()`` / ``ggml_cpu_has_avx512()``
#: are compile-time answers). The weight's ne[1] (rows) must be a multiple of 8 (the 8x8 interleave); the
#: copy has the file's size (the buffer type has no ``get_alloc_size``: ``ggml_nbytes``).
REPACK_TYPES = {_Q4_0: "avx2", _Q4_K: "avx2", _IQ4_NL: "avx2", _MXFP4: "avx2", _Q2_K: "avx512"}

#: AMX (ggml/src/ggml-cpu/amx/amx.cpp ``extra_buffer_type::supports_op``, MUL_MAT only): weight type ->
#: (ne[0] alignment = elements per block, bytes per block in the AMX layout or None = the file's size).
#: ne[1] must be a multiple of 32 (``TILE_N * 2``). Sizes: amx/mmq.cpp ``ggml_backend_amx_get_alloc_size``
#: / ``get_row_size`` (Q8_0 gains an int32 compensation per block, Q4_K / Q5_K 4 bytes, IQ4_XS 2; F16 is
#: kept as it is, ``qtype_has_amx_kernels`` is false for it, and runs AVX-512 code, not tiles).
AMX_TYPES: dict[int, tuple[int, int | None]] = {
    _Q4_0: (32, None), _Q4_1: (32, None), _Q8_0: (32, 38), _Q4_K: (256, 148), _Q5_K: (256, 180),
    _Q6_K: (256, None), _IQ4_XS: (256, 138), _F16: (16, None)}


def extra_buffer_class(ggml_type: int | None, shape: Sequence[int], n_bytes: int, expert: bool) -> tuple[str, int]:
    """Which of ggml's extra CPU buffer types could hold a matrix weight used by a matrix multiplication:
    ``(CPU_REPACK build flag or "", AMX copy bytes or -1)``.

    ``shape`` is ggml's ``(ne0, ne1, ...)`` (columns, rows); ``expert``: a MoE expert tensor (MUL_MAT_ID,
    which CPU_REPACK takes as a 3-D tensor and AMX does not). Rules: :data:`REPACK_TYPES`,
    :data:`AMX_TYPES`. x86 only: the Arm / RISC-V repack rules are not modelled."""
    if not isinstance(ggml_type, int) or len(shape) < 2:
        return "", -1
    ne0, ne1 = int(shape[0]), int(shape[1])
    dims = sum(1 for x in shape if x > 1)
    flag = REPACK_TYPES.get(ggml_type, "") if ne1 % 8 == 0 and dims <= (3 if expert else 2) else ""
    amx = -1
    rule = AMX_TYPES.get(ggml_type)
    if rule is not None and not expert and dims <= 2 and ne1 % 32 == 0 and ne0 % rule[0] == 0:
        amx = n_bytes if rule[1] is None else ne1 * (ne0 // rule[0]) * rule[1]
    return flag, amx


# common/common.h LLM_FFN_EXPS_REGEX: the tensors --cpu-moe / --n-cpu-moe keep on the CPU
_EXPS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")

# sliding-window layer pattern per architecture (llama.cpp src/llama-model.cpp load_hparams:
# hparams.set_swa_pattern(n): every n-th layer is global (dense), the rest use the window)
_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "cohere2": 4, "gemma4": 6}


def _kv_widths(kv: dict, hp: HyperParams, notes: list[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-layer K and V widths of the cache (``n_embd_k_gqa`` / ``n_embd_v_gqa`` = KV heads × head size, 0 for
    a layer without KV; src/llama-hparams.cpp ``n_embd_k_gqa``); MLA caches the latent + rope part as one
    head, and hybrid models with ``full_attention_interval`` keep KV only on every n-th layer."""
    arch, n_layer = hp.arch, hp.n_layer
    mla_kv = kv.get(f"{arch}.attention.kv_lora_rank")
    if mla_kv:
        # DeepSeek-style MLA caches the compressed latent + rope part, one "head"
        rope = int(kv.get(f"{arch}.rope.dimension_count") or 64)
        k_gqa = tuple(int(mla_kv) + rope if h else 0 for h in hp.n_head_kv)
        v_gqa = tuple(0 for _ in hp.n_head_kv)
        notes.append("MLA attention: KV estimated as latent + rope dims")
    else:
        k_gqa = tuple(h * hp.key_length for h in hp.n_head_kv)
        v_gqa = tuple(h * hp.value_length for h in hp.n_head_kv)
    interval = kv.get(f"{arch}.full_attention_interval")
    if isinstance(interval, int) and interval > 1:
        keep = [(i + 1) % interval == 0 for i in range(n_layer)]
        k_gqa = tuple(k if keep[i] else 0 for i, k in enumerate(k_gqa))
        v_gqa = tuple(v if keep[i] else 0 for i, v in enumerate(v_gqa))
        notes.append("hybrid model: KV only on full-attention layers")
    return k_gqa, v_gqa


def _recurrent_state(kv: dict, arch: str, k_gqa: tuple[int, ...], notes: list[str]) -> tuple[int, ...]:
    """Recurrent state bytes per layer and sequence, f32 rows (src/llama-hparams.cpp ``n_embd_r`` /
    ``n_embd_s``), on the layers without KV; empty without ``ssm.*`` keys."""
    d_conv = int(kv.get(f"{arch}.ssm.conv_kernel") or 0)
    d_inner = int(kv.get(f"{arch}.ssm.inner_size") or 0)
    d_state = int(kv.get(f"{arch}.ssm.state_size") or 0)
    n_group = int(kv.get(f"{arch}.ssm.group_count") or 0)
    if d_inner and d_state:
        per_layer = 4 * (max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner)
        return tuple(per_layer if k == 0 else 0 for k in k_gqa)
    if any(k == 0 for k in k_gqa):
        notes.append("layers without KV (recurrent?) and no ssm.* keys: their state is not counted")
    return ()


def _swa_layers(hp: HyperParams, notes: list[str]) -> tuple[int | None, tuple[int, ...]]:
    """``(window, layers)`` of sliding-window attention: the architecture's layer pattern (``_SWA_PATTERN``);
    ``(None, ())`` without a window, or with one whose pattern is unknown (a note: full KV assumed)."""
    swa = hp.sliding_window
    if swa is None or swa <= 0:
        return None, ()
    pattern = _SWA_PATTERN.get(hp.arch)
    if not pattern:
        notes.append(f"{hp.arch}.attention.sliding_window set but the layer pattern is unknown: full KV assumed")
        return None, ()
    layers = tuple(i for i in range(hp.n_layer) if (i + 1) % pattern != 0)
    return (swa if layers else None), layers


@dataclass
class _TensorBytes:
    """Where a file's tensor bytes go: per block (and its MoE experts), the input layer, the output layer, the
    matrix weights ggml's extra CPU buffer types may copy, and the token embeddings a tied output reuses."""

    block: list[int]
    experts: list[int]
    inp: int = 0
    out: int = 0
    embd_bytes: int = 0
    tied: bool = True
    extra: dict[tuple[int, str, int], list[int]] = field(default_factory=dict)

    def add_extra(self, layer: int, t: Any, nb: int, moved: int) -> None:
        shape: Sequence[int] = getattr(t, "shape", ()) or ()
        flag, amx = extra_buffer_class(getattr(t, "ggml_type", None), shape, nb, bool(_EXPS.search(t.name)))
        if flag or amx >= 0:
            acc = self.extra.setdefault((layer, flag, 1 if amx >= 0 else 0), [0, 0, 0])
            acc[0] += max(amx, 0)
            acc[1] += nb
            acc[2] += moved

    @property
    def extra_buffer_weights(self) -> tuple[tuple[int, str, int, int, int], ...]:
        """``ModelMemorySpec.extra_buffer_weights``: ``(layer, flag, AMX bytes or -1, bytes, moved bytes)``."""
        return tuple((layer, flag, v[0] if amx else -1, v[1], v[2])
                     for (layer, flag, amx), v in sorted(self.extra.items()))


def _tensor_bytes(tensors: Sequence[Any], n_layer: int) -> _TensorBytes:
    """Sum the tensors of a file by place (see :class:`_TensorBytes`)."""
    acc = _TensorBytes([0] * n_layer, [0] * n_layer)
    embd_tensor = None
    for t in tensors:
        nb = int(t.n_bytes or 0)
        m = _BLOCK.match(t.name)
        if m and int(m.group(1)) < n_layer:
            acc.block[int(m.group(1))] += nb
            if _EXPS.search(t.name):
                acc.experts[int(m.group(1))] += nb
            if t.name.endswith(".weight"):
                acc.add_extra(int(m.group(1)), t, nb, nb)
        elif t.name.startswith(_INPUT_TENSORS):
            acc.inp += nb
            if t.name.startswith("token_embd."):
                acc.embd_bytes += nb
                embd_tensor = t
        else:
            acc.out += nb
            if t.name.startswith("output.weight"):
                acc.tied = False
                acc.add_extra(-1, t, nb, nb)
    if acc.tied and embd_tensor is not None:
        # src/llama-model-loader.cpp create_tensor: the TENSOR_DUPLICATED token_embd is loaded as the output
        # (MUL_MAT on the output layer's buffer types); the input layer's copy stays in the CPU buffer
        acc.add_extra(-1, embd_tensor, acc.embd_bytes, 0)
    return acc


def spec_from_header(header: object, name: str | None = None) -> ModelMemorySpec:
    """Build a :class:`ModelMemorySpec` from a ``tuner.catalog.header.GGUFHeader``-like object
    (``kv`` dict, ``tensors`` with ``name``/``n_bytes``, ``path``).

    The attention shape comes from ``tuner.catalog.hparams.read_hparams`` (llama.cpp's rule: per-layer
    ``head_count`` / ``head_count_kv`` arrays, 0 = a recurrent layer without KV, missing KV heads = each
    layer's own head count, head size from layer 0; a rule the file breaks is a note). Hybrid models with
    ``full_attention_interval`` keep KV only on every n-th layer. Raises ``ValueError`` naming the missing
    key when ``general.architecture`` or ``<arch>.block_count`` is absent.
    """
    kv: dict = dict(getattr(header, "kv"))
    path = getattr(header, "path", None)
    hp = read_hparams(kv, path)
    arch, n_layer = hp.arch, hp.n_layer
    notes = list(hp.notes)
    k_gqa, v_gqa = _kv_widths(kv, hp, notes)
    recurrent = _recurrent_state(kv, arch, k_gqa, notes)
    swa, swa_layers = _swa_layers(hp, notes)
    tb = _tensor_bytes(getattr(header, "tensors"), n_layer)
    tokens = kv.get("tokenizer.ggml.tokens")
    return ModelMemorySpec(
        name=name or str(kv.get("general.name") or (Path(path).stem if path else arch)),
        path=str(path) if path else None,
        n_layer=n_layer,
        block_bytes=tuple(tb.block),
        input_bytes=tb.inp,
        output_bytes=tb.out + (tb.embd_bytes if tb.tied else 0),
        n_embd=hp.n_embd,
        n_vocab=int(kv.get(f"{arch}.vocab_size") or (len(tokens) if tokens is not None else 0)),
        n_embd_k_gqa=k_gqa,
        n_embd_v_gqa=v_gqa,
        n_ff=max(hp.n_ff, default=0) or None,
        n_head=hp.n_head[0] if hp.n_head else None,
        mtp_layers=int(kv.get(f"{arch}.nextn_predict_layers") or 0),
        swa_window=swa,
        swa_layers=swa_layers,
        context_length=hp.context_length,
        tied_output=tb.tied,
        recurrent_layer_bytes=recurrent,
        architecture=arch,
        notes=tuple(notes),
        expert_bytes=tuple(tb.experts) if any(tb.experts) else (),
        n_expert=int(kv.get(f"{arch}.expert_count") or 0),
        n_expert_used=int(kv.get(f"{arch}.expert_used_count") or 0),
        n_ff_exp=int(kv[f"{arch}.expert_feed_forward_length"]) if kv.get(f"{arch}.expert_feed_forward_length") else None,
        n_embd_head_k=hp.key_length or None,
        extra_buffer_weights=tb.extra_buffer_weights,
        tied_embd_bytes=tb.embd_bytes if tb.tied else 0,
    )


def load_model_spec(path: str | os.PathLike[str]) -> ModelMemorySpec:
    """Read ``path``'s GGUF header (``tuner.catalog.header.read_header``) into a spec.

    For the first shard of a split set (``NAME-00001-of-0000N.gguf``, see
    :mod:`tuner.catalog.split`) the tensors of every shard are counted: llama.cpp loads them all
    (src/llama-model-loader.cpp), while only the first shard carries the keys.

    Raises ``tuner.catalog.header.GGUFError`` for an unreadable file or a missing shard (named),
    ``ValueError`` for missing keys.
    """
    from tuner.catalog.header import GGUFError, read_header
    from tuner.catalog.split import split_shard_paths

    path = Path(path)
    first = read_header(path)
    shards = split_shard_paths(path)
    if len(shards) < 2 or shards[0] != path:
        return spec_from_header(first)
    tensors = list(first.tensors)
    for shard in shards[1:]:
        if not shard.exists():
            raise GGUFError(shard, f"missing shard of split set {path.name} (interrupted download?)")
        tensors.extend(read_header(shard).tensors)
    return spec_from_header(_Shards(kv=first.kv, tensors=tuple(tensors), path=first.path))


@dataclass(frozen=True)
class _Shards:
    """The header-like view :func:`spec_from_header` reads: first shard's keys, all shards' tensors."""

    kv: dict
    tensors: tuple
    path: object


# --------------------------------------------------------------------------------------------------
# The plan

def pad_to(n: int, multiple: int) -> int:
    """Round ``n`` up to a multiple (GGML_PAD)."""
    return (n + multiple - 1) // multiple * multiple


def kv_type_bytes(cache_type: str) -> float:
    """Bytes per element of a KV cache type (``-ctk``/``-ctv`` value). Raises ``ValueError`` naming it."""
    try:
        return KV_TYPE_BYTES[cache_type.lower()]
    except KeyError:
        raise ValueError(f"unknown KV cache type {cache_type!r} (-ctk/-ctv); known: {', '.join(KV_TYPE_BYTES)}") from None


def _layer_devices(n_layer_all: int, ngl: int, splits: list[float]) -> list[int]:
    """Device of each layer 0..n_layer_all (the last entry = output layer); -1 = CPU.

    src/llama-model.cpp load_tensors: i_gpu_start = max(n_layer + 1 - ngl, 0); act = min(ngl, n_layer + 1);
    device = upper_bound(cumulative splits, (il - i_gpu_start) / act).
    """
    if not splits:
        return [-1] * (n_layer_all + 1)
    if ngl < 0:
        ngl = n_layer_all + 1
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    total = sum(splits) or float(len(splits))
    cum, acc = [], 0.0
    for s in splits:
        acc += s if sum(splits) else 1.0
        cum.append(acc / total)
    out = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            out.append(-1)
            continue
        x = (il - i_gpu_start) / act
        dev = next((i for i, c in enumerate(cum) if c > x), len(cum) - 1)
        out.append(dev)
    return out


def _kv_cells(spec: ModelMemorySpec, layer: int, n_ctx: int, n_parallel: int, unified: bool, n_ubatch: int) -> int:
    if spec.swa_window and layer in spec.swa_layers:
        # src/llama-kv-cache-iswa.cpp: min(size_base, n_swa * (unified ? n_seq : 1) + n_ubatch), padded to 256
        swa = spec.swa_window * (n_parallel if unified else 1) + n_ubatch
        per_stream = n_ctx if unified else n_ctx // n_parallel
        cells = pad_to(min(per_stream, swa), 256)
        return cells * (1 if unified else n_parallel)
    return n_ctx


def _kv_layer_bytes(spec: ModelMemorySpec, layer: int, cells: int, bk: float, bv: float) -> int:
    return int(cells * (spec.n_embd_k_gqa[layer] * bk + spec.n_embd_v_gqa[layer] * bv))


# Compute buffers. llama.cpp sizes them by building the worst-case graph once and letting the ggml graph
# allocator (ggml/src/ggml-alloc.c ``ggml_gallocr_reserve_n``: tensors share memory once their last
# consumer ran, so the buffer is the peak of the live tensors, per backend) measure it:
# src/llama-context.cpp ``llama_context::sched_reserve`` reserves ``graph_reserve(n_tokens, n_seqs,
# n_outputs)`` with n_tokens = min(n_ctx, n_ubatch) and n_outputs = min(n_tokens, cparams.n_outputs_max).
# n_outputs_max is NOT n_batch in the server: tools/server/server-context.cpp ``load_model`` sets it from
# ``server_output_limits`` = common/speculative.cpp ``common_speculative_get_output_limits`` =
# min(n_batch, n_parallel x (1 + n_draft)), n_draft = ``common_speculative_n_max`` over the --spec-type
# list (0 without speculation). The draft context gets n_outputs_max = n_parallel
# (``common_base_params_to_speculative``; dflash/dspark: n_parallel x (n_max + 1)). ``llama-fit-params``
# leaves n_outputs_max at 0 = n_batch (common/common.h), so it reserves logits for every token of the ubatch.
# What the peak holds (fitted on llama-server b11434 "-lv 4" "compute buffer size" lines, bench/memory_accuracy.py):
#   activations  n_tokens x 4 B x (8 n_embd + 2 n_ff)   (residual, norms, Q/K/V, FFN gate/up alive at once;
#                                                         MoE: n_ff = n_expert_used x n_ff_exp, plus router logits)
#   logits       n_outputs x 4 B x (n_vocab + n_embd)    (the last matmul, on the output layer's backend;
#                                                         the layer activations are free by then)
#   KQ mask      n_tokens x n_kv x 2 B (f16 with flash attention, src/llama-graph.cpp
#                ``build_attn_inp_kq_mask``; f32 without), one per KV cache: a sliding-window model has a
#                second mask over its SWA cells
#   no flash attention: the attention step's n_head x n_kv x n_tokens f32 KQ + ~7 n_head x head_dim
#                f32 rows per token compete with the activations for the peak
COMPUTE_F32 = 4

#: Default draft length per speculation type when ``--spec-draft-n-max`` & co. are not given
#: (common/common.h ``common_params_speculative`` defaults; ngram-cache is fixed at 8,
#: common/speculative.cpp ``common_speculative_n_max``).
DEFAULT_N_MAX = {"draft": 3, "ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48, "ngram-mod": 64,
                 "ngram-cache": 8}


def spec_draft_n_max(spec_type: str, n_max: int | None = None) -> int:
    """Largest draft length over a ``--spec-type`` list, as common/speculative.cpp
    ``common_speculative_n_max`` computes it: draft-* types use ``n_max`` (default 3), n-gram types
    their own sizes (``n_max`` applied to them too when given, as tuner/server/argv.py passes it),
    ngram-cache 8, ``none`` 0. Raises nothing; unknown names count 0."""
    best = 0
    for t in (x.strip() for x in spec_type.split(",")):
        if t.startswith("draft-"):
            best = max(best, DEFAULT_N_MAX["draft"] if n_max is None else max(0, n_max))
        elif t == "ngram-cache":
            best = max(best, 8)
        elif t in DEFAULT_N_MAX:
            best = max(best, DEFAULT_N_MAX[t] if n_max is None else max(0, n_max))
    return best


def reserve_outputs(n_tokens: int, n_batch: int, n_parallel: int, n_draft: int) -> int:
    """Logits rows in the target's reserve graph: min(n_tokens, min(n_batch, n_parallel x (1 + n_draft))),
    at least 1 (tools/server/server-context.cpp ``server_output_limits``; src/llama-context.cpp
    ``sched_reserve``)."""
    return max(1, min(n_tokens, n_batch, n_parallel * (1 + max(0, n_draft))))


def compute_buffer_bytes(spec: ModelMemorySpec, n_ubatch: int, n_kv: int, with_output: bool,
                         flash_attn: bool, n_outputs: int = 1, n_kv_swa: int | None = None,
                         layers_here: bool = True) -> int:
    """Compute buffer (bytes) of one ggml backend that runs ``spec``'s graph for the reserve ubatch.

    ``n_ubatch``: tokens of the reserve graph (min(n_ctx, n_ubatch)); ``n_kv``: KV cells one stream
    attends in full-attention layers (``n_ctx_slot``; 0 when every layer is sliding-window);
    ``n_kv_swa``: cells of the sliding-window cache (None = no SWA layers); ``n_outputs``: logits
    rows (:func:`reserve_outputs`); ``with_output``: this backend runs the output layer;
    ``layers_here``: it runs repeating blocks (False = only the output layer, or a host that only
    prepares inputs). Peak = max(activations, logits) + the KQ mask(s) (see the comment above
    for the source). Raises nothing.
    """
    n_ff = spec.n_ff or 4 * spec.n_embd
    if spec.n_expert_used and spec.n_ff_exp:
        # MoE: the selected experts' gate/up rows (mul_mat_id) and the router logits
        n_ff = max(spec.n_ff or 0, spec.n_expert_used * spec.n_ff_exp + spec.n_expert)
    act = n_ubatch * COMPUTE_F32 * (8 * spec.n_embd + 2 * n_ff) if layers_here else 0
    logits = n_outputs * COMPUTE_F32 * (spec.n_vocab + spec.n_embd) if with_output else 0
    elt = 2 if flash_attn else COMPUTE_F32
    masks = 0
    if layers_here:
        masks = n_ubatch * n_kv * elt
        if n_kv_swa:
            masks += n_ubatch * n_kv_swa * elt
        if not flash_attn and spec.n_head:
            # without flash attention the attention step holds the f32 KQ (n_head x n_kv x n_tokens) next
            # to Q/K/V and their permuted copies (about 7 rows of n_head x head_dim per token, fitted)
            head = spec.n_embd_head_k or (spec.n_embd // spec.n_head)
            kq = spec.n_head * max(n_kv, n_kv_swa or 0) * n_ubatch * COMPUTE_F32
            act = max(act, kq + n_ubatch * COMPUTE_F32 * 7 * spec.n_head * head)
    return max(act, logits) + masks


def host_input_bytes(spec: ModelMemorySpec, n_ubatch: int, n_kv: int, flash_attn: bool,
                     n_kv_swa: int | None = None) -> int:
    """Host compute buffer when every layer runs on a GPU: the input embeddings (``get_rows`` on the
    CPU-resident ``token_embd``, n_ubatch x n_embd f32, twice: rows and their copy) and the KQ mask(s)
    the scheduler fills on the host before copying them to the GPU (src/llama-graph.cpp asserts the
    mask buffer is a host buffer)."""
    elt = 2 if flash_attn else COMPUTE_F32
    return n_ubatch * COMPUTE_F32 * spec.n_embd * 2 + n_ubatch * (n_kv + (n_kv_swa or 0)) * elt


@dataclass
class _Acc:
    target_weights_bytes: int = 0
    target_kv_bytes: int = 0
    draft_weights_bytes: int = 0
    draft_kv_bytes: int = 0
    mtp_kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    target_layers: int = 0
    draft_layers: int = 0
    output_here: bool = False
    expert_bytes: int = 0
    prompt_cache_bytes: int = 0

    def freeze(self) -> PlacementBytes:
        return PlacementBytes(self.target_weights_bytes, self.target_kv_bytes, self.draft_weights_bytes,
                              self.draft_kv_bytes, self.mtp_kv_bytes, self.compute_bytes, self.output_bytes,
                              self.prompt_cache_bytes)


def _place_model(spec: ModelMemorySpec, ngl: int, splits: list[float], places: list[_Acc], host: _Acc,
                 draft: bool, n_ctx: int, n_parallel: int, unified: bool, n_ubatch: int,
                 bk: float, bv: float, trunk_layers: int, flash_attn: bool,
                 cpu_expert_layers: int = 0) -> list[int]:
    devs = _layer_devices(spec.n_layer, ngl, splits)

    def at(dev: int) -> _Acc:
        return host if dev < 0 else places[dev]

    host_acc = at(-1)
    if draft:
        host_acc.draft_weights_bytes += spec.input_bytes
    else:
        host_acc.target_weights_bytes += spec.input_bytes
    for il in range(spec.n_layer):
        acc = at(devs[il])
        if draft:
            acc.draft_weights_bytes += spec.block_bytes[il]
            if devs[il] >= 0:
                acc.draft_layers += 1
        else:
            moved = spec.expert_bytes[il] if (spec.expert_bytes and il < cpu_expert_layers and devs[il] >= 0) else 0
            acc.target_weights_bytes += spec.block_bytes[il] - moved
            host.target_weights_bytes += moved
            host.expert_bytes += moved
            if devs[il] >= 0:
                acc.target_layers += 1
        if il < trunk_layers:
            kvb = _kv_layer_bytes(spec, il, _kv_cells(spec, il, n_ctx, n_parallel, unified, n_ubatch), bk, bv)
            if spec.recurrent_layer_bytes:
                kvb += spec.recurrent_layer_bytes[il] * n_parallel
            if draft:
                acc.draft_kv_bytes += kvb
            else:
                acc.target_kv_bytes += kvb
    out_acc = at(devs[spec.n_layer])
    out_bytes = spec.output_bytes
    if spec.tied_output and devs[spec.n_layer] < 0:
        # a tied output on the CPU maps the same token_embd bytes again: nothing extra
        out_bytes = 0
    if draft:
        out_acc.draft_weights_bytes += out_bytes
    else:
        out_acc.target_weights_bytes += out_bytes
    if devs[spec.n_layer] >= 0:
        out_acc.output_here = True
    return devs


def _coerce(request: MemoryRequest) -> MemoryRequest:
    """Accept a path or a ``ModelFile`` (anything with ``.path``) for target/draft (read its header),
    and ``"auto"``/``"all"``/numeric strings for ngl/draft_ngl."""
    def spec(m: object) -> ModelMemorySpec | None:
        if m is None or isinstance(m, ModelMemorySpec):
            return m
        path = m if isinstance(m, (str, os.PathLike)) else getattr(m, "path", None)
        if path is None:
            raise TypeError(f"cannot plan memory for {m!r}: need a ModelMemorySpec, a path or a ModelFile")
        return load_model_spec(path)

    def layers(n: object, flag: str) -> int | None:
        # llama.cpp spellings: "auto" (-1) and "all" (-2) both mean every layer to the plan
        if n is None or isinstance(n, int):
            return n
        if isinstance(n, str) and n.strip().lower() in ("auto", "all"):
            return None
        try:
            if isinstance(n, str | SupportsInt):  # "12", 12.0, a numpy integer
                return int(n)
        except (TypeError, ValueError):
            pass
        raise ValueError(f"{flag} must be an integer, 'auto' or 'all', got {n!r}") from None

    t, d = spec(request.target), spec(request.draft)
    if t is None:
        raise TypeError("cannot plan memory without a target (MemoryRequest.target is None)")
    ngl, dngl = layers(request.ngl, "-ngl"), layers(request.draft_ngl, "--spec-draft-ngl")
    if t is request.target and d is request.draft and ngl == request.ngl and dngl == request.draft_ngl:
        return request
    return replace(request, target=t, draft=d, ngl=ngl, draft_ngl=dngl)


def device_list(devices: Devices | Sequence[Device]) -> tuple[Device, ...]:
    """The GPUs of a ``Devices`` answer (or a plain sequence of ``Device``), in llama.cpp's order."""
    if isinstance(devices, Sequence):
        return tuple(devices)
    return tuple(devices.devices)


def cpu_buffers_of(devices: Devices | Sequence[Device]) -> CpuBuffers | None:
    """The extra-CPU-buffer fact a plan uses: ``devices.cpu_buffers`` (read from a load log of the build,
    ``tuner.crosscheck.cpu_buffers``), else a guess from ``devices.cpu_features``
    (``tuner.hardware.buffers.guess_cpu_buffers``); None for a plain sequence of devices."""
    if isinstance(devices, Sequence):
        return None
    from tuner.hardware.buffers import guess_cpu_buffers

    known = getattr(devices, "cpu_buffers", None)
    if known is not None:
        return known
    local = [d for d in devices.devices if getattr(d, "rpc_endpoint", None) is None]
    return guess_cpu_buffers(getattr(devices, "cpu_features", ()) or (), bool(local))


def _extra_copies(spec: ModelMemorySpec, ldevs: list[int], types: Sequence[str], flags: set[str]
                  ) -> dict[str, tuple[int, int]]:
    """``{buffer type: (copy bytes, moved bytes)}`` of ``spec``'s CPU-run weights: each goes to the first
    extra type in force that takes it (src/llama-model-loader.cpp ``select_weight_buft``; AMX before
    CPU_REPACK)."""
    out: dict[str, tuple[int, int]] = {}
    if not types:
        return out
    for layer, flag, amx, nb, moved in spec.extra_buffer_weights:
        if ldevs[spec.n_layer if layer < 0 else layer] >= 0:
            continue
        if "AMX" in types and amx >= 0:
            name, copy = "AMX", amx
        elif "CPU_REPACK" in types and flag and flag in flags:
            name, copy = "CPU_REPACK", nb
        else:
            continue
        c, m = out.get(name, (0, 0))
        out[name] = (c + copy, m + moved)
    return out


@dataclass(frozen=True)
class _Geometry:
    """The sizes llama.cpp derives from a request before it allocates (src/llama-context.cpp
    ``llama_context::llama_context`` and ``sched_reserve``): slots, whether they share one KV stream, the padded
    context and per-slot cells, the reserve graph's tokens, flash attention, and the logits rows of the
    target's and the draft's reserve graphs."""

    n_par: int
    unified: bool
    n_ctx: int
    n_ctx_slot: int
    n_tok: int
    flash: bool
    t_outputs: int
    d_outputs: int


def _geometry(request: MemoryRequest, spec_types: set[str]) -> _Geometry:
    """Raises ``ValueError`` for n_ctx < 1 or n_parallel < 1."""
    if request.n_ctx < 1:
        raise ValueError(f"n_ctx must be >= 1 (-c), got {request.n_ctx}")
    if request.n_parallel is not None and request.n_parallel < 1:
        raise ValueError(f"n_parallel must be >= 1 (-np), got {request.n_parallel}")
    n_par = 4 if request.n_parallel is None else request.n_parallel
    unified = request.kv_unified if request.kv_unified is not None else (request.n_parallel is None)
    # src/llama-context.cpp: n_ctx padded to 256; non-unified: per-slot n_ctx_seq padded to 256
    n_ctx = pad_to(request.n_ctx, 256)
    if unified:
        n_ctx_slot = n_ctx
    else:
        n_ctx_slot = pad_to(max(n_ctx // n_par, 1), 256)
        n_ctx = n_ctx_slot * n_par
    # src/llama-context.cpp llama_context::llama_context: n_batch = min(n_ctx, n_batch) (causal attention),
    # n_ubatch = min(n_batch, n_ubatch); sched_reserve: the reserve graph has min(n_ctx, n_ubatch) tokens
    n_batch = min(n_ctx, request.n_batch)
    n_tok = min(n_ctx, min(n_batch, request.n_ubatch))
    n_draft = spec_draft_n_max(request.spec_type, request.n_max)
    t_outputs = reserve_outputs(n_tok, n_batch, n_par, n_draft) if request.n_outputs_max is None else \
        max(1, min(n_tok, request.n_outputs_max))
    block_draft = bool(spec_types & {"draft-dflash", "draft-dspark"})
    d_outputs = min(n_tok, n_par * (max(1, n_draft + 1) if block_draft else 1))
    flash = True if request.flash_attn is None else request.flash_attn
    return _Geometry(n_par, unified, n_ctx, n_ctx_slot, n_tok, flash, t_outputs, d_outputs)


def _swa_cells(spec: ModelMemorySpec, geo: _Geometry) -> int | None:
    """KV cells one stream attends in sliding-window layers; None without them."""
    if not (spec.swa_window and spec.swa_layers):
        return None
    cells = _kv_cells(spec, spec.swa_layers[0], geo.n_ctx, geo.n_par, geo.unified, geo.n_tok)
    return cells if geo.unified else cells // geo.n_par


def _full_cells(spec: ModelMemorySpec, geo: _Geometry) -> int:
    """KV cells one stream attends in full-attention layers. The full-context mask exists only when some
    layer attends the whole cache (a 2-block Gemma 3 draft has sliding-window layers only:
    src/llama-kv-cache-iswa.cpp builds no base mask for it)."""
    swa = set(spec.swa_layers) if spec.swa_window else set()
    return geo.n_ctx_slot if any(i not in swa for i in range(spec.n_layer)) else 0


def _add_compute(spec: ModelMemorySpec, ldevs: list[int], n_out: int, geo: _Geometry, places: list[_Acc],
                 host: _Acc) -> None:
    """One compute buffer per backend that runs part of ``spec``'s graph (ggml_backend_sched: one gallocr per
    backend), and the host's input buffers when every layer runs on a GPU."""
    out_dev = ldevs[spec.n_layer]
    swa, n_kv = _swa_cells(spec, geo), _full_cells(spec, geo)
    for i, acc in enumerate(places):
        layers = sum(1 for x in ldevs[:-1] if x == i)
        if layers or out_dev == i:
            acc.compute_bytes += compute_buffer_bytes(spec, geo.n_tok, n_kv, out_dev == i, geo.flash, n_out, swa,
                                                      layers_here=bool(layers))
    cpu_layers = any(x < 0 for x in ldevs[:-1])
    if cpu_layers or out_dev < 0 or not places:
        host.compute_bytes += compute_buffer_bytes(spec, geo.n_tok, n_kv, out_dev < 0, geo.flash, n_out, swa,
                                                   layers_here=cpu_layers or not places)
        if not cpu_layers and places:
            host.compute_bytes += host_input_bytes(spec, geo.n_tok, n_kv, geo.flash, swa)
    else:
        host.compute_bytes += host_input_bytes(spec, geo.n_tok, n_kv, geo.flash, swa)


@dataclass
class _ExtraBuffers:
    """The copies ggml's extra CPU buffer types in force keep of CPU-run weights, summed per type as
    ``[copy bytes, bytes moved out of the plain CPU buffer]``."""

    types: tuple[str, ...]
    flags: set[str]
    by_type: dict[str, list[int]] = field(default_factory=dict)

    def add(self, spec: ModelMemorySpec, ldevs: list[int]) -> int:
        """Book ``spec``'s copies; returns their bytes."""
        copies = _extra_copies(spec, ldevs, self.types, self.flags)
        for name, (copy, moved) in copies.items():
            acc = self.by_type.setdefault(name, [0, 0])
            acc[0] += copy
            acc[1] += moved
        return sum(copy for copy, _ in copies.values())


def _splits(request: MemoryRequest, devs: Sequence[Device]) -> list[float]:
    """Relative layer split over the GPUs: ``-ts``, else by free memory (the budget when free is unknown),
    else evenly."""
    splits = list(request.tensor_split) if request.tensor_split else [
        float(x.free_bytes if x.free_bytes is not None else (x.budget_bytes or 0)) for x in devs]
    if devs and not any(splits):
        splits = [1.0] * len(devs)
    return splits


def _place_draft(request: MemoryRequest, geo: _Geometry, splits: list[float], places: list[_Acc], host: _Acc,
                 extra: _ExtraBuffers) -> tuple[int, int]:
    """Place the draft model next to the target: its weights, KV, compute and output buffers and its CPU
    weights' extra copies. Returns ``(draft ngl, extra copy bytes)``."""
    d = request.draft
    assert d is not None
    bkd, bvd = kv_type_bytes(request.cache_type_k_draft), kv_type_bytes(request.cache_type_v_draft)
    n_all_d = d.n_layer + 1
    dngl = n_all_d if request.draft_ngl is None or request.draft_ngl < 0 else min(request.draft_ngl, n_all_d)
    for acc in places:
        acc.output_here = False
    host.output_here = False
    ddevs = _place_model(d, dngl if places else 0, splits if places else [], places, host, True, geo.n_ctx,
                         geo.n_par, geo.unified, geo.n_tok, bkd, bvd, d.n_layer - d.mtp_layers, geo.flash)
    _add_compute(d, ddevs, geo.d_outputs, geo, places, host)
    repacked = extra.add(d, ddevs)
    host.draft_weights_bytes += repacked
    host.output_bytes += d.n_vocab * COMPUTE_F32 * geo.n_par
    return dngl, repacked


def _device_plans(request: MemoryRequest, devs: Sequence[Device], places: list[_Acc], output_dev: int,
                  notes: list[str]) -> list[DevicePlan]:
    dplans = []
    for i, (dev, acc) in enumerate(zip(devs, places)):
        need = acc.freeze()
        budget = dev.budget_bytes
        headroom = None if budget is None else budget - request.margin_bytes - need.total_bytes
        fits = None if headroom is None else headroom >= 0
        if budget is None and need.total_bytes:
            notes.append(f"{dev.name}: budget unknown, fit not checked")
        dplans.append(DevicePlan(i, dev.name, need, budget, request.margin_bytes, headroom, fits,
                                 acc.target_layers, acc.draft_layers, output_dev == i))
    return dplans


def plan_memory(request: MemoryRequest, devices: Devices | Sequence[Device]) -> MemoryPlan:
    """Plan where every byte of ``request`` goes on ``devices`` and whether it fits.

    ``devices``: a ``tuner.hardware.devices.Devices`` (or a tuple of ``Device``) in llama.cpp's order.
    GPUs are checked against ``budget_bytes − margin_bytes``; the host against available RAM.
    ``devices.cpu_buffers`` (or the guess of :func:`cpu_buffers_of`) adds the copies ggml's extra CPU
    buffer types (``AMX``, ``CPU_REPACK``) keep of CPU-run weights, unless ``request.no_repack``.
    Raises ``ValueError`` for a bad request (unknown cache type, n_ctx < 1, n_parallel < 1).
    """
    request = _coerce(request)
    devs = device_list(devices)
    t, d = request.target, request.draft
    notes: list[str] = list(t.notes)
    spec_types = {s.strip() for s in request.spec_type.split(",")}
    geo = _geometry(request, spec_types)
    bk, bv = kv_type_bytes(request.cache_type_k), kv_type_bytes(request.cache_type_v)
    bkd, bvd = kv_type_bytes(request.cache_type_k_draft), kv_type_bytes(request.cache_type_v_draft)
    uses_draft = d is not None and bool(spec_types & DRAFT_MODEL_TYPES)
    if d is not None and not uses_draft:
        notes.append(f"draft {d.name} given but --spec-type {request.spec_type!r} does not use it (not planned)")
    uses_mtp = "draft-mtp" in spec_types
    if uses_mtp and t.mtp_layers == 0:
        notes.append(f"target {t.name} has no MTP layers: draft-mtp fails to start (llama.cpp exits 1)")
    n_all_t = t.n_layer + 1
    ngl = n_all_t if request.ngl is None or request.ngl < 0 else min(request.ngl, n_all_t)
    splits = _splits(request, devs)
    places = [_Acc() for _ in devs]
    host = _Acc()
    trunk = t.n_layer - t.mtp_layers
    if request.n_cpu_moe < 0:
        raise ValueError(f"--n-cpu-moe must be >= 0, got {request.n_cpu_moe}")
    cpu_experts = t.n_layer if request.cpu_moe else request.n_cpu_moe
    if cpu_experts and not t.expert_bytes:
        notes.append(f"target {t.name} has no MoE expert tensors: --n-cpu-moe / --cpu-moe change nothing")
    tdevs = _place_model(t, ngl if devs else 0, splits if devs else [], places, host, False, geo.n_ctx, geo.n_par,
                         geo.unified, geo.n_tok, bk, bv, trunk, geo.flash, cpu_experts)
    if uses_mtp and t.mtp_layers:
        # MTP context: KV for the MTP layers at the same n_ctx, cache type from -ctkd/-ctvd (reference S10)
        for il in range(trunk, t.n_layer):
            acc = host if tdevs[il] < 0 else places[tdevs[il]]
            acc.mtp_kv_bytes += _kv_layer_bytes(t, il, geo.n_ctx, bkd, bvd)
    _add_compute(t, tdevs, geo.t_outputs, geo, places, host)
    cpu = cpu_buffers_of(devices)
    extra = _ExtraBuffers(() if request.no_repack or cpu is None else cpu.in_force,
                          set(cpu.build_flags) if cpu is not None else set())
    repacked = extra.add(t, tdevs)
    host.target_weights_bytes += repacked
    if host.expert_bytes and devs:
        # experts kept on the CPU: the CPU backend runs their matmuls for the offloaded blocks
        host.compute_bytes += compute_buffer_bytes(t, geo.n_tok, geo.n_ctx_slot, False, geo.flash, 1, None, True) - \
            geo.n_tok * geo.n_ctx_slot * (2 if geo.flash else COMPUTE_F32)
    # logits/embeddings output buffer (host): n_vocab f32 per output row; src/llama-context.cpp
    # output_reserve(n_seq_max) at construction: max(n_outputs, n_seq_max) rows = one per slot
    host.output_bytes += t.n_vocab * COMPUTE_F32 * geo.n_par
    dngl = request.draft_ngl if d is not None else None
    if uses_draft:
        dngl, repacked_d = _place_draft(request, geo, splits, places, host, extra)
        repacked += repacked_d
    dplans = _device_plans(request, devs, places, tdevs[t.n_layer], notes)
    host.prompt_cache_bytes += max(0, request.prompt_cache_bytes)
    hneed = host.freeze()
    ram_avail = getattr(devices, "ram_available_bytes", None)
    hhead = None if ram_avail is None else ram_avail - hneed.total_bytes
    hplan = HostPlan(hneed, ram_avail, hhead, None if hhead is None else hhead >= 0)
    heads = [p.headroom_bytes for p in dplans if p.headroom_bytes is not None] + ([hhead] if hhead is not None else [])
    fits = all(p.fits is not False for p in dplans) and hplan.fits is not False
    if request.ngl is not None and request.ngl > 0 and not devs:
        notes.append("no GPU: every layer runs on the CPU (ngl has no effect)")
    return MemoryPlan(fits, min(heads) if heads else None, tuple(dplans), hplan, ngl if devs else 0,
                      0 if not devs and dngl is not None else dngl, geo.n_ctx, geo.n_ctx_slot, geo.n_par,
                      geo.unified, tuple(notes), host.expert_bytes, geo.t_outputs, repacked,
                      tuple((n, v[0], v[1]) for n, v in extra.by_type.items()), cpu)


def max_target_ngl(request: MemoryRequest, devices: Devices | Sequence[Device]) -> int:
    """Largest target ``ngl`` (0 … n_layer + 1) whose plan fits every GPU next to the request's draft
    placement (``draft_ngl`` unchanged). 0 when no GPU or nothing fits (check ``plan_memory`` then).
    GPU usage grows with ngl, so a binary search over ngl is exact.
    """
    request = _coerce(request)
    devs = device_list(devices)
    if not devs:
        return 0

    def ok(n: int) -> bool:
        plan = plan_memory(replace(request, ngl=n), devices)
        return all(p.fits is not False for p in plan.devices)

    lo, hi = 0, request.target.n_layer + 1
    if ok(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class ContextTrade:
    """The context-vs-layers trade at one context size.

    ``n_ctx``: the context asked about; ``max_ngl_at_ctx``: the most target GPU layers (llama.cpp's
    count: output layer first, ``n_layer + 1`` = everything) that fit at ``n_ctx`` next to the request's
    draft placement; ``max_ctx_all_on_gpu``: the largest context (a multiple of 256, at most
    ``ctx_ceiling``) at which every target layer — and every draft layer, when a draft is planned —
    stays on the GPUs (0: not even 256 tokens; the ceiling itself when it fits there). ``ctx_ceiling``:
    the upper end searched (the target's training context, else 131072). All None without a GPU.
    """

    n_ctx: int
    max_ngl_at_ctx: int | None
    max_ctx_all_on_gpu: int | None
    ctx_ceiling: int
    n_layers_all: int


def _gpus_fit(plan: MemoryPlan) -> bool:
    return all(p.fits is not False for p in plan.devices)


def max_ctx_all_on_gpu(
    request: MemoryRequest, devices: Devices | Sequence[Device], ceiling: int | None = None
) -> int | None:
    """Largest ``n_ctx`` (multiple of 256, ≤ ``ceiling``; default the target's training context or
    131072) whose plan with every target layer (and every draft layer of a planned draft) on the GPUs
    fits them. 0 when 256 does not fit; None without a GPU. GPU usage grows with ``n_ctx`` (KV cache,
    masks), so a binary search is exact. Raises ``ValueError`` as :func:`plan_memory`.
    """
    request = _coerce(request)
    devs = device_list(devices)
    if not devs:
        return None
    top = ceiling or request.target.context_length or 131072
    full = replace(request, ngl=None, draft_ngl=None if request.draft is not None else request.draft_ngl)

    def ok(n_ctx: int) -> bool:
        return _gpus_fit(plan_memory(replace(full, n_ctx=n_ctx), devices))

    lo, hi = 0, max(1, top // 256)
    if ok(hi * 256):
        return hi * 256
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid * 256):
            lo = mid
        else:
            hi = mid - 1
    return lo * 256


def context_trade(
    request: MemoryRequest, devices: Devices | Sequence[Device], ceiling: int | None = None
) -> ContextTrade:
    """Both answers of the context-vs-layers trade for ``request`` on ``devices`` (see
    :class:`ContextTrade`): :func:`max_target_ngl` at ``request.n_ctx`` and :func:`max_ctx_all_on_gpu`."""
    request = _coerce(request)
    devs = device_list(devices)
    top = ceiling or request.target.context_length or 131072
    if not devs:
        return ContextTrade(request.n_ctx, None, None, top, request.target.n_layer + 1)
    return ContextTrade(request.n_ctx, max_target_ngl(request, devices), max_ctx_all_on_gpu(request, devices, top),
                        top, request.target.n_layer + 1)
