"""A new user's trial of the command line: a model name two files carry, one-line errors that name their
flag and value, and ``--json`` errors as one JSON object on stdout. Real CLI calls (``tuner.cli.main``),
real GGUF files (tests/synth.py), the real llama-server where one is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.cli import main


@pytest.fixture
def twins(tmp_path: Path) -> Path:
    """A models folder with two different files called model.gguf (a/ and b/, same size)."""
    root = tmp_path / "models"
    write_llama_gguf(root / "a" / "model.gguf", n_embd=64, n_layers=2)
    write_llama_gguf(root / "b" / "model.gguf", n_embd=64, n_layers=2)
    return root


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ 1: a name two files carry


@pytest.mark.parametrize("command", [
    ["tune", "--models", "{m}", "--target", "model.gguf"],
    ["tune", "--models", "{m}", "--target", "model"],
    ["plan", "--models", "{m}", "--target", "model.gguf", "--no-cross-check"],
    ["serve", "--models", "{m}", "--target", "model"],
    ["serve", "--models", "{m}", "--target", "model.gguf", "--spec-type", "ngram-mod"],
])
def test_an_ambiguous_target_name_is_an_error_listing_both_paths(command: list[str], twins: Path, capsys) -> None:
    argv = [a.replace("{m}", str(twins)) for a in command]
    rc, _, err = run(capsys, argv)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"draftwise {argv[0]}: --target"), err
    assert "is ambiguous" in err and "pass a path" in err
    assert str(twins / "a" / "model.gguf") in err and str(twins / "b" / "model.gguf") in err


@pytest.mark.server
def test_a_path_in_the_same_folder_is_not_ambiguous(twins: Path, capsys) -> None:
    rc, out, err = run(capsys, ["plan", "--models", str(twins), "--target", str(twins / "b" / "model.gguf"),
                                "--no-cross-check", "--json"])
    assert rc == 0, err
    assert json.loads(out)["fits"] is True


@pytest.mark.server
def test_links_to_one_file_are_one_model(tmp_path: Path, capsys) -> None:
    root = tmp_path / "models"
    real = write_llama_gguf(root / "blobs" / "model.gguf", n_embd=64, n_layers=2)
    (root / "link").mkdir()
    (root / "link" / "model.gguf").symlink_to(real)
    rc, out, err = run(capsys, ["plan", "--models", str(root), "--target", "model", "--no-cross-check", "--json"])
    assert rc == 0 and "ambiguous" not in err, err


def test_the_default_target_says_which_file_it_chose_when_names_collide(twins: Path, tmp_path: Path,
                                                                        capsys) -> None:
    """Same size: the tie goes to the path text (b/ after a/), the same on every run, and the note says so.
    A missing prompt file then stops the command before any launch."""
    notes = []
    for _ in range(2):
        rc, _, err = run(capsys, ["tune", "--models", str(twins), "--prompts", str(tmp_path / "none.txt")])
        assert rc == 2 and f"draftwise tune: --prompts {tmp_path / 'none.txt'}: cannot read prompt file" in err, err
        notes.append([line for line in err.splitlines() if "note: default target:" in line])
    assert notes[0] == notes[1] and len(notes[0]) == 1
    assert f"default target: {twins / 'b' / 'model.gguf'} (2 files are named model.gguf" in notes[0][0]
    assert "pass --target PATH" in notes[0][0]


def test_a_unique_name_needs_no_note(tmp_path: Path, capsys) -> None:
    root = tmp_path / "models"
    write_llama_gguf(root / "a" / "one.gguf", n_embd=64, n_layers=2)
    write_llama_gguf(root / "b" / "two.gguf", n_embd=64, n_layers=2)
    rc, _, err = run(capsys, ["tune", "--models", str(root), "--prompts", str(tmp_path / "none.txt")])
    assert rc == 2 and "default target" not in err, err


# ------------------------------------------------------------------ 2: errors name their flag


def test_serve_with_a_missing_target_names_the_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, ["serve", "--target", "nope.gguf"])
    assert rc == 2 and err.strip() == "draftwise serve: --target nope.gguf: no such file", err


def test_serve_with_a_missing_draft_names_the_flag_and_path(tmp_path: Path, capsys, stories260k: Path) -> None:
    gone = tmp_path / "gone.gguf"
    rc, _, err = run(capsys, ["serve", "--target", str(stories260k), "--draft", str(gone)])
    assert rc == 2 and err.strip() == f"draftwise serve: --draft {gone}: no such file", err


def test_plan_with_a_missing_target_names_the_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, ["plan", "--target", "nope"])
    assert rc == 2 and err.startswith("draftwise plan: --target nope: no such file"), err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["tune", "serve", "rpc-host", "doctor"])
def test_a_server_that_is_not_llama_server_names_the_flag(command: str, stories260k: Path, capsys) -> None:
    argv = {"tune": ["tune", "--models", str(stories260k.parent)],
            "serve": ["serve", "--target", str(stories260k)],
            "rpc-host": ["rpc-host", "--check-build"],
            "doctor": ["doctor", "--no-self-test", "--json"]}[command] + ["--server", "/bin/false"]
    rc, _, err = run(capsys, argv)
    assert rc == 2, err
    assert err.strip().splitlines()[-1] == (f"draftwise {command}: --server /bin/false: not a llama-server --help "
                                            "text: no options found"), err
    assert "Traceback" not in err


def test_plan_with_a_broken_gguf_names_the_flag_and_file(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"junk" * 10)
    rc, _, err = run(capsys, ["plan", "--target", str(junk)])
    assert rc == 2 and err.startswith(f"draftwise plan: --target {junk}: not a GGUF file"), err
    rc, _, err = run(capsys, ["plan", "--models", str(tmp_path), "--target", "junk"])
    assert rc == 2 and err.startswith(f"draftwise plan: --target junk ({junk}): not a GGUF file"), err


# ------------------------------------------------------------------ 3: --json errors are JSON on stdout


@pytest.mark.parametrize("argv, needle", [
    (["tune", "--models", "{tmp}/nope", "--json"], "--models {tmp}/nope: no such folder"),
    (["tune", "--json"], "the following arguments are required: --models"),
    (["scan", "{tmp}/nope", "--json"], "{tmp}/nope"),
    (["plan", "--target", "{tmp}/nope.gguf", "--json"], "--target {tmp}/nope.gguf: no such file"),
    (["compat", "{tmp}/a.gguf", "{tmp}/b.gguf", "--json"], "{tmp}/a.gguf"),
    (["devices", "--server", "{tmp}/nope", "--json"], "--server {tmp}/nope"),
    (["doctor", "--server", "{tmp}/nope", "--json", "--no-self-test"], "{tmp}/nope"),
])
def test_json_errors_are_one_object_on_stdout(argv: list[str], needle: str, tmp_path: Path, capsys) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    needle = needle.replace("{tmp}", str(tmp_path))
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage error
        rc = int(exc.code or 0)
    cap = capsys.readouterr()
    assert rc == 2, cap.err
    obj = json.loads(cap.out)  # exactly one JSON document
    assert isinstance(obj, dict) and needle in obj["error"], obj
    assert obj["code"] == "bad_input" and obj["exit_status"] == 2
    assert needle in cap.err  # the stderr line stays


def test_a_json_command_that_succeeds_prints_only_its_own_object(tmp_path: Path, capsys) -> None:
    write_llama_gguf(tmp_path / "m" / "t.gguf", n_embd=64, n_layers=2)
    rc, out, _ = run(capsys, ["scan", str(tmp_path / "m"), "--json"])
    assert rc == 0 and set(json.loads(out)) == {"models", "families"}


# ------------------------------------------------------------------ 6: a busy port is said once


@pytest.mark.server
def test_a_busy_port_is_reported_once(tmp_path: Path, stories260k: Path, llama_server_bin: Path) -> None:
    """The real llama-server cannot bind a port another process listens on; the cause was printed twice
    (the state line, then again with ``[port_busy]``)."""
    import os
    import socket
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(repo)}
        p = subprocess.run([sys.executable, "-m", "tuner", "serve", "--target", str(stories260k), "--port", str(port),
                            "--server", str(llama_server_bin), "--ready-timeout", "60"],
                           cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    cause = f"another process already listens on 127.0.0.1:{port}"
    assert p.stderr.count(cause) == 1, p.stderr
    assert "[port_busy]" not in p.stderr and "couldn't bind HTTP server socket" in p.stderr  # evidence stays
    assert "full log:" in p.stderr


# ------------------------------------------------------------------ 8: serve --target reads rpc_hosts


@pytest.mark.server
def test_serve_target_reads_the_rpc_hosts_setting_and_reports_an_unreachable_host(
        tmp_path: Path, _draftwise_home: Path, stories260k: Path, llama_server_bin: Path) -> None:
    """``serve --target FILE`` without ``--rpc`` ignored the ``rpc_hosts`` setting (``serve --models`` reads
    it through the profile). A closed local port as the host: the command names it, then serves on this
    machine alone (the real llama-server, stopped with Ctrl-C)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tuner import settings
    from tuner.process import free_port

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DRAFTWISE_HOME": str(_draftwise_home), "PYTHONPATH": str(repo)}
    closed = free_port()  # nothing listens there
    settings.save_settings(settings.Settings(rpc_hosts=(f"127.0.0.1:{closed}",)))
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--target", str(stories260k), "--server",
                          str(llama_server_bin), "--ready-timeout", "60"], cwd=repo, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout is not None
        endpoint = p.stdout.readline().strip()  # the endpoint line once the server is ready
        assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1"), endpoint
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    note = [line for line in err.splitlines() if f"127.0.0.1:{closed}" in line]
    assert note and note[0].startswith("draftwise serve: ") and "refused the connection" in note[0], err
    argv = [line for line in err.splitlines() if line.startswith("argv: ")][0]
    assert "--rpc" not in argv  # fell back to this machine's devices


