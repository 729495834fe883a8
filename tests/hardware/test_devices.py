"""Device detection: the real probes on this CPU-only machine, and every GPU situation of issue 3
injected through replaceable probes (fake NVML library, fake sysfs tree, fake --list-devices runner)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner.hardware.buffers import CpuBuffers
from tuner.hardware.devices import Probes, backend_of, detect_devices
from tuner.hardware.host import HostInfo, probe_host
from tuner.hardware.listdevices import (
    ListDevicesResult,
    parse_list_devices,
    run_list_devices,
)
from tuner.hardware.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NvmlResult,
    NvmlSampler,
    probe_nvml,
)
from tuner.hardware.sysfs import PciGpu, probe_pci_gpus
from tuner.hardware.unified import UnifiedInfo, probe_unified

MIB = 1024 * 1024
GIB = 1024 * MIB


# ----------------------------------------------------------------------------------- fakes
class FakeNVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML code {value}")
        self.value = value


class FakeNvml:
    """A pynvml-like object. ``gpus``: dicts with name, bus, total/used (bytes), mig, mem_error,
    procs [(pid, usedGpuMemory or None)], mig_slices [(name, total, free)]."""

    def __init__(self, gpus=(), init_error=None, driver="560.35.03"):
        self.gpus = list(gpus)
        self.init_error = init_error
        self.driver = driver
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        g = self.gpus[i]
        if g.get("lost"):
            raise FakeNVMLError(NVML_ERROR_GPU_IS_LOST)
        return ("gpu", i)

    def _g(self, h):
        return self.gpus[h[1]]

    def nvmlDeviceGetName(self, h):
        if h[0] == "mig":
            return self._g(h)["mig_slices"][h[2]][0]
        return self._g(h)["name"]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h[1]}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._g(h)["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._g(h)
        if h[0] == "mig":
            _, total, free = g["mig_slices"][h[2]]
            return SimpleNamespace(total=total, used=total - free, free=free)
        if g.get("mem_error"):
            raise FakeNVMLError(g["mem_error"])
        return SimpleNamespace(total=g["total"], used=g["used"], free=g["total"] - g["used"])

    def nvmlDeviceGetMigMode(self, h):
        g = self._g(h)
        if "mig" not in g:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return (1 if g["mig"] else 0, 1 if g["mig"] else 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(self._g(h).get("mig_slices", ()))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        return ("mig", h[1], i)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=42, memory=10)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._g(h).get("procs", ())]


def listed(*lines: str) -> ListDevicesResult:
    text = "Available devices:\n" + ("\n".join(lines) if lines else "  (none)") + "\n"
    return ListDevicesResult(True, parse_list_devices(text), None, text)


HOST = HostInfo(64 * GIB, 48 * GIB, 8, 16)


def probes(list_result=None, nvml=None, pci=(), unified=None, host=HOST) -> Probes:
    def nvml_probe():
        if nvml is None:
            return NvmlResult(False, (), None, "NVML unavailable: test")
        if callable(nvml) and not isinstance(nvml, FakeNvml):
            return nvml()
        return probe_nvml(nvml, wsl_paths=())

    return Probes(
        list_devices=lambda _path: list_result if list_result is not None else ListDevicesResult(False, (), "no llama-server (test)"),
        nvml=nvml_probe,
        pci=lambda: tuple(pci),
        host=lambda: host,
        unified=lambda: unified or UnifiedInfo("Linux", False, None),
    )


def gpu(name, bus, total_mib, used_mib, **kw):
    return dict(name=name, bus=bus, total=total_mib * MIB, used=used_mib * MIB, **kw)


# ---------------------------------------------------------------------------- real probes
@pytest.mark.server
def test_real_probes_give_a_clean_answer_here():
    devs = detect_devices(None)
    host = probe_host()
    assert host.ram_total_bytes and host.ram_total_bytes > 0 and host.cpu_cores >= 1
    assert devs.ram_total_bytes == host.ram_total_bytes
    assert 0 < devs.ram_available_bytes <= devs.ram_total_bytes
    # this machine has no GPU: CPU-only is an ordinary answer, not an error
    assert devs.devices == () and devs.cpu_only
    assert all(isinstance(n, str) for n in devs.notes)
    assert probe_nvml().ok is False  # no NVML library here; a value, not an exception
    assert isinstance(probe_pci_gpus(), tuple)
    assert probe_unified().apple_silicon is False


def test_the_caller_names_the_binary_and_hands_in_the_build_probe(tmp_path):
    """Without a binary there is no --list-devices probe (a note says so) and no build probe unless the caller
    gives one; the build probe gets the binary the caller named."""
    p = probes()
    devs = detect_devices(None, probes=Probes(nvml=p.nvml, pci=p.pci, host=p.host, unified=p.unified))
    assert not devs.listed_by_llama and devs.cpu_buffers is None
    assert "llama-server not found: device list from llama.cpp unavailable" in devs.notes
    asked = []
    fact = CpuBuffers(("CPU_REPACK",), ("avx2",))
    with_build = Probes(list_devices=p.list_devices, nvml=p.nvml, pci=p.pci, host=p.host, unified=p.unified,
                        cpu_buffers=lambda b: asked.append(b) or fact)
    assert detect_devices(tmp_path / "llama-server", probes=with_build).cpu_buffers == fact
    assert asked == [tmp_path / "llama-server"]


def test_notes_about_rpc_hosts_are_kept_apart():
    """The RPC hosts' notes (a host left out, a malformed entry) are in ``rpc_notes`` as well as in ``notes``;
    the local probes' notes are not."""
    from tuner.hardware.listdevices import ListedDevice
    from tuner.hardware.rpc import RpcDiscovery, RpcEndpoint

    up, down = RpcEndpoint("10.0.0.2", 50052), RpcEndpoint("10.0.0.3", 50052)
    found = RpcDiscovery((up,), (ListedDevice(0, "RPC0", str(up), 8 * GIB, 7 * GIB),),
                         (f"RPC host {down} refused the connection",), (down,))
    p = probes()
    asked = []
    rpc = Probes(list_devices=p.list_devices, nvml=p.nvml, pci=p.pci, host=p.host, unified=p.unified,
                 rpc=lambda b, eps: asked.append((b, eps)) or found)
    devs = detect_devices(None, probes=rpc, rpc_hosts=[str(up), str(down)])
    assert asked == [(None, (up, down))]
    assert devs.rpc_notes == (f"RPC host {down} refused the connection",)
    assert set(devs.rpc_notes) < set(devs.notes) and "no llama-server (test)" in devs.notes
    assert [d.name for d in devs.devices] == ["RPC0"] and devs.rpc_endpoints == (str(up),)
    assert devs.rpc_unreachable == (str(down),)
    bad = detect_devices(None, probes=rpc, rpc_hosts="10.0.0.2:notaport")
    assert len(bad.rpc_notes) == 1 and bad.rpc_notes[0].startswith("RPC hosts: ") and bad.devices == ()


