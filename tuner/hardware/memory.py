"""Memory plan for one launch configuration: does it fit, where does every byte go.

Rules follow llama.cpp b11434:
- layer placement by ``-ngl``: src/llama-model.cpp ``llama_model::load_tensors`` (``i_gpu_start =
  max(n_layer + 1 - ngl, 0)``; the input layer — token embeddings — always on the CPU; the output
  layer on the GPU only when ``ngl > n_layer``; layers split over GPUs in proportion to free memory
  unless a tensor split is given);
- context size: src/llama-context.cpp ``llama_context::llama_context`` (``n_ctx`` padded to 256; with
  a non-unified KV cache every slot gets ``n_ctx / n_parallel`` cells, padded to 256);
- KV cache bytes: src/llama-kv-cache.cpp (per layer ``n_ctx × n_embd_k_gqa`` K and ``n_ctx × n_embd_v_gqa`` V
  elements of the cache type; each layer's KV lives on that layer's device);
- draft: common/speculative.cpp (draft context ``n_ctx`` = target ``n_ctx``, ``n_seq_max`` = n_parallel,
  KV types from ``-ctkd/-ctvd``, default f16); MTP: weights shared with the target (count 0), its own
  KV for the MTP layers at the same ``n_ctx`` (common/fit.h, reference S10).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1024 * 1024
GIB = 1024 * MIB

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
    ``swa_layers`` (their KV holds only the window).
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
    recurrent_state_bytes_per_seq: int = 0
    context_length: int | None = None

    @property
    def weights_bytes(self) -> int:
        """All tensor bytes of the file (blocks + input + output)."""
        return sum(self.block_bytes) + self.input_bytes + self.output_bytes


@dataclass(frozen=True)
class MemoryRequest:
    """One candidate launch configuration to plan.

    ``ngl``/``draft_ngl``: GPU layers as llama.cpp counts them (``n_layer + 1`` or more = everything
    incl. the output layer; None = all). ``spec_type``: the ``--spec-type`` value (``none``,
    ``draft-simple``, ``draft-mtp``, ``ngram-*``...). ``n_parallel``: slots (``-np``; None = server
    auto = 4 slots with a unified KV). ``kv_unified`` None = llama-server's rule (True for auto -np,
    False for an explicit -np). ``margin_bytes``: free memory left on every GPU (``--fit-target``).
    ``tensor_split``: relative split over GPUs (``-ts``), None = by free memory.
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
    note). ``margin_bytes`` = the smallest headroom over the GPUs (host when CPU-only); negative =
    short by that much. ``n_ctx`` / ``n_ctx_slot`` = the sizes llama.cpp will use after padding.
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

    @property
    def total_bytes(self) -> int:
        """Everything the configuration allocates, all places together."""
        return self.host.need.total_bytes + sum(d.need.total_bytes for d in self.devices)