def test_serve_models_refuses_a_name_two_saved_profiles_carry(twins: Path, capsys) -> None:
    """Both files were tuned and have since been removed: the name still fits two profiles, and serve
    names both instead of serving the most recent one."""
    from tuner.profiles import ModelFileKey, Profile, ProfileStore, StalenessKeys

    store = ProfileStore()
    for sub in ("a", "b"):
        f = twins / sub / "model.gguf"
        keys = StalenessKeys(hardware_fingerprint="cpu", server_binary="llama-server", server_build="11434",
                             dialect_fingerprint="x", model_files=(ModelFileKey.of(f),), prompt_set_sha256="p" * 64)
        store.save(Profile(target_path=str(f.resolve()), keys=keys, winner={"spec_type": "none"},
                           server_config={"model_path": str(f.resolve()), "spec_type": "none"},
                           argv=("llama-server", "-m", str(f)), decision={"reason": "none"}, evidence=()))
        f.unlink()
    rc, _, err = run(capsys, ["serve", "--models", str(twins), "--target", "model"])
    assert rc == 2 and "--target 'model' is ambiguous" in err and "pass a path" in err, err
    assert str((twins / "a" / "model.gguf").resolve()) in err and str((twins / "b" / "model.gguf").resolve()) in err


def test_an_unknown_flag_of_a_command_shows_that_commands_usage(capsys: pytest.CaptureFixture[str]):
    """``serve … --json`` (serve has no --json) printed the top-level usage (stop-12 trial)."""
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--target", "x.gguf", "--json"])
    err = capsys.readouterr()
    assert exc.value.code == 2
    assert err.err.startswith("usage: draftwise serve ") and "draftwise serve: error: unrecognized arguments: --json" in err.err
    assert json.loads(err.out) == {"error": "unrecognized arguments: --json", "code": "bad_input", "exit_status": 2}
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert "draftwise: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_bad_value_is_one_line_without_the_usage(capsys: pytest.CaptureFixture[str]):
    """``tune --budget abc`` printed argparse's nine-line usage before the error (new-user trial): a bad value is
    one line naming the flag; an unknown flag still shows the command's usage (test above)."""
    with pytest.raises(SystemExit) as exc:
        main(["tune", "--models", "/nonexistent", "--budget", "abc"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err == "draftwise tune: error: argument --budget: invalid float value: 'abc'\n"
