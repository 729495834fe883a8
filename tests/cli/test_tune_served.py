"""``draftwise tune --prompts-from-served`` (issue 28, item 2) on the real llama-server and stories260K: serve with
capture on, send a few requests (one as a token array), re-tune on them; the profile records where its prompts
came from (never their text), the decision says how many captured requests it rests on and over what period,
the app's freshness check finds it fresh (with or without captures left), and new captures do not make it stale. Without captures: a one-line error naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.server import capture
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]

STORIES = ["Once upon a time, there was a little girl named Lily. She liked to play",
           "The cat sat on the mat and looked at the big red ball. It wanted",
           "Tom and his mom went to the park. They saw a dog"]


def _tune(models: Path, home: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["DRAFTWISE_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(models), "--json", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _serve_and_send(stories: Path, server: Path) -> list[str]:
    """Serve stories260K with capture on, send the stories and one token array; the texts llama-server logged."""
    folder = capture.log_prompts_dir("stories260K")
    cfg = ServerConfig(model_path=stories, n_ctx=512, alias="stories260K", log_prompts_dir=folder)
    sup = Supervisor(server)
    try:
        sup.start_and_wait(cfg, timeout_s=60)
        with sup.client() as client:
            for text in STORIES:
                client.completion(text, n_predict=4, temperature=0.0)
                time.sleep(0.01)
            tokens = [t for t in client.tokenize("Lily had a red ball.")]
            client.completion(tokens, n_predict=4, temperature=0.0)
    finally:
        sup.stop()
    time.sleep(capture.MIN_AGE_S + 0.1)
    return [r.text for r in capture.captured_requests("stories260K")]


@pytest.mark.server
@pytest.mark.timeout(400)
def test_tune_on_served_requests_records_the_source_and_says_how_many(tmp_path: Path, stories260k: Path,
                                                                      llama_server_bin: Path) -> None:
    home = Path(os.environ["DRAFTWISE_HOME"])
    logged = _serve_and_send(stories260k, llama_server_bin)
    assert len(logged) == 4 and logged[:3] == STORIES and logged[3].startswith("[\n")  # the token array as JSON

    proc = _tune(stories260k.parent, home, "--server", str(llama_server_bin), "--prompts-from-served",
                 "--budget", "40", "--n-predict", "32", "--ctx-size", "512")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    profile = json.loads(Path(out["profile_path"]).read_text(encoding="utf-8"))
    source = profile["decision"]["prompt_source"]
    assert source["kind"] == "served" and source["model_id"] == "stories260K" and source["requests"] == 4
    assert source["first_unix_s"] <= source["last_unix_s"] <= time.time()
    captured = [s for s in profile["decision"]["sentences"] if s["slot"] == "CAPTURED"]
    assert len(captured) == 1 and captured[0]["kind"] == "captured.replayed"
    n = captured[0]["params"]["requests"]
    assert 2 <= n <= 4  # the protocol may cut the prompts to fit the budget: it says how many it measured
    assert f"Tuned on {n} requests served " in profile["decision"]["reason"]
    assert "captured requests replayed as raw completions (/completion)" in proc.stderr
    # the profile keeps where its prompts came from, never their text
    text = Path(out["profile_path"]).read_text(encoding="utf-8")
    assert not any(story[:30] in text for story in STORIES)
    # the baseline answered the token array as tokens: every measured request has its prompt's own length
    prompt_ns = {s["prompt_index"]: s["prompt_n"] for m in profile["evidence"] for s in m["samples"]
                 if s.get("prompt_n")}
    assert prompt_ns and all(v > 5 for v in prompt_ns.values())

    # what the app checks before serving it again (Serve at start): the request the settings give (the built-in
    # prompts) finds the profile tuned on served requests fresh, and it stays so with no capture left
    from tuner.calibration.freshness import saved_state
    from tuner.calibration.request import TuneRequest
    from tuner.catalog.folder import scan_models
    from tuner.server.discovery import find_named_server

    def state():
        request = TuneRequest.create(stories260k.parent, server=llama_server_bin, n_predict=32, n_ctx=512)
        return saved_state(request, stories260k.resolve(), find_named_server(llama_server_bin),
                           scan_models(stories260k.parent))

    assert state().fresh, state().reasons
    capture.forget_captured()
    assert state().fresh, state().reasons

    # new captures make the re-tune available, never the profile stale
    _serve_and_send(stories260k, llama_server_bin)
    again = _tune(stories260k.parent, home, "--server", str(llama_server_bin), "--prompts-from-served",
                  "--budget", "40", "--n-predict", "32", "--ctx-size", "512")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["reused"] is True
    # a tune naming no prompts (the app's Start server) serves it too; --force re-tunes on the newer requests
    plain = _tune(stories260k.parent, home, "--server", str(llama_server_bin), "--budget", "40", "--n-predict", "32",
                  "--ctx-size", "512")
    assert plain.returncode == 0 and json.loads(plain.stdout)["reused"] is True, plain.stderr


def test_tune_on_served_requests_without_captures_is_a_one_line_error(tmp_path: Path, stories260k: Path) -> None:
    proc = _tune(stories260k.parent, Path(os.environ["DRAFTWISE_HOME"]), "--prompts-from-served")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("draftwise tune: --prompts-from-served: no captured requests of model 'stories260K'")
    assert "--capture-requests" in lines[0]
