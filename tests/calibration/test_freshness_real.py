"""A saved profile's freshness without tuning (``tuner.calibration.freshness``), against a real tune on
stories260K through a wrapper script around the real llama-server (``tune --server WRAPPER``):

- the profile the tune just saved is fresh for the same request (the keys computed without tuning are the
  ones the tune recorded, so the app's *Serve at start* and the tune agree);
- another context size makes it stale, with the reason;
- ``draftwise serve --models`` with the default binary refuses it: the profile is stale for that binary
  (README: a binary change makes a profile stale), naming the wrapper it was tuned with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.calibration.freshness import binary_reasons, saved_state
from tuner.calibration.request import TuneRequest
from tuner.catalog.folder import scan_models
from tuner.server.discovery import find_named_server

REPO = Path(__file__).resolve().parents[2]
QUICK = ("--budget", "40", "--n-predict", "32", "--max-prompts", "2", "--repetitions", "1", "--ctx-size", "256")


def _run(args: list[str], home: Path, server: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["DRAFTWISE_HOME"] = str(home)
    env["DRAFTWISE_LLAMA_SERVER"] = str(server)  # the default binary of a command without --server
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.server
@pytest.mark.timeout(360)
def test_a_just_tuned_profile_is_fresh_and_stale_for_another_binary(tmp_path: Path, stories260k: Path,
                                                                     llama_server_bin: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    models = stories260k.parent
    home = tmp_path / "home"
    wrapper = tmp_path / "bin" / "llama-server-wrapper"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{llama_server_bin}" "$@"\n')
    wrapper.chmod(0o755)
    done = _run(["tune", "--models", str(models), "--server", str(wrapper), "--json", *QUICK], home, llama_server_bin)
    assert done.returncode == 0, done.stderr
    profile_path = Path(json.loads(done.stdout)["profile_path"])
    assert profile_path.is_file()

    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    target = stories260k.resolve()
    binary = find_named_server(wrapper)
    scanned = scan_models(models)
    request = TuneRequest.create(models, server=wrapper, budget_s=40, n_predict=32, max_prompts=2, repetitions=1,
                                 n_ctx=256)
    state = saved_state(request, target, binary, scanned)
    assert state.profile is not None and state.problem is None
    assert state.fresh, state.reasons  # the keys a tune records, computed without tuning
    other_ctx = saved_state(TuneRequest.create(models, server=wrapper, budget_s=40, n_predict=32, max_prompts=2,
                                               repetitions=1, n_ctx=512), target, binary, scanned)
    assert not other_ctx.fresh and any("context size changed" in r for r in other_ctx.reasons), other_ctx.reasons
    real = find_named_server(llama_server_bin)
    reasons = binary_reasons(state.profile.keys, real)
    assert len(reasons) == 1 and reasons[0].startswith(
        f"the llama-server binary changed (tuned with {wrapper.resolve()}") and \
        f", now {Path(llama_server_bin).resolve()}" in reasons[0], reasons
    assert binary_reasons(state.profile.keys, binary) == []

    # serve --models with the default binary: stale for it, said in one line; nothing started
    refused = _run(["serve", "--models", str(models)], home, llama_server_bin)
    assert refused.returncode == 2, refused.stderr
    err = refused.stderr.strip()
    assert "draftwise serve: the profile for stories260K.gguf is stale for " in err and str(wrapper.resolve()) in err
    assert "--server PATH" in err and "Traceback" not in err and len(err.splitlines()) == 1, err
