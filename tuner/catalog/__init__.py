"""tuner.catalog: GGUF header reading, folder scan, classification, draft compatibility, families.

Public API (see docs/architecture.md), importable from this package (loaded on first use):
``read_header``, ``GGUFError``, ``has_chat_template``, ``scan_folder``, ``scan_file``,
``scan_models`` / ``ScanResult`` / ``default_target`` (a models folder as the front ends see it), ``check_compatible``,
``CompatVerdict``, ``group_families``, ``Family``, ``DraftCandidate``, ``ModelFile``, ``TokenizerInfo``;
the demo folder: ``write_demo_folder``, ``demo_folder``, ``DemoFolder``, ``DemoProgress``, ``is_generated_demo``,
``DEMO_LABEL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.lazyface import lazy_getattr

if TYPE_CHECKING:  # the names as the type checker sees them; at run time __getattr__ loads them
    from tuner.catalog.compat import CompatVerdict, check_compatible  # noqa: F401
    from tuner.catalog.demo import (  # noqa: F401
        DEMO_LABEL,
        DemoFolder,
        DemoProgress,
        demo_folder,
        is_generated_demo,
        write_demo_folder,
    )
    from tuner.catalog.families import DraftCandidate, Family, TargetEntry, group_families  # noqa: F401
    from tuner.catalog.folder import ScanResult, default_target, scan_models  # noqa: F401
    from tuner.catalog.header import GGUFError, GGUFHeader, TensorInfo, has_chat_template, read_header  # noqa: F401
    from tuner.catalog.model import ModelFile, TokenizerInfo  # noqa: F401
    from tuner.catalog.scan import scan_file, scan_folder  # noqa: F401

_EXPORTS = {
    "read_header": "tuner.catalog.header",
    "GGUFError": "tuner.catalog.header",
    "GGUFHeader": "tuner.catalog.header",
    "TensorInfo": "tuner.catalog.header",
    "has_chat_template": "tuner.catalog.header",
    "scan_folder": "tuner.catalog.scan",
    "scan_file": "tuner.catalog.scan",
    "scan_models": "tuner.catalog.folder",
    "ScanResult": "tuner.catalog.folder",
    "default_target": "tuner.catalog.folder",
    "check_compatible": "tuner.catalog.compat",
    "CompatVerdict": "tuner.catalog.compat",
    "group_families": "tuner.catalog.families",
    "Family": "tuner.catalog.families",
    "TargetEntry": "tuner.catalog.families",
    "DraftCandidate": "tuner.catalog.families",
    "ModelFile": "tuner.catalog.model",
    "TokenizerInfo": "tuner.catalog.model",
    "write_demo_folder": "tuner.catalog.demo",
    "demo_folder": "tuner.catalog.demo",
    "DemoFolder": "tuner.catalog.demo",
    "DemoProgress": "tuner.catalog.demo",
    "is_generated_demo": "tuner.catalog.demo",
    "DEMO_LABEL": "tuner.catalog.demo",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
