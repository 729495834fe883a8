"""The friendly model id (``--alias`` = file stem, split sets without the shard suffix) and the
prompt-cache limit (``--cache-ram``) in the exact argv, per dialect."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import help_text
from tuner.server.argv import build_argv
from tuner.server.config import ServerConfig, default_alias
from tuner.server.dialect import parse_help

CURRENT = parse_help(help_text("b11434"))
LEGACY = parse_help(help_text("legacy-4227c9b"))


@pytest.mark.parametrize(
    ("name", "alias"),
    [
        ("stories260K.gguf", "stories260K"),
        ("gemma-3-270m-Q4_K_M.gguf", "gemma-3-270m-Q4_K_M"),
        ("Qwen3-8B-Q4_K_M-00001-of-00003.gguf", "Qwen3-8B-Q4_K_M"),
        ("Qwen3-8B-Q4_K_M-00002-of-00003.GGUF", "Qwen3-8B-Q4_K_M"),
        ("single-00001-of-00001.gguf", "single-00001-of-00001"),  # a set of one is not split
        ("best-of-breed.gguf", "best-of-breed"),
        ("model.Q8_0.gguf", "model.Q8_0"),
    ],
)
def test_default_alias(name: str, alias: str) -> None:
    assert default_alias(Path("/models") / name) == alias


def test_alias_and_cache_ram_in_argv() -> None:
    cfg = ServerConfig(model_path=Path("/m/x-00001-of-00002.gguf"), port=9000,
                       alias=default_alias("/m/x-00001-of-00002.gguf"), cache_ram_mib=1024)
    argv = build_argv("/bin/llama-server", cfg, CURRENT)
    i = argv.index("-a")
    assert argv[i + 1] == "x"
    j = argv.index("-cram")
    assert argv[j + 1] == "1024"


def test_cache_ram_zero_and_unlimited_are_passed() -> None:
    for v in (0, -1):
        argv = build_argv("x", ServerConfig(model_path=Path("/m/a.gguf"), port=1, cache_ram_mib=v), CURRENT)
        assert argv[argv.index("-cram") + 1] == str(v)


def test_neither_flag_by_default_nor_on_a_build_without_them() -> None:
    plain = build_argv("x", ServerConfig(model_path=Path("/m/a.gguf"), port=1), CURRENT)
    assert "-a" not in plain and "-cram" not in plain
    assert not LEGACY.has("--cache-ram")
    legacy = build_argv("x", ServerConfig(model_path=Path("/m/a.gguf"), port=1, alias="a", cache_ram_mib=512), LEGACY)
    assert "-cram" not in legacy and "--cache-ram" not in legacy
    assert legacy[legacy.index("-a") + 1] == "a"  # the legacy build has --alias
