"""Scan a folder of GGUF files: classification, split sets, and a cache keyed by path+size+mtime.

Kinds (``ModelFile.kind``):

- ``llm``: a text model llama.cpp can load (its architecture is known to the gguf package).
- ``mmproj``: a multimodal projector (``general.architecture`` = ``clip`` or ``general.type`` = ``mmproj``).
- ``vocab-only``: tokenizer keys and no tensors (llama.cpp's ``models/ggml-vocab-*.gguf``).
- ``embedding``: ``<arch>.pooling_type`` set to a pooling (> 0) or a BERT-like architecture.
- ``draft-head``: a draft sidecar that only works with its target: EAGLE-3 (arch ``eagle3``),
  DFlash/DSpark (arch ``dflash``), ``gemma4-assistant``, or an MTP head (every block is a
  ``blk.N.nextn.*`` block) — common/speculative.cpp ``common_speculative_infer_type`` family.
- ``unsupported``: an architecture not in the gguf package's ``MODEL_ARCH_NAMES``.
- ``broken``: not GGUF, GGUF v1, big-endian, truncated, empty, unreadable, no tokenizer,
  or an incomplete split set; ``error`` names the cause.

Split sets follow llama.cpp's ``llama_split_path`` naming, ``NAME-%05d-of-%05d.gguf`` (1-based in
the name, ``split.no`` 0-based in the keys); only the first shard carries the architecture and
tokenizer. A complete set is one row (the first shard's path) listing every shard.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.catalog import gguf_adapter
from tuner.catalog.header import GGUFError, GGUFHeader, read_header
from tuner.catalog.hparams import read_hparams
from tuner.catalog.model import (
    KIND_BROKEN,
    KIND_DRAFT_HEAD,
    KIND_EMBEDDING,
    KIND_LLM,
    KIND_MMPROJ,
    KIND_UNSUPPORTED,
    KIND_VOCAB_ONLY,
    ModelFile,
    TokenizerInfo,
)
from tuner.catalog.split import SPLIT_NAME, short_name_list
from tuner.catalog.tokenizer import tokenizer_info
from tuner.storage import file_kind

# Bump when classification or the cached fields change: old cache entries are then ignored.
CACHE_VERSION = 3  # 3: one GGUF hyper-parameter reader (tuner.catalog.hparams), llama.cpp's rule
CACHE_FILE_NAME = "scan-cache.json"
MAX_CACHE_BYTES = 64 * 1024 * 1024
"""The largest scan cache read (64 MiB, about 60,000 files' entries); a larger one is left unread (the scan
reads every header again, and its next save replaces it)."""

# the split-set naming rule lives in tuner.catalog.split (also used by the server and hardware packages)

# Architectures of draft sidecars (llama-arch.cpp: eagle3, dflash, gemma4-assistant).
DRAFT_HEAD_ARCHS = frozenset({"eagle3", "dflash", "gemma4-assistant"})
# BERT-like encoders: always embedding models.
EMBEDDING_ARCHS = frozenset(
    {
        "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert",
        "neo-bert", "eurobert", "gemma-embedding", "llama-embed", "t5encoder",
    }
)
# Projector architectures (tools/mtmd/clip.cpp writes general.architecture = "clip").
MMPROJ_ARCHS = frozenset({"clip"})

_NEXTN_TENSOR = re.compile(r"^blk\.(\d+)\.nextn\.")
_BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class _FileFacts:
    """One file's own scan result plus its split keys (what the cache stores per file)."""

    model: ModelFile
    split_no: int | None
    split_count: int | None
    n_params: int | None = None  # tensor elements in this file alone (shards 2..N have no other facts)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return max(value)  # per-layer arrays (e.g. head_count per block): the largest
    return None


def _quantization(header: GGUFHeader) -> str | None:
    ftype = _int(header.kv.get("general.file_type"))
    if ftype is not None:
        name = gguf_adapter.file_type_names().get(ftype)
        if name:
            return name
    table = gguf_adapter.ggml_type_table()
    by_type: Counter[int] = Counter()
    for t in header.tensors:
        if len(t.shape) >= 2:
            by_type[t.ggml_type] += t.n_bytes or 0
    if not by_type:
        return None
    top = by_type.most_common(1)[0][0]
    return table.get(top, (f"type{top}",))[0]


