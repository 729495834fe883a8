"""Profile store: atomic save/load, corrupt files kept aside, staleness keys."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.profiles import (
    ModelFileKey,
    Profile,
    ProfileError,
    ProfileStore,
    StalenessKeys,
    stale_reasons,
)


def _keys(tmp_path: Path, build: str = "11434") -> StalenessKeys:
    target = tmp_path / "target.gguf"
    if not target.exists():
        target.write_bytes(b"GGUF" + b"\0" * 60)
    return StalenessKeys(
        hardware_fingerprint="cpu:2;ram:8GiB",
        server_binary="/usr/bin/llama-server:123:456",
        server_build=build,
        dialect_fingerprint="abc",
        model_files=(ModelFileKey.of(target),),
        prompt_set_sha256="p" * 64,
    )


def _profile(tmp_path: Path, keys: StalenessKeys) -> Profile:
    return Profile(
        target_path=str((tmp_path / "target.gguf").resolve()),
        keys=keys,
        winner={"spec_type": "draft-simple", "draft_path": "/m/d.gguf", "n_max": 8},
        server_config={"model_path": str(tmp_path / "target.gguf"), "spec_type": "draft-simple", "n_max": 8},
        argv=("llama-server", "-m", "target.gguf", "--spec-type", "draft-simple"),
        decision={"speedup": 1.4, "reason": "faster"},
        evidence=({"label": "no speculation", "gen_tokens_per_s": 240.0},),
    )


def test_save_and_load_round_trip(tmp_path: Path):
    store = ProfileStore(tmp_path / "profiles")
    keys = _keys(tmp_path)
    path = store.save(_profile(tmp_path, keys))
    assert path.parent == tmp_path / "profiles" and path.suffix == ".json"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    loaded = store.load(tmp_path / "target.gguf")
    assert loaded is not None
    assert loaded.keys == keys
    assert loaded.winner["n_max"] == 8 and loaded.argv[-1] == "draft-simple"
    assert loaded.created_unix_s is not None
    assert json.loads(path.read_text())["schema_version"] == 2
    assert store.find("target.gguf")[0].target_path == loaded.target_path
    assert store.load(tmp_path / "other.gguf") is None


def test_default_folder_honours_draftwise_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    assert ProfileStore().folder == tmp_path / "home" / "data" / "profiles"


def test_corrupt_profile_is_reported_and_kept_aside(tmp_path: Path):
    store = ProfileStore(tmp_path / "profiles")
    path = store.save(_profile(tmp_path, _keys(tmp_path)))
    path.write_text("{ not json", encoding="utf-8")
    with pytest.raises(ProfileError) as ei:
        store.load(tmp_path / "target.gguf")
    assert ei.value.moved_to is not None and ei.value.moved_to.exists()
    assert ei.value.moved_to.read_text() == "{ not json"
    assert str(path) in str(ei.value)
    assert store.load(tmp_path / "target.gguf") is None  # the next save starts clean


def test_other_schema_or_missing_key_is_reported(tmp_path: Path):
    store = ProfileStore(tmp_path / "profiles")
    path = store.save(_profile(tmp_path, _keys(tmp_path)))
    obj = json.loads(path.read_text())
    obj["schema_version"] = 99
    path.write_text(json.dumps(obj))
    with pytest.raises(ProfileError, match="schema_version 99"):
        store.load(tmp_path / "target.gguf")
    path = store.save(_profile(tmp_path, _keys(tmp_path)))
    obj = json.loads(path.read_text())
    del obj["argv"]
    path.write_text(json.dumps(obj))
    with pytest.raises(ProfileError, match="'argv'"):
        store.load(tmp_path / "target.gguf")


def test_staleness_keys(tmp_path: Path):
    keys = _keys(tmp_path)
    assert stale_reasons(keys, keys) == []
    assert any("build 11434" in r and "11500" in r for r in stale_reasons(keys, replace(keys, server_build="11500")))
    assert stale_reasons(keys, replace(keys, hardware_fingerprint="gpu")) != []
    assert stale_reasons(keys, replace(keys, prompt_set_sha256="q" * 64)) == ["the prompt set changed"]
    assert stale_reasons(keys, replace(keys, dialect_fingerprint="other")) != []
    # The target file changes on disk.
    (tmp_path / "target.gguf").write_bytes(b"GGUF" + b"\1" * 100)
    now = replace(keys, model_files=(ModelFileKey.of(tmp_path / "target.gguf"),))
    assert any("changed" in r for r in stale_reasons(keys, now))
    # A new draft appears in the folder.
    extra = replace(keys, model_files=keys.model_files + (ModelFileKey("/m/new.gguf", 1, 1),))
    assert any("new model file" in r for r in stale_reasons(keys, extra))
