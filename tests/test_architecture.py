"""The seams between packages (issue 13): one request object for both front ends, one error root, the log
file, and the small bugs found on the way (a broken binary, the profile's argv, a wrapper's children)."""

from __future__ import annotations

import argparse
import logging
import stat
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tuner.calibration.request import (
    DEFAULT_BUDGET_S,
    TuneError,
    TuneRequest,
    request_from_settings,
)
from tuner.calibration.sampling import Sampling
from tuner.errors import Cancelled, DraftwiseError
from tuner.settings import Settings


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def _cli_args(argv: list[str]) -> argparse.Namespace:
    from tuner.cli import build_parser

    return build_parser(only="tune").parse_args(argv)


def test_cli_and_app_build_identical_requests(tmp_path: Path) -> None:
    """The same settings through the command line and through the app give the same TuneRequest."""
    from tuner.cli.tune import request_from_args

    models, server = tmp_path / "models", tmp_path / "llama-server"
    settings = Settings(tune_budget_s=240, ctx_size=4096, temperature=0.5, top_k=20, long_share=0.25)
    app = request_from_settings(settings, models, target="t.gguf", server=server)
    cli = request_from_args(_cli_args(["tune", "--models", str(models), "--target", "t.gguf", "--server", str(server),
                                       "--budget", "240", "--ctx-size", "4096", "--temperature", "0.5",
                                       "--top-k", "20", "--long-share", "0.25"]))
    assert cli == app
    assert app.long_share == 0.25 and app.budget_s == 240.0 and app.n_ctx == 4096 and app.sampling == Sampling(temperature=0.5, top_k=20)
    # and with nothing set, both use the one default budget
    plain_app = request_from_settings(Settings(), models)
    plain_cli = request_from_args(_cli_args(["tune", "--models", str(models)]))
    assert plain_cli == plain_app
    assert plain_cli.budget_s == DEFAULT_BUDGET_S == float(Settings().tune_budget_s) == 300.0
    assert plain_cli.sampling == Sampling()  # llama-server's own defaults


def test_request_refuses_bad_values_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match="budget_s") as info:
        TuneRequest.create(tmp_path, budget_s=float("nan"))
    assert info.value.bad_input
    with pytest.raises(TuneError, match="n_predict"):
        TuneRequest.create(tmp_path, n_predict=0)
    with pytest.raises(TuneError, match="unknown tune option.*n_gpu"):
        TuneRequest.create(tmp_path, n_gpu=3)


def _error_tree_in_docstring() -> set[tuple[str, str, str, tuple[str, ...]]]:
    """``tuner/errors.py``'s tree as (class, module, parent, builtins it also derives from)."""
    import re

    import tuner.errors

    block = (tuner.errors.__doc__ or "").split("::\n", 1)[1]
    rows, parents = set(), []
    for line in block.splitlines():
        m = re.match(r"( *)(\w+) +(tuner[\w.]*)(?: \(also ([\w, ]+)\))?$", line)
        if m is None:
            continue
        depth = (len(m.group(1)) - 4) // 4
        parents[depth:] = [m.group(2)]
        also = tuple(sorted(b.strip() for b in (m.group(4) or "").split(",") if b.strip()))
        rows.add((m.group(2), m.group(3), parents[depth - 1] if depth else "", also))
    return rows


def test_every_project_error_derives_from_the_root_and_the_tree_in_errors_py_is_whole() -> None:
    """Every exception class defined under tuner/ (outside the Qt modules of the UI) derives from
    DraftwiseError, and errors.py's docstring draws each one under its parent, with its module."""
    import importlib
    import inspect
    import pkgutil

    import tuner

    found = []
    for info in pkgutil.walk_packages(tuner.__path__, "tuner."):
        if (info.name.startswith("tuner.ui") and info.name != "tuner.ui.flow") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found.append(obj)
    assert len(found) >= 20
    assert [c.__name__ for c in found if not issubclass(c, DraftwiseError)] == []
    walked = set()
    for cls in found:
        project = [b for b in cls.__bases__ if issubclass(b, DraftwiseError)]
        also = tuple(sorted(b.__name__ for b in cls.__bases__ if not issubclass(b, DraftwiseError)))
        walked.add((cls.__name__, cls.__module__, project[0].__name__, also) if project
                   else (cls.__name__, cls.__module__, "", ()))  # the root itself: Exception
    drawn = _error_tree_in_docstring()
    assert sorted(walked - drawn) == [] and sorted(drawn - walked) == [], "update the tree in tuner/errors.py"
    from tuner.calibration import measure
    from tuner.ui import flow

    assert measure.Cancelled is flow.Cancelled is Cancelled


