"""The staleness keys: what a saved profile must still match, each changing with what it stands for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tuner.calibration.pipeline.keys import file_identity, hardware_fingerprint, staleness_keys
from tuner.calibration.sampling import Sampling
from tuner.hardware.devices import Device, Devices

MIB = 2**20


def _gpu(total: int, free: int, endpoint: str | None = None) -> Device:
    return Device(index=0, name="RPC0" if endpoint else "CUDA0", backend="RPC" if endpoint else "CUDA",
                  total_bytes=total, free_bytes=free, budget_bytes=free, source="test", rpc_endpoint=endpoint)


def test_the_hardware_fingerprint_is_devices_memory_and_cores_not_free_memory() -> None:
    a = Devices(devices=(_gpu(8192 * MIB, 8000 * MIB),), ram_total_bytes=64 * 1024 * MIB, ram_available_bytes=1,
                cpu_cores=8)
    busy = Devices(devices=(_gpu(8192 * MIB, 1 * MIB),), ram_total_bytes=a.ram_total_bytes, ram_available_bytes=9,
                   cpu_cores=8)
    assert hardware_fingerprint(a) == hardware_fingerprint(busy) == "CUDA:CUDA0:8GiB;ram:64GiB;cpu:8"
    remote = Devices(devices=(_gpu(24 * 1024 * MIB, 20 * 1024 * MIB, "192.168.1.20:50052"),),
                     ram_total_bytes=None, ram_available_bytes=None, cpu_cores=None)
    assert hardware_fingerprint(remote) == "RPC:RPC0@192.168.1.20:50052:24GiB;ram:?GiB;cpu:?"


def test_a_files_identity_changes_with_its_contents_time(tmp_path: Path) -> None:
    f = tmp_path / "llama-server"
    f.write_bytes(b"x")
    before = file_identity(f)
    assert before.startswith(f"{f.resolve()}:1:")
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert file_identity(f) != before
    assert file_identity(tmp_path / "gone") == str(tmp_path / "gone")


def test_each_key_follows_what_it_stands_for(resolve: Any, fake_binary: Any) -> None:
    base = staleness_keys(resolve())
    assert staleness_keys(resolve()) == base  # the same request, the same keys
    assert base.hardware_fingerprint == "ram:16GiB;cpu:2" and base.n_ctx == 512
    assert base.server_build == "11434 (fa4e1ce)" and base.server_binary == file_identity(fake_binary.path)
    assert [Path(m.path).name for m in base.model_files] == ["stories260K.gguf", "stories-draft.gguf"]
    changed = {
        "n_predict": dict(n_predict=64), "long_context": dict(long_context=False), "max_prompts": dict(max_prompts=2),
    }
    for name, fields in changed.items():
        keys = staleness_keys(resolve(**fields))
        assert keys.prompt_set_sha256 != base.prompt_set_sha256 and keys.workload == base.workload, name
    assert staleness_keys(resolve(sampling=Sampling(temperature=0.7))).workload != base.workload
    assert staleness_keys(resolve(n_ctx=1024)).n_ctx == 1024
    assert staleness_keys(resolve(long_share=0.3)).long_share == 0.3
    assert staleness_keys(resolve(server_args=("--no-repack",))).server_args == ("--no-repack",)
