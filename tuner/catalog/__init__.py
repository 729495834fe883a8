"""tuner.catalog: GGUF header reading, folder scan, classification, draft compatibility, families.

Public API (see docs/architecture.md): ``read_header``, ``scan_folder``, ``check_compatible``,
``group_families`` and the types in :mod:`tuner.catalog.model`.
"""