@pytest.mark.server
def test_real_list_devices_on_the_cpu_build(llama_server_bin):
    res = run_list_devices(llama_server_bin)
    assert res.ok, res.note
    assert res.devices == ()
    assert "Available devices:" in res.raw_output
    devs = detect_devices(llama_server_bin)
    assert devs.listed_by_llama and devs.cpu_only


# ----------------------------------------------------------------------- --list-devices
def test_parse_list_devices_lines_and_none():
    text = (
        "ggml_cuda_init: found 2 CUDA devices\nAvailable devices:\n"
        "  CUDA0: NVIDIA GeForce RTX 4090 (24082 MiB, 23600 MiB free)\n"
        "  Vulkan1: AMD Radeon RX 7900 XTX (24560 MiB, 24000 MiB free)\n"
    )
    d = parse_list_devices(text)
    assert [x.name for x in d] == ["CUDA0", "Vulkan1"] and [x.index for x in d] == [0, 1]
    assert d[0].description == "NVIDIA GeForce RTX 4090"
    assert d[0].total_bytes == 24082 * MIB and d[0].free_bytes == 23600 * MIB
    assert parse_list_devices("Available devices:\n  (none)\n") == ()
    with pytest.raises(ValueError, match="Available devices"):
        parse_list_devices("error: invalid argument: --list-devices\n")
    assert [backend_of(n) for n in ("CUDA0", "Vulkan12", "Metal", "ROCm1")] == ["CUDA", "Vulkan", "Metal", "ROCm"]


