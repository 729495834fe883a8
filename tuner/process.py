"""The one adapter over ``subprocess`` and (for process trees and sockets) ``psutil``.

Children never outlive Draftwise:

- On Linux each child sets ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` between fork and exec, so the
  kernel kills it when its parent dies, even by SIGKILL. PDEATHSIG fires when the *thread* that
  forked the child exits, so every child is forked by one long-lived launcher thread owned by
  this module (:func:`spawn` hands the work to it and waits); servers started from short-lived
  worker threads therefore stay alive. If the parent is already gone when the child runs the
  pre-exec hook, the child exits at once.
- Each child gets its own session/process group; :meth:`ChildProcess.stop` sends SIGTERM, waits,
  then SIGKILLs the whole tree (psutil children + the process group).
- An ``atexit`` hook stops every child still running at a normal interpreter exit.
- A short probe whose output is read (:func:`run_capture`, :func:`run_output`: ``--help``,
  ``--version``, ``--list-devices``, ``llama-fit-params``) may print at most
  :data:`MAX_CAPTURE_BYTES` and run at most its timeout: past either, its whole tree and process group
  are killed and :class:`OutputCapExceeded` / ``TimeoutError`` is raised. When it exits normally, what
  is left of its process group (a wrapper's background job) is killed too.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import ctypes.util
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

import psutil

from tuner.errors import DraftwiseError
from tuner.units import format_bytes

log = logging.getLogger(__name__)


_PR_SET_PDEATHSIG = 1

#: Lines of log each child keeps in memory (the full log goes to its file).
DEFAULT_TAIL_LINES = 2000
#: A log file is rotated (to ``<name>.1``) when it grows past this size.
MAX_LOG_FILE_BYTES = 32 * 2**20
#: The most output (stdout and stderr together, bytes) a short probe may print: past it the probe is
#: stopped and :class:`OutputCapExceeded` raised. ``--help`` of llama-server b11434 is ~58 KiB.
MAX_CAPTURE_BYTES = 4 * 2**20
_READ_CHUNK = 64 * 2**10


class OutputCapExceeded(DraftwiseError, OSError):
    """A probe printed more than its output cap; it was stopped (whole tree and process group) and its
    output dropped. ``argv``: what ran; ``cap_bytes``: the cap. An ``OSError``, so a caller that reports
    "could not run" for a missing program reports this too."""

    def __init__(self, argv: Sequence[str], cap_bytes: int) -> None:
        self.argv = list(argv)
        self.cap_bytes = cap_bytes
        super().__init__(f"{' '.join(self.argv)}: output cut at the {format_bytes(cap_bytes)} cap and the program "
                         "stopped (it printed more)")


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def _make_preexec(parent_pid: int) -> Callable[[], None] | None:
    if _prctl is None:
        return None
    prctl = _prctl

    def preexec() -> None:  # runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # parent died before prctl took effect
            os._exit(1)

    return preexec


# ---------------------------------------------------------------------------------------------
# the launcher thread


class _Launcher:
    """One daemon thread that lives as long as the interpreter and forks every child."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Callable[[], object], Future]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            fn, fut = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed back to the caller
                fut.set_exception(exc)

    def call(self, fn: Callable[[], object]) -> object:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="draftwise-launcher", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future = Future()
        self._queue.put((fn, fut))
        return fut.result()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread


_launcher = _Launcher()


def launcher_thread() -> threading.Thread | None:
    """The thread that forks children (None before the first spawn); for tests."""
    return _launcher.thread


# ---------------------------------------------------------------------------------------------


def _open_private_log(path: Path):
    """Open ``path`` for appending text, created with mode 0600 in a 0700 folder (a log holds the
    model paths and the prompts' first lines: owner-only, like every state file)."""
    from tuner.paths import ensure_private_dir

    ensure_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.chmod(path, 0o600)
    except OSError:
        pass
    return os.fdopen(fd, "a", encoding="utf-8")


