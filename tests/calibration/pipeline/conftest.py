"""Fixtures of the pipeline's step tests: the fake llama-server (tests/conftest.py ``fake_server_bin``) as the
caller's binary, a stories260K folder with a draft cut from it, and a quiet machine (no hardware probe, no
other llama-server, an idle load watcher), so that what runs beside a test does not leak into what a step
reports."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def fake_server(fake_server_bin: Path) -> Path:
    """The fake llama-server (tests/fakes/fake_llama_server.py: b11434's ``--help`` and ``--version``)."""
    return fake_server_bin


@pytest.fixture
def fake_binary(fake_server: Path) -> Any:
    """The fake as the caller's :class:`~tuner.server.discovery.ServerBinary` (build 11434)."""
    from tuner.server.discovery import ServerBinary

    return ServerBinary(path=fake_server, source="test", build=11434, commit="fa4e1ce",
                        version_text="version: 11434 (fa4e1ce)")


@pytest.fixture
def broken_server(tmp_path: Path) -> Path:
    """An executable called llama-server whose ``--help`` fails (a crash, not a llama-server)."""
    exe = tmp_path / "broken" / "llama-server"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\necho 'segmentation fault' >&2\nexit 139\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def family(tmp_path: Path, stories260k: Path) -> Path:
    """A models folder: stories260K.gguf (the target) and stories-draft.gguf (its first 2 blocks)."""
    from tests.synth import write_first_blocks_gguf

    models = tmp_path / "models"
    models.mkdir()
    target = models / "stories260K.gguf"
    stories260k.rename(target)
    write_first_blocks_gguf(target, models / "stories-draft.gguf", 2, general_name="stories draft")
    return models


class IdleWatcher:
    """A load watcher that saw an idle machine."""

    def start(self) -> None:
        pass

    def summary(self, early: bool = False) -> Any:
        from tuner.hardware.host import LoadSummary

        return LoadSummary(samples=3, other_cpu_mean=0.0, other_cpu_max=0.0, steal_mean=0.0, busy_share=0.0)

    def stop(self) -> Any:
        return self.summary()


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A CPU-only machine with 16 GiB, no other llama-server and an idle load watcher; returns its Devices."""
    import tuner.hardware
    import tuner.hardware.host
    from tuner.hardware import Devices

    devices = Devices(devices=(), ram_total_bytes=16 * 2**30, ram_available_bytes=12 * 2**30, cpu_cores=2,
                      cpu_threads=2)
    monkeypatch.setattr(tuner.hardware, "detect_devices", lambda *a, **k: devices)
    monkeypatch.setattr(tuner.hardware.host, "LoadWatcher", IdleWatcher)
    monkeypatch.setattr(tuner.hardware.host, "foreign_processes", lambda name: [])
    return devices


@pytest.fixture
def resolve(family: Path, fake_binary: Any, quiet_machine: Any) -> Any:
    """``resolve(**request_fields) -> TuneInputs`` of the stories260K family with the fake llama-server on the
    quiet machine (``events=`` a list to collect the events into)."""
    from tuner.calibration.pipeline.events import Events
    from tuner.calibration.pipeline.inputs import resolve_inputs
    from tuner.calibration.request import TuneRequest

    def run(events: list[Any] | None = None, binary: Any = None, **fields: Any) -> Any:
        request = TuneRequest.create(family, **{"n_ctx": 512, "threads": 1, **fields})
        return resolve_inputs(request, scanned=None, binary=binary or fake_binary,
                              events=Events(events.append if events is not None else None))

    return run