def _mtp_layers(header: GGUFHeader, arch: str | None) -> tuple[int, set[int], set[int]]:
    nextn_blocks: set[int] = set()
    all_blocks: set[int] = set()
    for t in header.tensors:
        m = _BLOCK_TENSOR.match(t.name)
        if not m:
            continue
        all_blocks.add(int(m.group(1)))
        if _NEXTN_TENSOR.match(t.name):
            nextn_blocks.add(int(m.group(1)))
    declared = _int(header.kv.get(f"{arch}.nextn_predict_layers")) if arch else None
    return max(declared or 0, len(nextn_blocks)), nextn_blocks, all_blocks


@dataclass(frozen=True)
class _Shape:
    """The scan table's attention columns: the largest per-layer head counts and layer 0's head sizes
    (``tuner.catalog.hparams``; 0 = None); all None without ``<arch>.block_count`` (llama.cpp cannot load such a
    file)."""

    n_head: int | None = None
    n_head_kv: int | None = None
    key_length: int | None = None
    value_length: int | None = None
    notes: tuple[str, ...] = ()


def _attention_shape(header: GGUFHeader) -> _Shape:
    try:
        hp = read_hparams(header.kv, header.path)
    except ValueError:
        return _Shape()
    return _Shape(hp.n_head_max, hp.n_head_kv_max, hp.key_length or None, hp.value_length or None, hp.notes)


def classify_header(header: GGUFHeader, size_bytes: int | None = None, mtime_ns: int | None = None) -> ModelFile:
    """Classify one parsed header (a single file, or a split shard read alone).

    Returns a :class:`ModelFile` with ``shards = (header.path,)``. Never raises.
    """
    path = header.path
    kv = header.kv
    arch = header.architecture
    size = header.file_size_bytes if size_bytes is None else size_bytes
    # every row starts as this one (kind and error replaced below)
    base = ModelFile(
        path=path, kind=KIND_BROKEN, shards=(path,), size_bytes=size, mtime_ns=mtime_ns, architecture=arch
    )
    try:
        tok: TokenizerInfo | None = tokenizer_info(header)
    except GGUFError as exc:
        return replace(base, error=exc.reason)
    split_count = _int(kv.get("split.count"))
    split_no = _int(kv.get("split.no"))
    if arch is None:
        if split_count and split_count > 1 and split_no:
            return replace(
                base,
                error=f"shard {split_no + 1} of {split_count} of a split set read alone (its name does not "
                "follow NAME-0000i-of-0000N.gguf, so the other shards cannot be found)",
            )
        return replace(base, error="no 'general.architecture' key", tokenizer=tok)

    n_params = sum(t.n_elements for t in header.tensors)
    mtp, nextn_blocks, all_blocks = _mtp_layers(header, arch)
    shape = _attention_shape(header)
    name = kv.get("general.name")
    pooling = _int(kv.get(f"{arch}.pooling_type"))
    detail: list[tuple[str, str]] = []
    if pooling is not None:
        detail.append(("pooling_type", str(pooling)))
    if shape.notes:
        detail.append(("note", "; ".join(shape.notes)))
    full = replace(
        base,
        name=name if isinstance(name, str) else None,
        n_layers=_int(kv.get(f"{arch}.block_count")),
        n_params=n_params or None,
        quantization=_quantization(header),
        context_length=_int(kv.get(f"{arch}.context_length")),
        mtp_layers=mtp,
        n_embd=_int(kv.get(f"{arch}.embedding_length")),
        n_head=shape.n_head,
        n_head_kv=shape.n_head_kv,
        key_length=shape.key_length,
        value_length=shape.value_length,
        tokenizer=tok,
    )

    def row(kind: str, error: str | None = None, extra: tuple[tuple[str, str], ...] = ()) -> ModelFile:
        return replace(full, kind=kind, error=error, detail=tuple(detail) + extra)

    if not header.tensors and not (split_count and split_count > 1):
        if tok is not None:
            return row(KIND_VOCAB_ONLY)
        return row(KIND_BROKEN, "no tensors and no tokenizer")
    general_type = kv.get("general.type")
    if arch in MMPROJ_ARCHS or general_type == "mmproj":
        return row(KIND_MMPROJ)
    if arch in DRAFT_HEAD_ARCHS:
        spec = "draft-eagle3" if arch == "eagle3" else "draft-mtp" if arch == "gemma4-assistant" else (
            "draft-dspark" if any(t.name == "markov_w1.weight" for t in header.tensors) else "draft-dflash"
        )
        return row(KIND_DRAFT_HEAD, extra=(("spec_type", spec),))
    if nextn_blocks and all_blocks and all_blocks <= nextn_blocks:
        return row(KIND_DRAFT_HEAD, extra=(("spec_type", "draft-mtp"),))
    if arch in EMBEDDING_ARCHS or (pooling is not None and pooling > 0):
        return row(KIND_EMBEDDING)
    try:
        known = gguf_adapter.known_architectures()
    except gguf_adapter.GGUFPackageError as exc:  # pragma: no cover - broken install
        known = None
        detail.append(("note", str(exc)))
    if known is not None and arch not in known:
        return row(
            KIND_UNSUPPORTED,
            f"architecture '{arch}' (general.architecture) is not known to llama.cpp: not in "
            f"MODEL_ARCH_NAMES of gguf {gguf_adapter.package_version() or '(unknown version)'}; "
            "a newer llama.cpp and gguf package may support it",
        )
    if tok is None:
        return row(KIND_BROKEN, "no tokenizer ('tokenizer.ggml.model' missing): llama.cpp cannot load it")
    return row(KIND_LLM)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def scan_file(path: Path | str) -> ModelFile:
    """Classify one GGUF file (a split shard is read alone; use :func:`scan_folder` for sets).

    Never raises: unreadable or invalid files give a ``broken`` row whose ``error`` names the cause.
    """
    return _scan_one(Path(path)).model


