"""The user's own llama-server flags on real launches (issue 23, item 4): ``--server-arg`` reaches every launch of
a sweep (baseline and candidates alike), the saved profile (argv, server_config, staleness key), the served
server's command line (``serve`` prints it; the running process carries it), ``plan --server-check``'s argv, and
another list makes the profile stale. Real llama-server, real stories260K."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from .conftest import TUNE_THREADS

REPO = Path(__file__).resolve().parents[2]
FLAGS = ("--no-repack", "-tb", "1")  # switches weight repacking off; one prompt-processing thread


def _cli(*argv: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}  # DRAFTWISE_HOME: the test's
    return subprocess.run([sys.executable, "-m", "tuner", *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def _tune_kw(models: Path, server: Path) -> dict:
    from tuner.calibration.prompts import Prompt, make_prompt_set
    from tuner.calibration.sampling import GREEDY

    ps = make_prompt_set([Prompt("Once upon a time, there was a little girl named Lily.", "creative")], source="t")
    return dict(target="stories260K.gguf", prompts=ps, budget_s=30, server=server, n_predict=16, repetitions=1,
                n_ctx=256, threads=TUNE_THREADS, sampling=GREEDY, long_context=False)


@pytest.mark.server
def test_server_args_reach_every_launch_the_profile_and_the_served_server(stories260k: Path,
                                                                          llama_server_bin: Path) -> None:
    from tuner.calibration.tune import tune

    models = stories260k.parent
    kw = _tune_kw(models, llama_server_bin)
    argvs: list[list[str]] = []

    def on_ready(ev) -> None:
        if ev.kind == "ready":
            argvs.append(list(ev.detail["argv"]))

    res = tune(models, server_args=FLAGS, on_event=on_ready, **kw)
    assert res.profile is not None and not res.reused
    assert len(argvs) >= 2, argvs  # the baseline and at least one n-gram candidate
    for argv in argvs:  # every launch, the baseline's included, ends with the user's flags
        assert tuple(argv[-3:]) == FLAGS, argv
    assert any("--spec-type" in a and a[a.index("--spec-type") + 1] == "none" for a in argvs)
    prof = res.profile
    assert prof.keys.server_args == FLAGS
    assert tuple(prof.argv[-3:]) == FLAGS and tuple(prof.server_config["extra_args"][-3:]) == FLAGS

    # the same flags: fresh, and the reuse message says it was tuned with them
    said: list[str] = []
    again = tune(models, server_args=FLAGS, on_event=lambda ev: said.append(f"{ev.kind}: {ev.message}"), **kw)
    assert again.reused
    assert any(s.startswith("reused:") and "tuned with the extra llama-server flags --no-repack -tb 1" in s
               for s in said), said

    # another list: stale, with the reason (the re-tune is cancelled at once)
    cancel = threading.Event()
    stale: list[str] = []

    def on_stale(ev) -> None:
        if ev.kind == "stale":
            stale.append(ev.message)
            cancel.set()

    assert tune(models, server_args=("--no-repack",), on_event=on_stale, cancel=cancel, **kw).cancelled
    assert stale and ("the extra llama-server flags changed (tuned with --no-repack -tb 1, now --no-repack)"
                      in stale[0]), stale

    # serve --models: the profile's flags, on the printed argv and on the running server's command line
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--models", str(models), "--server",
                          str(llama_server_bin)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        endpoint = p.stdout.readline().strip()  # type: ignore[union-attr]
        assert endpoint.startswith("http://127.0.0.1:"), p.stderr.read() if p.stderr else ""
        servers = [c for c in psutil.Process(p.pid).children(recursive=True) if "llama-server" in c.name()]
        assert servers and tuple(servers[0].cmdline()[-3:]) == FLAGS, [c.cmdline() for c in servers]
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    argv_line = next(line for line in err.splitlines() if line.startswith("argv: "))
    assert argv_line.endswith(" --no-repack -tb 1"), argv_line

    # serve --models with another list than the profile's: refused, naming the re-tune command
    r = _cli("serve", "--models", str(models), "--server", str(llama_server_bin), "--server-arg=-tb=2")
    assert r.returncode == 2, r.stderr
    assert "tuned with the extra llama-server flags --no-repack -tb 1" in r.stderr
    assert "--server-arg=-tb=2" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.server
def test_serve_from_flags_and_plan_server_check_carry_the_flags(stories260k: Path, llama_server_bin: Path) -> None:
    """``serve --target`` with the ``server_args`` setting (no flag given) and ``plan --server-check``."""
    from tuner import settings as settings_mod

    settings_mod.save_settings(settings_mod.Settings(server_args=("-tb=1", "--no-repack")))
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--target", str(stories260k), "--ctx-size", "4096",
                          "--server", str(llama_server_bin)], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        endpoint = p.stdout.readline().strip()  # type: ignore[union-attr]
        assert endpoint.startswith("http://127.0.0.1:"), p.stderr.read() if p.stderr else ""
        servers = [c for c in psutil.Process(p.pid).children(recursive=True) if "llama-server" in c.name()]
        assert servers and servers[0].cmdline()[-3:] == ["-tb", "1", "--no-repack"], [c.cmdline() for c in servers]
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)

    r = _cli("plan", "--target", str(stories260k), "--server", str(llama_server_bin), "--server-check",
             "--no-cross-check", "--json", "--server-arg=--no-repack")  # the flag replaces the setting
    assert r.returncode in (0, 1), r.stderr
    data = json.loads(r.stdout)
    assert data["server_args"] == ["--no-repack"]
    argv = data["server_check"]["argv"]
    assert "--no-repack" in argv and "-tb" not in argv, argv


@pytest.mark.server
def test_a_flag_this_build_does_not_know_is_refused_naming_it_and_the_binary(stories260k: Path,
                                                                           llama_server_bin: Path) -> None:
    """b11434 replaced --no-mmap by --load-mode: the allow-list admits it, this binary does not."""
    from tuner.server.dialect import probe_dialect

    if probe_dialect(llama_server_bin).has("--no-mmap"):
        pytest.skip("this llama-server still lists --no-mmap")
    for argv in (["serve", "--target", str(stories260k)], ["tune", "--models", str(stories260k.parent)]):
        r = _cli(*argv, "--server", str(llama_server_bin), "--server-arg=--no-mmap")
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert "--no-mmap" in line and str(llama_server_bin) in line and "does not know this flag" in line, r.stderr
        assert "--server-arg=--load-mode=none" in line
