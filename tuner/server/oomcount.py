"""The kernel's out-of-memory kill counters (Linux), read around a llama-server's life.

A SIGKILL that Draftwise did not send is told apart by these counters: the kernel's OOM killer
counts every kill in ``/proc/vmstat`` (``oom_kill``) and in the ``memory.events`` file of the
cgroup (v2) the process lives in (``oom_kill``, hierarchical: a child cgroup's kills count in its
parents too). systemd-oomd and similar daemons kill a whole cgroup with SIGKILL from user space
and move neither counter. The supervisor reads the counters when it spawns a server and again
after the server died; :func:`tuner.server.diagnosis.diagnose` compares them (pure).

Elsewhere (Windows, macOS, a container without ``/proc``) every counter is ``None`` (unknown).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from tuner.storage import read_regular_bytes

log = logging.getLogger(__name__)

#: The counters as a tuple: (``/proc/vmstat`` oom_kill, the cgroup's ``memory.events`` oom_kill);
#: ``None`` = cannot be read here.
OomCounters = tuple[int | None, int | None]

#: Most bytes read from one /proc or /sys file (vmstat is a few KiB).
MAX_READ_BYTES = 1 << 20

_OOM_KILL = re.compile(rb"^oom_kill (\d+)\s*$", re.MULTILINE)


def _read_counter(path: Path) -> int | None:
    """The ``oom_kill N`` value of a vmstat-style file, or None when absent or unreadable."""
    try:
        data = read_regular_bytes(path, limit_bytes=MAX_READ_BYTES)
    except OSError:
        return None
    m = _OOM_KILL.search(data)
    return int(m.group(1)) if m else None


def cgroup_events_file(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The ``memory.events`` file of this process's cgroup v2, or None.

    The cgroup comes from ``/proc/self/cgroup``'s ``0::/PATH`` line (the unified hierarchy); the
    file is looked up under ``cgroup_root`` and, on a hybrid v1/v2 system, under its ``unified``
    mount. Raises nothing.
    """
    try:
        text = read_regular_bytes(proc_root / "self" / "cgroup", limit_bytes=MAX_READ_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            rel = line[3:].strip().lstrip("/")
            for base in (cgroup_root, cgroup_root / "unified"):
                f = base / rel / "memory.events" if rel else base / "memory.events"
                if f.is_file():
                    return f
    return None


def read_oom_counters(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> OomCounters:
    """``(system, cgroup)`` OOM-kill counts now: ``/proc/vmstat`` ``oom_kill`` and the cgroup v2
    ``memory.events`` ``oom_kill`` (see :func:`cgroup_events_file`). Either is None when this
    system does not have it (not Linux, kernel before 4.13, no cgroup v2). Raises nothing."""
    system = _read_counter(proc_root / "vmstat")
    events = cgroup_events_file(proc_root, cgroup_root)
    cgroup = _read_counter(events) if events is not None else None
    return system, cgroup

