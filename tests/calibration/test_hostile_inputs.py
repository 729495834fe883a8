"""Hostile inputs to the commands (issue 16): special files never block, tune stops on Ctrl-C,
symlinked model folders, tampered and corrupt profiles, settings with a bad value.

Every command runs as a real subprocess (``python -m tuner ...``) with a real llama-server where one
is needed, so a hang is a test failure after its timeout, not a stuck suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["DRAFTWISE_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(args: list[str], home: Path, timeout_s: float = 60) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tuner", *args], cwd=REPO, env=_env(home), capture_output=True,
                       text=True, timeout=timeout_s)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


# ------------------------------------------------------------------------- special files


@pytest.mark.server
@pytest.mark.parametrize("case", ["compat", "plan", "tune-prompts", "serve-api-key-file"])
def test_a_fifo_argument_is_refused_within_seconds(case: str, tmp_path: Path, stories260k: Path,
                                                   llama_server_bin: Path) -> None:
    """Issue 16 item 5: each of these blocked forever on a FIFO."""
    fifo = tmp_path / ("pipe.gguf" if case in ("compat", "plan") else "pipe.txt")
    os.mkfifo(fifo)
    args = {
        "compat": ["compat", str(fifo), str(stories260k)],
        "plan": ["plan", "--target", str(fifo), "--no-cross-check"],
        "tune-prompts": ["tune", "--models", str(stories260k.parent), "--prompts", str(fifo),
                         "--server", str(llama_server_bin)],
        "serve-api-key-file": ["serve", "--target", str(stories260k), "--api-key-file", str(fifo),
                               "--server", str(llama_server_bin)],
    }[case]
    rc, out, err, took = _run(args, tmp_path / "home", timeout_s=30)
    assert rc == 2, (rc, out, err)
    assert "FIFO" in err and "Traceback" not in err, err
    assert took < 15


def test_a_fifo_as_settings_file_does_not_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner import settings as S

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    S.settings_path().parent.mkdir(parents=True)
    os.mkfifo(S.settings_path())
    t0 = time.monotonic()
    loaded = S.load_settings_keeping_valid()
    assert time.monotonic() - t0 < 2
    assert loaded.settings == S.Settings() and "FIFO" in (loaded.message() or "")
    assert S.settings_path().exists()  # a FIFO is reported, not renamed or replaced


# ------------------------------------------------------------------------ tune and Ctrl-C


@pytest.mark.server
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_tune_interrupted_exits_within_the_stop_grace_and_leaves_no_child(
        sig: int, tmp_path: Path, stories260k: Path, llama_server_bin: Path) -> None:
    """A signal while the sweep's llama-server runs: exit 130 within TUNE_STOP_GRACE_S (3 s) plus
    the interpreter's exit, and no llama-server left behind."""
    import psutil

    from tuner.cli.tune import TUNE_STOP_GRACE_S

    p = subprocess.Popen([sys.executable, "-m", "tuner", "tune", "--models", str(stories260k.parent), "--server",
                          str(llama_server_bin), "--budget", "300", "--max-prompts", "3", "--ctx-size", "256"],
                         cwd=REPO, env=_env(tmp_path / "home"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        servers: set[int] = set()
        t_end = time.monotonic() + 120
        while not servers and time.monotonic() < t_end and p.poll() is None:
            try:
                servers = {c.pid for c in psutil.Process(p.pid).children(recursive=True)
                           if "llama-server" in " ".join(c.cmdline())}
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
            time.sleep(0.05)
        assert servers, "tune never launched llama-server"
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
        assert p.returncode == 130, err
        assert took < TUNE_STOP_GRACE_S + 3.0, took
        assert "Traceback" not in err
        for pid in servers:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if p.poll() is None:
            p.kill()


# ------------------------------------------------------------ symlinks and tampered profiles


def _tune_json(models: Path, server: Path, home: Path) -> dict:
    rc, out, err, _ = _run(["tune", "--models", str(models), "--server", str(server), "--json", "--budget", "40",
                            "--n-predict", "24", "--max-prompts", "2", "--ctx-size", "256"], home, timeout_s=300)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.server
def test_symlinked_models_folder_tune_then_serve_and_tampered_profiles(
        tmp_path: Path, stories260k: Path, llama_server_bin: Path) -> None:
    """Issue 16 item 13: tune --models DIR stored the profile under the resolved path and serve
    --models DIR said "no profile". Here DIR is itself a link to a folder of links into a blob
    store (the Hugging Face cache shape). Then item 9: a profile whose extra_args add --host
    0.0.0.0 / --tools / --api-key "" is refused by serve --models and by the app, naming the option."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    blob = blobs / "sha256-0123abcd"
    stories260k.rename(blob)
    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "stories260K.gguf").symlink_to(blob)
    models = tmp_path / "models"
    models.symlink_to(snap)
    home = tmp_path / "home"
    out = _tune_json(models, llama_server_bin, home)
    profile_path = Path(out["profile_path"])

    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--models", str(models), "--server",
                          str(llama_server_bin)], cwd=REPO, env=_env(home), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1"), p.stderr.read()
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)

    original = profile_path.read_text()
    from tuner.profiles import Profile, ProfileError
    from tuner.settings import Settings
    from tuner.ui.flow import serving_config

    for extra, named in ((["--host", "0.0.0.0"], "--host"), (["--tools", "all"], "--tools"),
                         (["--api-key", ""], "--api-key"), (["--temp", "0.7", "--api-key-file=/tmp/k"], "--api-key-file"),
                         (["--cors-origins", "*"], "--cors-origins")):
        obj = json.loads(original)
        obj["server_config"]["extra_args"] = extra
        profile_path.write_text(json.dumps(obj))
        rc, _, err, _ = _run(["serve", "--models", str(models), "--server", str(llama_server_bin)], home)
        assert rc == 2 and repr(named) in err and "may not set" in err, err
        with pytest.raises(ProfileError, match=named):
            serving_config(Profile.from_json(obj, profile_path), Settings())
    # the profile's own host / api_key fields are refused too
    for key, value in (("host", "0.0.0.0"), ("api_key", "x")):
        obj = json.loads(original)
        obj["server_config"][key] = value
        profile_path.write_text(json.dumps(obj))
        rc, _, err, _ = _run(["serve", "--models", str(models), "--server", str(llama_server_bin)], home)
        assert rc == 2 and f"server_config.{key}" in err, err
    # a spec_type that is not a string: one line, no traceback
    obj = json.loads(original)
    obj["server_config"]["spec_type"] = 5
    profile_path.write_text(json.dumps(obj))
    rc, _, err, _ = _run(["serve", "--models", str(models), "--server", str(llama_server_bin)], home)
    assert rc == 2 and "server_config.spec_type" in err and "Traceback" not in err, err
    # allowed options pass the check
    from tuner.calibration.serving import check_profile_extra_args

    assert check_profile_extra_args(["--temp", "0.7", "--seed", "-1"], "p") == ("--temp", "0.7", "--seed", "-1")

    # a corrupt profile is reported as corrupt (never "no profile") and serve renames nothing
    profile_path.write_text("{ not json")
    rc, _, err, _ = _run(["serve", "--models", str(models), "--server", str(llama_server_bin)], home)
    assert rc == 2 and "not valid JSON" in err and "no profile" not in err, err
    assert profile_path.read_text() == "{ not json"
    assert not list(profile_path.parent.glob("*.corrupt-*"))
    # a profile of a future schema likewise
    obj = json.loads(original)
    obj["schema_version"] = 99
    profile_path.write_text(json.dumps(obj))
    rc, _, err, _ = _run(["serve", "--models", str(models), "--server", str(llama_server_bin)], home)
    assert rc == 2 and "schema_version 99" in err, err
    assert profile_path.exists() and not list(profile_path.parent.glob("*.corrupt-*"))


# ----------------------------------------------------------------------------- settings


def test_one_bad_setting_keeps_every_valid_key_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16 item 12: tune_budget_s 20 (then below the range) made the app start on defaults and the next change
    overwrote models_dir, server_binary, prompts_path and port."""
    from tuner import settings as S

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    p = S.settings_path()
    p.parent.mkdir(parents=True)
    original = {"schema_version": 1, "models_dir": str(tmp_path / "m"), "server_binary": "/opt/llama-server",
                "prompts_path": str(tmp_path / "p.jsonl"), "port": 9123, "tune_budget_s": 5,
                "expose_on_lan": "yes", "future_key": [1, 2]}
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(original).encode())  # with a UTF-8 BOM
    loaded = S.load_settings_keeping_valid()
    st = loaded.settings
    assert st.models_dir == tmp_path / "m" and st.server_binary == Path("/opt/llama-server")
    assert st.prompts_path == tmp_path / "p.jsonl" and st.port == 9123
    assert st.tune_budget_s == S.Settings().tune_budget_s and st.expose_on_lan is False
    assert [e.key for e in loaded.problems] == ["tune_budget_s", "expose_on_lan"]
    msg = loaded.message()
    assert "'tune_budget_s'" in msg and "got 5" in msg and "'expose_on_lan'" in msg and "value 'yes'" in msg
    assert loaded.kept_aside is not None
    assert json.loads(loaded.kept_aside.read_bytes().decode("utf-8-sig")) == original
    # settings.json itself now holds the valid keys (and the unknown one), so nothing depends on a save
    repaired = json.loads(p.read_text())
    assert repaired["port"] == 9123 and repaired["models_dir"] == str(tmp_path / "m")
    assert repaired["future_key"] == [1, 2] and repaired["tune_budget_s"] == S.Settings().tune_budget_s
    # the next save of a change keeps the valid keys
    S.save_settings(st.replace(start_at_login=True))
    again = S.load_settings_keeping_valid()
    assert not again.problems
    assert again.settings == st.replace(start_at_login=True)
    assert p.stat().st_mode & 0o777 == 0o600


def test_settings_with_a_bom_load_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner import settings as S

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    S.settings_path().parent.mkdir(parents=True)
    S.settings_path().write_bytes(b"\xef\xbb\xbf" + json.dumps({"port": 9001}).encode())
    assert S.load_settings().port == 9001
    assert not S.load_settings_keeping_valid().problems


def test_prompt_files_with_hostile_json_are_line_errors(tmp_path: Path) -> None:
    from tuner.calibration.prompts import PromptFileError, load_prompts

    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": "ok"}\n' + "[" * 100000 + "\n")
    with pytest.raises(PromptFileError, match=r"deep.jsonl:2: not valid JSON"):
        load_prompts(deep)
    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": "ok", "n": ' + "9" * 5000 + "}\n")
    with pytest.raises(PromptFileError, match=r"big.jsonl:1: not valid JSON"):
        load_prompts(big)


def test_the_sweep_measures_a_bounded_number_of_prompts(tmp_path: Path) -> None:
    """Item 7: a 100,000-prompt file measured every prompt whatever --budget said."""
    from tuner.calibration.prompts import MAX_PROMPTS_PER_SWEEP, load_prompts, select_prompts

    f = tmp_path / "many.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"p{i}", "category": ["a", "b", "c"][i % 3]}) + "\n"
                         for i in range(20_000)))
    ps = load_prompts(f)
    assert len(ps) == 20_000
    events = []
    from tuner.calibration.tune import tune

    class Stop(Exception):
        pass

    def on_event(ev):
        events.append(ev)
        if ev.kind == "skipped":
            raise Stop

    with pytest.raises(Stop):  # stopped at the note, before anything is scanned or launched
        tune(tmp_path, prompts=f, budget_s=30, on_event=on_event)
    assert "20,000 prompts" in events[-1].message and f"at most {MAX_PROMPTS_PER_SWEEP}" in events[-1].message
    chosen = select_prompts(ps, MAX_PROMPTS_PER_SWEEP)
    assert len(chosen) == MAX_PROMPTS_PER_SWEEP and {p.category for _, p in chosen} == {"a", "b", "c"}


