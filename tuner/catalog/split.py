"""Split GGUF sets: the shard file names llama.cpp derives from the first shard.

llama.cpp names shards ``NAME-%05d-of-%05d.gguf`` (src/llama.cpp ``llama_split_path``; 1-based in
the name, while the ``split.no`` key is 0-based) and, given the first shard, loads the others by
that name (src/llama-model-loader.cpp ``llama_model_loader`` constructor). This module is pure
path logic (no file reads beyond ``exists``) so that the server and hardware packages can use it
without importing the scanner.
"""

from __future__ import annotations

import re
from pathlib import Path

#: ``NAME-0000i-of-0000N.gguf`` (llama.cpp ``llama_split_prefix`` accepts exactly 5 digits each).
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def split_shard_paths(path: Path | str) -> tuple[Path, ...]:
    """Every shard path of the split set ``path`` belongs to, in order (1 … N), whether or not
    the files exist; ``(path,)`` for a file whose name is not ``NAME-0000i-of-0000N.gguf`` with
    N > 1 (look-alikes such as ``best-of-breed.gguf`` are single files).

    Shape: a tuple of N paths in ``path``'s folder. Raises nothing.
    """
    path = Path(path)
    m = SPLIT_NAME.match(path.name)
    if not m or int(m.group("count")) < 2:
        return (path,)
    n = int(m.group("count"))
    # keep the extension's spelling of the given name (.gguf / .GGUF)
    ext = path.name[-5:]
    return tuple(path.with_name(f"{m.group('stem')}-{i:05d}-of-{n:05d}{ext}") for i in range(1, n + 1))


def missing_shards(path: Path | str) -> tuple[Path, ...]:
    """The shards of ``path``'s split set that do not exist (empty for a complete set or a
    single file). Raises nothing."""
    return tuple(p for p in split_shard_paths(path) if not p.exists())


def short_name_list(names: list[str] | tuple[str, ...], shown: int = 3) -> str:
    """``a, b, c`` or ``a, b, c and 99,995 more``: a list of file names that keeps an error
    message to one short line (a name such as ``x-00001-of-99999.gguf`` misses 99,998 shards).
    Raises nothing."""
    names = list(names)
    if len(names) <= shown + 1:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" and {len(names) - shown:,} more"
