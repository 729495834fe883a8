"""The one adapter over the ``gguf`` package (gguf-py from llama.cpp).

The catalog needs only the package's constants: the architecture names llama.cpp knows
(``MODEL_ARCH_NAMES``), the GGML tensor types with their block sizes (``GGML_QUANT_SIZES``)
and the file-type names (``LlamaFileType``). Importing the ``gguf`` package itself pulls in
numpy and its reader (about 0.1-0.4 s), too slow for a scan command, so when the package is
not already imported we load its ``constants.py`` module on its own (it imports nothing but
the standard library). The writer and the full reader (:func:`new_writer`, :func:`open_reader`, used by
:mod:`tuner.catalog.synthetic` to generate the demo models) import the whole package, on first use only.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from tuner.errors import DraftwiseError


class GGUFPackageError(DraftwiseError, RuntimeError):
    """The ``gguf`` package is missing or lacks an expected constant (names the constant)."""


@lru_cache(maxsize=1)
def _constants() -> ModuleType:
    loaded = sys.modules.get("gguf.constants")
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("gguf")
    if spec is None or not spec.submodule_search_locations:
        raise GGUFPackageError("the 'gguf' package is not installed (pip install gguf)")
    path = None
    for folder in spec.submodule_search_locations:
        candidate = f"{folder}/constants.py"
        try:
            with open(candidate, "rb"):
                path = candidate
                break
        except OSError:
            continue
    if path is None:
        raise GGUFPackageError("gguf package has no constants.py")
    mod_spec = importlib.util.spec_from_file_location("_draftwise_gguf_constants", path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=1)
def known_architectures() -> frozenset[str]:
    """Architecture strings (``general.architecture`` values) that the gguf package, and so
    llama.cpp's src/llama-arch.cpp ``LLM_ARCH_NAMES`` of the same era, knows.

    Raises:
        GGUFPackageError: ``gguf.constants.MODEL_ARCH_NAMES`` is missing.
    """
    names = getattr(_constants(), "MODEL_ARCH_NAMES", None)
    if not names:
        raise GGUFPackageError("gguf.constants.MODEL_ARCH_NAMES is missing")
    return frozenset(str(v) for v in names.values())


@lru_cache(maxsize=1)
def package_version() -> str | None:
    """Installed version of the ``gguf`` package (e.g. ``0.19.0``), ``None`` when unknown."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("gguf")
    except (ImportError, PackageNotFoundError):  # pragma: no cover - depends on the install
        return None


@lru_cache(maxsize=1)
def ggml_type_table() -> dict[int, tuple[str, int, int]]:
    """GGML tensor types: ``{type id: (name, block size in elements, bytes per block)}``
    (from ``gguf.constants.GGML_QUANT_SIZES``, mirroring ggml/src/ggml.c ``type_traits``)."""
    consts = _constants()
    sizes = getattr(consts, "GGML_QUANT_SIZES", None)
    if sizes is None:
        raise GGUFPackageError("gguf.constants.GGML_QUANT_SIZES is missing")
    return {int(t): (t.name, int(block), int(nbytes)) for t, (block, nbytes) in sizes.items()}


@lru_cache(maxsize=1)
def file_type_names() -> dict[int, str]:
    """``general.file_type`` values → short names such as ``Q4_K_M`` (``gguf.constants.LlamaFileType``)."""
    enum = getattr(_constants(), "LlamaFileType", None)
    if enum is None:
        return {}
    out = {}
    for member in enum:
        name = member.name
        for prefix in ("MOSTLY_", "ALL_"):
            if name.startswith(prefix):
                name = name[len(prefix):]
        out[int(member)] = name
    return out


def _package() -> ModuleType:
    """The whole ``gguf`` package (imported on first use: it pulls in numpy).

    Raises:
        GGUFPackageError: the package is not installed.
    """
    try:
        import gguf
    except ImportError as exc:
        raise GGUFPackageError(f"the 'gguf' package is not installed (pip install gguf): {exc}") from exc
    return gguf


def new_writer(path: str | Path, architecture: str) -> Any:
    """A ``gguf.GGUFWriter`` for ``path`` with ``general.architecture`` = ``architecture`` (nothing is
    written until its ``write_header_to_file``). The writer's API is gguf-py's (llama.cpp gguf-py/gguf/
    gguf_writer.py): ``add_*`` keys, ``add_tensor_info`` then ``write_tensor_data`` to stream tensors.

    Raises:
        GGUFPackageError: the package is not installed.
    """
    return _package().GGUFWriter(Path(path), architecture)


def open_reader(path: str | Path) -> Any:
    """A ``gguf.GGUFReader`` on ``path`` (memory-mapped; ``fields`` and ``tensors`` as gguf-py gives them).

    Raises:
        GGUFPackageError: the package is not installed.
        OSError: the file cannot be opened; ValueError: it is not a GGUF file gguf-py can read.
    """
    return _package().GGUFReader(Path(path))


def value_type(name: str) -> Any:
    """The ``gguf.GGUFValueType`` member called ``name`` (``"UINT32"``, ``"STRING"``, ``"ARRAY"``, …).

    Raises:
        GGUFPackageError: the package is not installed or has no such member.
    """
    try:
        return _package().GGUFValueType[name]
    except KeyError as exc:
        raise GGUFPackageError(f"gguf.GGUFValueType has no member {name!r}") from exc