def _scan_one(path: Path) -> _FileFacts:
    st = _stat(path)
    size = st.st_size if st else 0
    mtime = st.st_mtime_ns if st else None

    def broken(reason: str) -> _FileFacts:
        return _FileFacts(
            ModelFile(path=path, kind=KIND_BROKEN, error=reason, shards=(path,), size_bytes=size, mtime_ns=mtime),
            None,
            None,
        )

    if st is not None and not stat.S_ISREG(st.st_mode):
        return broken(f"not a regular file (it is {file_kind(st.st_mode)})")
    try:
        header = read_header(path)
    except GGUFError as exc:
        return broken(exc.reason)
    model = classify_header(header, size_bytes=size, mtime_ns=mtime)
    if model.kind == KIND_BROKEN and st is not None and _stat(path) is None:
        model = replace(model, error=f"{model.error} (the file was removed while it was scanned)")
    n_params = sum(t.n_elements for t in header.tensors)
    return _FileFacts(model, _int(header.kv.get("split.no")), _int(header.kv.get("split.count")), n_params)


# ---------------------------------------------------------------------------------------------
# folder walk


MAX_WALK_DEPTH = 16
"""Folder levels below the scanned folder the walk enters (through links too); deeper ones are a row."""
MAX_WALK_ENTRIES = 20_000
"""Directory entries (files and folders, any name) the walk reads before it stops with a row saying so."""
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")
"""Folders a link may lead into but the walk never enters or reads (another program's files through
``/proc/*/root``, devices), except :data:`SYSTEM_FOLDERS_ALLOWED`."""
SYSTEM_FOLDERS_ALLOWED = ("/dev/shm",)
_SKIP_ROWS_PER_REASON = 10


