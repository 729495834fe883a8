"""The folder walk stays in the folder and drops nothing silently (issue 27, item 5).

``ln -s /proc models/p`` made ``scan`` list other programs' models through ``/proc/*/root``; links were
followed with no bound; an unreadable sub-folder and a file nested too deep to open were left out with no row.
Now: links followed to 16 levels and 20,000 entries, each folder once, never into ``/proc``, ``/sys`` or
``/dev`` (``/dev/shm`` excepted), and each folder or file left out is a ``broken`` row saying why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.catalog import scan as scan_mod
from tuner.catalog.folder import find_named_model, gguf_files_under
from tuner.catalog.scan import MAX_WALK_DEPTH, MAX_WALK_ENTRIES, scan_folder, walk_gguf
from tuner.cli import main

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX links and system folders")


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_llama_gguf(tmp_path_factory.mktemp("src") / "m.gguf", n_embd=32, n_layers=1).read_bytes()


def _rows(folder: Path) -> dict[str, object]:
    return {str(r.path.relative_to(folder)): r for r in scan_folder(folder, cache=False)}


def test_links_into_proc_sys_and_dev_are_rows_never_walked(tmp_path: Path, model_bytes: bytes) -> None:
    (tmp_path / "own.gguf").write_bytes(model_bytes)
    (tmp_path / "p").symlink_to("/proc")
    (tmp_path / "s").symlink_to("/sys")
    (tmp_path / "d").symlink_to("/dev")
    (tmp_path / "environ.gguf").symlink_to("/proc/self/environ")  # a file there: never read either
    rows = _rows(tmp_path)
    assert set(rows) == {"own.gguf", "p", "s", "d", "environ.gguf"}  # nothing from /proc/*/root, /sys, /dev
    assert rows["own.gguf"].kind == "llm"
    for name, top in (("p", "/proc"), ("s", "/sys"), ("d", "/dev"), ("environ.gguf", "/proc")):
        row = rows[name]
        assert row.kind == "broken" and f"a link into {top}, a system folder" in row.error, row


def test_a_link_into_dev_shm_is_followed(tmp_path: Path, model_bytes: bytes) -> None:
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")
    shm = Path(tempfile.mkdtemp(prefix="dw-walk-", dir="/dev/shm"))
    try:
        (shm / "in-shm.gguf").write_bytes(model_bytes)
        (tmp_path / "shm").symlink_to(shm)
        rows = _rows(tmp_path)
        assert set(rows) == {"shm/in-shm.gguf"} and rows["shm/in-shm.gguf"].kind == "llm"
    finally:
        shutil.rmtree(shm)


def test_link_loops_enter_each_folder_once(tmp_path: Path, model_bytes: bytes) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.gguf").write_bytes(model_bytes)
    (tmp_path / "b" / "y.gguf").write_bytes(model_bytes)  # another file, the same bytes
    (tmp_path / "a" / "to-b").symlink_to(tmp_path / "b")
    (tmp_path / "b" / "to-a").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "self").symlink_to(".")
    (tmp_path / "up").symlink_to(tmp_path)
    walk = walk_gguf(tmp_path)
    assert sorted(p.name for p in walk.files) == ["x.gguf", "y.gguf"] and walk.skipped == ()
    rows = scan_folder(tmp_path, cache=False)
    assert sorted(r.path.name for r in rows) == ["x.gguf", "y.gguf"] and {r.kind for r in rows} == {"llm"}


def test_links_are_followed_to_16_levels_then_a_row(tmp_path: Path, model_bytes: bytes) -> None:
    """Folders f0 … f17 outside the models folder, each reached only through the link ``next`` in the one
    before: f15 is 16 levels down (scanned), f16 would be 17 (a row, not entered)."""
    outside = tmp_path / "outside"
    models = tmp_path / "models"
    models.mkdir()
    for i in range(18):
        (outside / f"f{i}").mkdir(parents=True)
        (outside / f"f{i}" / f"at{i + 1}.gguf").write_bytes(model_bytes)
        if i:
            (outside / f"f{i - 1}" / "next").symlink_to(outside / f"f{i}")
    (models / "start").symlink_to(outside / "f0")
    rows = _rows(models)
    found = sorted(int(Path(k).name[2:-5]) for k, r in rows.items() if r.kind == "llm")
    assert found == list(range(1, MAX_WALK_DEPTH + 1))
    (deep,) = [r for r in rows.values() if r.kind == "broken"]
    assert deep.path.name == "next" and len(deep.path.relative_to(models).parts) == MAX_WALK_DEPTH + 1
    assert f"more than {MAX_WALK_DEPTH} folders below" in deep.error and "not entered" in deep.error


@pytest.fixture
def fast_folder(tmp_path: Path):
    """A folder on tmpfs when there is one (20,000 files take 0.4 s there, 10-16 s on this disk), else tmp_path."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = Path(tempfile.mkdtemp(prefix="dw-walk-", dir="/dev/shm"))
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path / "fast"


