"""Probes are bounded: a child whose output Draftwise reads (``--help``, ``--version``, ``--list-devices``,
``llama-fit-params``) may print at most ``MAX_CAPTURE_BYTES`` and run at most its timeout; past either its
whole process group is killed (a wrapper's grandchild too), and a probe that exits leaves nothing of its
group behind. Real processes (POSIX shell scripts), no fakes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tuner import process
from tuner.hardware.listdevices import run_list_devices
from tuner.units import format_bytes

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(os.name != "posix", reason="shell scripts and process groups are POSIX")


def script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return p


def live_members(pgid: int) -> list[int]:
    """Pids of the process group ``pgid`` that still run (a zombie awaiting its reaper counts as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return out


def wait_gone(pgid: int, within_s: float = 5.0) -> list[int]:
    """Live members of ``pgid`` after giving a SIGKILLed group ``within_s`` to disappear."""
    deadline = time.monotonic() + within_s
    while (left := live_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def pids_written(path: Path) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= 2:
            return [int(x) for x in lines]
        time.sleep(0.02)
    raise AssertionError(f"the script did not write its pids to {path}")


# a wrapper that starts a grandchild and waits for it: its pid and the grandchild's go to PIDS
WRAPPER_WITH_GRANDCHILD = 'echo $$ > "$PIDS"\nsleep 317 &\necho $! >> "$PIDS"\nwait\n'


@pytest.mark.parametrize("how", ["run_output", "run_capture", "list_devices"])
def test_timed_out_probe_leaves_no_process_of_its_group(tmp_path: Path, how: str) -> None:
    pids_file = tmp_path / "pids"
    exe = script(tmp_path, "wrapper", WRAPPER_WITH_GRANDCHILD.replace("$PIDS", str(pids_file)))
    t0 = time.monotonic()
    if how == "list_devices":
        result = run_list_devices(exe, timeout_s=1.0)
        assert not result.ok and result.note is not None and "timed out after 1 s" in result.note
    else:
        with pytest.raises(TimeoutError, match="no exit within 1 s"):
            getattr(process, how)([str(exe), "--list-devices"], timeout_s=1.0)
    assert time.monotonic() - t0 < 20, "the timeout did not end the probe"
    wrapper_pid, sleep_pid = pids_written(pids_file)
    assert wait_gone(wrapper_pid) == [], "a process of the timed-out probe's group survived"
    assert not process.process_exists(sleep_pid), "the wrapper's grandchild (sleep 317) survived"


def test_probe_that_exits_takes_its_background_job_along(tmp_path: Path) -> None:
    """A wrapper that answers and exits while its background job still holds the output pipe: the answer
    comes back at once (not after the timeout) and the job is killed with the group."""
    pids_file = tmp_path / "pids"
    body = 'echo $$ > "$PIDS"\nsleep 317 &\necho $! >> "$PIDS"\necho "version: 1 (abc)"\nexit 0\n'
    exe = script(tmp_path, "answers", body.replace("$PIDS", str(pids_file)))
    rc, out = process.run_capture([str(exe), "--version"], timeout_s=60.0)
    assert (rc, out.strip()) == (0, "version: 1 (abc)")
    wrapper_pid, sleep_pid = pids_written(pids_file)
    assert wait_gone(wrapper_pid) == []
    assert not process.process_exists(sleep_pid)


@pytest.mark.parametrize("how", ["run_output", "run_capture"])
def test_endless_output_is_cut_at_the_cap_and_the_group_killed(tmp_path: Path, how: str) -> None:
    pids_file = tmp_path / "pids"
    body = 'echo $$ > "$PIDS"\nsleep 317 &\necho $! >> "$PIDS"\nexec yes AAAAAAAAAAAAAAAAAAAAAAAA\n'
    exe = script(tmp_path, "endless", body.replace("$PIDS", str(pids_file)))
    cap = 256 * 1024
    with pytest.raises(process.OutputCapExceeded, match=r"output cut at the 256.0 KiB cap") as info:
        getattr(process, how)([str(exe), "--help"], timeout_s=60.0, cap_bytes=cap)
    assert isinstance(info.value, OSError)  # callers that report "could not run" report it too
    assert info.value.cap_bytes == cap and info.value.argv == [str(exe), "--help"]
    wrapper_pid, sleep_pid = pids_written(pids_file)
    assert wait_gone(wrapper_pid) == []
    assert not process.process_exists(sleep_pid)


def test_output_under_the_cap_is_returned_whole(tmp_path: Path) -> None:
    # 3 x 100 KiB on stdout and one line on stderr; the streams kept apart (run_output) or merged (run_capture)
    exe = script(tmp_path, "talker", "head -c 307200 /dev/zero | tr '\\0' 'x'\nprintf 'a\\r\\nb\\n'\n"
                 "echo 'to stderr' >&2\nexit 3\n")
    rc, out, err = process.run_output([str(exe)], timeout_s=60.0, cap_bytes=400 * 1024)
    assert rc == 3
    assert out == "x" * 307200 + "a\nb\n"
    assert err == "to stderr\n"
    rc, merged = process.run_capture([str(exe)], timeout_s=60.0, cap_bytes=400 * 1024)
    assert rc == 3 and "x" * 307200 in merged and "a\nb\n" in merged and "to stderr" in merged


def test_cap_counts_stdout_and_stderr_together(tmp_path: Path) -> None:
    exe = script(tmp_path, "both", "head -c 40000 /dev/zero\nhead -c 40000 /dev/zero >&2\n")
    assert process.run_output([str(exe)], timeout_s=60.0, cap_bytes=80_000)[0] == 0
    with pytest.raises(process.OutputCapExceeded):
        process.run_output([str(exe)], timeout_s=60.0, cap_bytes=79_999)


def test_a_missing_program_is_still_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        process.run_output([str(tmp_path / "nope")], timeout_s=5.0)
    assert not isinstance(info.value, process.OutputCapExceeded)


def test_devices_with_an_endless_llama_server_stays_small_and_says_so_in_one_line(tmp_path: Path) -> None:
    """``draftwise devices --server SCRIPT`` where SCRIPT prints endlessly to anything it is asked: the
    command's own peak RSS stays under 100 MB (it reached 4.7 GB before the cap) and the endless output is
    one note naming the cap; stderr has only the progress line."""
    exe = script(tmp_path, "llama-server", "exec yes " + "A" * 200 + "\n")
    rss_file = tmp_path / "peak"
    # the peak RSS of this process image: VmHWM (its memory map's high-water mark, new at exec; ru_maxrss would
    # also count the forking pytest's pages), ru_maxrss where there is no /proc
    code = ("import resource, sys; from tuner.cli import main; rc = main(['devices', '--server', sys.argv[1]])\n"
            "try:\n"
            "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
            "    peak = int(hwm.split()[1]) * 1024\n"
            "except OSError:\n"
            "    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "    peak = r if sys.platform == 'darwin' else r * 1024  # bytes on macOS, KiB elsewhere\n"
            "open(sys.argv[2], 'w').write(str(peak)); sys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DRAFTWISE_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", code, str(exe), str(rss_file)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    peak_bytes = int(rss_file.read_text())
    assert peak_bytes < 100 * 10**6, f"draftwise devices peaked at {peak_bytes / 1e6:.0f} MB"
    assert proc.stderr.strip().splitlines() == [f"asking {exe} --list-devices ..."]
    notes = [line for line in proc.stdout.splitlines() if "cap" in line]
    assert len(notes) == 1, proc.stdout
    assert f"{exe} --list-devices: output cut at the {format_bytes(process.MAX_CAPTURE_BYTES)} cap" in notes[0]
    assert len(proc.stdout) < 2000, "the endless output reached the report"