def test_list_devices_failures_are_notes():
    def timeout(argv, t):
        raise TimeoutError(f"{argv[0]}: no exit within {t} s")

    def missing(argv, t):
        raise FileNotFoundError(2, "No such file", argv[0])

    r = run_list_devices("/opt/llama-server", runner=timeout, timeout_s=3)
    assert not r.ok and "timed out after 3 s" in r.note and "/opt/llama-server" in r.note
    r = run_list_devices("/opt/llama-server", runner=missing)
    assert not r.ok and "could not run" in r.note
    r = run_list_devices("/opt/llama-server", runner=lambda a, t: (1, "", "error: invalid argument: --list-devices\n"))
    assert not r.ok and "exited 1" in r.note and "invalid argument" in r.note
    r = run_list_devices(None)
    assert not r.ok and "not found" in r.note
    seen = []
    r = run_list_devices("/x/llama-server", runner=lambda a, t: (seen.append(a) or (0, "Available devices:\n  (none)\n", "")))
    assert r.ok and r.devices == () and seen == [["/x/llama-server", "--list-devices"]]


# ------------------------------------------------------------------------------- NVML
@pytest.mark.parametrize(
    "code, words",
    [
        (NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (NVML_ERROR_LIBRARY_NOT_FOUND, "not found"),
        (NVML_ERROR_GPU_IS_LOST, "lost"),
    ],
)
def test_nvml_init_failure_is_a_note_and_cpu_only(code, words):
    lib = FakeNvml(init_error=code)
    res = probe_nvml(lib, wsl_paths=())
    assert not res.ok and words in res.note
    # with an NVIDIA card on the bus but NVML broken, the answer is still a value with the note
    devs = detect_devices(None, probes=probes(nvml=lib, pci=[PciGpu("0000:01:00.0", "nvidia", "nvidia", "active")]))
    assert devs.devices == ()
    assert any(words in n for n in devs.notes)


def test_nvml_library_missing_on_wsl_names_the_wsl_folder(tmp_path):
    wsl = tmp_path / "libnvidia-ml.so.1"
    wsl.write_bytes(b"")  # exists but is not loadable: the note must still explain WSL
    res = probe_nvml(FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND), wsl_paths=(str(wsl),))
    assert not res.ok and "WSL" in res.note and "/usr/lib/wsl/lib" in res.note


def test_nvml_reads_gpus_and_shuts_down():
    lib = FakeNvml([gpu("NVIDIA GeForce RTX 3060", "00000000:01:00.0", 12288, 1000)])
    res = probe_nvml(lib, wsl_paths=())
    assert res.ok and res.driver_version == "560.35.03"
    g = res.gpus[0]
    assert g.total_bytes == 12288 * MIB and g.free_bytes == 11288 * MIB and g.pci_bus_id == "00000000:01:00.0"
    assert g.mig_enabled is None and lib.calls == ["init", "shutdown"]


def test_per_process_memory_not_available_is_none_with_a_note():
    lib = FakeNvml([gpu("RTX", "b", 8192, 4000, procs=[(1234, None), (99, 512 * MIB)])])
    s = NvmlSampler(lib)
    assert s.open()
    u = s.sample(0, pid=1234)
    assert u.process_used_bytes is None and "N/A" in u.note
    assert u.used_bytes == 4000 * MIB and u.util_percent == 42
    assert s.sample(0, pid=99).process_used_bytes == 512 * MIB
    s.close()
    closed = s.sample(0)
    assert closed.used_bytes is None and closed.note


