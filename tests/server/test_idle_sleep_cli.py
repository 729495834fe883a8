"""``draftwise serve --idle-sleep SECONDS``: off by default (the app's default is 15 minutes), checked like every
declared number, passed as ``--sleep-idle-seconds``, and refused with the reason on a llama-server without the
flag (ik_llama.cpp) instead of serving with the model pinned."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from tests.server.conftest import DATA
from tuner.cli import main as cli_main
from tuner.settings import DEFAULT_IDLE_SLEEP_S, Settings


def _ik_binary(tmp_path: Path) -> Path:
    """A stand-in that answers ``--help`` with ik_llama.cpp's captured help text (it serves nothing)."""
    exe = tmp_path / "ik" / "llama-server"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat '{DATA / 'llama-server-help-ik-0.1.5.txt'}'\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_the_defaults_off_for_serve_15_minutes_in_the_app(capsys, stories260k_session: Path) -> None:
    from tuner.cli.serve import config_from_args

    assert DEFAULT_IDLE_SLEEP_S == 900 and Settings().idle_sleep_s == 900
    with pytest.raises(SystemExit):
        cli_main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--idle-sleep SECONDS" in help_text and "default: off, the model stays loaded" in help_text
    ns = argparse.Namespace(models=None, target=str(stories260k_session), draft=None, spec_type=None, port=None,
                            host=None, n_max=None, ngl=None, draft_ngl=None, n_ctx=None, api_key=None)
    assert config_from_args(ns).sleep_idle_s is None  # serve keeps the model loaded unless asked
    for given, served in ((600, 600), (0, None)):
        ns.idle_sleep = given
        assert config_from_args(ns).sleep_idle_s == served


@pytest.mark.parametrize("value", ["-1", "604801"])
def test_a_bad_idle_sleep_is_one_line_naming_the_flag(value: str, capsys, fake_server_bin: Path,
                                                      stories260k_session: Path) -> None:
    rc = cli_main(["serve", "--target", str(stories260k_session), "--server", str(fake_server_bin),
                   "--idle-sleep", value])
    assert rc == 2
    assert f"--idle-sleep {value}: must be 0 (off) or between 1 and 604800 seconds" in capsys.readouterr().err


def test_idle_sleep_on_a_binary_without_the_flag_is_refused_with_the_reason(tmp_path: Path, capsys,
                                                                           stories260k_session: Path) -> None:
    ik = _ik_binary(tmp_path)
    rc = cli_main(["serve", "--target", str(stories260k_session), "--server", str(ik), "--idle-sleep", "600"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1] == ("draftwise serve: --idle-sleep 600: ik_llama.cpp's llama-server has no --sleep-idle-seconds, "
                       "so it cannot unload an idle model (current llama.cpp builds can); serve without --idle-sleep")
