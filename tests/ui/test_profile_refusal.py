"""The app's serve path (tuner/ui/flow.py ``serving_config``, called by ``tune_and_serve`` for the profile it
serves) refuses a tampered profile with one line naming the field, as ``serve --models`` does (issue 27, item 4);
its RPC hosts are checked against the app's own ``rpc_hosts`` setting."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.profile_folder import FOREIGN, fake_profile, make_models
from tuner.profiles import ProfileError
from tuner.settings import Settings
from tuner.ui import flow


@pytest.fixture
def models(tmp_path: Path, stories260k: Path) -> Path:
    return make_models(tmp_path, stories260k)




def _refusal(prof: SimpleNamespace, settings: Settings, folder: Path) -> str:
    """What the app shows (``describe_error``: the error line of the Tune tab and the notification)."""
    with pytest.raises(ProfileError) as exc:
        flow.serving_config(prof, settings, folder)  # type: ignore[arg-type]
    msg = flow.describe_error(exc.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize(("fields", "named"), [
    ({"model_path": "{elsewhere}"}, "server_config.model_path"),
    ({"spec_type": "draft-simple", "draft_path": "{elsewhere}", "n_max": 4}, "server_config.draft_path"),
    ({"rpc": [FOREIGN]}, FOREIGN),
    ({"threads": 10**6}, "server_config.threads 1000000"),
    ({"n_parallel": 100000}, "server_config.n_parallel 100000"),
    ({"n_ctx": 2**40}, "server_config.n_ctx 1099511627776"),
])
def test_the_app_refuses_a_tampered_profile_in_one_line(models: Path, tmp_path: Path, stories260k: Path,
                                                        fields: dict, named: str) -> None:
    elsewhere = tmp_path / "elsewhere.gguf"
    shutil.copyfile(stories260k, elsewhere)
    fields = {k: (str(elsewhere) if v == "{elsewhere}" else v) for k, v in fields.items()}
    assert named in _refusal(fake_profile(models, **fields), Settings(), models)


def test_the_app_serves_a_foreign_rpc_host_its_setting_allows(models: Path) -> None:
    prof = fake_profile(models, rpc=[FOREIGN])
    assert "rpc_hosts setting" in _refusal(prof, Settings(), models)
    cfg = flow.serving_config(prof, dataclasses.replace(Settings(), rpc_hosts=(FOREIGN,)), models)  # type: ignore[arg-type]
    assert cfg.rpc == (FOREIGN,) and cfg.host == "127.0.0.1"


def test_the_apps_rpc_fallback_keeps_idle_sleep_and_the_capture(models: Path) -> None:
    """The served settings of the app (idle sleep, the capture of served requests) survive a lost RPC host."""
    from tuner.calibration.serving import rpc_fallback_config

    prof = fake_profile(models, rpc=["127.0.0.1:50052"])
    prof.winner, prof.evidence, prof.keys = {"spec_type": "none"}, (), SimpleNamespace(server_args=())
    settings = dataclasses.replace(Settings(), idle_sleep_s=120, capture_requests=True)
    cfg = flow.serving_config(prof, settings, models)  # type: ignore[arg-type]
    assert cfg.sleep_idle_s == 120 and cfg.log_prompts_dir is not None
    fallback = rpc_fallback_config(cfg, prof)  # type: ignore[arg-type]
    assert fallback is not None and fallback.rpc == ()
    assert fallback.sleep_idle_s == 120 and fallback.log_prompts_dir == cfg.log_prompts_dir
