"""Fixtures of the hardware tests: header-like model specs and fake devices."""

from __future__ import annotations

from tuner.hardware.devices import Device, Devices
from tuner.hardware.memory import GIB, MIB, ModelMemorySpec


def dense_spec(name: str, *, file_bytes: int, n_layer: int, n_embd: int, n_head: int, n_head_kv: int,
               head_dim: int, n_ff: int, n_vocab: int, embd_bytes_per_param: float = 0.5625,
               out_bytes_per_param: float = 0.8203) -> ModelMemorySpec:
    """A header-like spec of a dense GGUF of ``file_bytes`` (Q4_K token embeddings, Q6_K output)."""
    embd = int(n_vocab * n_embd * embd_bytes_per_param)
    out = int(n_vocab * n_embd * out_bytes_per_param)
    block = (file_bytes - embd - out) // n_layer
    return ModelMemorySpec(
        name=name, path=None, n_layer=n_layer, block_bytes=(block,) * n_layer, input_bytes=embd,
        output_bytes=out, n_embd=n_embd, n_vocab=n_vocab,
        n_embd_k_gqa=(n_head_kv * head_dim,) * n_layer, n_embd_v_gqa=(n_head_kv * head_dim,) * n_layer,
        n_ff=n_ff, n_head=n_head,
    )


def gpu_devices(*gpus: tuple[str, int, int], ram_bytes: int = 32 * GIB) -> Devices:
    """Devices with GPUs given as (name, total MiB, free MiB); budget = free."""
    devs = tuple(
        Device(i, name, "CUDA", total * MIB, free * MIB, free * MIB, "test") for i, (name, total, free) in enumerate(gpus)
    )
    return Devices(devs, ram_bytes, ram_bytes, 8, (), 16, None, True)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _draftwise_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Caches and machine facts (the build's CPU buffers, a recorded CPU workaround) of every hardware test
    go to a private DRAFTWISE_HOME, never the user's."""
    home = tmp_path_factory.mktemp("dw-home")
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def cpu_only_devices(binary) -> Devices:
    """CPU-only devices (16 GiB RAM, 8 available, 2 cores) that carry what ``binary`` really does with
    quantized weights here (``tuner.crosscheck.cpu_buffers.probe_cpu_buffers``: one probe launch per
    DRAFTWISE_HOME, so a recorded ``--no-repack`` workaround and the server checks see the same mode)."""
    from tuner.crosscheck.cpu_buffers import probe_cpu_buffers

    fact = probe_cpu_buffers(binary)
    assert fact is not None and fact.source == "load log", "the probe of the build's CPU buffers failed"
    return Devices((), 16 * GIB, 8 * GIB, 2, cpu_buffers=fact)


def record_workaround(binary, cause: str) -> None:
    """Record the ``--no-repack`` workaround for ``binary`` in the test's DRAFTWISE_HOME (the real store)."""
    from tuner.server.workarounds import record_no_repack

    record_no_repack(binary, cause, ["test"])


@pytest.fixture(scope="session")
def synth_family(tmp_path_factory):
    """A small generated family (256 wide, 6 blocks, F16, draft = first 2 blocks): a shape the
    compute-buffer model was NOT fitted on."""
    from tests.synth import make_family

    return make_family(tmp_path_factory.mktemp("hw-family"), n_embd=256, n_layers=6, draft_layers=2,
                       n_head=8, n_head_kv=2)
