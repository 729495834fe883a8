"""One scan of a models folder, and the default target: what the app and the sweep share, so a
*Tune & serve* scans once and both pick the same target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .families import Family, group_families
from .model import ModelFile
from .scan import scan_folder


@dataclass(frozen=True)
class ScanResult:
    """One scan of a models folder.

    Attributes:
        folder: the folder scanned.
        models: every GGUF file found (a broken file is a ``broken`` row, never an exception).
        families: the LLMs grouped into families (``tuner.catalog.families.group_families``).
    """

    folder: Path
    models: tuple[ModelFile, ...]
    families: tuple[Family, ...]


def scan_models(folder: str | Path, cache: bool = True) -> ScanResult:
    """Scan ``folder`` (``tuner.catalog.scan.scan_folder``) and group its families.

    Raises:
        FileNotFoundError: ``folder`` does not exist or is not a folder (names it).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"models folder {folder} does not exist")
    models = scan_folder(folder, cache=cache)
    return ScanResult(folder=folder, models=tuple(models), families=tuple(group_families(models)))


def default_target(models: Sequence[ModelFile], families: Sequence[Family]) -> ModelFile | None:
    """The target tuned when the user named none: the largest LLM that has a compatible draft or a
    matched draft head, else the largest LLM (ties: the path's text); ``None`` without any LLM."""
    llms = [m for m in models if m.kind == "llm"]
    if not llms:
        return None
    with_routes = {str(Path(e.target.path).resolve()) for f in families for e in f.targets if e.drafts or e.heads}
    pool = [m for m in llms if str(Path(m.path).resolve()) in with_routes] or llms
    return max(pool, key=lambda m: (m.size_bytes or 0, str(m.path)))


__all__ = ["ScanResult", "default_target", "scan_models"]
