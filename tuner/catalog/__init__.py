"""tuner.catalog: GGUF header reading, folder scan, classification, draft compatibility, families.

Public API (see docs/architecture.md), importable from this package (loaded on first use):
``read_header``, ``GGUFError``, ``has_chat_template``, ``scan_folder``, ``scan_file``, ``check_compatible``,
``CompatVerdict``, ``group_families``, ``Family``, ``DraftCandidate``, ``ModelFile``, ``TokenizerInfo``;
the demo folder: ``write_demo_folder``, ``demo_folder``, ``DemoFolder``, ``DemoProgress``, ``is_generated_demo``,
``DEMO_LABEL``.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "read_header": "tuner.catalog.header",
    "GGUFError": "tuner.catalog.header",
    "GGUFHeader": "tuner.catalog.header",
    "TensorInfo": "tuner.catalog.header",
    "has_chat_template": "tuner.catalog.header",
    "scan_folder": "tuner.catalog.scan",
    "scan_file": "tuner.catalog.scan",
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


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.catalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
