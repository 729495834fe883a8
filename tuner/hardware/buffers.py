"""Parse the buffer sizes llama-server reports while loading (at ``-lv 4``), per model.

Lines (b11434): ``load_tensors: CPU_Mapped model buffer size = 163.57 MiB`` (src/llama-model.cpp
``load_tensors``), ``llama_kv_cache: CPU KV buffer size = 72.00 MiB`` (src/llama-kv-cache.cpp),
``sched_reserve: CPU compute buffer size = 25.02 MiB`` and ``llama_context: CPU output buffer size``
(src/llama-context.cpp), ``RS buffer size`` for recurrent state (src/llama-memory-recurrent.cpp).
Everything after ``loading draft model`` (common/speculative.cpp) belongs to the draft. These lines
are libllama INFO = TRACE in the server log: hidden at the default verbosity, shown with ``-lv 4``.

With ``--fit on`` (the default) the server also logs, before it loads anything, its own projection: a
``common_memory_breakdown_print`` table (common/fit.cpp) per no-alloc measurement, one after
``getting device memory data for initial parameters`` (the target) and one after ``getting device
memory data for the extra model`` (the draft / MTP context, common/common.cpp ``common_init_result``).
Rows: ``- <device> (<description>) | total = free + (self = model + context + compute) + unaccounted``
and ``- Host | self = model + context + compute`` in MiB (rounded down); "context" is the KV cache
(src/llama-context.cpp ``llama_context::memory_breakdown``: the output buffer is not in it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tuner.units import MIB

_BUF = re.compile(r"(\S+)\s+(model|KV|compute|output|RS) buffer size\s*=\s*([\d.]+) MiB")


@dataclass(frozen=True)
class ModelBuffers:
    """Bytes per buffer kind for one model, summed over backends, plus the per-backend detail.

    ``by_backend``: ``((kind, backend name, bytes), ...)`` in log order (e.g. ``("model", "CUDA0", ...)``).
    Sizes are printed with 0.01 MiB resolution.
    """

    model_bytes: int = 0
    kv_bytes: int = 0
    compute_bytes: int = 0
    output_bytes: int = 0
    recurrent_bytes: int = 0
    by_backend: tuple[tuple[str, str, int], ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        """All buffers of this model."""
        return self.model_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes + self.recurrent_bytes


@dataclass(frozen=True)
class LoadBuffers:
    """Buffers of one server start: the target, and the draft when one was loaded (else None)."""

    target: ModelBuffers
    draft: ModelBuffers | None

    @property
    def total_bytes(self) -> int:
        """Target plus draft."""
        return self.target.total_bytes + (self.draft.total_bytes if self.draft else 0)


_FIELD = {"model": "model_bytes", "kv": "kv_bytes", "compute": "compute_bytes", "output": "output_bytes",
          "rs": "recurrent_bytes"}


def parse_load_buffers(lines: Iterable[str]) -> LoadBuffers:
    """Collect the buffer lines of a llama-server log. Raises ``ValueError`` when there are none
    (the server was not started with ``-lv 4``, or failed before loading)."""
    acc: dict[str, dict[str, int]] = {"target": {}, "draft": {}}
    detail: dict[str, list[tuple[str, str, int]]] = {"target": [], "draft": []}
    who = "target"
    for line in lines:
        if "loading draft model" in line:
            who = "draft"
        m = _BUF.search(line)
        if not m:
            continue
        kind = m.group(2).lower()
        n = int(round(float(m.group(3)) * MIB))
        key = _FIELD[kind]
        acc[who][key] = acc[who].get(key, 0) + n
        detail[who].append((kind, m.group(1), n))
    if not detail["target"]:
        raise ValueError("no 'buffer size' lines in the llama-server log (start it with -lv 4)")
    target = ModelBuffers(**acc["target"], by_backend=tuple(detail["target"]))
    draft = ModelBuffers(**acc["draft"], by_backend=tuple(detail["draft"])) if detail["draft"] else None
    return LoadBuffers(target, draft)


@dataclass(frozen=True)
class ProjectionRow:
    """One row of a ``common_memory_breakdown_print`` table: ``place`` = ggml device name or ``Host``."""

    place: str
    model_bytes: int
    context_bytes: int
    compute_bytes: int

    @property
    def total_bytes(self) -> int:
        """model + context + compute (the table's "self")."""
        return self.model_bytes + self.context_bytes + self.compute_bytes


@dataclass(frozen=True)
class StartupProjection:
    """llama-server's own start-up projection (``--fit on``, ``-lv 4``): the target's rows, and the
    draft's (extra model) rows when one was measured (else empty)."""

    target: tuple[ProjectionRow, ...]
    draft: tuple[ProjectionRow, ...]


_ROW = re.compile(r"\|\s+-\s+(\S+)[^|]*\|\s*(?:\d+\s*=\s*\d+\s*\+\s*\(\s*)?(\d+)\s*=\s*(\d+)\s*\+\s*(\d+)\s*\+\s*(\d+)")


def parse_startup_projection(lines: Iterable[str]) -> StartupProjection:
    """The first target table and the first extra-model table of a ``-lv 4 --fit on`` server log.

    Raises ``ValueError`` when the log has no ``memory breakdown`` table (fit off, verbosity below 4,
    or the server failed before fitting)."""
    tables: dict[str, list[ProjectionRow]] = {}
    who: str | None = None
    current: list[ProjectionRow] | None = None
    for line in lines:
        if "device memory data for initial parameters" in line:
            who = "target"
            continue
        if "device memory data for the extra model" in line:
            who = "draft"
            continue
        if "memory breakdown [MiB]" in line:
            current = None
            if who is not None and who not in tables:
                current = tables[who] = []
            continue
        if current is None:
            continue
        m = _ROW.search(line)
        if m:
            current.append(ProjectionRow(m.group(1), int(m.group(3)) * MIB, int(m.group(4)) * MIB,
                                         int(m.group(5)) * MIB))
        elif "|" not in line:
            current = None
    if "target" not in tables or not tables["target"]:
        raise ValueError("no 'memory breakdown' table in the llama-server log (needs --fit on and -lv 4)")
    return StartupProjection(tuple(tables["target"]), tuple(tables.get("draft", ())))
