"""A saved profile serves only its own target, the drafts of its models folder, RPC hosts on this machine or in
the ``rpc_hosts`` setting, and numbers within their options' bounds (issue 27, item 4); the local-only fallback
of an RPC configuration keeps every serving setting."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.profile_folder import FOREIGN, fake_profile, make_models
from tuner.calibration.profile_checks import SERVED_FIELDS
from tuner.calibration.serving import ProfileError, profile_server_config, rpc_fallback_config
from tuner.server.config import ServerConfig
from tuner.settings import Settings, allow_rpc_hosts, load_settings, save_settings


@pytest.fixture
def models(tmp_path: Path, stories260k: Path) -> Path:
    return make_models(tmp_path, stories260k)




def _refused(prof: SimpleNamespace, folder: Path | None, rpc_allowed: tuple[str, ...] = ()) -> str:
    with pytest.raises(ProfileError) as exc:
        profile_server_config(prof, folder, rpc_allowed=rpc_allowed)
    text = str(exc.value)
    assert "\n" not in text, text  # one line
    return text


def test_a_profile_of_the_folder_with_its_own_draft_is_served(models: Path) -> None:
    prof = fake_profile(models, spec_type="draft-simple", draft_path=str(models / "draft.gguf"), n_max=4, threads=2,
                    n_parallel=1, ngl=6, draft_ngl="all", rpc=["127.0.0.1:50052", "localhost:50053"])
    cfg = profile_server_config(prof, models, rpc_allowed=())
    assert cfg.model_path == models / "target.gguf" and cfg.draft_path == models / "draft.gguf"
    assert cfg.rpc == ("127.0.0.1:50052", "localhost:50053") and cfg.ngl == 6


def test_another_model_as_model_path_is_refused(models: Path, tmp_path: Path, stories260k: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = elsewhere / "other-model.gguf"
    shutil.copyfile(stories260k, other)
    text = _refused(fake_profile(models, model_path=str(other)), models)
    assert "server_config.model_path" in text and "other-model.gguf" in text and "its own target" in text
    # the same file through a link counts as the target itself
    link = elsewhere / "link.gguf"
    link.symlink_to(models / "target.gguf")
    assert profile_server_config(fake_profile(models, model_path=str(link)), models, rpc_allowed=()).model_path == link


def test_a_target_outside_the_served_folder_is_refused(models: Path, tmp_path: Path) -> None:
    other_folder = tmp_path / "other"
    other_folder.mkdir()
    text = _refused(fake_profile(models), other_folder)
    assert "target_path" in text and "not a model file of" in text


@pytest.mark.parametrize("how", ["absolute", "dotdot", "outside-link"])
def test_a_draft_outside_the_models_folder_is_refused(models: Path, tmp_path: Path, stories260k: Path,
                                                       how: str) -> None:
    outside = tmp_path / "outside.gguf"
    shutil.copyfile(stories260k, outside)
    if how == "absolute":
        draft = str(outside)
    elif how == "dotdot":
        draft = str(models / ".." / "outside.gguf")
    else:  # a link of its own, outside the folder, named like the folder's draft
        (tmp_path / "models-alias").mkdir()
        (tmp_path / "models-alias" / "draft.gguf").symlink_to(outside)
        draft = str(tmp_path / "models-alias" / "draft.gguf")
    text = _refused(fake_profile(models, spec_type="draft-simple", draft_path=draft, n_max=4), models)
    assert "server_config.draft_path" in text and "models folder" in text, text


def test_a_link_of_the_folder_is_a_draft_of_the_folder(models: Path, tmp_path: Path, stories260k: Path) -> None:
    """A folder of links into a blob store (how the Hugging Face cache lays out files) is what the scan lists
    as the folder's models: a draft reached through one of the folder's own entries is one of them."""
    blob = tmp_path / "blobs" / "sha256-0123abcd"  # no suffix, as in the Hugging Face cache
    blob.parent.mkdir()
    shutil.copyfile(stories260k, blob)
    (models / "linked-draft.gguf").symlink_to(blob)
    prof = fake_profile(models, spec_type="draft-simple", draft_path=str(blob), n_max=4)
    assert profile_server_config(prof, models, rpc_allowed=()).draft_path == blob
    (models / "linked-draft.gguf").unlink()  # no entry of the folder leads to it any more
    assert "server_config.draft_path" in _refused(prof, models)


def test_a_draft_that_is_not_a_gguf_file_is_refused(models: Path) -> None:
    (models / "notes.txt").write_text("x", encoding="utf-8")
    text = _refused(fake_profile(models, spec_type="draft-simple", draft_path=str(models / "notes.txt")), models)
    assert "server_config.draft_path" in text


def test_a_foreign_rpc_host_is_refused_until_the_setting_allows_it(models: Path) -> None:
    prof = fake_profile(models, rpc=[FOREIGN])
    text = _refused(prof, models)
    assert "server_config.rpc" in text and FOREIGN in text
    assert "rpc_hosts setting" in text and f"--rpc {FOREIGN}" in text  # how to allow it
    assert profile_server_config(prof, models, rpc_allowed=(FOREIGN,)).rpc == (FOREIGN,)
    # the default reads the setting: refused, then allowed once tune --rpc added the host to it
    with pytest.raises(ProfileError, match="192.0.2.7"):
        profile_server_config(prof, models)
    assert allow_rpc_hosts([FOREIGN]) == (FOREIGN,)
    assert load_settings().rpc_hosts == (FOREIGN,)
    assert profile_server_config(prof, models).rpc == (FOREIGN,)
    assert allow_rpc_hosts([FOREIGN]) == ()  # there already: the setting is not written twice
    # another port of the same machine is another server: still refused
    with pytest.raises(ProfileError, match="192.0.2.7:50053"):
        profile_server_config(fake_profile(models, rpc=["192.0.2.7:50053"]), models)


def test_allow_rpc_hosts_keeps_the_other_settings(models: Path) -> None:
    save_settings(dataclasses.replace(Settings(), port=8123, rpc_hosts=("10.0.0.2:50052",)))
    assert allow_rpc_hosts(["10.0.0.2:50052", FOREIGN]) == (FOREIGN,)
    st = load_settings()
    assert st.port == 8123 and st.rpc_hosts == ("10.0.0.2:50052", FOREIGN)


def test_a_malformed_rpc_list_is_refused(models: Path) -> None:
    assert "server_config.rpc" in _refused(fake_profile(models, rpc=[5]), models)
    assert "server_config.rpc" in _refused(fake_profile(models, rpc=["nohost"]), models)


@pytest.mark.parametrize(("field", "value"), [
    ("threads", 10**6), ("threads", 0), ("n_parallel", 100000), ("n_parallel", -1), ("n_ctx", 2**40),
    ("n_ctx", 3), ("n_max", 0), ("n_max", 65), ("n_min", -1), ("ngram_n_max", 1000), ("ngram_n_min", -2),
    ("p_min", 1.5), ("cache_ram_mib", 10**30), ("ngl", 99999), ("draft_ngl", -1),
])
def test_a_number_out_of_its_options_bounds_is_refused(models: Path, field: str, value: object) -> None:
    prof = fake_profile(models, spec_type="draft-simple", draft_path=str(models / "draft.gguf"), **{field: value})
    text = _refused(prof, models)
    assert f"server_config.{field} {value}" in text and "must be" in text, text


def test_gpu_layers_are_bounded_by_the_models_blocks(models: Path) -> None:
    """stories260K has 5 blocks: ngl 6 (blocks + 1) serves, 7 is refused naming the model."""
    assert profile_server_config(fake_profile(models, ngl=6), models, rpc_allowed=()).ngl == 6
    text = _refused(fake_profile(models, ngl=7), models)
    assert "server_config.ngl 7" in text and "target.gguf" in text


@pytest.mark.parametrize(("field", "value"), [
    ("host", "0.0.0.0"), ("api_key", "k"), ("cors_origins", "*"), ("sleep_idle_s", 5),
    ("log_prompts_dir", "/tmp/x"),
])
def test_a_serving_setting_of_the_profiles_own_is_refused(models: Path, field: str, value: object) -> None:
    assert f"server_config.{field}" in _refused(fake_profile(models, **{field: value}), models)


def test_the_store_refuses_a_profile_file_standing_for_another_model(models: Path, tmp_path: Path) -> None:
    """A profile file copied over another target's file: its target_path names the other model."""
    from tuner.profiles import ModelFileKey, Profile, ProfileStore, StalenessKeys

    store = ProfileStore()
    target = models / "target.gguf"
    keys = StalenessKeys(hardware_fingerprint="cpu", server_binary="llama-server", server_build="11434",
                         dialect_fingerprint="x", model_files=(ModelFileKey.of(target),), prompt_set_sha256="p" * 64)
    prof = Profile(target_path=str(target.resolve()), keys=keys, winner={"spec_type": "none"},
                   server_config={"model_path": str(target.resolve()), "spec_type": "none"}, argv=(),
                   decision={"reason": "none"})
    saved = store.save(prof)
    assert store.load(target, keep_aside=False) is not None
    draft = models / "draft.gguf"
    shutil.copyfile(saved, store.path_for(draft))
    with pytest.raises(ProfileError, match="target_path") as exc:
        store.load(draft, keep_aside=False)
    assert "draft.gguf" in str(exc.value)


