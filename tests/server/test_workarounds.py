"""The machine-fact store (tuner/server/workarounds.py) and the OOM counters (tuner/server/oomcount.py)."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest

from tuner import paths
from tuner.server import workarounds
from tuner.server.config import ServerConfig
from tuner.server.oomcount import cgroup_events_file, read_oom_counters
from tuner.server.workarounds import (
    apply_workarounds,
    current_workaround,
    forget_workarounds,
    parse_cpuinfo,
    record_no_repack,
)


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """A stand-in llama-server with a ggml-cpu library beside it."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "libggml-cpu.so.0.26.0").write_bytes(b"\x7fELF cpu kernels")
    exe = d / "llama-server"
    exe.write_bytes(b"#!/bin/sh\n")
    return exe


def test_the_store_lives_under_draftwise_home(_draftwise_home: Path) -> None:
    """The server tests' autouse fixture (tests/server/conftest.py) redirects DRAFTWISE_HOME: no test writes
    the user's real store."""
    assert os.environ["DRAFTWISE_HOME"] == str(_draftwise_home)
    assert workarounds.store_path() == _draftwise_home / "data" / "workarounds.json"
    assert workarounds.store_path().parent == paths.data_dir()


def test_record_then_reuse(binary: Path) -> None:
    assert current_workaround(binary) is None
    cfg = ServerConfig(model_path=Path("m.gguf"))
    assert apply_workarounds(cfg, binary) is cfg
    lines = [f"line {i}" for i in range(30)]
    fact = record_no_repack(binary, "sigill", lines)
    assert fact.no_repack and fact.cause == "sigill" and fact.binary == str(binary)
    assert fact.evidence == tuple(lines[-20:])
    assert fact.kernel_release == platform.release() and fact.cpu_model
    again = current_workaround(binary)
    assert again == fact
    assert apply_workarounds(cfg, binary).no_repack is True
    assert oct(workarounds.store_path().stat().st_mode & 0o777) == "0o600"
    assert forget_workarounds() == 1
    assert current_workaround(binary) is None and forget_workarounds() == 0


def test_a_rebuilt_binary_or_another_kernel_is_a_new_key(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record_no_repack(binary, "sigsegv", ["x"])
    assert current_workaround(binary) is not None
    monkeypatch.setattr(workarounds.platform, "release", lambda: "9.9.9-other")
    assert current_workaround(binary) is None
    monkeypatch.undo()
    lib = binary.parent / "libggml-cpu.so.0.26.0"
    lib.write_bytes(b"\x7fELF rebuilt without AMX")  # a rebuilt llama.cpp: the kernels changed
    assert current_workaround(binary) is None


def test_another_cpu_is_a_new_key(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record_no_repack(binary, "sigill", ["x"])
    other = workarounds.CpuIdentity("Other CPU", frozenset({"avx2"}))
    monkeypatch.setattr(workarounds, "cpu_identity", lambda: other)
    assert current_workaround(binary) is None


def test_bad_cause_and_missing_binary(binary: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cause"):
        record_no_repack(binary, "sigterm", [])
    with pytest.raises(OSError):
        record_no_repack(tmp_path / "gone", "sigill", [])
    assert current_workaround(tmp_path / "gone") is None  # never raises


def test_a_corrupt_store_is_kept_aside_and_never_stops_a_launch(binary: Path) -> None:
    store = workarounds.store_path()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("{ not json", encoding="utf-8")
    assert current_workaround(binary) is None
    assert not store.exists() and list(store.parent.glob("workarounds.json.corrupt-*"))
    store.write_bytes(b" " * (workarounds.MAX_STORE_BYTES + 1))  # oversized: refused, not read whole
    assert current_workaround(binary) is None
    record_no_repack(binary, "sigbus", ["x"])  # writing still works
    assert json.loads(store.read_text(encoding="utf-8"))["entries"][0]["fact"]["cause"] == "sigbus"


def test_parse_cpuinfo_x86_and_arm() -> None:
    x86 = parse_cpuinfo("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 amx_tile\n\n"
                        "processor\t: 1\nmodel name\t: ignored\n")
    assert x86.model == "Intel(R) Xeon(R) Processor" and x86.flags == {"fpu", "avx2", "amx_tile"}
    arm = parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n")
    assert arm.model == "implementer 0x41 part 0xd40" and "sve" in arm.flags


def test_oom_counters_from_proc_and_cgroup_v2(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "vmstat").write_text("pgfault 1\noom_kill 3\nfoo 2\n")
    (proc / "self" / "cgroup").write_text("0::/user.slice/app-draftwise.scope\n")
    scope = cg / "user.slice" / "app-draftwise.scope"
    scope.mkdir(parents=True)
    (scope / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert cgroup_events_file(proc, cg) == scope / "memory.events"
    assert read_oom_counters(proc, cg) == (3, 2)
    # a hybrid system: the v2 hierarchy is mounted at cgroup/unified
    (scope / "memory.events").unlink()
    uni = cg / "unified" / "user.slice" / "app-draftwise.scope"
    uni.mkdir(parents=True)
    (uni / "memory.events").write_text("oom_kill 5\n")
    assert read_oom_counters(proc, cg) == (3, 5)
    # nothing readable: unknown, not an error
    assert read_oom_counters(tmp_path / "none", tmp_path / "none") == (None, None)


def test_oom_counters_of_this_machine_are_numbers_or_unknown() -> None:
    system, cgroup = read_oom_counters()
    assert system is None or system >= 0
    assert cgroup is None or cgroup >= 0
    if Path("/proc/vmstat").is_file() and "oom_kill" in Path("/proc/vmstat").read_text():
        assert system is not None
