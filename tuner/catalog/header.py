"""Fast GGUF header reader: magic, version, key/value pairs and tensor infos, nothing else.

Unlike ``gguf.GGUFReader`` (which builds a numpy view for every token string of a
150,000-token vocabulary), this reader walks array bodies without decoding their elements:
numeric arrays become :class:`ArrayRef` (offset + count), string arrays :class:`StringArray`
(offset + count + end offset), decoded only on demand. Every count and length read from the
file is checked against the bytes that remain before anything is allocated, so a crafted file
(e.g. an array of 2**40 strings) is refused with :class:`GGUFError`. Tensor data must lie inside
the file (an interrupted download is reported naming the first tensor that is cut off).

Format: ggml/src/gguf.cpp ``gguf_init_from_file_impl`` and docs/gguf.md of llama.cpp.
Versions 2 and 3 share the layout (64-bit counts); version 1 (32-bit counts) is refused, as
llama.cpp does. Files are little-endian; a big-endian GGUF is refused on a little-endian host.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tuner import storage
from tuner.catalog import gguf_adapter
from tuner.errors import DraftwiseError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT, ggml/src/gguf.cpp
MAX_DIMS = 4  # GGML_MAX_DIMS

# GGUF value types (enum gguf_type, ggml/include/gguf.h)
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 8, 9, 10, 11, 12

_SCALAR_FORMATS = {
    T_UINT8: "<B",
    T_INT8: "<b",
    T_UINT16: "<H",
    T_INT16: "<h",
    T_UINT32: "<I",
    T_INT32: "<i",
    T_FLOAT32: "<f",
    T_BOOL: "<?",
    T_UINT64: "<Q",
    T_INT64: "<q",
    T_FLOAT64: "<d",
}
_SCALAR = {t: struct.Struct(f) for t, f in _SCALAR_FORMATS.items()}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# Numeric arrays up to this many elements are decoded into tuples right away (split info,
# eagle3 target layers, ...); longer ones stay as ArrayRef.
EAGER_ARRAY_MAX = 64
# The header is read through a window: first this many bytes, then READ_CHUNK_BYTES at a time
# from wherever the next read starts (bytes that are skipped are never read).
FIRST_CHUNK_BYTES = 4 << 20
READ_CHUNK_BYTES = 1 << 20
# Nested arrays deeper than this are refused (gguf.cpp has no nesting in practice).
MAX_NESTING = 4

# The reader's limits: memory is bounded by these, whatever a file claims. Real models are far
# below them (a 262,144-token vocabulary is about 5 MiB of strings; the largest models have a few
# thousand tensors and a few hundred keys).
#: longest single string (key, string value, tensor name) decoded
MAX_STRING_BYTES = 16 << 20
#: all decoded strings of one header together
MAX_KEPT_STRING_BYTES = 64 << 20
#: key/value pairs, tensors, and values kept (short array elements, nested arrays) together
MAX_ITEMS = 1 << 18
#: entries of one string array walked (a vocabulary has up to a few hundred thousand)
MAX_STRING_ARRAY_COUNT = 1 << 22
#: bytes :meth:`StringArray.raw` / :meth:`ArrayRef.values` read back from the file at once
MAX_REGION_BYTES = 64 << 20


class GGUFError(DraftwiseError):
    """A file cannot be read as GGUF. ``path`` names the file, ``reason`` says why (plain words)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's description from the header.

    Attributes:
        name: tensor name, e.g. ``blk.0.attn_q.weight``.
        shape: dimensions as stored (ggml order: ``ne[0]`` first, the row length).
        ggml_type: GGML type id (0 = F32, 1 = F16, 12 = Q4_K, ...).
        offset_bytes: absolute file offset of the tensor data (data section start + stored offset).
        n_bytes: size of the data in bytes; ``None`` for a GGML type the gguf package does not know.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset_bytes: int
    n_bytes: int | None

    @property
    def n_elements(self) -> int:
        """Number of elements (product of ``shape``)."""
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class ArrayRef:
    """A numeric array kept in the file: ``count`` elements of GGUF type ``elem_type`` at ``offset_bytes``."""

    path: Path
    elem_type: int
    count: int
    offset_bytes: int

    def values(self) -> tuple:
        """Decode all elements (reads ``count * element size`` bytes).

        Raises:
            GGUFError: the element type is not a numeric type, the file changed or vanished, or
                the array is larger than ``MAX_REGION_BYTES``.
        """
        fmt = _SCALAR_FORMATS.get(self.elem_type)
        if fmt is None:
            raise GGUFError(self.path, f"array of GGUF type {self.elem_type} cannot be decoded as numbers")
        size = struct.calcsize(fmt)
        raw = _read_region(self.path, self.offset_bytes, size * self.count, "numeric array")
        if len(raw) != size * self.count:
            raise GGUFError(self.path, "file is shorter than its header says (changed while reading?)")
        return struct.unpack(f"<{self.count}{fmt[1]}", raw)

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class StringArray:
    """A string array kept in the file, decoded only on demand.

    The raw region ``[offset_bytes, end_offset_bytes)`` holds ``count`` entries, each a
    little-endian u64 length followed by that many bytes (UTF-8 by convention).
    """

    path: Path
    count: int
    offset_bytes: int
    end_offset_bytes: int

    def __len__(self) -> int:
        return self.count

    def raw(self) -> bytes:
        """The whole region as bytes (length prefixes included); cheap to hash or compare.

        Raises:
            GGUFError: the file changed or vanished since the header was read, or the region is
                larger than ``MAX_REGION_BYTES``.
        """
        data = _read_region(self.path, self.offset_bytes, self.end_offset_bytes - self.offset_bytes, "string array")
        if len(data) != self.end_offset_bytes - self.offset_bytes:
            raise GGUFError(self.path, "file is shorter than its header says (changed while reading?)")
        return data

    def iter_bytes(self, data: bytes | None = None) -> Iterator[bytes]:
        """Yield each element as raw bytes, in order. ``data`` may pass a region from :meth:`raw`."""
        buf = self.raw() if data is None else data
        pos = 0
        unpack = _U64.unpack_from
        for _ in range(self.count):
            try:
                (n,) = unpack(buf, pos)
            except (struct.error, OverflowError):
                raise GGUFError(self.path, "string array changed since the header was read") from None
            pos += 8
            yield bytes(buf[pos : pos + n])
            pos += n

    def texts(self) -> list[str]:
        """Decode every element (UTF-8, invalid bytes replaced). Slow for big vocabularies."""
        return [b.decode("utf-8", errors="replace") for b in self.iter_bytes()]

    def element_offsets(self, indices: tuple[int, ...], data: bytes | None = None) -> dict[int, int]:
        """Offsets (relative to ``offset_bytes``) where the elements with the given ids start.

        An index equal to ``count`` maps to the region's end. Walks the length prefixes only.
        """
        buf = self.raw() if data is None else data
        wanted = sorted(set(indices))
        out: dict[int, int] = {}
        pos = 0
        unpack = _U64.unpack_from
        i = 0
        for target in wanted:
            if target > self.count:
                raise IndexError(f"element {target} of a {self.count}-element array")
            while i < target:
                pos += 8 + unpack(buf, pos)[0]
                i += 1
            out[target] = pos
        return out


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before the tensor data of one GGUF file.

    Attributes:
        path: the file read.
        version: GGUF version (2 or 3).
        kv: key → value. Scalars are Python values (``str``, ``int``, ``float``, ``bool``);
            string arrays are :class:`StringArray`; numeric arrays are tuples when short
            (at most ``EAGER_ARRAY_MAX`` elements) and :class:`ArrayRef` otherwise.
        tensors: tensor infos in file order.
        data_offset: absolute offset of the tensor data section (aligned to ``general.alignment``).
        file_size_bytes: size of the file.
        kv_types: key → GGUF value type id (``T_STRING``, ``T_ARRAY``, ...).
    """

    path: Path
    version: int
    kv: dict[str, object]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_size_bytes: int
    kv_types: dict[str, int]

    def get(self, key: str, default: object = None) -> object:
        """``kv.get(key, default)``."""
        return self.kv.get(key, default)

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` when it is a string, else ``None``."""
        arch = self.kv.get("general.architecture")
        return arch if isinstance(arch, str) else None


