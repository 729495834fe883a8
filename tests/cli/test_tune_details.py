"""``draftwise tune --details`` on a saved profile: its details are printed without tuning (fresh or stale), and a
tune runs only when the target has no saved profile (tuner/cli/tune.py ``saved_result``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.router_folder import save_profile
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.inputs import resolve_inputs
from tuner.calibration.pipeline.keys import staleness_keys
from tuner.cli import build_parser, main
from tuner.cli.tune import request_from_args, saved_result
from tuner.profiles import ProfileStore
from tuner.server.config import ServerConfig

pytestmark = pytest.mark.server  # the tune's inputs ask llama-server its build and flags (nothing is launched)


def _argv(stories: Path, server: Path, *extra: str) -> list[str]:
    return ["tune", "--models", str(stories.parent), "--server", str(server), "--ctx-size", "512", *extra]


def _save_fresh(stories: Path, server: Path) -> Path:
    """A profile of stories260K (a draft-simple winner, 1.3×) whose keys are this request's: fresh."""
    request = request_from_args(build_parser().parse_args(_argv(stories, server, "--details")))
    keys = staleness_keys(resolve_inputs(request, scanned=None, binary=None, events=Events(None)))
    cfg = ServerConfig(model_path=stories, draft_path=stories, spec_type="draft-simple", n_max=2, n_ctx=512)
    store = ProfileStore()
    return store.save(replace(save_profile(cfg, 1.3, store), keys=keys))


def test_details_of_a_saved_profile_are_printed_without_tuning(stories260k: Path, llama_server_bin: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = _save_fresh(stories260k, llama_server_bin)
    saved = path.read_bytes()
    assert main(_argv(stories260k, llama_server_bin, "--details")) == 0
    out, err = capsys.readouterr()
    assert "Decision: " in out and f"Profile: {path} (reused)" in out and "stale" not in out
    assert "launch" not in err and path.read_bytes() == saved  # nothing measured, nothing saved again

    obj = json.loads(saved)
    obj["keys"]["server_build"] = "1 (0000000)"  # made by another llama-server build: stale
    path.write_text(json.dumps(obj), encoding="utf-8")
    stale = path.read_bytes()
    assert main(_argv(stories260k, llama_server_bin, "--details")) == 0
    out, err = capsys.readouterr()
    assert "Decision: " in out and f"Profile: {path}\n" in out and "(stale; --force measures again)" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("This saved profile is stale: ") and "build" in last and "--force" in last, out
    assert "launch" not in err and path.read_bytes() == stale


def test_without_a_saved_profile_there_are_no_details_to_print(stories260k: Path, llama_server_bin: Path) -> None:
    request = request_from_args(build_parser().parse_args(_argv(stories260k, llama_server_bin, "--details")))
    assert saved_result(request) is None  # the command tunes then
    _save_fresh(stories260k, llama_server_bin)
    found = saved_result(request)
    assert found is not None and found[1] == () and found[0].reused and found[0].decision is not None
