"""What one endpoint serves for a folder (tuner/calibration/routing.py), without a server: the targets and their
decisions in a few words, a tuned target's section from its profile, an untuned one plainly, a model the preset
cannot carry left out with the reason, ``--models-max`` from the memory plan, and when the app serves one model
at a time instead (and why)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.router_folder import router_folder, save_profile
from tests.server.conftest import help_text
from tuner.calibration.routing import (
    decision_words,
    models_max_for,
    router_plan,
    serving_plan,
    target_choices,
)
from tuner.catalog.folder import scan_models
from tuner.hardware.devices import Device, Devices
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help
from tuner.settings import Settings
from tuner.units import GIB, MIB

B11434 = parse_help(help_text("b11434"))
CPU = Devices(devices=(), ram_total_bytes=24 * GIB, ram_available_bytes=20 * GIB, cpu_cores=2)


@pytest.fixture
def folder(tmp_path: Path, stories260k: Path) -> Path:
    return router_folder(tmp_path, stories260k)  # profiles in the test's own DRAFTWISE_HOME (conftest)


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    b = tmp_path / "llama-server"
    b.write_bytes(b"\x7fELF")  # a program, not a wrapper script
    return b


def test_the_targets_with_their_decisions_in_a_few_words(folder: Path) -> None:
    choices = target_choices(scan_models(folder))
    assert [(c.name, c.model_id, c.tuned, c.words) for c in choices] == [
        ("stories260K.gguf", "stories260K", True, "draft model stories260K.gguf speeds up 1.2×"),
        ("target.gguf", "target", True, "draft model draft-good.gguf speeds up 1.6×"),
        ("draft-good.gguf", "draft-good", False, "")]
    alone = save_profile(ServerConfig(folder / "draft-good.gguf", n_ctx=256), 1.0)
    assert decision_words(alone) == "on its own"  # a profile saved before decision kinds were kept


def test_a_tuned_target_is_its_profile_an_untuned_one_the_model_alone(folder: Path, binary: Path) -> None:
    settings = Settings(models_dir=folder, cache_ram_mib=256, idle_sleep_s=600, port=9123)
    plan = router_plan(scan_models(folder), settings, binary, B11434, CPU, api_key="k")
    by_id = {m.model_id: m for m in plan.models}
    target = by_id["target"]
    assert target.tuned and target.config.draft_path == folder / "draft-good.gguf" and target.config.n_max == 4
    assert target.config.cache_ram_mib == 256 and target.words.endswith("speeds up 1.6×")
    untuned = by_id["draft-good"]
    assert not untuned.tuned and untuned.config.draft_path is None and untuned.config.spec_type is None
    assert (plan.port, plan.host, plan.api_key, plan.sleep_idle_s) == (9123, "127.0.0.1", "k", 600)
    assert plan.left_out == ()


def test_a_model_the_preset_cannot_carry_is_left_out_with_the_reason(folder: Path, binary: Path) -> None:
    odd = folder / "sub#1"
    odd.mkdir()
    shutil.copyfile(folder / "stories260K.gguf", odd / "copy.gguf")
    plan = router_plan(scan_models(folder), Settings(models_dir=folder), binary, B11434, CPU)
    assert "copy" not in {m.model_id for m in plan.models}
    [(path, why)] = plan.left_out
    assert path == str(odd / "copy.gguf") and why.startswith("copy: model = ") and "'#'" in why


def test_models_max_from_the_memory_plan(folder: Path, binary: Path) -> None:
    plan = router_plan(scan_models(folder), Settings(models_dir=folder), binary, B11434, CPU)
    n, why = models_max_for(plan.models, CPU)
    assert n == 3 and why.startswith("up to 3 models loaded at once")
    # a fifth of 24 GiB (4.8 GiB) stays free: room for one model (about 1 GiB with its 1024 MiB prompt cache)
    tight = replace(CPU, ram_available_bytes=int(4.8 * GIB) + 1100 * MIB)
    assert models_max_for(plan.models, tight)[0] == 1
    gpu = Device(0, "CUDA0", "CUDA", 8 * GIB, 8 * GIB, 8 * GIB, "nvml")
    on_gpu = [replace(m, config=replace(m.config, ngl=99)) for m in plan.models]
    one_gpu = replace(CPU, devices=(gpu,))
    assert models_max_for(on_gpu, one_gpu) == (1, "one model at a time: each is planned to fill the GPU")


def test_when_the_app_serves_one_model_at_a_time(folder: Path, binary: Path, tmp_path: Path) -> None:
    scan = scan_models(folder)
    plan, why = serving_plan(scan, Settings(models_dir=folder), binary, B11434, folder / "target.gguf", devices=CPU)
    assert plan is not None and why == ""
    # (a LAN endpoint and a wrapper script: tests/server/test_router_preset.py::test_who_cannot_be_a_router)
    cases = [
        (Settings(models_dir=folder, rpc_hosts=("10.0.0.2:50052",)), B11434, "RPC hosts are set"),
        (Settings(models_dir=folder), parse_help(help_text("ik-0.1.5")), "has no --models-preset"),
    ]
    for settings, dialect, words in cases:
        plan, why = serving_plan(scan, settings, binary, dialect, folder / "target.gguf", devices=CPU)
        assert plan is None and words in why
    one = tmp_path / "one"
    one.mkdir()
    shutil.copyfile(folder / "stories260K.gguf", one / "stories260K.gguf")
    plan, why = serving_plan(scan_models(one), Settings(models_dir=one), binary, B11434, None, devices=CPU)
    assert plan is None and why == "the folder holds one model"
