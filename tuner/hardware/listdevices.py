"""Adapter for ``llama-server --list-devices``: what llama.cpp itself will offload to.

The server prints (common/arg.cpp ``common_print_available_devices``)::

    Available devices:
      CUDA0: NVIDIA GeForce RTX 4090 (24082 MiB, 23600 MiB free)

or ``  (none)`` on a CPU-only build/host, and exits 0 at once. Only non-CPU ggml devices are listed,
in the order ``--device`` / ``-ts`` use. This module is the only one in ``tuner.hardware`` that runs a
process (one short run with a timeout through ``tuner.process.run_output``, the project's one
subprocess adapter).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.units import MIB

_LINE = re.compile(
    r"^\s*(?P<name>[^:\s]+):\s*(?P<desc>.*?)\s*\((?P<total>\d+)\s*MiB,\s*(?P<free>\d+)\s*MiB free\)\s*$"
)


@dataclass(frozen=True)
class ListedDevice:
    """One device line of ``--list-devices``.

    ``name`` is the ggml device name (``CUDA0``, ``Vulkan1``, ``Metal``, ``ROCm0``...) that ``--device``
    accepts; ``index`` its position in llama.cpp's order (0-based). Sizes are whole MiB as printed,
    converted to bytes.
    """

    index: int
    name: str
    description: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class ListDevicesResult:
    """Outcome of one ``--list-devices`` call.

    ``ok`` is False when the binary could not be run or its output not understood; ``note`` then says
    why (never an exception). ``devices`` is empty for a CPU-only answer (``(none)``).
    """

    ok: bool
    devices: tuple[ListedDevice, ...]
    note: str | None
    raw_output: str = ""


# runner(argv, timeout_s) -> (returncode, stdout, stderr); raises OSError / TimeoutError
Runner = Callable[[list[str], float], "tuple[int, str, str]"]


def _default_runner(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    from tuner.process import run_output  # the one module that runs child processes

    return run_output(argv, timeout_s)


def parse_list_devices(text: str) -> tuple[ListedDevice, ...]:
    """Parse the stdout of ``llama-server --list-devices`` into devices (llama.cpp's order).

    Raises ``ValueError`` when the ``Available devices:`` header is missing (not a llama.cpp binary, or
    a build without the flag). ``(none)`` gives an empty tuple.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Available devices:")
    except StopIteration:
        raise ValueError("no 'Available devices:' line in --list-devices output") from None
    devices: list[ListedDevice] = []
    for line in lines[start + 1 :]:
        if line.strip() == "(none)":
            break
        m = _LINE.match(line)
        if not m:
            continue
        devices.append(
            ListedDevice(
                index=len(devices),
                name=m.group("name"),
                description=m.group("desc"),
                total_bytes=int(m.group("total")) * MIB,
                free_bytes=int(m.group("free")) * MIB,
            )
        )
    return tuple(devices)


def run_list_devices(
    server_binary: str | os.PathLike[str] | None,
    timeout_s: float = 30.0,
    runner: Runner | None = None,
) -> ListDevicesResult:
    """Run ``<server_binary> --list-devices`` once and parse it; never raises.

    ``server_binary`` None → ``ok=False`` with a note (no llama-server known). ``runner`` replaces the
    subprocess call in tests. The child gets the environment without ``LLAMA_ARG_*``.
    """
    if server_binary is None:
        return ListDevicesResult(False, (), "llama-server not found: device list from llama.cpp unavailable")
    argv = [str(Path(server_binary)), "--list-devices"]
    run = runner or _default_runner
    from tuner.process import OutputCapExceeded

    try:
        rc, out, err = run(argv, timeout_s)
    except TimeoutError:
        return ListDevicesResult(False, (), f"{argv[0]} --list-devices timed out after {timeout_s:g} s")
    except OutputCapExceeded as exc:
        return ListDevicesResult(False, (), f"{exc}; is it a llama-server?")
    except OSError as exc:
        return ListDevicesResult(False, (), f"{argv[0]} --list-devices could not run: {exc}")
    if rc != 0:
        tail = (err or out).strip().splitlines()[-3:]
        return ListDevicesResult(
            False, (), f"{argv[0]} --list-devices exited {rc}: {' | '.join(tail)}", out + err
        )
    try:
        devices = parse_list_devices(out)
    except ValueError as exc:
        return ListDevicesResult(False, (), f"{argv[0]} --list-devices: {exc}", out + err)
    return ListDevicesResult(True, devices, None, out)
