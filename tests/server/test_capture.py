"""The capture of served requests without a server (tuner/server/capture.py): the private folders, pruning by
count and by bytes (oldest first by modification time, files younger than a second left alone), listing,
deleting one, *Forget*, switching off, the re-tune's reader, and what every launch gets (the argv only with
capture on, umask 077, no slot-debug variable). Files are real files this test writes the way llama-server does
(``<12-digit milliseconds>.txt``, tools/server/server-context.cpp ``handle_completions_impl``)."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.server.conftest import help_text
from tuner import process
from tuner.server import capture
from tuner.server.argv import UnsupportedConfigError, build_argv
from tuner.server.capture import CaptureBounds
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help
from tuner.units import MIB

CURRENT = parse_help(help_text("b11434"))
LEGACY = parse_help(help_text("legacy-4227c9b"))
IK = parse_help(help_text("ik-0.1.5"))
NOW = 1_800_000_000.0
posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes and umask are POSIX")


def write(folder: Path, name_ms: int, text: str | bytes, age_s: float, now: float = NOW) -> Path:
    """A captured file as llama-server names it, received ``age_s`` seconds before ``now``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name_ms:012d}.txt"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.utime(path, (now - age_s, now - age_s))
    return path


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# ------------------------------------------------------------------------------------------ pruning
def test_prune_keeps_the_newest_200_by_modification_time_not_by_name(tmp_path: Path) -> None:
    """Names restart after a reboot (a monotonic clock), so the order is the files' times: here the names run
    the other way round, and the 10 oldest by time go."""
    folder = tmp_path / "m"
    for i in range(210):
        write(folder, 10_000 - i, f"request {i}", age_s=1000 - i)  # i = 209 is the newest
    result = capture.prune(folder, CaptureBounds(), now_s=NOW)
    assert (result.removed, result.kept) == (10, 200)
    assert names(folder) == {f"{10_000 - i:012d}.txt" for i in range(10, 210)}
    assert capture.prune(folder, now_s=NOW).removed == 0  # the default bound is the same 200


def test_prune_keeps_at_most_64_mib(tmp_path: Path) -> None:
    """70 files of 1 MiB (sparse: no disk used) → the newest 64, exactly 64 MiB; one large new file pushes
    out everything older that no longer fits."""
    folder = tmp_path / "m"
    for i in range(70):
        p = write(folder, i, b"", age_s=500 - i)
        with p.open("r+b") as fh:
            fh.truncate(MIB)
        os.utime(p, (NOW - 500 + i, NOW - 500 + i))
    assert capture.MAX_BYTES == 64 * MIB
    result = capture.prune(folder, now_s=NOW)
    assert (result.removed, result.kept, result.kept_bytes) == (6, 64, 64 * MIB)
    assert names(folder) == {f"{i:012d}.txt" for i in range(6, 70)}
    big = write(folder, 99, b"", age_s=10)
    with big.open("r+b") as fh:
        fh.truncate(40 * MIB)
    os.utime(big, (NOW - 10, NOW - 10))
    result = capture.prune(folder, now_s=NOW)
    assert result.kept_bytes <= 64 * MIB and result.kept == 25 and big.exists()


def test_a_file_younger_than_a_second_is_never_pruned_but_counts(tmp_path: Path) -> None:
    """llama-server may still be writing a file of this instant: it stays, and an older one goes instead."""
    folder = tmp_path / "m"
    young = [write(folder, 100 + i, "being written", age_s=0.2) for i in range(3)]
    old = [write(folder, i, "old", age_s=60 - i) for i in range(3)]
    result = capture.prune(folder, CaptureBounds(max_files=2, max_bytes=MIB, min_age_s=1.0), now_s=NOW)
    assert all(p.exists() for p in young) and not any(p.exists() for p in old)
    assert (result.removed, result.kept) == (3, 3)