def _read_region(path: Path, offset: int, n: int, what: str) -> bytes:
    """``n`` bytes at ``offset`` of ``path`` (fewer when the file is now shorter).

    Raises:
        GGUFError: ``n`` exceeds ``MAX_REGION_BYTES``, or the file cannot be opened or read
            (e.g. it was deleted after its header was read).
    """
    if n > MAX_REGION_BYTES:
        raise GGUFError(path, f"{what} of {n} bytes is larger than the reader's limit of {MAX_REGION_BYTES >> 20} MiB")
    try:
        with storage.open_regular(path) as fh:
            fh.seek(offset)
            return fh.read(n)
    except OSError as exc:
        raise GGUFError(path, f"cannot read {what} again: {_os_reason(exc)}") from exc


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, storage.NotRegularFileError):
        return f"not a regular file (it is {exc.kind})"
    return str(exc.strerror or exc)


def _describe_non_gguf(head: bytes) -> str:
    """Plain-words guess at what a non-GGUF file is, from its first bytes."""
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype", b"<html", b"<head", b"<?xml")):
        return "not a GGUF file: it is an HTML/XML page (a download saved from a web page?)"
    if stripped.startswith(b"version https://git-lfs"):
        return "not a GGUF file: it is a Git LFS pointer (run 'git lfs pull')"
    if stripped.startswith((b"{", b"[")):
        return "not a GGUF file: it looks like JSON text"
    if head[:4] in (b"lmgg", b"fmgg", b"tjgg", b"ggml", b"ggjt", b"ggmf"):
        return "not a GGUF file: legacy GGML/GGJT format (convert it to GGUF)"
    return f"not a GGUF file: magic bytes are {head[:4]!r}, expected b'GGUF'"