def test_a_binary_that_is_not_llama_server_is_a_tune_error(tmp_path: Path, stories260k: Path) -> None:
    """A broken binary (its --help fails) ends tune with a TuneError naming it, not a DialectError traceback."""
    from tuner.calibration.tune import tune

    broken = tmp_path / "llama-server"
    broken.write_text("#!/bin/sh\necho 'segmentation fault' >&2\nexit 139\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(TuneError) as info:
        tune(stories260k.parent, server=broken, budget_s=30)
    assert str(broken) in str(info.value)
    assert info.value.bad_input  # the user named it with --server


def test_profile_argv_says_nothing_about_where_to_listen() -> None:
    """The profile's argv is the tuned flags: no hard-coded --port 8080 that serve would not use."""
    from tuner.server.argv import build_argv, tuned_argv
    from tuner.server.config import ServerConfig
    from tuner.server.dialect import parse_help

    dialect = parse_help((Path(__file__).parent / "server/data/llama-server-help-b11434.txt").read_text())
    cfg = ServerConfig(model_path=Path("/m/t.gguf"), draft_path=Path("/m/d.gguf"), spec_type="draft-simple",
                       n_max=8, n_ctx=4096)
    argv = tuned_argv("/bin/llama-server", cfg, dialect)
    assert "--port" not in argv and "--host" not in argv
    full = build_argv("/bin/llama-server", cfg.with_port(9123), dialect)
    assert [a for a in full if a not in ("--host", "127.0.0.1", "--port", "9123")] == argv


def test_stop_reaches_a_wrapper_scripts_children(tmp_path: Path) -> None:
    """ChildProcess.stop signals the child's whole process group: the server under a wrapper script
    stops too (it used to survive a graceful stop)."""
    from tuner import process

    pid_file = tmp_path / "inner.pid"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nwait\n")
    wrapper.chmod(0o755)
    child = process.spawn([str(wrapper)])
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    inner = psutil.Process(int(pid_file.read_text()))
    assert inner.is_running()
    child.stop(grace_s=5.0)
    inner.wait(timeout=5)  # raises psutil.TimeoutExpired when the inner process survived
    assert not inner.is_running()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_log_file_exists_after_a_run_and_holds_a_worker_threads_traceback(tmp_path: Path,
                                                                              stories260k: Path) -> None:
    from tuner.cli import main
    from tuner.logs import log_path, redact, setup_logging

    assert main(["scan", str(stories260k.parent)]) == 0
    path = log_path()
    assert path.is_file() and "draftwise" in path.read_text()

    setup_logging()

    def work() -> None:
        raise RuntimeError("forced failure in a worker")

    t = threading.Thread(target=work, name="forced-worker")
    t.start()
    t.join()
    for h in logging.getLogger("tuner").handlers:
        h.flush()
    text = path.read_text()
    assert "uncaught exception in thread forced-worker" in text
    assert "Traceback (most recent call last)" in text and "RuntimeError: forced failure in a worker" in text
    # keys never reach the log
    logging.getLogger("tuner.test").warning("argv: llama-server --api-key sk-secret-123 -m x")
    for h in logging.getLogger("tuner").handlers:
        h.flush()
    assert "sk-secret-123" not in path.read_text() and "--api-key ***" in path.read_text()
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer ***"


def test_cli_prints_one_line_for_a_project_error_and_a_traceback_for_a_bug(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner import cli
    from tuner.cli import catalog

    def expected(args: argparse.Namespace) -> int:
        raise TuneError("--models /nowhere: no such folder", bad_input=True)

    def bug(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("a bug")

    real_register = catalog.register

    def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
        real_register(sub)
        sub.choices["scan"].set_defaults(func=which["func"])

    which = {"func": expected}
    monkeypatch.setattr(catalog, "register", register)
    assert cli.main(["scan", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "draftwise scan: --models /nowhere: no such folder"
    which["func"] = bug
    assert cli.main(["scan", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err and "this is a bug; the log is" in err
    from tuner.logs import log_path

    assert "ZeroDivisionError: a bug" in log_path().read_text()


def test_core_packages_do_not_print_or_parse_arguments() -> None:
    """Only tuner/cli and tuner/ui parse arguments or print to the terminal."""
    import re

    root = Path(__file__).resolve().parent.parent / "tuner"
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("cli/", "ui/")) or rel in ("app.py", "__main__.py"):
            continue
        text = path.read_text()
        for pattern in (r"^\s*print\(", r"\bimport argparse\b", r"\bsys\.std(out|err)\.write\("):
            for m in re.finditer(pattern, text, re.M):
                line = text.count("\n", 0, m.start()) + 1
                offenders.append(f"{rel}:{line}")
    assert offenders == []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_commands_one_line_error_and_exit_status_reach_the_log(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A user error (a missing folder) prints one line and the log file has it too, with the exit status
    (a new user's bug report carried nothing but "draftwise 0.1.0 tune")."""
    from tuner.cli import main
    from tuner.logs import log_path

    gone = tmp_path / "nope"
    assert main(["tune", "--models", str(gone)]) == 2
    err = capsys.readouterr().err
    assert f"--models {gone}: no such folder" in err and "Traceback" not in err
    for h in logging.getLogger("tuner").handlers:
        h.flush()
    text = log_path().read_text()
    assert f"draftwise tune: --models {gone}: no such folder" in text
    assert "tune exited with status 2" in text
    assert sys.stderr is not None and type(sys.stderr).__name__ != "_ErrorLineTee"  # restored
