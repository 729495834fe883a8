"""The target model: the models folder scanned once, the ``--target`` name checked, the target chosen.

The folder arrives as the request's path and, from a caller that scanned it already (the app), as that
scan: :func:`scan_folder` reconciles the two once (both paths resolved). The name check runs before the
prompt file is read (an ambiguous name is the first thing the user must fix); the folder's own problems (a
file, missing, no LLM in it, no such target) are reported by :func:`choose_target`, after the prompt file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..request import TuneError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tuner.catalog.families import TargetEntry
    from tuner.catalog.folder import ScanResult
    from tuner.catalog.model import ModelFile


@dataclass(frozen=True)
class TargetChoice:
    """The target of the sweep.

    Attributes:
        scan: the models folder's scan (every file, the families).
        model: the target's row of the scan.
        path: the target file, resolved.
        entry: the catalog's entry for it (its drafts and heads, and those refused), ``None`` when it has none.
    """

    scan: ScanResult
    model: ModelFile
    path: Path
    entry: TargetEntry | None


def scan_folder(models_dir: Path, scanned: ScanResult | None) -> ScanResult | None:
    """The scan of ``models_dir``: ``scanned`` when it is of this folder (both paths resolved), else a new
    one (``tuner.catalog.folder.scan_models``); ``None`` when ``models_dir`` is not a folder (reported by
    :func:`choose_target`). Raises nothing of its own (a broken file is a ``broken`` row)."""
    from tuner.catalog.folder import scan_models

    if not models_dir.is_dir():
        return None
    if scanned is not None and Path(scanned.folder).resolve() == models_dir.resolve():
        return scanned
    return scan_models(models_dir)


def check_target_name(scan: ScanResult | None, target: str | None) -> str | None:
    """Check the ``--target`` name against the folder before anything else is read.

    Returns:
        Without a ``target``, the note naming the default target's file when another LLM of the folder
        shares its file name (``tuner.catalog.folder.default_target_note``), else ``None``.

    Raises:
        TuneError: (``bad_input``) two different LLM files carry the name; the message lists them.
    """
    from tuner.catalog.folder import default_target, default_target_note

    if scan is None:
        return None
    if target is not None:
        _named_llm(_llms(scan), target)
        return None
    return default_target_note(scan.models, default_target(scan.models, scan.families))


def choose_target(models_dir: Path, target: str | None, scan: ScanResult | None) -> TargetChoice:
    """The target: ``target`` by path, file name or stem, or the folder's default
    (``tuner.catalog.folder.default_target``: the largest LLM that has a draft or head, else the largest).

    Args:
        models_dir: the models folder, resolved (the errors name it).
        target: ``TuneRequest.target``.
        scan: :func:`scan_folder`'s answer.

    Raises:
        TuneError: (``bad_input``) ``models_dir`` is a file or no folder, holds no LLM GGUF file (the
            broken ones listed), the name is ambiguous, or no LLM there is ``target`` (the LLMs listed).
    """
    from tuner.catalog.folder import default_target

    if models_dir.is_file():
        raise TuneError(f"--models {models_dir}: is a file; give the folder that holds it (and --target "
                        f"{models_dir.name})", bad_input=True)
    if scan is None:
        raise TuneError(f"--models {models_dir}: no such folder", bad_input=True)
    llms = _llms(scan)
    if not llms:
        broken = [f"{m.path.name} ({m.kind}{': ' + m.error if m.error else ''})" for m in scan.models]
        raise TuneError(f"--models {models_dir}: no LLM GGUF file in this folder"
                        + (f"; found: {', '.join(broken)}" if broken else ""), bad_input=True)
    chosen = _named_llm(llms, target) if target is not None else default_target(scan.models, scan.families)
    if chosen is None:
        raise TuneError(f"--target {target!r}: no such LLM in {models_dir}; LLMs there: "
                        + ", ".join(Path(m.path).name for m in llms), bad_input=True)
    path = Path(chosen.path).resolve()
    entries = {Path(e.target.path).resolve(): e for f in scan.families for e in f.targets}
    return TargetChoice(scan=scan, model=chosen, path=path, entry=entries.get(path))


def _llms(scan: ScanResult) -> list[ModelFile]:
    return [m for m in scan.models if m.kind == "llm"]


def _named_llm(llms: Sequence[ModelFile], target: str) -> ModelFile | None:
    """The LLM ``target`` names: the file at that path, else the one file called so (name or stem).

    Raises:
        TuneError: (``bad_input``) two different files carry the name (``tuner.catalog.folder.pick_named``).
    """
    from tuner.catalog.folder import AmbiguousModelError, pick_named

    tp = Path(target)
    want = tp.resolve() if tp.exists() else None
    at_path = next((m for m in llms if want is not None and Path(m.path).resolve() == want), None)
    if at_path is not None:
        return at_path
    try:
        named = pick_named([m.path for m in llms], target, flag="--target")
    except AmbiguousModelError as exc:
        raise TuneError(str(exc), bad_input=True) from exc
    return next((m for m in llms if named is not None and Path(m.path) == named), None)