class _Cursor:
    """Bounds-checked reads over a file through a sliding window (no mmap, so a file truncated
    while we read it gives an error, not SIGBUS). ``buf`` holds the file bytes
    ``[base, base + len(buf))``; ``pos`` is an absolute offset and may run past the window while
    skipping data nobody reads (skipping only moves ``pos``). At most one window of
    ``max(FIRST_CHUNK_BYTES, READ_CHUNK_BYTES + MAX_STRING_BYTES)`` bytes is held, whatever the
    file claims. Every failure is a GGUFError naming ``what``."""

    __slots__ = ("buf", "base", "pos", "size", "path", "fh", "kept_bytes", "items")

    def __init__(self, fh, size: int, path: Path, first_chunk: int) -> None:
        self.fh = fh
        self.size = size
        self.path = path
        self.pos = 0
        self.base = 0
        self.kept_bytes = 0  # decoded string bytes kept in the header (MAX_KEPT_STRING_BYTES)
        self.items = 0  # values kept (MAX_ITEMS)
        fh.seek(0)
        self.buf = fh.read(min(size, first_chunk))

    def truncated(self, n: int, what: str) -> GGUFError:
        return GGUFError(
            self.path,
            f"truncated or corrupt header: {what} needs {n} bytes at offset {self.pos}, "
            f"but the file has {self.size} bytes",
        )

    def fill(self, start: int, n: int) -> None:
        """Make the window cover ``[start, start + n)`` (already checked to lie inside the file),
        reading from ``start`` at least ``READ_CHUNK_BYTES``."""
        want = min(self.size - start, max(n, READ_CHUNK_BYTES))
        self.fh.seek(start)
        data = self.fh.read(want)
        if len(data) < n:
            raise GGUFError(self.path, "file became shorter while it was being read")
        self.buf = data
        self.base = start

    def need(self, n: int, what: str) -> int:
        """Check that ``n`` bytes at ``pos`` lie inside the file and are in the window; returns
        their offset inside ``buf``."""
        end = self.pos + n
        if n < 0 or end > self.size:
            raise self.truncated(n, what)
        rel = self.pos - self.base
        if rel < 0 or end > self.base + len(self.buf):
            self.fill(self.pos, n)
            rel = 0
        return rel

    def keep(self, n_items: int, n_bytes: int = 0) -> None:
        """Count values and decoded bytes kept in the header against the reader's limits."""
        self.items += n_items
        self.kept_bytes += n_bytes
        if self.items > MAX_ITEMS:
            raise GGUFError(self.path, f"header holds more than {MAX_ITEMS} values (the reader's limit)")
        if self.kept_bytes > MAX_KEPT_STRING_BYTES:
            raise GGUFError(
                self.path, f"header strings exceed {MAX_KEPT_STRING_BYTES >> 20} MiB in total (the reader's limit)"
            )

    def u32(self, what: str) -> int:
        rel = self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, rel)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        rel = self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, rel)
        self.pos += 8
        return v

    def take(self, n: int, what: str) -> bytes:
        """The next ``n`` bytes (``n`` <= MAX_STRING_BYTES checked by the caller)."""
        rel = self.need(n, what)
        self.pos += n
        return self.buf[rel : rel + n]

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        if n > self.size - self.pos:
            raise self.truncated(n, what)
        if n > MAX_STRING_BYTES:
            raise GGUFError(
                self.path,
                f"{what} claims {n} bytes, more than the reader's limit of {MAX_STRING_BYTES >> 20} MiB per string",
            )
        self.keep(1, n)
        rel = self.need(n, what)
        self.pos += n
        return str(memoryview(self.buf)[rel : rel + n], "utf-8", "replace")  # no intermediate copy

    def scalar(self, t: int, what: str):
        st = _SCALAR[t]
        rel = self.need(st.size, what)
        (v,) = st.unpack_from(self.buf, rel)
        self.pos += st.size
        return v

    def skip(self, n: int) -> None:
        """Advance over ``n`` bytes that were already checked against the file size."""
        self.pos += n

    def skip_strings(self, count: int, what: str) -> None:
        """Advance over ``count`` strings, reading only their length prefixes (window by window;
        a long string is skipped by seeking, never read)."""
        size, i = self.size, 0
        unpack = _U64.unpack_from
        pos = self.pos
        while True:
            buf, base = self.buf, self.base
            rel = pos - base
            try:
                if rel < 0:
                    raise struct.error("before the window")
                for i in range(i, count):  # noqa: B020 - resumes at the entry that failed
                    rel += 8 + unpack(buf, rel)[0]
                pos = base + rel
                break
            except (struct.error, OverflowError):
                # the next length prefix lies past the window (or past the file)
                pos = base + rel
                if pos + 8 > size:
                    raise GGUFError(
                        self.path,
                        f"truncated or corrupt header: string array {what} ({count} entries) runs past the "
                        f"end of the file ({size} bytes) at entry {i}",
                    ) from None
                self.fill(pos, 8)
        if pos > size:
            raise GGUFError(
                self.path,
                f"truncated or corrupt header: string array {what} ({count} entries) runs past the end "
                f"of the file ({size} bytes)",
            )
        self.pos = pos