@dataclass(frozen=True)
class GgufWalk:
    """What :func:`walk_gguf` found.

    Attributes:
        files: every ``*.gguf`` entry to scan (a FIFO or a file that cannot be stat'ed included: each becomes a
            ``broken`` row), each file once.
        skipped: ``(path, reason)`` for each folder or file left out (cannot be listed, a link into a system
            folder, too deep, the entry limit): the scan shows each as a ``broken`` row, so nothing is
            dropped silently. At most :data:`_SKIP_ROWS_PER_REASON` of one kind, then one that counts the rest.
    """

    files: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...]


def _in_system_folder(path: Path | str) -> str | None:
    """The system folder (:data:`SYSTEM_FOLDERS`) ``path`` really lies in (links resolved), else None."""
    if os.name != "posix":
        return None
    real = os.path.realpath(path)
    if any(real == ok or real.startswith(ok + "/") for ok in SYSTEM_FOLDERS_ALLOWED):
        return None
    return next((top for top in SYSTEM_FOLDERS if real == top or real.startswith(top + "/")), None)


def _is_link(e: os.DirEntry) -> bool:
    """``e`` is a symbolic link (True when that cannot be told: then it is checked like one)."""
    try:
        return e.is_symlink()
    except OSError:
        return True


class _Walk:
    """State of one walk: the directories and files seen (device, inode), the entries read, the rows kept."""

    def __init__(self, root: Path, each_file_once: bool) -> None:
        self.root = root
        self.each_file_once = each_file_once
        self.seen_dirs: set[tuple[int, int]] = set()
        self.seen_files: set[tuple[int, int]] = set()
        self.files: list[Path] = []
        self.entries = 0
        self.skipped: list[tuple[Path, str]] = []
        self.kinds: Counter[str] = Counter()
        self.first: dict[str, Path] = {}

    def skip(self, path: Path, kind: str, reason: str) -> None:
        """Keep ``(path, reason)`` as a row; past :data:`_SKIP_ROWS_PER_REASON` of one ``kind``, only count it."""
        self.kinds[kind] += 1
        self.first.setdefault(kind, path)
        if self.kinds[kind] <= _SKIP_ROWS_PER_REASON:
            self.skipped.append((path, reason))

    def result(self) -> GgufWalk:
        extra = [(self.root, f"{n - _SKIP_ROWS_PER_REASON} more left out as {self.first[kind]} was ({kind})")
                 for kind, n in self.kinds.items() if n > _SKIP_ROWS_PER_REASON]
        return GgufWalk(tuple(self.files), tuple(self.skipped + extra))

    def enter(self, d: Path, linked: bool) -> list[os.DirEntry] | None:
        """The entries of folder ``d`` to look at, or None (seen already, a system folder, or unreadable:
        the last two a row). ``linked``: ``d`` is a link (or the scanned folder): only then can it lead into a
        system folder (a plain sub-folder lies where its parent does)."""
        try:
            st = os.stat(d)
        except OSError as exc:  # its path is longer than PATH_MAX, it vanished, a folder on the way is locked
            self.skip(d, "cannot be listed", f"cannot open this folder ({exc.strerror or exc}): the models in it "
                      "are left out")
            return None
        key = (st.st_dev, st.st_ino)
        if key in self.seen_dirs:
            return None  # a link loop or a folder reached twice: its files are listed once
        self.seen_dirs.add(key)
        system = _in_system_folder(d) if linked else None
        if system is not None:
            self.skip(d, "a system folder", f"a link into {system}, a system folder: the scan never enters it")
            return None
        try:
            with os.scandir(d) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError as exc:
            self.skip(d, "cannot be listed", f"cannot list this folder ({exc.strerror or exc}): the models in it "
                      "are left out")
            return None

    def add_file(self, e: os.DirEntry) -> None:
        """Keep the ``*.gguf`` entry ``e`` (once per file; a dangling link is not a model)."""
        p = Path(e.path)
        fst = _stat(p)
        if fst is None:
            if not e.is_symlink():
                self.files.append(p)  # exists but cannot be stat'ed: a broken row
            return
        if not stat.S_ISREG(fst.st_mode):
            self.files.append(p)  # a FIFO, socket or device named *.gguf: a broken row, never opened
            return
        system = _in_system_folder(p) if _is_link(e) else None  # its folder was checked on entry
        if system is not None:
            self.skip(p, "a system folder", f"a link into {system}, a system folder: the scan never reads it")
            return
        fkey = (fst.st_dev, fst.st_ino)
        if fkey not in self.seen_files or not self.each_file_once:
            self.seen_files.add(fkey)
            self.files.append(p)


