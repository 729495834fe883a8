"""Locate files shipped in the repository's ``resources/`` folder.

Works from a source checkout / editable install (``<repo>/resources``), from a
PyInstaller bundle (``sys._MEIPASS/resources``) and from ``DRAFTWISE_RESOURCES``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def resources_dir() -> Path:
    """Return the folder holding Draftwise's resources.

    Raises:
        FileNotFoundError: no candidate folder exists (names every place looked at).
    """
    candidates: list[Path] = []
    env = os.environ.get("DRAFTWISE_RESOURCES")
    if env:
        candidates.append(Path(env))
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidates.append(Path(bundle) / "resources")
    candidates.append(Path(__file__).resolve().parent.parent / "resources")
    candidates.append(Path(sys.prefix) / "share" / "draftwise" / "resources")
    for c in candidates:
        if c.is_dir():
            return c
    raise FileNotFoundError(
        "Draftwise resources folder not found; looked in: " + ", ".join(str(c) for c in candidates)
    )


def resource_path(*parts: str) -> Path:
    """Return ``resources_dir() / parts``; the file need not exist."""
    return resources_dir().joinpath(*parts)
