"""tuner.settings: load/save round trip, clear errors naming the key, the API key file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tuner import settings as S
from tuner.storage import CorruptFileError


def test_defaults_and_round_trip(tmp_path):
    assert S.load_settings() == S.Settings()
    st = S.Settings(models_dir=tmp_path / "m", tune_budget_s=600, port=9000, start_at_login=True)
    written = S.save_settings(st)
    assert written == S.settings_path() and written.is_file()
    assert S.load_settings() == st
    assert json.loads(written.read_text())["models_dir"] == str(tmp_path / "m")


@pytest.mark.parametrize(
    "key,value",
    [("port", 0), ("port", 70000), ("port", "8080"), ("tune_budget_s", 5), ("tune_budget_s", True),
     ("expose_on_lan", "yes"), ("models_dir", 3)],
)
def test_bad_values_name_the_key_and_file(key, value):
    S.settings_path().parent.mkdir(parents=True, exist_ok=True)
    S.settings_path().write_text(json.dumps({key: value}))
    with pytest.raises(S.SettingsError) as ei:
        S.load_settings()
    assert ei.value.key == key
    assert str(S.settings_path()) in str(ei.value) and repr(key) in str(ei.value)


def test_corrupt_file_is_kept_aside():
    p = S.settings_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("{not json")
    with pytest.raises(CorruptFileError):
        S.load_settings()
    assert not p.exists() and list(p.parent.glob("settings.json.corrupt-*"))


def test_lan_exposure_requires_api_key():
    st = S.Settings(expose_on_lan=True)
    assert st.host == "0.0.0.0"
    with pytest.raises(S.SettingsError) as ei:
        S.save_settings(st)
    assert ei.value.key == "expose_on_lan"
    with pytest.raises(S.SettingsError):
        S.server_api_key(st)
    key = S.generate_api_key()
    S.save_settings(st)
    assert S.server_api_key(st) == key
    assert S.server_api_key(S.Settings()) is None  # local only: no key needed
    assert S.Settings().host == "127.0.0.1"


def test_api_key_is_owner_only_and_random():
    k1 = S.generate_api_key()
    mode = stat.S_IMODE(os.stat(S.api_key_path()).st_mode)
    assert mode == 0o600
    assert S.read_api_key() == k1 and len(k1) > 40
    k2 = S.generate_api_key()
    assert k2 != k1 and S.read_api_key() == k2
    os.chmod(S.api_key_path(), 0o644)
    with pytest.raises(S.SettingsError, match="chmod 600"):
        S.read_api_key()
    assert S.delete_api_key() and S.read_api_key() is None


def test_files_live_under_draftwise_home(draftwise_home: Path):
    assert draftwise_home in S.settings_path().parents
    assert draftwise_home in S.api_key_path().parents
