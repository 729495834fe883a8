"""``draftwise plan`` counts the prompt cache ``draftwise serve`` passes (``--cache-ram``, the
``cache_ram_mib`` setting, 1024 MiB by default), not 0 unless ``--cache-ram`` is given, and shows it.
Real CLI calls on the real stories260K.gguf; the serve side is serve's own config builder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tuner import settings
from tuner.cli import main
from tuner.units import MIB


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))


def _plan(capsys, target: Path, *extra: str) -> tuple[int, str]:
    rc = main(["plan", "--target", str(target), "--no-cross-check", *extra])
    return rc, capsys.readouterr().out


def _served_cache_ram(target: Path) -> int | None:
    from tuner.cli.serve import config_from_args

    ns = argparse.Namespace(models=None, target=str(target), draft=None, spec_type=None, port=None, host=None,
                            n_max=None, ngl=None, draft_ngl=None, n_ctx=None, api_key=None)
    return config_from_args(ns).cache_ram_mib


@pytest.mark.server
def test_plan_counts_the_cache_serve_passes_by_default(capsys, stories260k: Path) -> None:
    rc, out = _plan(capsys, stories260k, "--json")
    data = json.loads(out)
    assert rc == 0
    assert data["cache_ram_mib"] == settings.DEFAULT_CACHE_RAM_MIB == _served_cache_ram(stories260k) == 1024
    assert data["cache_ram_from"] == "setting cache_ram_mib"
    assert data["host"]["need"]["prompt_cache_bytes"] == 1024 * MIB
    rc, out = _plan(capsys, stories260k)
    line = [x for x in out.splitlines() if "prompt cache:" in x]
    assert line == ["  prompt cache: up to 1.0 GiB of host RAM while serving (--cache-ram 1024, as serve passes it: "
                    "the cache_ram_mib setting), counted above"], out
    host = [x for x in out.splitlines() if x.startswith("host RAM")][0]
    assert "1.0 GiB" in host  # the cache-ram column of the host row


@pytest.mark.server
def test_plan_follows_the_setting_like_serve_and_the_flag_wins(capsys, stories260k: Path) -> None:
    settings.save_settings(settings.Settings(cache_ram_mib=256))
    rc, out = _plan(capsys, stories260k, "--json")
    data = json.loads(out)
    assert data["cache_ram_mib"] == _served_cache_ram(stories260k) == 256
    assert data["host"]["need"]["prompt_cache_bytes"] == 256 * MIB
    rc, out = _plan(capsys, stories260k, "--json", "--cache-ram", "0")
    data = json.loads(out)
    assert data["cache_ram_mib"] == 0 and data["cache_ram_from"] == "--cache-ram"
    assert data["host"]["need"]["prompt_cache_bytes"] == 0
    settings.save_settings(settings.Settings(cache_ram_mib=-1))
    rc, out = _plan(capsys, stories260k)
    assert "prompt cache: no limit (--cache-ram -1, as serve passes it" in out and "not counted" in out