def walk_gguf(folder: Path, each_file_once: bool = True) -> GgufWalk:
    """Every ``*.gguf`` file under ``folder``, bounded: links to folders are followed, each folder is entered
    once (device and inode), at most :data:`MAX_WALK_DEPTH` levels down and :data:`MAX_WALK_ENTRIES` entries
    read, never into :data:`SYSTEM_FOLDERS` (``/dev/shm`` excepted). What is left out is in ``skipped``.
    ``each_file_once`` False keeps every name of a file that several links name (for finding a model by
    name). Never raises."""
    walk = _Walk(folder, each_file_once)
    stack = [(folder, 0, True)]
    while stack:
        d, depth, linked = stack.pop()
        entries = walk.enter(d, linked)
        if entries is None:
            continue
        subdirs = []
        for e in entries:
            walk.entries += 1
            if walk.entries > MAX_WALK_ENTRIES:
                walk.skip(d, "the entry limit", f"the scan stopped here after reading {MAX_WALK_ENTRIES:,} files and "
                          f"folders under {folder}: the rest is left out (choose the folder that holds the models)")
                return walk.result()
            try:
                is_dir = e.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                if depth + 1 > MAX_WALK_DEPTH:
                    walk.skip(Path(e.path), "too deep", f"more than {MAX_WALK_DEPTH} folders below {folder}: "
                              "not entered")
                else:
                    subdirs.append((Path(e.path), depth + 1, _is_link(e)))
            elif e.name.lower().endswith(".gguf"):
                walk.add_file(e)
        stack.extend(reversed(subdirs))
    return walk.result()


def _group_splits(facts: list[_FileFacts]) -> list[ModelFile]:
    singles: list[ModelFile] = []
    sets: dict[tuple[Path, str, int], dict[int, _FileFacts]] = {}
    for f in facts:
        m = SPLIT_NAME.match(f.model.path.name)
        if m and int(m.group("count")) > 1:
            key = (f.model.path.parent, m.group("stem"), int(m.group("count")))
            sets.setdefault(key, {})[int(m.group("no"))] = f
        else:
            singles.append(f.model)
    rows = list(singles)
    for (parent, stem, count), shards in sets.items():
        rows.append(_merge_split(parent, stem, count, shards))
    rows.sort(key=lambda r: str(r.path))
    return rows


class _ShardNames:
    """``names[i]`` = the file name of shard ``i`` (1-based) of a split set."""

    def __init__(self, stem: str, count: int) -> None:
        self.stem, self.count = stem, count

    def __getitem__(self, i: int) -> str:
        return f"{self.stem}-{i:05d}-of-{self.count:05d}.gguf"


def _merge_split(parent: Path, stem: str, count: int, shards: dict[int, _FileFacts]) -> ModelFile:
    present = [shards[i].model.path for i in sorted(shards)]
    total = sum(shards[i].model.size_bytes for i in shards)
    first = shards.get(1)
    head_path = first.model.path if first else present[0]
    mtime = first.model.mtime_ns if first else None
    names = _ShardNames(stem, count)
    missing = [names[i] for i in range(1, count + 1) if i not in shards]
    if missing:
        return ModelFile(
            path=head_path, kind=KIND_BROKEN, shards=tuple(present), size_bytes=total, mtime_ns=mtime,
            architecture=first.model.architecture if first else None,
            error=f"incomplete split set: missing shard{'s' if len(missing) > 1 else ''} " + short_name_list(missing),
        )
    for i in range(1, count + 1):
        f = shards[i]
        # Shards 2..N read alone have no architecture: that is expected. A shard is bad when its
        # header could not be read at all (no split keys) or when the first shard is broken.
        if f.model.kind == KIND_BROKEN and (i == 1 or f.split_count is None):
            return ModelFile(
                path=head_path, kind=KIND_BROKEN, shards=tuple(present), size_bytes=total, mtime_ns=mtime,
                error=f"shard {names[i]}: {f.model.error}",
            )
        if f.split_count is not None and f.split_count != count:
            return ModelFile(
                path=head_path, kind=KIND_BROKEN, shards=tuple(present), size_bytes=total, mtime_ns=mtime,
                error=f"shard {names[i]}: split.count is {f.split_count}, the file name says {count}",
            )
        if f.split_no is not None and f.split_no != i - 1:
            return ModelFile(
                path=head_path, kind=KIND_BROKEN, shards=tuple(present), size_bytes=total, mtime_ns=mtime,
                error=f"shard {names[i]}: split.no is {f.split_no} (0-based), expected {i - 1}",
            )
    assert first is not None
    n_params = sum((shards[i].n_params or 0) for i in shards) or None
    return replace(first.model, shards=tuple(present), size_bytes=total, n_params=n_params)