def _served(config: ServerConfig) -> ServerConfig:
    """``config`` with every serving setting away from its default."""
    return dataclasses.replace(config, host="0.0.0.0", port=8123, api_key="secret", cors_origins="*",
                               alias="my-model", cache_ram_mib=512, sleep_idle_s=30,
                               log_prompts_dir=Path("/kept/requests"), no_repack=True)


@pytest.mark.parametrize("with_profile", [False, True])
def test_the_rpc_fallback_keeps_every_serving_setting(models: Path, with_profile: bool) -> None:
    prof = fake_profile(models, rpc=["127.0.0.1:50052"], ngl="all")
    prof.winner, prof.evidence, prof.keys = {"spec_type": "none", "rpc": ["127.0.0.1:50052"]}, (), \
        SimpleNamespace(server_args=())
    config = _served(profile_server_config(prof, models, rpc_allowed=()))
    fallback = rpc_fallback_config(config, prof if with_profile else None)
    assert fallback is not None and fallback.rpc == () and fallback.ngl == 0
    for name in SERVED_FIELDS:
        assert getattr(fallback, name) == getattr(config, name), name
    assert fallback.sleep_idle_s == 30 and fallback.log_prompts_dir == Path("/kept/requests")


#: ServerConfig fields a tune's winner sets (tuner/calibration/serving.py ``candidate_config``).
_TUNED_FIELDS = {"model_path", "draft_path", "spec_type", "n_max", "n_min", "p_min", "ngl", "draft_ngl", "n_ctx",
                 "n_parallel", "cache_type_k", "cache_type_v", "threads", "fit", "extra_args", "ngram_n_max",
                 "ngram_n_min", "spec_autotune", "rpc", "omp_passive", "poll"}