# ------------------------------------------------------------------------------ minor items


@pytest.mark.server
def test_minor_command_line_items(tmp_path: Path, stories260k: Path, llama_server_bin: Path) -> None:
    """One-line errors, no tracebacks: tune --server /bin/false, serve --target on a vocab-only
    file (refused before any launch), plan --ngl -5, doctor --timeout -1, and a scan table with a
    file name that is not UTF-8."""
    from tests.synth import write_vocab_gguf

    home = tmp_path / "home"
    rc, _, err, _ = _run(["tune", "--models", str(stories260k.parent), "--server", "/bin/false"], home)
    assert rc == 2 and "Traceback" not in err and "/bin/false" in err, err
    vocab = write_vocab_gguf(tmp_path / "vocab" / "ggml-vocab.gguf")
    rc, _, err, _ = _run(["serve", "--target", str(vocab), "--server", str(llama_server_bin)], home)
    assert rc == 2 and "vocab-only" in err and "argv:" not in err, err
    rc, _, err, _ = _run(["plan", "--target", str(stories260k), "--ngl", "-5", "--no-cross-check"], home)
    assert rc == 2 and err.strip() == "draftwise plan: --ngl -5: must be at least 0", err
    rc, _, err, _ = _run(["doctor", "--timeout", "-1", "--server", str(llama_server_bin)], home)
    assert rc == 2 and err.strip() == "draftwise doctor: --timeout -1: must be between 1 and 3600 seconds", err
    odd = tmp_path / "odd"
    odd.mkdir()
    os.symlink(stories260k, os.path.join(os.fsencode(odd), b"caf\xe9-\xff.gguf"))
    env = _env(home)
    env["LC_ALL"] = env["LANG"] = "C.UTF-8"
    p = subprocess.run([sys.executable, "-m", "tuner", "scan", str(odd)], cwd=REPO, env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr
    assert b"\\udce9" in p.stdout or b"\\xe9" in p.stdout, p.stdout


def test_state_folders_and_files_are_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16 item 11: state folders were 0755 (also when an older version made them)."""
    from tuner import paths
    from tuner import settings as S
    from tuner.storage import atomic_write_json

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    paths.data_dir().mkdir(parents=True, mode=0o755)
    os.chmod(paths.data_dir(), 0o755)
    S.save_settings(S.Settings(port=9002))
    atomic_write_json(paths.profiles_dir() / "x.json", {"a": 1})
    atomic_write_json(paths.cache_dir() / "scan-cache.json", {})
    for folder in (paths.config_dir(), paths.data_dir(), paths.profiles_dir(), paths.cache_dir()):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert S.settings_path().stat().st_mode & 0o777 == 0o600
    # a folder of the user's (not Draftwise's) is never chmodded
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    atomic_write_json(mine / "out.json", {})
    assert mine.stat().st_mode & 0o777 == 0o755
