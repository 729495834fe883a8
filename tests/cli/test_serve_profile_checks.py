"""``draftwise serve --models DIR`` refuses a tampered profile in one line naming the field, and ``tune --rpc H``
adds H to the ``rpc_hosts`` setting (issue 27, item 4). The fake llama-server: nothing is served."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.profile_folder import FOREIGN, make_models
from tuner.cli import main as cli_main
from tuner.profiles import ModelFileKey, Profile, ProfileStore, StalenessKeys
from tuner.settings import load_settings


@pytest.fixture
def models(tmp_path: Path, stories260k: Path) -> Path:
    return make_models(tmp_path, stories260k)


def _save(target: Path, **server_config: object) -> Path:
    """A profile for ``target`` as the tune writes it, with ``server_config`` changed; returns its file."""
    keys = StalenessKeys(hardware_fingerprint="cpu", server_binary="llama-server", server_build="11434",
                         dialect_fingerprint="x", model_files=(ModelFileKey.of(target),), prompt_set_sha256="p" * 64)
    obj = {"model_path": str(target.resolve()), "spec_type": "none", "n_ctx": 4096} | server_config
    return ProfileStore().save(Profile(target_path=str(target.resolve()), keys=keys, winner={"spec_type": "none"},
                                       server_config=obj, argv=(), decision={"reason": "none"}))


def _serve_refuses(capsys: pytest.CaptureFixture[str], models: Path, fake_server_bin: Path) -> str:
    rc = cli_main(["serve", "--models", str(models), "--target", "target.gguf", "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("draftwise serve: "), err  # one line, nothing started
    return lines[0]


def test_serve_refuses_a_profile_naming_another_model(models: Path, tmp_path: Path, stories260k: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      fake_server_bin: Path) -> None:
    other = tmp_path / "elsewhere" / "other-model.gguf"
    other.parent.mkdir()
    shutil.copyfile(stories260k, other)
    _save(models / "target.gguf", model_path=str(other))
    line = _serve_refuses(capsys, models, fake_server_bin)
    assert "server_config.model_path" in line and "other-model.gguf" in line


def test_serve_refuses_a_draft_outside_the_folder(models: Path, tmp_path: Path, stories260k: Path,
                                                  capsys: pytest.CaptureFixture[str], fake_server_bin: Path) -> None:
    outside = tmp_path / "outside.gguf"
    shutil.copyfile(stories260k, outside)
    _save(models / "target.gguf", spec_type="draft-simple", draft_path=str(models / ".." / "outside.gguf"), n_max=4)
    line = _serve_refuses(capsys, models, fake_server_bin)
    assert "server_config.draft_path" in line and "models folder" in line


def test_serve_refuses_a_foreign_rpc_host_naming_how_to_allow_it(models: Path, capsys: pytest.CaptureFixture[str],
                                                                  fake_server_bin: Path) -> None:
    _save(models / "target.gguf", rpc=[FOREIGN])
    line = _serve_refuses(capsys, models, fake_server_bin)
    assert FOREIGN in line and "rpc_hosts setting" in line and f"--rpc {FOREIGN}" in line


@pytest.mark.parametrize(("field", "value"), [("threads", 10**6), ("n_parallel", 100000), ("n_ctx", 2**40)])
def test_serve_refuses_a_number_out_of_range(models: Path, capsys: pytest.CaptureFixture[str],
                                             fake_server_bin: Path, field: str, value: int) -> None:
    _save(models / "target.gguf", **{field: value})
    line = _serve_refuses(capsys, models, fake_server_bin)
    assert f"server_config.{field} {value}: must be between" in line


def test_serve_refuses_a_profile_file_standing_for_another_model(models: Path, capsys: pytest.CaptureFixture[str],
                                                                fake_server_bin: Path) -> None:
    """The draft's profile file copied over the target's: its target_path is the draft."""
    saved = _save(models / "draft.gguf")
    shutil.copyfile(saved, ProfileStore().path_for(models / "target.gguf"))
    line = _serve_refuses(capsys, models, fake_server_bin)
    assert "target_path" in line and "draft.gguf" in line


def test_tune_rpc_adds_the_named_host_to_the_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     fake_server_bin: Path) -> None:
    """The host is added once the command line is valid (an empty folder then ends the tune: no server runs);
    a malformed --rpc adds nothing."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["tune", "--models", str(empty), "--rpc", "nohost", "--server", str(fake_server_bin)]) == 2
    assert load_settings().rpc_hosts == ()
    capsys.readouterr()
    cli_main(["tune", "--models", str(empty), "--rpc", FOREIGN, "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert f"added {FOREIGN} to the rpc_hosts setting" in err, err
    assert load_settings().rpc_hosts == (FOREIGN,)
    cli_main(["tune", "--models", str(empty), "--rpc", FOREIGN, "--server", str(fake_server_bin)])
    assert "rpc_hosts setting" not in capsys.readouterr().err  # there already
    assert load_settings().rpc_hosts == (FOREIGN,)
