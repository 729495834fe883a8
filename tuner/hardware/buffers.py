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


#: ggml-cpu's extra buffer types, in the order the CPU backend offers them (ggml/src/ggml-cpu/ggml-cpu.cpp
#: ``ggml_backend_cpu_get_extra_buffer_types``); src/llama-model.cpp ``make_cpu_buft_list`` lists them
#: before the plain CPU buffer type, and a weight goes to the first one that supports its operation.
EXTRA_CPU_BUFFER_TYPES = ("AMX", "CPU_KLEIDIAI", "CPU_RISCV64_SPACEMIT", "CPU_REPACK")

_SYSTEM_INFO = re.compile(r"system_info:.*?\|\s*CPU\s*:(.*)$")


@dataclass(frozen=True)
class CpuBuild:
    """What one load log says about the CPU backend of a llama-server build.

    ``extra_types``: the extra CPU buffer types the target's weights went to (:data:`EXTRA_CPU_BUFFER_TYPES`
    order; empty = none: a model without such weights, ``--no-repack``, or every layer on a GPU);
    ``extra_bytes``: ``((type, bytes), ...)`` of those buffers; ``build_flags``: the ``system_info`` features
    whose value is ``1``, lower-cased (``("avx", "avx2", "avx512", "amx_int8", "repack", ...)``; empty when the
    line is missing).
    """

    extra_types: tuple[str, ...]
    extra_bytes: tuple[tuple[str, int], ...]
    build_flags: tuple[str, ...]


def parse_build_flags(lines: Iterable[str]) -> tuple[str, ...]:
    """The CPU features of the first ``system_info`` line (``AVX2 = 1`` → ``"avx2"``; ``= 0`` and
    non-numeric values such as ``SVE_CNT`` are left out), sorted; empty without such a line."""
    for line in lines:
        m = _SYSTEM_INFO.search(line)
        if not m:
            continue
        flags = set()
        for part in m.group(1).split("|"):
            name, _, value = part.partition("=")
            if name.strip() and value.strip() == "1":
                flags.add(name.strip().lower())
        return tuple(sorted(flags))
    return ()


def parse_cpu_build(lines: Iterable[str]) -> CpuBuild:
    """The extra CPU buffer types of the target's load lines and the build's CPU features (see the module
    docs). Raises ``ValueError`` when the log has no ``model buffer size`` line (not started with ``-lv 4``,
    or it failed before loading), so "no extra buffer" is never read from a log that cannot show one."""
    lines = list(lines)
    bufs = parse_load_buffers(lines)
    if not any(kind == "model" for kind, _, _ in bufs.target.by_backend):
        raise ValueError("no 'model buffer size' line in the llama-server log (start it with -lv 4)")
    sizes: dict[str, int] = {}
    for kind, name, n in bufs.target.by_backend:
        if kind == "model" and name in EXTRA_CPU_BUFFER_TYPES:
            sizes[name] = sizes.get(name, 0) + n
    order = [t for t in EXTRA_CPU_BUFFER_TYPES if t in sizes]
    return CpuBuild(tuple(order), tuple((t, sizes[t]) for t in order), parse_build_flags(lines))


@dataclass(frozen=True)
class CpuBuffers:
    """Which extra CPU buffer types hold copies of quantized weights of CPU-run layers, for one llama-server
    build on one CPU, and whether they are in force (the plan reads it from ``Devices.cpu_buffers``).

    ``types``: the build's extra buffer types with repacking on (:data:`EXTRA_CPU_BUFFER_TYPES` order), as a
    load log of the build showed them (``source`` ``"load log"``) or as guessed from the CPU's flags when no
    log was read (``"CPU flags"``); ``build_flags``: the CPU backend's compiled features (:func:`parse_build_flags`
    names; the guess maps ``avx512f`` to ``avx512``); ``no_repack``: launches run with ``--no-repack``
    (``params.no_extra_bufts``: src/llama-model.cpp ``make_cpu_buft_list`` then offers no extra buffer type),
    e.g. the workaround recorded for a CPU that crashes in those kernels; ``cause``: that workaround's crash
    (``"sigill"``, ``"sigsegv"``, ``"sigbus"``), None without one.
    """

    types: tuple[str, ...]
    build_flags: tuple[str, ...] = ()
    no_repack: bool = False
    source: str = "load log"
    cause: str | None = None

    @property
    def in_force(self) -> tuple[str, ...]:
        """The extra buffer types launches really get: none with ``no_repack``."""
        return () if self.no_repack else self.types

    @property
    def openmp(self) -> bool | None:
        """The build's CPU backend uses OpenMP (``system_info: … OPENMP = 1``): its threads then spin-wait at
        each graph node's barrier (ggml/src/ggml-cpu/ggml-cpu.c ``ggml_barrier`` is an ``omp barrier``), so
        ``OMP_WAIT_POLICY=PASSIVE`` is the setting that lets them sleep; False: ggml's own threadpool
        (``--poll``). None when only guessed from the CPU's flags (``source`` ``"CPU flags"``)."""
        if self.source != "load log":
            return None
        return "openmp" in self.build_flags


def guess_cpu_buffers(cpu_flags: Iterable[str], local_gpus: bool) -> CpuBuffers:
    """The guess when no load log of the build was read: ``CPU_REPACK`` when the CPU reports ``avx2``
    (assumes a build for this CPU's instruction sets), never AMX (compiled only into a native build for an
    AMX host: only a load log shows it), and nothing with a local GPU (its backend's host buffer type comes
    before the extra ones in src/llama-model.cpp ``make_cpu_buft_list``; a weight takes the first type that
    supports it, and with mmap it is then kept in the plain CPU buffer: llama-server's ``--no-host`` exists
    to bypass that)."""
    flags = {"avx512" if f == "avx512f" else f for f in cpu_flags}
    types = ("CPU_REPACK",) if "avx2" in flags and not local_gpus else ()
    return CpuBuffers(types, tuple(sorted(flags)), source="CPU flags")