def test_mig_budget_is_the_slice_not_the_whole_gpu():
    lib = FakeNvml([gpu("NVIDIA A100-SXM4-40GB", "00000000:07:00.0", 40960, 20000, mig=True,
                        mig_slices=[("MIG 1g.5gb", 4864 * MIB, 4800 * MIB)])])
    devs = detect_devices(None, probes=probes(
        list_result=listed("  CUDA0: NVIDIA A100-SXM4-40GB MIG 1g.5gb (4864 MiB, 4700 MiB free)"), nvml=lib))
    (d,) = devs.devices
    assert d.budget_bytes == 4700 * MIB and d.total_bytes == 4864 * MIB
    assert any("MIG" in n and "whole GPU" in n for n in d.notes)
    assert d.nvml_index == 0 and d.source == "llama-server+nvml"
    # without llama.cpp's list the single slice from NVML is used, never the 40 GiB
    (d2,) = detect_devices(None, probes=probes(nvml=lib)).devices
    assert d2.budget_bytes == 4800 * MIB
    # two slices and no llama.cpp list: the budget is unknown rather than wrong
    lib2 = FakeNvml([gpu("A100", "b", 40960, 0, mig=True,
                         mig_slices=[("a", 4864 * MIB, 4864 * MIB), ("b", 9984 * MIB, 9984 * MIB)])])
    (d3,) = detect_devices(None, probes=probes(nvml=lib2)).devices
    assert d3.budget_bytes is None and any("budget unknown" in n for n in d3.notes)


def test_unified_memory_gpu_with_nvml_not_supported():
    lib = FakeNvml([gpu("NVIDIA GB10", "000f:01:00.0", 0, 0, mem_error=NVML_ERROR_NOT_SUPPORTED)])
    host = HostInfo(128 * GIB, 100 * GIB, 20, 20)
    devs = detect_devices(None, probes=probes(
        list_result=listed("  CUDA0: NVIDIA GB10 (122000 MiB, 110000 MiB free)"), nvml=lib, host=host))
    (d,) = devs.devices
    assert d.unified_memory and probe_nvml(lib, wsl_paths=()).gpus[0].memory_unsupported
    assert any("NOT_SUPPORTED" in n for n in d.notes)
    assert d.budget_bytes is not None and d.budget_bytes <= host.ram_available_bytes
    assert d.budget_bytes <= host.ram_total_bytes - 4 * GIB
    # NVML only: memory unknown there, budget from host RAM
    (d2,) = detect_devices(None, probes=probes(nvml=lib, host=host)).devices
    assert d2.unified_memory and d2.total_bytes is None and d2.budget_bytes == 100 * GIB


def test_only_an_unsupported_memory_query_makes_a_gpu_unified():
    """Another memory error is a note on a discrete GPU; only NVML's NOT_SUPPORTED (a typed field, not the
    note's words) marks unified memory."""
    lib = FakeNvml([gpu("NVIDIA GeForce RTX 4090", "00000000:01:00.0", 24564, 0, mem_error=NVML_ERROR_GPU_IS_LOST)])
    (g,) = probe_nvml(lib, wsl_paths=()).gpus
    assert not g.memory_unsupported and g.memory_note
    (d,) = detect_devices(None, probes=probes(
        list_result=listed("  CUDA0: NVIDIA GeForce RTX 4090 (24564 MiB, 24000 MiB free)"), nvml=lib)).devices
    assert not d.unified_memory and d.budget_bytes == 24000 * MIB


def test_llama_order_wins_over_nvml_pci_order():
    # NVML: PCI order (3060 first); CUDA (fastest first): 4090 is CUDA0
    lib = FakeNvml([gpu("NVIDIA GeForce RTX 3060", "00000000:01:00.0", 12288, 500),
                    gpu("NVIDIA GeForce RTX 4090", "00000000:02:00.0", 24564, 400)])
    devs = detect_devices(None, probes=probes(
        list_result=listed("  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23600 MiB free)",
                           "  CUDA1: NVIDIA GeForce RTX 3060 (11900 MiB, 11300 MiB free)"), nvml=lib))
    assert [d.name for d in devs.devices] == ["CUDA0", "CUDA1"]
    assert [d.nvml_index for d in devs.devices] == [1, 0]
    assert [d.description for d in devs.devices] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"]
    assert devs.devices[0].budget_bytes == 23600 * MIB
    assert any("different orders" in n and "CUDA0 = NVML GPU 1" in n for n in devs.notes)


