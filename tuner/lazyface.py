"""A package face that loads its modules on first use: ``__getattr__ = lazy_getattr(__name__, EXPORTS)`` in a
package's ``__init__`` (PEP 562), where ``EXPORTS`` maps each public name to the module that defines it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: ``name`` is imported from ``exports[name]`` when first
    asked. Raises AttributeError (naming the package) for a name not in ``exports``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


__all__ = ["lazy_getattr"]