def test_the_walk_stops_after_20000_entries_with_a_row(tmp_path: Path, model_bytes: bytes, fast_folder: Path) -> None:
    (tmp_path / "a.gguf").write_bytes(model_bytes)
    fast_folder.mkdir(exist_ok=True)
    for i in range(MAX_WALK_ENTRIES + 10):
        os.close(os.open(fast_folder / f"{i:05d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    junk = tmp_path / "junk"
    junk.symlink_to(fast_folder)
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "late.gguf").write_bytes(model_bytes)  # after junk/: past the limit
    rows = _rows(tmp_path)
    assert rows["a.gguf"].kind == "llm" and "z/late.gguf" not in rows
    (stop,) = [r for r in rows.values() if r.kind == "broken"]
    assert stop.path == junk and f"stopped here after reading {MAX_WALK_ENTRIES:,} files and folders" in stop.error


def test_an_unreadable_sub_folder_is_a_row(tmp_path: Path, model_bytes: bytes, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.gguf").write_bytes(model_bytes)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "hidden.gguf").write_bytes(model_bytes)
    if os.geteuid() == 0:  # root lists a folder of mode 000: refuse it as the kernel refuses another user
        real = os.scandir

        def scandir(path=".", *a, **k):
            if str(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *a, **k)

        monkeypatch.setattr(scan_mod.os, "scandir", scandir)
    locked.chmod(0)
    try:
        rows = _rows(tmp_path)
        rc = main(["scan", "--no-cache", str(tmp_path)])
    finally:
        locked.chmod(0o755)
    assert set(rows) == {"ok.gguf", "locked"}
    assert rows["locked"].kind == "broken"
    assert rows["locked"].error == "cannot list this folder (Permission denied): the models in it are left out"
    out = capsys.readouterr().out
    assert rc == 0 and "  locked: cannot list this folder (Permission denied)" in out.split("Problems:")[1]


def test_a_file_nested_too_deep_to_open_is_a_row(tmp_path: Path, model_bytes: bytes) -> None:
    """16 folders of 254-character names: the last folder's path is longer than PATH_MAX (4096), so neither
    it nor the file in it can be opened by path."""
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for i in range(16):
            name = f"{i:02d}" + "d" * 252
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("deep.gguf", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "wb") as fh:
            fh.write(model_bytes)
    finally:
        os.close(fd)
    rows = scan_folder(tmp_path, cache=False)
    assert len(rows) == 1 and rows[0].kind == "broken"
    assert len(rows[0].path.relative_to(tmp_path).parts) == 16  # the folder that cannot be listed
    assert rows[0].error == "cannot open this folder (File name too long): the models in it are left out"


def test_a_model_is_found_by_name_through_a_link(tmp_path: Path, model_bytes: bytes) -> None:
    """``--target NAME`` looks at every name of a file (the scan lists the file once)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "real.gguf").write_bytes(model_bytes)
    (tmp_path / "alias.gguf").symlink_to(tmp_path / "a" / "real.gguf")
    assert [p.name for p in gguf_files_under(tmp_path)] == ["real.gguf", "alias.gguf"] or \
        sorted(p.name for p in gguf_files_under(tmp_path)) == ["alias.gguf", "real.gguf"]
    assert find_named_model(tmp_path, "real") == tmp_path / "a" / "real.gguf"
    assert find_named_model(tmp_path, "alias.gguf") == tmp_path / "alias.gguf"
    assert len(scan_folder(tmp_path, cache=False)) == 1
