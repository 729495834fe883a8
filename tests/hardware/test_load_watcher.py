"""The load watcher (psutil) sees another program's CPU use and leaves our own process tree out."""

from __future__ import annotations

import os
import time

import psutil

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


def test_summary_and_note():
    quiet = summarize_load([LoadSample(i, 0.02, 0.0) for i in range(10)])
    assert not quiet.busy and quiet.note() is None
    busy = summarize_load([LoadSample(i, 0.4, 0.0) for i in range(10)])
    assert busy.busy and busy.other_cpu_mean >= BUSY_FRACTION
    assert busy.note().startswith("Other programs used 40 % of the CPU during the sweep")
    stolen = summarize_load([LoadSample(i, 0.3, 0.05) for i in range(4)])
    assert "steal time" in stolen.note()
    assert summarize_load([]).samples == 0 and not summarize_load([]).busy
    assert os.getpid() > 0


def test_foreign_processes_leaves_our_own_tree_out():
    from tuner.hardware.host import foreign_processes

    with Burner(total_s=3.0) as burner:
        found = dict(foreign_processes("python"))
        # the burner was re-parented outside our tree: another program; this process is never listed
        assert burner.pid in found and os.getpid() not in found