class ChildProcess:
    """A running child with its log captured (stdout and stderr merged).

    Attributes:
        pid: process id (also its process-group id).
        argv: the argv it was started with.
        log_path: the file receiving the full log, or None.
        started_at_s: ``time.monotonic()`` at start.
    """

    def __init__(self, popen: subprocess.Popen, argv: Sequence[str], log_path: Path | None,
                 tail_lines: int, on_line: Callable[[str], None] | None) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.argv = list(argv)
        self.log_path = log_path
        self.started_at_s = time.monotonic()
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._tail_lock = threading.Lock()
        self._on_line = on_line
        self._eof = threading.Event()
        self._reader = threading.Thread(target=self._read, name=f"llama-server-log-{self.pid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        f = None
        try:
            if self.log_path is not None:
                try:
                    f = _open_private_log(self.log_path)
                    f.write("# " + " ".join(self.argv) + "\n")
                except OSError:
                    f = None
            assert self._popen.stdout is not None
            for raw in iter(self._popen.stdout.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                with self._tail_lock:
                    self._tail.append(line)
                if f is not None:
                    try:
                        f.write(line + "\n")
                        f.flush()
                        if f.tell() > MAX_LOG_FILE_BYTES and self.log_path is not None:
                            # a server kept for days: keep the current file and one older part
                            f.close()
                            os.replace(self.log_path, self.log_path.with_suffix(self.log_path.suffix + ".1"))
                            f = _open_private_log(self.log_path)
                    except OSError:
                        log.debug("cannot write the child's log %s", self.log_path, exc_info=True)
                if self._on_line is not None:
                    try:
                        self._on_line(line)
                    except Exception:
                        log.exception("a log-line callback of pid %s failed", self.pid)
        except (OSError, ValueError):  # the pipe closed under the reader
            log.debug("output reader of pid %s ended", self.pid, exc_info=True)
        finally:
            if f is not None:
                f.close()
            self._eof.set()

    def log_lines(self, n: int | None = None) -> list[str]:
        """The last ``n`` log lines (all kept lines when None), oldest first."""
        with self._tail_lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def poll(self) -> int | None:
        """The exit status, or None while running (negative = killed by that signal)."""
        return self._popen.poll()

    @property
    def returncode(self) -> int | None:
        """Same as :meth:`poll`."""
        return self._popen.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait up to ``timeout_s`` for exit; the status, or None on timeout.

        Also waits (briefly) for the log reader to drain, so the last lines are in
        :meth:`log_lines` once this returns a status.
        """
        try:
            rc = self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._eof.wait(2.0)
        return rc

    def is_alive(self) -> bool:
        """True while the process runs."""
        return self._popen.poll() is None

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the child (no error if it is gone)."""
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` once to the child's whole process group (on POSIX the child leads its own session,
        so the group is the child and everything it started that did not leave it, e.g. the real server
        under a wrapper script); to the child alone where there are no groups or the group is gone. No
        error if it is gone. Once, not twice: llama-server exits at once with status 1 on a second
        SIGTERM/SIGINT (tools/server/server.cpp ``signal_handler``: "Received second interrupt")."""
        if os.name == "posix":
            try:
                os.killpg(self.pid, sig)
                return
            except (ProcessLookupError, PermissionError, OSError):
                pass
        self.signal(sig)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """Graceful stop: SIGTERM to the child's process group (a wrapper script's children too), wait
        ``grace_s`` for the child, then SIGKILL the whole tree (descendants and group). The exit status."""
        if self.is_alive():
            self.signal_group(signal.SIGTERM if hasattr(signal, "SIGTERM") else signal.SIGINT)
            rc = self.wait(grace_s)
            if rc is None:
                kill_tree(self.pid)
        rc = self.wait(10.0)
        if os.name == "posix":
            # members of the child's group that outlived it (ignored SIGTERM): the group id cannot be
            # reused while any member lives, so this reaches only them
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        _live.discard(self)
        return rc

    def kill(self) -> int | None:
        """Immediately SIGKILL the child's whole tree; the exit status."""
        kill_tree(self.pid)
        rc = self.wait(10.0)
        _live.discard(self)
        return rc

    def listens_on(self, port: int) -> bool | None:
        """True when this process (or a descendant) holds a listening TCP socket on ``port``.

        None when psutil cannot tell (no permission / unsupported platform).
        """
        try:
            procs = [psutil.Process(self.pid)]
            procs += procs[0].children(recursive=True)
            for p in procs:
                conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
                for c in conns:
                    if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                        return True
            return False
        except psutil.NoSuchProcess:
            return False
        except (psutil.AccessDenied, NotImplementedError):
            return None


_live: set[ChildProcess] = set()


def _popen_kwargs(parent: int, env: Mapping[str, str] | None, stderr: int) -> dict:
    """``subprocess.Popen`` keywords of every child: stdin closed, stdout piped, ``stderr`` as given
    (``subprocess.STDOUT`` or ``PIPE``), its own session (POSIX) or process group (Windows), killed with
    its parent ``parent`` (Linux PDEATHSIG)."""
    kwargs: dict = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                        env=dict(env) if env is not None else None, close_fds=True)
    if os.name == "posix":
        kwargs["start_new_session"] = True
        pre = _make_preexec(parent)
        if pre is not None:
            kwargs["preexec_fn"] = pre
    else:  # pragma: no cover - Windows
        kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    return kwargs


def spawn(argv: Sequence[str], env: Mapping[str, str] | None = None, log_path: Path | None = None,
          tail_lines: int = DEFAULT_TAIL_LINES, on_line: Callable[[str], None] | None = None,
          cwd: Path | None = None, pass_fds: Sequence[int] = (), umask: int | None = None) -> ChildProcess:
    """Start ``argv`` from the module's launcher thread (see module docstring).

    Args:
        argv: program and arguments.
        env: the complete child environment (None = inherit).
        log_path: file that receives every log line (appended), or None.
        tail_lines: lines kept in memory for :meth:`ChildProcess.log_lines`.
        on_line: called from the reader thread with each line.
        pass_fds: file descriptors the child inherits (e.g. a memfd it opens as ``/dev/fd/N``).
        umask: the child's file-mode creation mask (POSIX; e.g. ``0o077``: every file it creates is its user's
            only), set in the child between fork and exec, with the other pre-exec steps (``Popen(umask=…)``);
            None = inherited. Ignored on Windows, which has no umask.

    Raises:
        OSError: the program cannot be executed (missing, not executable).
    """
    parent = os.getpid()

    def _do() -> ChildProcess:
        kwargs = _popen_kwargs(parent, env, subprocess.STDOUT)
        kwargs["cwd"] = str(cwd) if cwd else None
        if pass_fds:
            kwargs["pass_fds"] = tuple(pass_fds)
        if umask is not None and os.name == "posix":
            kwargs["umask"] = umask
        popen = subprocess.Popen(list(argv), **kwargs)
        return ChildProcess(popen, argv, log_path, tail_lines, on_line)

    child = _launcher.call(_do)
    assert isinstance(child, ChildProcess)
    _live.add(child)
    return child


class _Collector:
    """Reads a probe's pipes on daemon threads into byte buffers, at most ``cap_bytes`` in all; sets
    :attr:`over` (and stops reading) when the probe prints more."""

    def __init__(self, streams: Sequence, cap_bytes: int) -> None:
        self._cap = cap_bytes
        self._bufs = [bytearray() for _ in streams]
        self._total = 0
        self._lock = threading.Lock()
        self.over = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(i, st), name="draftwise-probe-reader",
                                          daemon=True) for i, st in enumerate(streams)]
        for t in self._threads:
            t.start()

    def _read(self, i: int, stream) -> None:
        fd = stream.fileno()
        while not self.over.is_set():
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                room = self._cap - self._total
                self._bufs[i] += chunk[:room]
                self._total += min(room, len(chunk))
                if len(chunk) > room:
                    self.over.set()  # the child now blocks on a full pipe until it is killed

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every pipe's end; True when all ended."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def texts(self) -> list[str]:
        """What was read so far, one text per stream (UTF-8, bad bytes replaced, ``\\r\\n`` → ``\\n``)."""
        with self._lock:
            return [bytes(b).decode("utf-8", "replace").replace("\r\n", "\n") for b in self._bufs]


def _exited(popen: subprocess.Popen) -> bool:
    """True once ``popen`` has exited. On POSIX with ``waitid`` it stays unreaped (a zombie), so its pid
    and so its process-group id cannot be reused before :func:`_end_probe` has signalled the group."""
    if hasattr(os, "waitid") and popen.returncode is None:
        try:
            return os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # already reaped
            pass
    return popen.poll() is not None


def _wait_probe(popen: subprocess.Popen, collector: _Collector, deadline: float) -> str | None:
    """Wait for the probe's exit; None when it exited, else ``"cap"`` or ``"timeout"`` (still running)."""
    pause = 0.002
    while not _exited(popen):
        if collector.over.is_set():
            return "cap"
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        collector.over.wait(min(pause, left))
        pause = min(pause * 2, 0.02)
    return "cap" if collector.over.is_set() else None


def _end_probe(popen: subprocess.Popen, collector: _Collector, whole_tree: bool) -> int | None:
    """Kill what is left of the probe (its descendants too when ``whole_tree``; its process group always),
    reap it and close its pipes; its exit status."""
    if whole_tree:
        kill_tree(popen.pid)
    elif os.name == "posix":
        try:  # a wrapper's background job: the group id is still ours while the child is unreaped
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    try:
        rc = popen.wait(10.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
        rc = None
    if collector.join(2.0):
        for stream in (popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()
    else:  # a descendant that left the group holds the pipe: its reader ends when it does
        log.debug("%s: a process outside its group still holds its output", popen.args)
    return rc


def _run_bounded(argv: Sequence[str], env: Mapping[str, str] | None, timeout_s: float, merge: bool,
                 cap_bytes: int) -> tuple[int, list[str]]:
    """Run ``argv`` with its output read into memory, bounded in time and bytes (module docstring).

    Returns ``(exit status, [merged text])`` when ``merge``, else ``(status, [stdout, stderr])``.

    Raises:
        OSError: cannot execute. TimeoutError: ``timeout_s`` passed. OutputCapExceeded: more than
        ``cap_bytes`` printed. In both cases the probe's tree and group are killed first.
    """
    env = clean_env(os.environ) if env is None else env
    parent = os.getpid()

    def _do() -> subprocess.Popen:
        stderr = subprocess.STDOUT if merge else subprocess.PIPE
        return subprocess.Popen(list(argv), **_popen_kwargs(parent, env, stderr))

    popen = _launcher.call(_do)
    assert isinstance(popen, subprocess.Popen)
    collector = _Collector([popen.stdout] if merge else [popen.stdout, popen.stderr], cap_bytes)
    deadline = time.monotonic() + timeout_s
    why: str | None = "interrupted"
    try:
        why = _wait_probe(popen, collector, deadline)
    finally:
        rc = _end_probe(popen, collector, whole_tree=why is not None)
    if why == "cap":
        raise OutputCapExceeded(argv, cap_bytes)
    if why == "timeout" or rc is None:
        raise TimeoutError(f"{argv[0]} {' '.join(argv[1:])}: no exit within {timeout_s:g} s (stopped)")
    return rc, collector.texts()


def run_capture(argv: Sequence[str], timeout_s: float = 30.0, env: Mapping[str, str] | None = None,
                cap_bytes: int = MAX_CAPTURE_BYTES) -> tuple[int, str]:
    """Run a short command (``--help``, ``--version``) and return ``(exit status, stdout + stderr text)``
    (merged in the order printed; UTF-8, bad bytes replaced, ``\\r\\n`` read as ``\\n``).

    ``env`` None = this process's environment without ``LLAMA_ARG_*`` (:func:`clean_env`). At most
    ``cap_bytes`` of output (:data:`MAX_CAPTURE_BYTES`) and ``timeout_s`` seconds; whatever it left
    running in its process group is killed when it exits.

    Raises:
        OSError: cannot execute. TimeoutError: still running after ``timeout_s``. OutputCapExceeded:
        printed more than ``cap_bytes``. On both, its whole tree and process group are killed first.
    """
    rc, texts = _run_bounded(argv, env, timeout_s, True, cap_bytes)
    return rc, texts[0]


def run_output(argv: Sequence[str], timeout_s: float = 30.0, env: Mapping[str, str] | None = None,
               cap_bytes: int = MAX_CAPTURE_BYTES) -> tuple[int, str, str]:
    """Run a short command to completion (``--list-devices``, ``llama-fit-params``, ``sysctl``)
    with stdin closed and return ``(exit status, stdout text, stderr text)`` kept apart.

    As :func:`run_capture` otherwise (``cap_bytes`` counts stdout and stderr together).

    Raises:
        OSError: cannot execute. TimeoutError: still running after ``timeout_s``. OutputCapExceeded:
        printed more than ``cap_bytes``. On both, its whole tree and process group are killed first.
    """
    rc, (out, err) = _run_bounded(argv, env, timeout_s, False, cap_bytes)
    return rc, out, err


def kill_tree(pid: int, sig: int = signal.SIGKILL if hasattr(signal, "SIGKILL") else 9) -> None:
    """Send ``sig`` to ``pid``, all its descendants (psutil) and its process group."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    if os.name == "posix":
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host`` (the OS picks it; a race is still possible,
    so callers treat "couldn't bind" as port busy and retry)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def pids_listening_on(port: int) -> list[int] | None:
    """Pids holding a listening TCP socket on ``port``; None when psutil may not look
    (permission)."""
    try:
        return sorted({c.pid for c in psutil.net_connections(kind="tcp")
                       if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid})
    except (psutil.AccessDenied, NotImplementedError):
        return None


def process_exists(pid: int) -> bool:
    """True when ``pid`` runs (zombies count as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def tree_usage(pid: int) -> tuple[int, float] | None:
    """``(rss_bytes, cpu_seconds)`` summed over ``pid`` and its descendants; None when gone."""
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    rss, cpu = 0, 0.0
    for p in procs:
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                t = p.cpu_times()
                cpu += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss, cpu


def descendant_with_args(pid: int, words: Sequence[str]) -> int | None:
    """The pid of a live descendant of ``pid`` whose command line holds ``words`` one after the other (e.g. a
    router's model process: ``("--port", "4711")``); None when there is none or psutil may not look."""
    want = list(words)
    n = len(want)
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    for kid in kids:
        try:
            cmd = kid.cmdline()
            if kid.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(cmd[i:i + n] == want for i in range(len(cmd) - n + 1)):
            return kid.pid
    return None


def process_stopped(pid: int) -> bool | None:
    """True when ``pid`` is stopped (SIGSTOP / SIGTSTP: ``T`` state), False when running or
    sleeping, None when gone or unknown."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, getattr(psutil, "STATUS_TRACING_STOP", "t"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def find_processes(name_part: str) -> list[int]:
    """Pids whose executable name or first argv element contains ``name_part`` (for checks)."""
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = p.info.get("cmdline") or []
            if name_part in (p.info.get("name") or "") or (cmd and name_part in cmd[0]):
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@atexit.register
def kill_all_children() -> None:
    """Kill (SIGKILL, whole tree) every child spawned here that still runs, at once; for an
    interrupted command that must exit now. Raises nothing."""
    for child in list(_live):
        try:
            child.kill()
        except Exception:
            log.debug("cannot kill pid %s", child.pid, exc_info=True)


def _stop_all_children() -> None:
    for child in list(_live):
        try:
            child.stop(grace_s=3.0)
        except Exception:
            log.debug("cannot stop pid %s", child.pid, exc_info=True)


#: Variables no child gets besides ``LLAMA_ARG_*``: the API key, and ``LLAMA_SERVER_SLOTS_DEBUG``, which makes
#: llama-server put prompt and answer text into its log (the tokens around a prompt-cache mismatch, as warnings)
#: and into ``/slots`` (tools/server/server-context.cpp: ``server_context_impl::load_model`` reads it, the
#: prompt-cache mismatch warnings of ``pre_decode`` and the ``/slots`` handler's ``to_json`` use it): served
#: requests stay out of every log.
DROPPED_ENV = frozenset({"LLAMA_API_KEY", "LLAMA_SERVER_SLOTS_DEBUG"})


def clean_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` without any ``LLAMA_ARG_*`` variable or one of :data:`DROPPED_ENV`.

    The server reads these before the CLI and ``--spec-type`` appends to them
    (common/arg.cpp), so an inherited ``LLAMA_ARG_SPEC_TYPE`` would silently add a type.
    """
    return {k: v for k, v in environ.items() if not k.startswith("LLAMA_ARG_") and k not in DROPPED_ENV}
