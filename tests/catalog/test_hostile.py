"""The reader's contract on hostile bytes: only GGUFError, bounded memory, vanished files, FIFOs.

- a seeded mutation fuzz over real and generated headers (bounded to a few seconds; the longer run
  is ``bench/fuzz_header.py``);
- the regressions of issue 16: a string-array element claiming 2**63 bytes (was OverflowError),
  a 2 GiB sparse file whose lengths claim most of it (was ~20 GB RSS), memory measured in a
  subprocess (a pytest process's high-water mark is shared by every test);
- a file deleted between its header and its token region is one ``broken`` row;
- a FIFO named ``*.gguf`` is refused at once, never opened for a blocking read.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.catalog import header as header_mod
from tuner.catalog.header import GGUFError, read_header
from tuner.catalog.scan import classify_header, scan_file, scan_folder

REPO = Path(__file__).resolve().parents[2]


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _head(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", n_tensors, n_kv)


def _kv_str_array(key: str, lengths_and_bytes: list[tuple[int, bytes]]) -> bytes:
    """A string array whose elements have the given *claimed* lengths followed by the given bytes."""
    body = b"".join(struct.pack("<Q", n) + data for n, data in lengths_and_bytes)
    return _s(key) + struct.pack("<I", 9) + struct.pack("<I", 8) + struct.pack("<Q", len(lengths_and_bytes)) + body


# ------------------------------------------------------------------------------------ fuzz

_SPECIAL_U64 = (0, 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**63 + 7, 2**64 - 1)


def _mutate(rng, data: bytes, header_end: int) -> bytes:
    """One random mutation inside the first ``header_end`` bytes: special u64 values, byte flips,
    truncation, a duplicated or deleted slice."""
    b = bytearray(data)
    end = max(24, min(header_end, len(b)))
    op = rng.randrange(6)
    if op <= 1:  # a special length/count value at a random offset (aligned or not)
        pos = rng.randrange(4, end - 8)
        v = rng.choice(_SPECIAL_U64 + (len(b), len(b) - pos, len(b) + 1, rng.getrandbits(64)))
        b[pos:pos + 8] = struct.pack("<Q", v)
    elif op == 2:
        for _ in range(rng.randrange(1, 16)):
            b[rng.randrange(4, end)] = rng.randrange(256)
    elif op == 3:
        del b[rng.randrange(4, end):]
    elif op == 4:
        i = rng.randrange(4, end)
        j = min(len(b), i + rng.randrange(1, 64))
        b[i:i] = b[i:j] * rng.randrange(1, 4)
    else:
        i = rng.randrange(4, end)
        del b[i:i + rng.randrange(1, 64)]
    return bytes(b)


def _fuzz(seed: int, sources: list[Path], tmp: Path, budget_s: float, max_cases: int) -> dict:
    """Mutate ``sources`` until ``budget_s`` or ``max_cases``; every failure must be a GGUFError and
    scanning the mutant must return a row. Returns counts by outcome."""
    import random

    rng = random.Random(seed)
    bases = []
    for src in sources:
        end = read_header(src).data_offset
        with open(src, "rb") as fh:  # the header and a little tensor data: fast to write
            bases.append((fh.read(end + 4096), end))
    out = {"cases": 0, "ok": 0, "gguf_error": 0}
    p = tmp / "mutant.gguf"
    t_end = time.monotonic() + budget_s
    while out["cases"] < max_cases and time.monotonic() < t_end:
        data, header_end = rng.choice(bases)
        mutant = _mutate(rng, data, header_end)
        if rng.random() < 0.3:
            mutant = _mutate(rng, mutant, header_end)
        p.write_bytes(mutant)
        out["cases"] += 1
        try:
            h = read_header(p, check_data=rng.random() < 0.3)
        except GGUFError as exc:
            assert exc.path == p and exc.reason
            out["gguf_error"] += 1
        except Exception as exc:  # the contract: nothing else, ever
            raise AssertionError(f"seed {seed} case {out['cases']}: {type(exc).__name__}: {exc}") from exc
        else:
            out["ok"] += 1
            classify_header(h)  # never raises
        row = scan_file(p)  # never raises
        assert row.kind
    return out


def test_fuzzed_headers_raise_only_gguf_error(stories260k_session: Path, tmp_path: Path) -> None:
    """~3 s of seeded mutations of the real stories260K and a generated llama GGUF."""
    synth = write_llama_gguf(tmp_path / "synth.gguf")
    total = {"cases": 0, "ok": 0, "gguf_error": 0}
    for seed in (1, 2, 3):
        got = _fuzz(seed, [stories260k_session, synth], tmp_path, budget_s=1.0, max_cases=2000)
        for k in total:
            total[k] += got[k]
    assert total["cases"] >= 100 and total["gguf_error"] > 0 and total["ok"] > 0, total


def test_fuzzed_gemma_header(gemma3_270m: Path, tmp_path: Path) -> None:
    """The real Gemma 3 header (262,144-token vocabulary): mutations of its header bytes only
    (tensor data cut off, so check_data fails too: still only GGUFError)."""
    h = read_header(gemma3_270m)
    with open(gemma3_270m, "rb") as fh:
        head = fh.read(h.data_offset + 4096)
    src = tmp_path / "gemma-head.gguf"
    src.write_bytes(head)
    with pytest.raises(GGUFError, match="truncated"):
        read_header(src)
    import random

    rng = random.Random(7)
    p = tmp_path / "m.gguf"
    for _ in range(25):
        p.write_bytes(_mutate(rng, head, h.data_offset))
        try:
            read_header(p, check_data=False)
        except GGUFError:
            pass


# ------------------------------------------------------------------------ regressions


@pytest.mark.parametrize("claim", [2**63, 2**63 + 1, 2**64 - 1, 2**62])
def test_string_array_element_claiming_2_63_bytes(tmp_path: Path, claim: int) -> None:
    """Issue 16 item 1: a string-array element claiming >= 2**63 bytes raised OverflowError."""
    kv = _kv_str_array("tokenizer.ggml.tokens", [(1, b"a"), (claim, b"b" * 8), (1, b"c")])
    p = tmp_path / "big.gguf"
    p.write_bytes(_head(0, 1) + kv + b"\0" * 64)
    with pytest.raises(GGUFError, match="runs past the end"):
        read_header(p)
    assert scan_file(p).kind == "broken"


@pytest.mark.parametrize("what", ["key", "value", "tensor name"])
def test_scalar_lengths_of_2_63(tmp_path: Path, what: str) -> None:
    big = struct.pack("<Q", 2**63)
    if what == "key":
        data = _head(0, 1) + big + b"x" * 32
    elif what == "value":
        data = _head(0, 1) + _s("general.name") + struct.pack("<I", 8) + big + b"x" * 32
    else:
        data = _head(1, 0) + big + b"x" * 64
    p = tmp_path / "s.gguf"
    p.write_bytes(data)
    with pytest.raises(GGUFError):
        read_header(p)


def _rss_probe(path: Path, chunk: int | None = None) -> dict:
    """Read ``path`` in a fresh interpreter; returns its outcome, peak RSS growth and seconds."""
    # The peak is reset after the imports (Linux: writing 5 to /proc/self/clear_refs resets VmHWM
    # to the current RSS), so the figure is the reader's own high-water mark, not the imports'.
    code = (
        "import json, sys, time\n"
        "import tuner.catalog.header as h\n"
        "from tuner.catalog.scan import scan_file\n"
        "def hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'): return int(line.split()[1])\n"
        "def rss():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmRSS:'): return int(line.split()[1])\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "before = rss()\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    hd = h.read_header(sys.argv[1]); out = 'ok'\n"
        "except h.GGUFError as e:\n"
        "    out = 'GGUFError: ' + e.reason\n"
        "row = scan_file(sys.argv[1])\n"
        "print(json.dumps({'out': out, 'kind': row.kind, 'grow_kib': hwm() - before, "
        "'seconds': time.monotonic() - t0}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                         env=env, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


#: RSS the reader may add (KiB) for any hostile file: one window (4 MiB first chunk, or 1 MiB plus
#: a string of at most MAX_STRING_BYTES = 16 MiB) plus interpreter noise.
RSS_BOUND_KIB = 48 * 1024


def test_memory_is_bounded_whatever_the_file_claims(tmp_path: Path) -> None:
    """Issue 16 item 2: lengths checked only against the file size made the reader allocate
    ~10x the claim (a 2 GiB sparse file: ~20 GB RSS, 168 s). Now: refused or skipped by
    seeking, in a fresh process, with a bounded peak RSS."""
    size = 2 << 30
    cases = {}
    # a string value claiming almost the whole 2 GiB (sparse) file
    p = tmp_path / "value.gguf"
    with open(p, "wb") as fh:
        fh.write(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + struct.pack("<Q", size - 200))
        fh.truncate(size)
    cases["2GiB string value"] = p
    # a string array: one tiny element, one element claiming ~2 GiB, one more: skipped by seeking
    p = tmp_path / "array.gguf"
    kv = _kv_str_array("tokenizer.ggml.tokens", [(1, b"a"), (size - 400, b"")])
    with open(p, "wb") as fh:
        fh.write(_head(0, 1) + kv)
        fh.truncate(size)
    cases["2GiB string-array element"] = p
    # a 64 MiB claimed string (the 675 MB RSS case)
    p = tmp_path / "64m.gguf"
    with open(p, "wb") as fh:
        fh.write(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + struct.pack("<Q", 64 << 20))
        fh.truncate(70 << 20)
    cases["64MiB string"] = p
    # a string array of 2**22 + 1 empty elements (zeros) in a sparse file: refused by count
    p = tmp_path / "count.gguf"
    with open(p, "wb") as fh:
        fh.write(_head(0, 1) + _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<I", 8)
                 + struct.pack("<Q", 2**22 + 1))
        fh.truncate(size)
    cases["4M-element string array"] = p
    # the probe sees memory: a legal 12 MiB string is read in full
    p = tmp_path / "legal.gguf"
    p.write_bytes(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + _s(b"z" * (12 << 20)))
    legal = _rss_probe(p)
    assert legal["out"] == "ok" and legal["grow_kib"] > 12 * 1024, legal
    for name, path in cases.items():
        got = _rss_probe(path)
        assert got["out"].startswith("GGUFError") or got["out"] == "ok", (name, got)
        assert got["grow_kib"] < RSS_BOUND_KIB, (name, got)
        assert got["seconds"] < 20, (name, got)
        assert got["kind"] == "broken", (name, got)


def test_a_big_but_legal_string_is_read(tmp_path: Path) -> None:
    """A 1 MiB chat template (legal, under MAX_STRING_BYTES) still reads, across windows."""
    template = "x" * (1 << 20)
    p = tmp_path / "t.gguf"
    p.write_bytes(_head(0, 2) + _s("tokenizer.chat_template") + struct.pack("<I", 8) + _s(template)
                  + _s("general.name") + struct.pack("<I", 8) + _s("after"))
    h = read_header(p)
    assert h.kv["tokenizer.chat_template"] == template and h.kv["general.name"] == "after"


def test_limits_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "s.gguf"
    p.write_bytes(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + _s("y" * 5000))
    monkeypatch.setattr(header_mod, "MAX_STRING_BYTES", 4096)
    with pytest.raises(GGUFError, match="limit of"):
        read_header(p)


def test_small_windows_give_the_same_header(stories260k_session: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Window refills at every size give the header read in one chunk."""
    full = read_header(stories260k_session)
    monkeypatch.setattr(header_mod, "FIRST_CHUNK_BYTES", 100)
    for chunk in (9, 64, 1000):
        monkeypatch.setattr(header_mod, "READ_CHUNK_BYTES", chunk)
        assert read_header(stories260k_session) == full


