"""What the ``--no-repack`` mode means for a plan and for the user, in pure functions: whether argv words turn
ggml's extra CPU buffer types (``AMX``, ``CPU_REPACK``) off, and the one sentence shown while the
``--no-repack`` workaround is in force.

What a build really does on this CPU is read elsewhere: :mod:`tuner.crosscheck.cpu_buffers` starts the build
once on the self-test model and keeps its answer (``tuner.hardware.buffers.CpuBuffers``); the callers put it in
``Devices.cpu_buffers`` (``tuner.crosscheck.build.build_probes``), which the memory plan reads. Nothing here
runs a process.
"""

from __future__ import annotations

from collections.abc import Sequence

#: How much faster generation is with the repacked kernels than with ``--no-repack`` (Gemma 3 270M Q4_K_M,
#: one thread; bench/no_repack_cost.py), when a measurement supports a figure; 0 = none is claimed. Measured on
#: an AMD EPYC (AVX-512, CPU_REPACK: 12.7 of Gemma's 235 MiB repacked), 8 rotated rounds side by side, load
#: average 1.4-1.8: 54.9 vs 54.8 tokens/s, +0.3 % (rounds 0.93-1.13x), no measurable gain there; an AMX build
#: repacks 213.9 MiB of it, but no AMX CPU that runs those kernels was at hand to measure.
REPACK_SPEEDUP_PCT = 0

#: The llama-server flags that turn repacking off (b11434 ``--repack, -nr, --no-repack``, common/arg.cpp).
NO_REPACK_FLAGS = ("--no-repack", "-nr")


def no_repack_in(argv_words: Sequence[str]) -> bool:
    """True when llama-server argv words turn weight repacking off: the last of ``--no-repack`` / ``-nr``
    and ``--repack`` wins (common/arg.cpp: each sets ``params.no_extra_bufts``)."""
    state = False
    for word in argv_words:
        if word in NO_REPACK_FLAGS:
            state = True
        elif word == "--repack":
            state = False
    return state


def no_repack_sentence(cause: str | None, build_types: tuple[str, ...] = ()) -> str:
    """The one plain sentence shown (doctor, tune report, Serve tab) while launches run with
    ``--no-repack`` because this CPU crashed in the repacked kernels.

    ``cause``: the crash the workaround cured (``"sigill"`` / ``"sigsegv"`` / ``"sigbus"``, as
    ``tuner.server.workarounds.CpuWorkaround.cause``); ``build_types``: the build's extra buffer types when
    known. Only an illegal-instruction crash of a build that has (or may have) the AMX buffer type is
    called an AMX crash; a segmentation fault is "repacked CPU kernels"."""
    amx = (cause or "").lower() in ("sigill", "illegal_instruction") and (not build_types or "AMX" in build_types)
    where = "llama.cpp's AMX kernels" if amx else "llama.cpp's repacked CPU kernels"
    gain = f"are about {REPACK_SPEEDUP_PCT} % faster" if REPACK_SPEEDUP_PCT > 0 else "can make quantized models faster"
    return f"Repacked CPU kernels are off: this CPU crashes in {where}; on CPUs where they work they {gain}."


__all__ = ["NO_REPACK_FLAGS", "REPACK_SPEEDUP_PCT", "no_repack_in", "no_repack_sentence"]
