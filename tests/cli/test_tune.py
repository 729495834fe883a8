"""``draftwise tune`` on the real stories260K, profile reuse/staleness, and serving the saved winner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.calibration.serving import NoProfileError, config_from_profile
from tuner.profiles import ProfileStore

REPO = Path(__file__).resolve().parents[2]


def _tune(models: Path, server: Path, home: Path, *extra: str) -> tuple[int, dict | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["DRAFTWISE_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "tune", "--models", str(models), "--server", str(server), "--json",
         "--budget", "40", "--n-predict", "48", "--max-prompts", "3", "--ctx-size", "512", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    out = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None
    return proc.returncode, out, proc.stderr


@pytest.mark.server
def test_tune_json_reuse_stale_and_serve(tmp_path: Path, stories260k: Path, llama_server_bin: Path):
    models = stories260k.parent
    home = tmp_path / "home"
    rc, out, err = _tune(models, llama_server_bin, home)
    assert rc == 0, err
    dec = out["decision"]
    for key in ("spec_type", "draft", "n_max", "argv", "gen_tokens_per_s", "baseline_gen_tokens_per_s",
                "speedup", "reason"):
        assert key in dec
    assert dec["draft"] is None  # stories260K has no draft model in the folder
    assert dec["argv"][0] == str(llama_server_bin) and str(stories260k.resolve()) in dec["argv"]
    assert dec["baseline_gen_tokens_per_s"] > 0 and dec["reason"]
    assert out["measurements"] and out["measurements"][0]["candidate"]["spec_type"] == "none"
    for m in out["measurements"]:
        assert set(m) >= {"candidate", "gen_tokens_per_s", "acceptance", "speculative_active", "lossless"}
    profile_path = Path(out["profile_path"])
    assert profile_path.is_file() and profile_path.is_relative_to(home)
    assert "progress" not in err or "launch" in err  # progress goes to stderr

    # A fresh profile is reused without measuring.
    t0 = time.monotonic()
    rc, again, err = _tune(models, llama_server_bin, home)
    assert rc == 0, err
    assert again["reused"] is True and again["profile_path"] == out["profile_path"]
    assert again["decision"]["spec_type"] == dec["spec_type"]
    assert "reused" in err
    reuse_s = time.monotonic() - t0

    # A profile made on another server build is stale and re-tuned.
    obj = json.loads(profile_path.read_text())
    obj["keys"]["server_build"] = "1 (0000000)"
    profile_path.write_text(json.dumps(obj))
    rc, retuned, err = _tune(models, llama_server_bin, home)
    assert rc == 0, err
    assert retuned["reused"] is False and "stale" in err and "build" in err
    assert json.loads(profile_path.read_text())["keys"]["server_build"] != "1 (0000000)"
    assert reuse_s < 30

    # The log file tells the three runs' story at INFO (no --verbose): started, each llama-server's
    # command line, decision, saved; the reuse; the stale profile and its reason. Never a prompt text.
    log_text = (home / "logs" / "draftwise.log").read_text(encoding="utf-8")
    for line in ("tune started: tuning stories260K.gguf", "tune decision: ", "tune saved: profile saved to",
                 f"started: {llama_server_bin}", "tune reused: using the saved profile", "tune stale: ",
                 "llama-server starting -> ready", "llama-server stopping -> stopped"):
        assert line in log_text, line
    from tuner.calibration.prompts import default_prompts

    for prompt in default_prompts().prompts:
        if prompt.text:
            assert prompt.text[:40] not in log_text

    # serve: config_from_profile gives the saved winner, and `draftwise serve --models DIR` serves it
    # and answers an OpenAI-style chat completion.
    os.environ["DRAFTWISE_HOME"] = str(home)
    cfg = config_from_profile(models)
    assert Path(cfg.model_path) == stories260k.resolve() and cfg.port is None
    assert cfg.spec_type == dec["spec_type"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--models", str(models), "--server",
                             str(llama_server_bin)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # printed once the server is ready
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), proc.stderr.read()
        from tuner.server.client import ServerClient

        with ServerClient(url[: -len("/v1")], timeout_s=30) as client:
            answer = client.chat([{"role": "user", "content": "Tell me a story."}], max_tokens=16)
        assert answer["choices"][0]["message"]["content"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert rc == 0


def test_no_profile_error_names_the_command(tmp_path: Path):
    with pytest.raises(NoProfileError, match=r"no profile: run draftwise tune --models .* first"):
        config_from_profile(tmp_path, store=ProfileStore(tmp_path / "profiles"))


def test_cli_reports_a_bad_prompt_file(tmp_path: Path, stories260k: Path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"oops": 1}\n', encoding="utf-8")
    env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(stories260k.parent),
                           "--prompts", str(bad), "--json"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert f"{bad}:2" in proc.stderr
    error = json.loads(proc.stdout)  # --json: the same one-line error as one JSON object on stdout
    assert f"{bad}:2" in error["error"] and error["code"] == "bad_input" and error["exit_status"] == 2


def test_cli_reports_a_missing_target(tmp_path: Path, stories260k: Path):
    env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(stories260k.parent),
                           "--target", "nope.gguf"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "nope.gguf" in proc.stderr and "stories260K.gguf" in proc.stderr


@pytest.mark.parametrize("extra, words", [
    (["--budget", "0"], "--budget 0: must be between 10 and 86400 seconds"),
    (["--budget", "-5"], "--budget -5: must be between 10 and 86400 seconds"),
    (["--n-predict", "0"], "--n-predict 0"),
    (["--max-prompts", "0"], "--max-prompts 0"),
    (["--server", "/nonexistent/llama-server"], "--server /nonexistent/llama-server"),
])
def test_cli_bad_options_are_one_line_errors(tmp_path: Path, stories260k: Path, extra: list, words: str):
    env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(stories260k.parent), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("[")]  # progress lines start with [
    assert lines == [lines[0]] and words in lines[0] and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_cli_missing_and_empty_models_folder(tmp_path: Path):
    env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home")}
    (tmp_path / "empty").mkdir()
    for folder, words in ((tmp_path / "missing", "no such folder"), (tmp_path / "empty", "no LLM GGUF file")):
        proc = subprocess.run([sys.executable, "-m", "tuner", "tune", "--models", str(folder)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
        assert f"--models {folder}" in proc.stderr and words in proc.stderr


def test_a_long_label_keeps_its_draft_length():
    """The result tables cut labels at 46 characters: "… n_max 16" read "… n_max 1" (new-user trial)."""
    from tuner.cli.tune_report import _fit

    for label in ("draft-simple generated-demo-draft.gguf n_max 16",
                  "draft-simple generated-demo-draft.gguf n_max 16 probabilistic drafts"):
        fitted = _fit(label)
        assert len(fitted) == 46 and "…" in fitted
        assert fitted.endswith(label[label.rfind(" n_max "):])
    assert _fit("ngram-mod") == "ngram-mod"