def test_prune_leaves_other_files_alone(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    write(folder, 1, "x", age_s=100)
    (folder / "notes.md").write_text("mine")
    (folder / "000000000002.txt").mkdir()
    capture.prune(folder, CaptureBounds(max_files=0), now_s=NOW)
    assert names(folder) == {"notes.md", "000000000002.txt"}


def test_the_pruner_runs_at_most_every_interval() -> None:
    clock = [0.0]
    folder = Path("/nonexistent-capture-folder")
    pruner = capture.Pruner(folder, interval_s=2.0, clock=lambda: clock[0])
    assert pruner.tick() is not None  # due at once
    clock[0] = 1.9
    assert pruner.tick() is None
    clock[0] = 2.1
    assert pruner.tick() == capture.PruneResult(0, 0, 0)


# ------------------------------------------------------------------------------------------ folders
@posix_only
def test_the_folder_is_made_private_before_the_server_starts() -> None:
    folder = capture.log_prompts_dir("stories260K")
    assert folder == capture.captures_root() / "stories260K"
    for f in (folder, capture.captures_root()):
        assert stat.S_IMODE(f.stat().st_mode) == 0o700
    folder.chmod(0o755)  # widened by hand: made private again
    assert stat.S_IMODE(capture.log_prompts_dir("stories260K").stat().st_mode) == 0o700


@posix_only
def test_a_link_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    capture.captures_root().mkdir(parents=True, mode=0o700)
    (capture.captures_root() / "m").symlink_to(elsewhere)
    with pytest.raises(capture.CaptureError, match="not a folder"):
        capture.log_prompts_dir("m")


@pytest.mark.parametrize("model_id", ["org/model:Q4", "../../etc", "..", ".", "CON", "nul.txt", "a" * 300,
                                      "name.", "café model", "x\x1b[2Jy", ""])
def test_any_model_id_is_one_folder_inside_the_root(model_id: str) -> None:
    name = capture.folder_name(model_id)
    assert name and "/" not in name and "\\" not in name and name not in (".", "..") and len(name) <= 64
    assert name.isascii() and name.replace("-", "").replace("_", "").replace(".", "").isalnum()
    assert capture.capture_dir(model_id).parent == capture.captures_root()
    assert capture.folder_name(model_id) != capture.folder_name(model_id + "2")
    assert capture.folder_name("gemma-3-270m-Q4_K_M") == "gemma-3-270m-Q4_K_M"


# ------------------------------------------------------------------------------------------ listing, deleting
def test_the_list_is_newest_first_with_the_first_words() -> None:
    folder = capture.log_prompts_dir("m")
    write(folder, 2, "older prompt about cats", age_s=30, now=time.time())
    write(folder, 1, "  newest\n\tprompt " + "word " * 40, age_s=5, now=time.time())
    write(capture.log_prompts_dir("other"), 3, "another model", age_s=1, now=time.time())
    listed = capture.list_captured("m")
    assert [f.path.name for f in listed] == ["000000000001.txt", "000000000002.txt"]
    assert listed[0].model_id == "m" and listed[0].size_bytes == len("  newest\n\tprompt " + "word " * 40)
    assert listed[0].first_words() == "newest prompt word word word word word word word word word word …"
    assert listed[1].first_words() == "older prompt about cats"
    assert len(capture.list_captured()) == 3
    assert capture.captured_count("m") == (2, sum(f.size_bytes for f in listed))


def test_one_request_is_deleted_and_nothing_outside_the_captures(tmp_path: Path) -> None:
    folder = capture.log_prompts_dir("m")
    a = write(folder, 1, "a", age_s=5, now=time.time())
    b = write(folder, 2, "b", age_s=4, now=time.time())
    assert capture.delete_captured(a) and not a.exists() and b.exists()
    assert not capture.delete_captured(a)  # already gone
    outside = tmp_path / "000000000009.txt"
    outside.write_text("mine")
    for bad in (outside, folder / ".." / ".." / "000000000009.txt", folder / "notes.md", folder):
        with pytest.raises(ValueError, match="not a captured request"):
            capture.delete_captured(bad)
    assert outside.exists() and b.exists()


def test_forget_deletes_every_request_and_keeps_the_folders_for_the_serving_server() -> None:
    folders = [capture.log_prompts_dir(m) for m in ("a", "b")]
    for i, f in enumerate(folders):
        write(f, i, "x", age_s=3, now=time.time())
        write(f, 10 + i, "y", age_s=2, now=time.time())
    assert capture.forget_captured(keep_folders=True) == 4
    assert all(f.is_dir() and not any(f.iterdir()) for f in folders)
    assert capture.list_captured() == []


def test_switching_off_deletes_the_requests_and_their_folders() -> None:
    for m in ("a", "b"):
        write(capture.log_prompts_dir(m), 1, "x", age_s=3, now=time.time())
    assert capture.forget_captured() == 2
    assert not capture.captures_root().exists()
    assert capture.forget_captured() == 0  # nothing left: no error


def test_drop_probe_removes_only_the_readiness_completion_of_this_launch() -> None:
    folder = capture.log_prompts_dir("m")
    now = time.time()
    probe = write(folder, 1, "Once upon a time", age_s=0.5, now=now)
    user = write(folder, 2, "Once upon a time, the user wrote", age_s=0.4, now=now)
    earlier = write(folder, 3, "Once upon a time", age_s=600, now=now)  # a user's, before this launch
    assert capture.drop_probe(folder, "Once upon a time", since_unix_s=now - 2) == 1
    assert not probe.exists() and user.exists() and earlier.exists()


# ------------------------------------------------------------------------------------------ the re-tune's reader
def test_the_reader_dedups_samples_over_time_and_says_the_period() -> None:
    folder = capture.log_prompts_dir("m")
    now = time.time()
    for i in range(20):
        write(folder, i, f"prompt {i}", age_s=2000 - 100 * i, now=now)  # 100 s apart, oldest first
    write(folder, 50, "prompt 3", age_s=50, now=now)  # the same text again, later
    write(folder, 51, "being written", age_s=0.1, now=now)
    every = capture.captured_requests("m", now_s=now)
    assert every.files == 21 and every.duplicates == 1 and len(every) == 20
    assert [r.text for r in every][-1] == "prompt 3"  # the newest copy of a repeat
    assert "prompt 3" not in [r.text for r in every][:-1] and "being written" not in [r.text for r in every]
    assert every.span_s == pytest.approx(2000 - 50)
    sample = capture.captured_requests("m", limit=5, now_s=now)
    texts = [r.text for r in sample]
    assert texts[0] == "prompt 0" and texts[-1] == "prompt 3" and len(texts) == 5
    assert sample.first_unix_s == every.first_unix_s and sample.last_unix_s == every.last_unix_s
    assert [r.mtime for r in sample] == sorted(r.mtime for r in sample)
    assert capture.captured_requests("none-such").requests == ()


def test_the_reader_marks_a_json_prompt() -> None:
    folder = capture.log_prompts_dir("m")
    write(folder, 1, "[\n  1,\n  15043\n]", age_s=5, now=time.time())
    write(folder, 2, "[a bracketed title]", age_s=4, now=time.time())
    flags = {r.text[:3]: r.looks_like_json for r in capture.captured_requests("m")}
    assert flags == {"[\n ": True, "[a ": False}


# ------------------------------------------------------------------------------------------ what a launch gets
def test_the_argv_carries_the_folder_only_when_capture_is_on() -> None:
    off = ServerConfig(model_path=Path("/m/t.gguf"), port=1)
    assert not any("log-prompts" in a for a in build_argv("llama-server", off, CURRENT))
    on = ServerConfig(model_path=Path("/m/t.gguf"), port=1, log_prompts_dir=Path("/c/t"))
    argv = build_argv("llama-server", on, CURRENT)
    assert argv[argv.index("--log-prompts-dir") + 1] == "/c/t"
    for dialect, who in ((LEGACY, "this older llama.cpp build"), (IK, "ik_llama.cpp's llama-server")):
        assert not dialect.has_capture
        assert dialect.capture_problem() == (f"{who} has no --log-prompts-dir, so it cannot keep the requests it "
                                             "serves (current llama.cpp builds can)")
        with pytest.raises(UnsupportedConfigError, match="--log-prompts-dir"):
            build_argv("llama-server", on, dialect)
    assert CURRENT.has_capture and CURRENT.capture_problem() is None


@posix_only
def test_a_child_gets_umask_077_and_no_slot_debug_variable(tmp_path: Path) -> None:
    child = process.spawn([sys.executable, "-c", "import os; print(oct(os.umask(0))); "
                           "print(os.environ.get('LLAMA_SERVER_SLOTS_DEBUG'))"],
                          env=process.clean_env({**os.environ, "LLAMA_SERVER_SLOTS_DEBUG": "1"}), umask=0o077)
    assert child.wait(30) == 0
    assert child.log_lines() == ["0o77", "None"]
    plain = process.spawn([sys.executable, "-c", "import os; print(oct(os.umask(0)))"])
    assert plain.wait(30) == 0 and plain.log_lines() == [oct(_own_umask())]


def _own_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