# -------------------------------------------------------------------- vanished / special files


def test_file_deleted_after_its_header_is_one_broken_row(stories260k: Path) -> None:
    """Issue 16 item 3: StringArray.raw() reopened a deleted file and FileNotFoundError escaped."""
    h = read_header(stories260k)
    stories260k.unlink()
    row = classify_header(h)
    assert row.kind == "broken" and "cannot read" in row.error and "No such file" in row.error
    with pytest.raises(GGUFError):
        h.kv["tokenizer.ggml.scores"].values()


def test_file_vanishing_during_a_folder_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted between the header read and the tokenizer fingerprint, inside scan_folder."""
    a = write_llama_gguf(tmp_path / "a.gguf")
    write_llama_gguf(tmp_path / "b.gguf", seed=1)
    import tuner.catalog.scan as scan_mod

    real = scan_mod.read_header

    def read_then_delete(path, *args, **kw):
        h = real(path, *args, **kw)
        if Path(path) == a:
            a.unlink()
        return h

    monkeypatch.setattr(scan_mod, "read_header", read_then_delete)
    rows = scan_folder(tmp_path, cache=False)
    by = {r.path.name: r for r in rows}
    assert by["b.gguf"].kind == "llm"
    assert by["a.gguf"].kind == "broken" and "removed while it was scanned" in by["a.gguf"].error


def _no_hang(fn, timeout_s: float = 5.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it blocks."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "blocked on a special file"
    return box


def test_fifo_model_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    box = _no_hang(lambda: read_header(fifo))
    assert isinstance(box.get("error"), GGUFError) and "FIFO" in str(box["error"])
    box = _no_hang(lambda: scan_file(fifo))
    assert box["value"].kind == "broken" and "FIFO" in box["value"].error
    box = _no_hang(lambda: scan_folder(fifo, cache=False))
    assert box["value"][0].kind == "broken"


def test_special_files_are_named(tmp_path: Path) -> None:
    import socket

    from tuner.storage import NotRegularFileError, open_regular

    sock_path = tmp_path / "s.gguf"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock_path))
        with pytest.raises(OSError):  # a socket cannot even be opened; named by scan
            open_regular(sock_path)
        assert "socket" in scan_file(sock_path).error
    finally:
        s.close()
    with pytest.raises(NotRegularFileError, match="character device"):
        open_regular("/dev/null")
    with pytest.raises(NotRegularFileError, match="folder"):
        open_regular(tmp_path)
    long = tmp_path / ("x" * 300 + ".gguf")
    row = scan_file(long)
    assert row.kind == "broken" and "too long" in row.error.lower()


def test_missing_shard_list_stays_one_short_line(tmp_path: Path) -> None:
    """x-00001-of-99999.gguf: the error named all 99,998 missing shards (2.3 MB)."""
    write_llama_gguf(tmp_path / "x-00001-of-99999.gguf")
    rows = scan_folder(tmp_path, cache=False)
    assert len(rows) == 1 and rows[0].kind == "broken"
    assert len(rows[0].error) < 200 and "99,995 more" in rows[0].error


def test_scan_cache_entries_of_the_wrong_type_are_rescanned(tmp_path: Path) -> None:
    from tuner.catalog.scan import _cache_path
    from tuner.storage import atomic_write_json

    models = tmp_path / "models"
    a = write_llama_gguf(models / "a.gguf")
    b = write_llama_gguf(models / "b.gguf", seed=1)
    st_b = b.stat()
    atomic_write_json(_cache_path(), {"version": 2, "entries": {
        str(a.absolute()): [],
        str(b.absolute()): {"size": st_b.st_size, "mtime_ns": st_b.st_mtime_ns, "model": {"path": 3}},
    }})
    rows = scan_folder(models)
    assert [r.kind for r in rows] == ["llm", "llm"]