# ---------------------------------------------------------------------------------------------
# cache


def _cache_path() -> Path:
    from tuner.paths import cache_dir

    return cache_dir() / CACHE_FILE_NAME


def _tok_to_dict(t: TokenizerInfo | None) -> dict | None:
    if t is None:
        return None
    return {
        "model": t.model, "pre": t.pre, "n_tokens": t.n_tokens, "bos_id": t.bos_id, "eos_id": t.eos_id,
        "add_bos": t.add_bos, "add_eos": t.add_eos, "fingerprint": t.fingerprint, "vocab_type": t.vocab_type,
    }


def _tok_from_dict(d: dict | None) -> TokenizerInfo | None:
    return None if d is None else TokenizerInfo(**d)


def _model_to_dict(m: ModelFile) -> dict:
    return {
        "path": str(m.path), "kind": m.kind, "error": m.error, "shards": [str(s) for s in m.shards],
        "size_bytes": m.size_bytes, "architecture": m.architecture, "name": m.name, "n_layers": m.n_layers,
        "n_params": m.n_params, "quantization": m.quantization, "context_length": m.context_length,
        "mtp_layers": m.mtp_layers, "n_embd": m.n_embd, "n_head": m.n_head, "n_head_kv": m.n_head_kv,
        "key_length": m.key_length, "value_length": m.value_length, "tokenizer": _tok_to_dict(m.tokenizer),
        "mtime_ns": m.mtime_ns, "detail": [list(x) for x in m.detail],
    }


def _model_from_dict(d: dict) -> ModelFile:
    d = dict(d)
    d["path"] = Path(d["path"])
    d["shards"] = tuple(Path(s) for s in d["shards"])
    d["tokenizer"] = _tok_from_dict(d.get("tokenizer"))
    d["detail"] = tuple(tuple(x) for x in d.get("detail", ()))
    return ModelFile(**d)


def _facts_from_cache(hit: dict) -> _FileFacts:
    """Rebuild one file's facts from its cache entry.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: the entry does not have the cached shape.
    """
    model = _model_from_dict(hit["model"])
    if not isinstance(model.kind, str) or not isinstance(model.size_bytes, int):
        raise TypeError("cache entry of the wrong type")
    ints = [hit.get("split_no"), hit.get("split_count"), hit.get("n_params")]
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in ints):
        raise TypeError("cache entry of the wrong type")
    return _FileFacts(model, *ints)