def test_identical_gpus_matched_by_free_memory():
    lib = FakeNvml([gpu("NVIDIA RTX A4000", "01", 16376, 8000), gpu("NVIDIA RTX A4000", "02", 16376, 300)])
    devs = detect_devices(None, probes=probes(
        list_result=listed("  CUDA0: NVIDIA RTX A4000 (16100 MiB, 15800 MiB free)",
                           "  CUDA1: NVIDIA RTX A4000 (16100 MiB, 8100 MiB free)"), nvml=lib))
    assert [d.nvml_index for d in devs.devices] == [1, 0]


def test_suspended_laptop_dgpu_is_not_woken():
    def nvml_must_not_run():
        raise AssertionError("NVML queried a runtime-suspended GPU")

    pci = [PciGpu("0000:01:00.0", "nvidia", "nvidia", "suspended"), PciGpu("0000:00:02.0", "intel", "i915", "active")]
    devs = detect_devices(None, probes=probes(nvml=nvml_must_not_run, pci=pci))
    assert any("runtime-suspended" in n and "0000:01:00.0" in n for n in devs.notes)
    (d,) = devs.devices
    assert d.runtime_suspended and d.budget_bytes is None


# ------------------------------------------------------------------------------ AMD sysfs
def _fake_sys(root: Path, slot: str, *, cls="0x030000", vendor="0x1002", driver="amdgpu", status="active",
              mem: dict[str, int] | None = None) -> None:
    dev = root / "bus" / "pci" / "devices" / slot
    (dev / "power").mkdir(parents=True)
    (dev / "class").write_text(cls + "\n")
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "power" / "runtime_status").write_text(status + "\n")
    drv = root / "bus" / "pci" / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(drv)
    for k, v in (mem or {}).items():
        (dev / k).write_text(f"{v}\n")


def test_amd_sysfs_vram_and_gtt_separately(tmp_path):
    _fake_sys(tmp_path, "0000:03:00.0", mem={"mem_info_vram_total": 16 * GIB, "mem_info_vram_used": 1 * GIB,
                                             "mem_info_gtt_total": 32 * GIB, "mem_info_gtt_used": 0})
    _fake_sys(tmp_path, "0000:00:1f.3", cls="0x040300", vendor="0x8086", driver="snd_hda_intel")
    gpus = probe_pci_gpus(tmp_path)
    assert len(gpus) == 1 and gpus[0].vendor == "amd"
    assert gpus[0].vram_total_bytes == 16 * GIB and gpus[0].gtt_total_bytes == 32 * GIB
    devs = detect_devices(None, probes=probes(pci=gpus))
    (d,) = devs.devices
    assert d.total_bytes == 16 * GIB and d.budget_bytes == 15 * GIB  # GTT not added
    assert d.gtt_total_bytes == 32 * GIB and any("GTT" in n and "not in the budget" in n for n in d.notes)
    # with llama.cpp's Vulkan list the sysfs card is matched and GTT still kept apart
    devs = detect_devices(None, probes=probes(pci=gpus, list_result=listed(
        "  Vulkan0: AMD Radeon RX 7800 XT (RADV NAVI32) (16368 MiB, 15000 MiB free)")))
    (d,) = devs.devices
    assert d.budget_bytes == 15000 * MIB and d.source == "llama-server+sysfs" and d.gtt_total_bytes == 32 * GIB


def test_amd_suspended_memory_not_read(tmp_path):
    _fake_sys(tmp_path, "0000:03:00.0", status="suspended", mem={"mem_info_vram_total": 8 * GIB,
                                                               "mem_info_vram_used": 0})
    (g,) = probe_pci_gpus(tmp_path)
    assert g.suspended and g.vram_total_bytes is None and "not read" in g.note


def test_amd_apu_is_unified(tmp_path):
    _fake_sys(tmp_path, "0000:c1:00.0", mem={"mem_info_vram_total": 512 * MIB, "mem_info_vram_used": 100 * MIB,
                                             "mem_info_gtt_total": 30 * GIB, "mem_info_gtt_used": 0})
    (d,) = detect_devices(None, probes=probes(pci=probe_pci_gpus(tmp_path))).devices
    assert d.unified_memory and any("APU" in n for n in d.notes)


