"""Scan a folder of GGUF files: classification, split sets, and a cache keyed by path+size+mtime."""

from __future__ import annotations

from pathlib import Path

from tuner.catalog.model import ModelFile


def scan_folder(folder: Path | str, cache: bool = True) -> list[ModelFile]:
    """Classify every ``*.gguf`` under ``folder`` (recursive; symlink loops and unreadable files are safe).

    Never raises for a bad file: it becomes a ``broken`` row with ``error`` naming the cause.

    Raises:
        NotADirectoryError / FileNotFoundError: ``folder`` itself is missing.
    """
    raise NotImplementedError


def scan_file(path: Path | str) -> ModelFile:
    """Classify one GGUF file (a split shard is read alone; use :func:`scan_folder` for sets)."""
    raise NotImplementedError