def _read_value(cur: _Cursor, t: int, key: str, path: Path, depth: int = 0):
    if t in _SCALAR:
        return cur.scalar(t, f"value of {key!r}")
    if t == T_STRING:
        return cur.string(f"value of {key!r}")
    if t == T_ARRAY:
        if depth >= MAX_NESTING:
            raise GGUFError(path, f"key {key!r}: arrays nested more than {MAX_NESTING} deep")
        et = cur.u32(f"element type of {key!r}")
        count = cur.u64(f"element count of {key!r}")
        remaining = cur.size - cur.pos
        if et in _SCALAR:
            esize = _SCALAR[et].size
            if count * esize > remaining:
                raise GGUFError(
                    path,
                    f"key {key!r}: array claims {count} elements of {esize} bytes, more than the "
                    f"{remaining} bytes left in the file",
                )
            start = cur.pos
            if count <= EAGER_ARRAY_MAX:
                cur.keep(count)
                data = cur.take(count * esize, f"elements of {key!r}")
                return struct.unpack_from(f"<{count}{_SCALAR_FORMATS[et][1]}", data, 0)
            cur.keep(1)
            cur.skip(count * esize)
            return ArrayRef(path, et, count, start)
        if et == T_STRING:
            if count * 8 > remaining:
                raise GGUFError(
                    path,
                    f"key {key!r}: array claims {count} strings, more than the {remaining} bytes left "
                    "in the file can hold",
                )
            if count > MAX_STRING_ARRAY_COUNT:
                raise GGUFError(
                    path, f"key {key!r}: array claims {count} strings, more than the reader's limit of "
                    f"{MAX_STRING_ARRAY_COUNT}",
                )
            cur.keep(1)
            start = cur.pos
            cur.skip_strings(count, repr(key))
            return StringArray(path, count, start, cur.pos)
        if et == T_ARRAY:
            if count * 12 > remaining:
                raise GGUFError(path, f"key {key!r}: array claims {count} nested arrays, more than the file holds")
            cur.keep(count)
            return tuple(_read_value(cur, T_ARRAY, key, path, depth + 1) for _ in range(count))
        raise GGUFError(path, f"key {key!r}: unknown array element type {et}")
    raise GGUFError(path, f"key {key!r}: unknown GGUF value type {t}")