# ---------------------------------------------------------------------------- Apple / unified
def test_apple_metal_budget_is_working_set_and_host_ram():
    host = HostInfo(36 * GIB, 20 * GIB, 12, 12)
    apple = UnifiedInfo("Darwin", True, None)
    devs = detect_devices(None, probes=probes(
        list_result=listed("  Metal: Apple M3 Pro (27648 MiB, 27648 MiB free)"), unified=apple, host=host))
    (d,) = devs.devices
    assert d.unified_memory and d.backend == "Metal"
    assert d.budget_bytes == 20 * GIB  # available RAM is the tighter limit
    # no llama.cpp list: estimated from host RAM and the OS cap (wired limit when set)
    (d2,) = detect_devices(None, probes=probes(unified=UnifiedInfo("Darwin", True, 30 * GIB),
                                          host=HostInfo(36 * GIB, 34 * GIB, 12, 12))).devices
    assert d2.unified_memory and d2.budget_bytes == 30 * GIB
    assert probe_unified("Darwin", "arm64", sysctl=lambda n: "24576").wired_limit_bytes == 24 * GIB
    assert probe_unified("Darwin", "arm64", sysctl=lambda n: "0").wired_limit_bytes is None


def test_a_crashing_probe_becomes_a_note():
    def boom():
        raise RuntimeError("sysfs exploded")

    p = probes()
    p = Probes(list_devices=p.list_devices, nvml=p.nvml, pci=boom, host=p.host, unified=p.unified)
    devs = detect_devices(None, probes=p)
    assert devs.devices == () and any("sysfs exploded" in n for n in devs.notes)


def test_live_sampling_skips_a_suspended_gpu(tmp_path):
    from tuner.hardware.devices import Device, Devices, suspended_check

    _fake_sys(tmp_path, "0000:01:00.0", vendor="0x10de", driver="nvidia", status="suspended")
    devs = Devices((Device(0, "CUDA0", "CUDA", 8 * GIB, 7 * GIB, 7 * GIB, "test", nvml_index=0,
                           pci_bus_id="00000000:01:00.0"),), 16 * GIB, 8 * GIB, 4)
    lib = FakeNvml([gpu("RTX", "00000000:01:00.0", 8192, 100)])
    s = NvmlSampler(lib, is_suspended=suspended_check(devs, str(tmp_path)))
    assert s.open()
    lib.nvmlDeviceGetHandleByIndex = None  # any query would now fail loudly
    u = s.sample(0)
    assert u.used_bytes is None and "suspended" in u.note
    # once the GPU is awake it is polled again
    (tmp_path / "bus/pci/devices/0000:01:00.0/power/runtime_status").write_text("active\n")
    lib.nvmlDeviceGetHandleByIndex = FakeNvml.nvmlDeviceGetHandleByIndex.__get__(lib)
    assert s.sample(0).used_bytes == 100 * MIB


def test_used_bytes_total_for_the_vram_graph():
    from tuner.hardware import nvml

    lib = FakeNvml([gpu("A", "01", 8192, 1000), gpu("B", "02", 8192, 500)])
    assert nvml.used_bytes_total(lib) == 1500 * MIB
    assert nvml.used_bytes_total(FakeNvml(init_error=NVML_ERROR_DRIVER_NOT_LOADED)) is None
    nvml._shared = None


def test_gpu_present_but_cpu_only_build_says_so(tmp_path):
    lib = FakeNvml([gpu("NVIDIA GeForce RTX 4090", "01", 24564, 400)])
    devs = detect_devices(None, probes=probes(list_result=listed(), nvml=lib))
    assert devs.devices == () and devs.listed_by_llama
    assert any("RTX 4090" in n and "lists no GPU" in n for n in devs.notes)


def test_vulkan_device_on_an_nvidia_card_is_matched_with_nvml():
    lib = FakeNvml([gpu("NVIDIA GeForce RTX 3060", "00000000:01:00.0", 12288, 300)])
    (d,) = detect_devices(None, probes=probes(
        list_result=listed("  Vulkan0: NVIDIA GeForce RTX 3060 (12288 MiB, 11800 MiB free)"), nvml=lib)).devices
    assert d.backend == "Vulkan" and d.nvml_index == 0 and d.source == "llama-server+nvml"