def _load_cache() -> dict:
    from tuner.storage import CorruptFileError, FileTooLargeError, load_json

    try:
        data = load_json(_cache_path(), limit_bytes=MAX_CACHE_BYTES, what="the scan cache")
    except FileTooLargeError as exc:  # read nothing of it; the next save replaces our own cache
        logging.getLogger(__name__).warning("%s", exc)
        return {}
    except (CorruptFileError, OSError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(entries: dict) -> None:
    from tuner.storage import atomic_write_json

    try:
        atomic_write_json(_cache_path(), {"version": CACHE_VERSION, "entries": entries})
    except OSError:
        pass  # a read-only cache folder only costs speed


def scan_folder(folder: Path | str, cache: bool = True) -> list[ModelFile]:
    """Classify every ``*.gguf`` under ``folder`` (recursive through :func:`walk_gguf`: links followed, each
    folder once, bounded in depth and entries, never into ``/proc``, ``/sys`` or ``/dev``).

    Args:
        folder: the models folder (a single ``.gguf`` file is accepted too).
        cache: reuse results for files whose absolute path, size and mtime are unchanged, from
            ``tuner.paths.cache_dir() / "scan-cache.json"`` (written atomically).

    Returns:
        One :class:`ModelFile` per model, sorted by path; a complete split set is one row.
        Never raises for a bad file: it becomes a ``broken`` row with ``error`` naming the cause; so does a
        folder or file the walk left out (``walk_gguf``'s ``skipped``: cannot be listed, a system folder,
        too deep, past the entry limit), with size 0.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        OSError: ``folder`` cannot be looked at (a name longer than the system allows, a link loop).
    """
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"models folder not found: {folder}")
    walk = walk_gguf(folder) if folder.is_dir() else GgufWalk((folder,), ())
    files = list(walk.files)
    entries = _load_cache() if cache else {}
    facts: list[_FileFacts] = []
    changed = False
    for p in files:
        ap = str(p.absolute())
        st = _stat(p)
        hit = entries.get(ap) if st is not None else None
        if st is not None and isinstance(hit, dict) and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
            try:
                facts.append(_facts_from_cache(hit))
                continue
            except (KeyError, TypeError, ValueError, AttributeError):
                pass  # a cache entry of the wrong shape: scan the file again
        f = _scan_one(p)
        facts.append(f)
        if cache and st is not None and f.model.mtime_ns is not None:
            entries[ap] = {
                "size": st.st_size, "mtime_ns": st.st_mtime_ns, "model": _model_to_dict(f.model),
                "split_no": f.split_no, "split_count": f.split_count, "n_params": f.n_params,
            }
            changed = True
    if cache:
        # forget files that were under this folder and are gone
        root = str(folder.absolute())
        seen = {str(p.absolute()) for p in files}
        for key in [k for k in entries if (k == root or k.startswith(root + os.sep)) and k not in seen]:
            del entries[key]
            changed = True
        if changed:
            _save_cache(entries)
    left_out = [ModelFile(path=p, kind=KIND_BROKEN, error=reason, shards=(p,)) for p, reason in walk.skipped]
    return sorted(_group_splits(facts) + left_out, key=lambda r: str(r.path))


def model_to_json(m: ModelFile) -> dict:
    """JSON form used by ``draftwise scan --json``: ``shards`` is the number of files,
    ``shard_paths`` lists them; ``tokenizer`` has ``model, pre, n_tokens, bos, eos, add_bos,
    add_eos, fingerprint`` (plus ``vocab_type``); ``error`` only for broken/unsupported files."""
    t = m.tokenizer
    out: dict = {
        "path": str(m.path),
        "kind": m.kind,
    }
    if m.error is not None:
        out["error"] = m.error
    out.update(
        {
            "shards": len(m.shards),
            "shard_paths": [str(s) for s in m.shards],
            "size_bytes": m.size_bytes,
            "architecture": m.architecture,
            "name": m.name,
            "n_layers": m.n_layers,
            "n_params": m.n_params,
            "quantization": m.quantization,
            "context_length": m.context_length,
            "mtp_layers": m.mtp_layers,
            "n_embd": m.n_embd,
            "n_head": m.n_head,
            "n_head_kv": m.n_head_kv,
            "tokenizer": None
            if t is None
            else {
                "model": t.model, "pre": t.pre, "n_tokens": t.n_tokens, "bos": t.bos_id, "eos": t.eos_id,
                "add_bos": t.add_bos, "add_eos": t.add_eos, "fingerprint": t.fingerprint,
                "vocab_type": t.vocab_type,
            },
        }
    )
    if m.detail:
        out["detail"] = dict(m.detail)
    return out
