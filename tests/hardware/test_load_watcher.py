"""The load watcher (psutil) sees another program's CPU use and leaves our own process tree out."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.burner import Burner
from tuner.hardware.host import BUSY_FRACTION, LoadSample, LoadWatcher, summarize_load


def test_a_burner_outside_our_tree_counts_as_another_program_and_stops_by_itself():
    n_cpu = psutil.cpu_count(logical=True) or 1
    with Burner(total_s=4.0, min_burst_s=4.0, max_burst_s=4.0) as burner:
        assert burner.pid is not None and burner.alive()
        assert burner.pid not in {p.pid for p in psutil.Process().children(recursive=True)}
        # the same intervals seen twice: once with the burner as "ours" (its pid is the own tree's root)
        proc = psutil.Process(burner.pid)
        c0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        theirs = LoadWatcher(interval_s=0.5).start()
        ours = LoadWatcher(interval_s=0.5, own_pid=burner.pid).start()
        time.sleep(3.0)
        s_theirs, s_ours = theirs.stop(), ours.stop()
        share = (sum(proc.cpu_times()[:2]) - c0) / ((time.monotonic() - t0) * n_cpu)
        assert s_theirs.samples >= 3 and s_ours.samples >= 3
        # the difference of the two is the burner's own share of the machine (up to one core: on a
        # loaded machine it gets less), which the own-tree watcher left out
        diff = s_theirs.other_cpu_mean - s_ours.other_cpu_mean
        assert share > 0.05 and abs(diff - share) < 0.5 * share + 0.03, (diff, share, s_theirs, s_ours)
        deadline = time.monotonic() + 6.0
        while burner.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not burner.alive()  # bounded: it ended on its own after total_s


def test_our_own_children_that_ran_and_exited_are_not_another_program():
    """Every launch of a sweep ends with its llama-server reaped: its CPU time leaves the live tree. That
    used to read as another program at 100 % for one interval per launch (an idle sweep said "Other
    programs used 25 % of the CPU (up to 100 %)" and planned as on a busy machine)."""
    n_cpu = psutil.cpu_count(logical=True) or 1
    watcher = LoadWatcher(interval_s=0.5).start()
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"])
        child.wait()
    child_cpu = sum(psutil.Process().cpu_times()[2:4])
    time.sleep(0.6)
    s = watcher.stop()
    assert child_cpu > 2.0 and s.samples >= 5  # the children did burn ~3 s between them
    # the children's share of the machine was ~1/n_cpu while they ran; none of it counts as "other"
    assert s.other_cpu_max < 0.5, (s, [x.other_cpu_fraction for x in watcher.samples])
    assert s.other_cpu_mean < 0.5 / n_cpu and not s.busy, s


def test_summary():
    """The summary's figures and its busy verdict (the decision's sentence about them:
    tests/calibration/test_wording.py)."""
    quiet = summarize_load([LoadSample(i, 0.02, 0.0) for i in range(10)])
    assert not quiet.busy
    busy = summarize_load([LoadSample(i, 0.4, 0.0) for i in range(10)])
    assert busy.busy and busy.other_cpu_mean >= BUSY_FRACTION and busy.other_cpu_mean == pytest.approx(0.4)
    stolen = summarize_load([LoadSample(i, 0.3, 0.05) for i in range(4)])
    assert stolen.busy and stolen.steal_mean == pytest.approx(0.05)
    assert summarize_load([]).samples == 0 and not summarize_load([]).busy
    assert os.getpid() > 0


def test_foreign_processes_leaves_our_own_tree_out():
    from tuner.hardware.host import foreign_processes

    with Burner(total_s=3.0) as burner:
        found = dict(foreign_processes("python"))
        # the burner was re-parented outside our tree: another program; this process is never listed
        assert burner.pid in found and os.getpid() not in found