def test_every_server_config_field_is_tuned_or_served() -> None:
    """A field neither tuned nor in SERVED_FIELDS would be lost by the RPC fallback: a new ServerConfig field
    must be sorted into one of the two."""
    names = {f.name for f in dataclasses.fields(ServerConfig)}
    assert not set(SERVED_FIELDS) & _TUNED_FIELDS
    assert names == set(SERVED_FIELDS) | _TUNED_FIELDS, sorted(names ^ (set(SERVED_FIELDS) | _TUNED_FIELDS))


def test_a_target_in_a_blob_store_served_through_a_linked_folder(tmp_path: Path, stories260k: Path) -> None:
    """The Hugging Face cache shape: the folder is a link to a snapshot of links into blobs without a suffix,
    and the tune saves the resolved blob as the target."""
    blob = tmp_path / "blobs" / "sha256-0123abcd"
    blob.parent.mkdir()
    shutil.copyfile(stories260k, blob)
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "stories260K.gguf").symlink_to(blob)
    models = tmp_path / "models"
    models.symlink_to(snapshot)
    prof = SimpleNamespace(path="/p/profile.json", target_path=str(blob.resolve()),
                           server_config={"model_path": str(blob.resolve()), "spec_type": "none"})
    assert profile_server_config(prof, models, rpc_allowed=()).model_path == blob.resolve()
    (snapshot / "stories260K.gguf").unlink()
    assert "target_path" in _refused(prof, models)