def has_chat_template(path: Path | str) -> bool:
    """True when the GGUF at ``path`` carries a non-empty ``tokenizer.chat_template`` (llama-server then
    applies it to ``/v1/chat/completions`` requests: tools/server/server-common.cpp
    ``oaicompat_chat_params_parse``). An unreadable header counts as no template; raises nothing."""
    try:
        v = read_header(path).kv.get("tokenizer.chat_template")
    except (GGUFError, OSError):
        return False
    return isinstance(v, str) and bool(v.strip())


def read_header(path: Path | str, check_data: bool = True) -> GGUFHeader:
    """Read the header of one GGUF file.

    Args:
        path: the file.
        check_data: also require every tensor's data to lie inside the file.

    Returns:
        The parsed :class:`GGUFHeader`.

    Raises:
        GGUFError: the file cannot be opened, is not a regular file (FIFO, socket, device:
            refused without blocking), is empty, is not GGUF (the reason says what it
            looks like: HTML page, Git LFS pointer, legacy GGML), is GGUF v1 or another
            unsupported version, is big-endian, declares counts/lengths larger than the file,
            has an unknown value type, is truncated (header or tensor data), or exceeds one of the
            reader's limits (``MAX_STRING_BYTES``, ``MAX_KEPT_STRING_BYTES``, ``MAX_ITEMS``,
            ``MAX_STRING_ARRAY_COUNT``). No other exception escapes, whatever the bytes.

    Memory: one read window (at most ``max(FIRST_CHUNK_BYTES, READ_CHUNK_BYTES +
    MAX_STRING_BYTES)`` = 17 MiB) plus the header kept (at most ``MAX_KEPT_STRING_BYTES`` = 64 MiB
    of decoded strings and ``MAX_ITEMS`` values), independent of the lengths the file claims;
    skipped regions are never read. A file whose claims are refused or skipped costs one 4 MiB
    first window. ``bench/fuzz_header.py`` and ``tests/catalog/test_hostile.py`` measure it in a
    fresh process.
    """
    path = Path(path)
    try:
        fh = storage.open_regular(path)
    except OSError as exc:
        raise GGUFError(path, f"cannot open: {_os_reason(exc)}") from exc
    with fh:
        try:
            size = os.fstat(fh.fileno()).st_size
        except OSError as exc:
            raise GGUFError(path, f"cannot stat: {exc.strerror or exc}") from exc
        if size == 0:
            raise GGUFError(path, "empty file (0 bytes)")
        if size < 24:
            head = fh.read(size)
            if head[:4] != GGUF_MAGIC:
                raise GGUFError(path, _describe_non_gguf(head))
            raise GGUFError(path, f"truncated: {size} bytes is shorter than a GGUF header")
        head = fh.read(64)
        if head[:4] != GGUF_MAGIC:
            raise GGUFError(path, _describe_non_gguf(head))
        try:
            cur = _Cursor(fh, size, path, FIRST_CHUNK_BYTES)
            return _parse(cur, size, path, check_data)
        except OSError as exc:
            raise GGUFError(path, f"read error: {_os_reason(exc)}") from exc
        except (struct.error, OverflowError, ValueError, IndexError, MemoryError, RecursionError) as exc:
            # a safety net for the contract (only GGUFError escapes); the checks above should
            # make this unreachable, and the fuzz test (tests/catalog/test_hostile.py) looks for it
            raise GGUFError(path, f"corrupt header ({type(exc).__name__}: {exc})") from exc


