"""``serve --threads`` and the ``threads`` setting override the tuned thread setting; ``tune`` takes the setting
when no ``--threads`` is given (the thread stage then does not run)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tuner import settings
from tuner.calibration.request import request_from_settings
from tuner.cli.serve import config_from_args
from tuner.server.config import ServerConfig


def _ns(tmp_path: Path, **kw) -> argparse.Namespace:
    base = dict(models=str(tmp_path), target="t", draft=None, spec_type=None, port=None, host=None, n_max=None,
                ngl=None, draft_ngl=None, n_ctx=None, api_key=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def tuned_passive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ServerConfig:
    import tuner.calibration.serving as serving

    tuned = ServerConfig(model_path=tmp_path / "t.gguf", threads=2, omp_passive=True)
    monkeypatch.setattr(serving, "config_from_profile", lambda models_dir, target: tuned)
    return tuned


def test_the_profile_setting_is_served_unless_overridden(tmp_path: Path, tuned_passive: ServerConfig) -> None:
    cfg = config_from_args(_ns(tmp_path))
    assert (cfg.threads, cfg.omp_passive) == (2, True)  # the tuned setting, environment included
    cfg = config_from_args(_ns(tmp_path, threads=1))
    assert (cfg.threads, cfg.omp_passive, cfg.poll) == (1, False, None)  # the flag wins, wholesale
    settings.save_settings(settings.Settings(threads=3))
    assert config_from_args(_ns(tmp_path)).threads == 3  # the setting over the profile
    assert config_from_args(_ns(tmp_path, threads=1)).threads == 1  # the flag over the setting


def test_serve_target_and_tune_take_the_setting(tmp_path: Path, stories260k_session: Path) -> None:
    assert config_from_args(_ns(tmp_path, models=None, target=str(stories260k_session))).threads is None
    settings.save_settings(settings.Settings(threads=1))
    assert config_from_args(_ns(tmp_path, models=None, target=str(stories260k_session))).threads == 1
    req = request_from_settings(settings.load_settings(), tmp_path)
    assert req.threads == 1


def test_a_bad_threads_setting_or_flag_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(settings.SettingsError, match="threads"):
        settings.Settings(threads=0)
    from tuner.cli import main as cli_main

    assert cli_main(["serve", "--target", str(tmp_path / "x.gguf"), "--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err
