"""The sweep's llama-server, resolved once: the caller's, the one named with ``--server`` (that file or an
error naming the flag), or the discovered one; then the user's extra flags against what it lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuner.calibration.pipeline.server import ServerChoice, check_server_args, resolve_server
from tuner.calibration.request import TuneError


def test_a_named_server_is_that_file_with_its_build_and_dialect(fake_server: Path) -> None:
    choice = resolve_server(fake_server, None)
    assert choice.binary.path == fake_server.absolute() and choice.binary.build == 11434
    assert "draft-simple" in choice.dialect.spec_types and choice.dialect.has("--spec-draft-sampling")


def test_a_named_server_that_is_missing_or_no_llama_server_is_the_users_error(tmp_path: Path,
                                                                               broken_server: Path) -> None:
    gone = tmp_path / "no-such-server"
    with pytest.raises(TuneError) as info:
        resolve_server(gone, None)
    assert str(info.value) == f"--server {gone}: no such file, or not executable" and info.value.bad_input
    with pytest.raises(TuneError) as info:
        resolve_server(broken_server, None)
    assert str(info.value).startswith(f"--server {broken_server}: ") and info.value.bad_input
    assert f"{broken_server}: {broken_server}" not in str(info.value)  # the path is said once


def test_the_callers_binary_wins_and_its_dialect_error_is_the_users_only_when_named(
        tmp_path: Path, fake_binary: Any, broken_server: Path) -> None:
    from dataclasses import replace

    assert resolve_server(tmp_path / "no-such-server", fake_binary).binary is fake_binary
    broken = replace(fake_binary, path=broken_server)
    for named, bad_input in ((None, False), (broken_server, True)):
        with pytest.raises(TuneError) as info:
            resolve_server(named, broken)
        assert str(broken_server) in str(info.value) and info.value.bad_input is bad_input


def test_a_discovered_server_or_none_at_all(monkeypatch: pytest.MonkeyPatch, fake_binary: Any) -> None:
    import tuner.server.discovery as discovery

    monkeypatch.setattr(discovery, "find_server", lambda setting=None: fake_binary)
    assert resolve_server(None, None).binary is fake_binary

    def nowhere(setting: object = None) -> Any:
        raise discovery.ServerNotFoundError([("PATH", "no llama-server on PATH")])

    monkeypatch.setattr(discovery, "find_server", nowhere)
    with pytest.raises(TuneError, match="no llama-server on PATH") as info:
        resolve_server(None, None)
    assert not info.value.bad_input  # nothing the user typed is wrong: the install is


def test_extra_flags_must_be_ones_the_binary_lists(fake_server: Path) -> None:
    choice: ServerChoice = resolve_server(fake_server, None)
    check_server_args(("--no-repack", "-tb", "2"), choice)
    with pytest.raises(TuneError, match="--no-such-flag") as info:
        check_server_args(("--no-such-flag",), choice)
    assert info.value.bad_input and str(fake_server) in str(info.value)