def _parse(cur: _Cursor, size: int, path: Path, check_data: bool) -> GGUFHeader:
    cur.pos = 4
    version = cur.u32("version")
    if version & 0xFFFF == 0 and (version >> 24) in (1, 2, 3):
        swapped = version >> 24
        if sys.byteorder == "little":
            raise GGUFError(
                path, f"big-endian GGUF (version {swapped}) cannot be used on this little-endian machine"
            )
    if version == 1:
        raise GGUFError(path, "GGUF version 1 is no longer supported by llama.cpp (re-convert the model)")
    if version not in (2, 3):
        raise GGUFError(path, f"unsupported GGUF version {version} (this reader knows 2 and 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("key/value count")
    remaining = size - cur.pos
    # A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes.
    if n_kv * 13 > remaining:
        raise GGUFError(path, f"header claims {n_kv} key/value pairs, more than the {remaining} bytes left can hold")
    # A tensor info takes at least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
    if n_tensors * 32 > remaining:
        raise GGUFError(path, f"header claims {n_tensors} tensors, more than the {remaining} bytes left can hold")
    if n_kv + n_tensors > MAX_ITEMS:
        raise GGUFError(
            path, f"header claims {n_kv} key/value pairs and {n_tensors} tensors, more than the reader's limit of "
            f"{MAX_ITEMS} in all",
        )
    cur.keep(n_kv + n_tensors)

    kv: dict[str, object] = {}
    kv_types: dict[str, int] = {}
    for i in range(n_kv):
        key = cur.string(f"key #{i}")
        t = cur.u32(f"type of key {key!r}")
        if key in kv:
            raise GGUFError(path, f"duplicate key {key!r}")
        kv[key] = _read_value(cur, t, key, path)
        kv_types[key] = t

    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(path, f"key 'general.alignment' = {alignment!r} is not a power of two")

    types = gguf_adapter.ggml_type_table()
    raw_tensors = []
    names = set()
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.u32(f"dimension count of tensor {name!r}")
        if n_dims == 0 or n_dims > MAX_DIMS:
            raise GGUFError(path, f"tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
        shape = struct.unpack_from(f"<{n_dims}Q", cur.take(8 * n_dims, f"shape of tensor {name!r}"), 0)
        ggml_type = cur.u32(f"type of tensor {name!r}")
        offset = cur.u64(f"offset of tensor {name!r}")
        if name in names:
            raise GGUFError(path, f"duplicate tensor name {name!r}")
        names.add(name)
        raw_tensors.append((name, shape, ggml_type, offset))

    data_offset = cur.pos + (-cur.pos % alignment)
    tensors = []
    for name, shape, ggml_type, offset in raw_tensors:
        n_elem = 1
        for d in shape:
            n_elem *= d
        info = types.get(ggml_type)
        n_bytes = None
        if info is not None:
            _, block, type_size = info
            if shape[0] % block:
                raise GGUFError(
                    path, f"tensor {name!r}: row length {shape[0]} is not a multiple of the {info[0]} block size {block}"
                )
            n_bytes = n_elem // block * type_size
        if offset % alignment:
            raise GGUFError(
                path, f"tensor {name!r}: data offset {offset} is not a multiple of the alignment {alignment}"
            )
        start = data_offset + offset
        if check_data:
            end = start + (n_bytes or 0)
            if end > size:
                raise GGUFError(
                    path,
                    f"truncated: tensor {name!r} needs bytes up to offset {end} but the file has only "
                    f"{size} bytes (interrupted download?)",
                )
        tensors.append(TensorInfo(name, tuple(shape), ggml_type, start, n_bytes))

    return GGUFHeader(
        path=path,
        version=version,
        kv=kv,
        tensors=tuple(tensors),
        data_offset=data_offset,
        file_size_bytes=size,
        kv_types=kv_types,
    )
