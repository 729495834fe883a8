"""The attention shape of a GGUF model, read once and the way llama.cpp reads it.

One reader for the scan's table (``tuner.catalog.scan``) and the memory plan (``tuner.hardware.memory``).
The rule is llama.cpp b11434's:

- ``<arch>.block_count`` (``n_layer``) and ``<arch>.embedding_length`` (``n_embd``) are scalars
  (src/llama-model.cpp ``llama_model_base::load_hparams``).
- ``<arch>.attention.head_count``, ``head_count_kv`` and ``feed_forward_length`` are a scalar or a per-layer
  array (src/llama-model-loader.cpp ``llama_model_loader::get_key_or_arr``): a scalar applies to every layer;
  an array must have exactly ``n_layer`` elements, or the model does not load ("key … has wrong array
  length"). A missing key leaves zeros.
- ``head_count_kv`` missing: each layer gets its own ``head_count`` (``load_hparams`` copies the per-layer
  array ``n_head_arr`` into ``n_head_kv_arr`` before reading the key).
- ``attention.key_length`` / ``value_length`` missing: ``n_embd / n_head()``, where ``n_head()`` is layer 0's
  head count (src/llama-hparams.cpp ``llama_hparams::n_head(il = 0)``); a model whose layer 0 has no heads
  has none (0). A present key always wins here (a few architectures read it even then, e.g.
  src/models/plamo2.cpp).

A file that breaks a rule is still read (a short array is padded with its last value, a long one cut), with
a note saying llama.cpp refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.catalog.header import GGUFError


@dataclass(frozen=True)
class HyperParams:
    """A model's attention shape, per layer where llama.cpp keeps it per layer.

    ``n_head`` / ``n_head_kv`` / ``n_ff``: ``n_layer`` values each (0 = none: a layer without attention,
    e.g. a recurrent one, or a missing key); ``key_length`` / ``value_length``: the head size of keys and
    values (0 when layer 0 has no heads and the file does not say); ``context_length``: the training context
    (``<arch>.context_length``), ``sliding_window``: ``<arch>.attention.sliding_window``, both None when absent;
    ``notes``: the rules the file breaks, in words.
    """

    arch: str
    n_layer: int
    n_embd: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    key_length: int
    value_length: int
    context_length: int | None
    sliding_window: int | None
    notes: tuple[str, ...] = ()

    @property
    def n_head_max(self) -> int | None:
        """The largest per-layer head count (the scan table's ``n_head``); None when no layer has heads."""
        return max(self.n_head, default=0) or None

    @property
    def n_head_kv_max(self) -> int | None:
        """The largest per-layer KV head count (the scan table's ``n_head_kv``); None when no layer has any."""
        return max(self.n_head_kv, default=0) or None


def _scalar(value: object) -> int | None:
    """An integer key's value; None for anything else (a bool, a string, an array)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _numbers(value: object) -> tuple[int, ...] | None:
    """A numeric array's elements (a short one is a tuple, a long one an ``ArrayRef`` read on demand);
    None when ``value`` is no numeric array or its elements cannot be read."""
    if isinstance(value, (tuple, list)):
        items = tuple(value)
    else:
        values = getattr(value, "values", None)
        if not callable(values):
            return None
        try:
            items = tuple(values())
        except (GGUFError, OSError, ValueError):
            return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return None
    return tuple(int(v) for v in items)


def per_layer(kv: Mapping[str, object], key: str, n_layer: int, notes: list[str]) -> tuple[int, ...] | None:
    """``key`` as ``n_layer`` values, as ``get_key_or_arr`` reads it: a scalar for every layer, an array as it
    is. None when the key is absent (or not a number). An array of another length gets a note and is padded
    with its last value (or cut)."""
    if key not in kv:
        return None
    value = kv[key]
    scalar = _scalar(value)
    if scalar is not None:
        return (scalar,) * n_layer
    items = _numbers(value)
    if items is None:
        notes.append(f"{key} is neither a number nor an array of numbers: ignored")
        return None
    if len(items) != n_layer:
        notes.append(f"{key} has {len(items)} values for {n_layer} layers: llama.cpp refuses this file "
                     "(wrong array length)")
        items = (items + (items[-1:] or (0,)) * n_layer)[:n_layer]
    return items


def read_hparams(kv: Mapping[str, object], where: object = None) -> HyperParams:
    """The attention shape of a GGUF header's key/value map, by llama.cpp's rule (see the module docs).

    ``where``: the file, for error messages. Raises ``ValueError`` naming the missing key when
    ``general.architecture`` or ``<arch>.block_count`` is absent (llama.cpp cannot load the model)."""
    arch = kv.get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError(f"{where}: GGUF key general.architecture missing")
    n_layer = _scalar(kv.get(f"{arch}.block_count"))
    if n_layer is None:
        raise ValueError(f"{where}: GGUF key {arch}.block_count missing")
    notes: list[str] = []
    n_embd = _scalar(kv.get(f"{arch}.embedding_length")) or 0
    zeros = (0,) * n_layer
    n_head = per_layer(kv, f"{arch}.attention.head_count", n_layer, notes) or zeros
    n_head_kv = per_layer(kv, f"{arch}.attention.head_count_kv", n_layer, notes) or n_head
    n_ff = per_layer(kv, f"{arch}.feed_forward_length", n_layer, notes) or zeros
    head0 = n_head[0] if n_head else 0
    default_len = n_embd // head0 if head0 > 0 else 0
    key_length = _scalar(kv.get(f"{arch}.attention.key_length"))
    value_length = _scalar(kv.get(f"{arch}.attention.value_length"))
    return HyperParams(
        arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
        key_length=default_len if key_length is None else key_length,
        value_length=default_len if value_length is None else value_length,
        context_length=_scalar(kv.get(f"{arch}.context_length")),
        sliding_window=_scalar(kv.get(f"{arch}.attention.sliding_window")),
        notes=tuple(notes))


__all__ = ["HyperParams", "per_layer", "read_hparams"]
