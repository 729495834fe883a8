"""One scan of a models folder, and the default target: what the app and the sweep share, so a
*Tune & serve* scans once and both pick the same target.

Also the one rule for a model named on the command line (``--target NAME``, ``--draft NAME``): its file
name or its stem (file name without ``.gguf``), and a name that two different files under the folder
carry (``a/model.gguf`` and ``b/model.gguf``) is an error naming both paths, never a silent pick.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import DraftwiseError

from .families import Family, group_families
from .model import ModelFile
from .scan import scan_folder, walk_gguf


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


class AmbiguousModelError(DraftwiseError, ValueError):
    """A model name given on the command line (a file name or stem) matches several different files.

    Attributes:
        flag: the option that named it (``--target``, ``--draft``).
        name: the name as given.
        paths: the matching files (sorted, one per distinct file: links to one file count once).
    """

    bad_input = True

    def __init__(self, flag: str, name: str, paths: Sequence[Path]) -> None:
        self.flag = flag
        self.name = name
        self.paths = tuple(paths)
        shown = ", ".join(str(p) for p in self.paths)
        super().__init__(f"{flag} {name!r} is ambiguous: {len(self.paths)} files have that name: {shown}; "
                         f"pass a path instead (e.g. {flag} {self.paths[0]})")


def _identity(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return str(path)


def _named(path: Path, name: str) -> bool:
    return name in (path.name, path.stem)


def pick_named(paths: Iterable[str | Path], name: str, flag: str = "--target") -> Path | None:
    """The one file among ``paths`` whose file name or stem (name without ``.gguf``) is ``name``.

    Returns:
        That path, or ``None`` when no path matches. Several paths that resolve to one file (links)
        are one match (the first in sorted order is returned).

    Raises:
        AmbiguousModelError: two or more different files match (lists them, names ``flag``).
    """
    found: dict[str, Path] = {}
    for p in sorted(Path(x) for x in paths):
        if _named(p, name):
            found.setdefault(_identity(p), p)
    if len(found) > 1:
        raise AmbiguousModelError(flag, name, sorted(found.values()))
    return next(iter(found.values()), None)


def gguf_files_under(folder: str | Path) -> list[Path]:
    """Every ``*.gguf`` file under ``folder`` by each of its names, sorted: the scan's walk (:func:`tuner.catalog.scan.walk_gguf`:
    links followed, each folder once, bounded, never into ``/proc``, ``/sys`` or ``/dev``); ``[]`` for a
    folder that cannot be read."""
    return sorted(walk_gguf(Path(folder), each_file_once=False).files)


def find_named_model(folder: str | Path, name: str, flag: str = "--target") -> Path | None:
    """:func:`pick_named` over :func:`gguf_files_under` ``folder``: the one GGUF file there called ``name``.

    Raises:
        AmbiguousModelError: two different files under ``folder`` carry that name.
    """
    return pick_named(gguf_files_under(folder), name, flag)


def default_target_note(models: Sequence[ModelFile], chosen: ModelFile | None) -> str | None:
    """One line saying which file :func:`default_target` chose when other LLMs in ``models`` share its
    file name (``a/model.gguf``, ``b/model.gguf``), so the user can tell them apart; ``None`` when its
    name is unique."""
    if chosen is None:
        return None
    name = Path(chosen.path).name
    same = sorted({_identity(Path(m.path)): Path(m.path) for m in models
                   if m.kind == "llm" and Path(m.path).name == name}.values())
    if len(same) < 2:
        return None
    return (f"default target: {chosen.path} ({len(same)} files are named {name}: {', '.join(map(str, same))}; "
            "the largest is chosen, ties by path; pass --target PATH to choose another)")


__all__ = [
    "AmbiguousModelError",
    "ScanResult",
    "default_target",
    "default_target_note",
    "find_named_model",
    "gguf_files_under",
    "pick_named",
    "scan_models",
]
