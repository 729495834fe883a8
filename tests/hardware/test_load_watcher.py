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


_CHILD = "import time\nt = time.process_time()\nwhile time.process_time() - t < {cpu_s}: pass"
"""A child that burns ``cpu_s`` seconds of CPU (not of wall time: on a busy machine it takes longer, burns the same)."""


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all CPUs; the fields the watcher counts as busy)."""
    ct = psutil.cpu_times()
    return sum(getattr(ct, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))


def _ours_s() -> float:
    """CPU seconds of this process and of every child it has reaped, as the kernel accounts them (``os.times``)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def test_our_own_children_that_ran_and_exited_are_not_another_program():
    """Every launch of a sweep ends with its llama-server reaped: its CPU time leaves the live tree. That
    used to read as another program at 100 % for one interval per launch (an idle sweep said "Other
    programs used 25 % of the CPU (up to 100 %)" and planned as on a busy machine).

    The watcher's "other" CPU, interval by interval, is compared with what the other programs really used
    over the same time: the machine's busy time minus this process's and its reaped children's (the
    kernel's totals, taken once at each end). Other programs that load the machine meanwhile are in both;
    what must not appear is our children's CPU on top. (A sum of psutil's counters over every process
    outside our tree is no reference: a program reaped meanwhile brings its whole life's CPU into its
    parent's counters, which hid the defect in one run of four on a shared machine.) Short children, well
    under one interval each, so that a child's CPU and its reaping fall mostly in one interval and the old
    reading's excess shows on a busy machine too (other programs at 50-70 % of it: 1.4-1.8 CPU s too
    many). On a saturated machine (load several times the cores) a sample's cap at 100 % hides the excess
    and the old reading passes as well: there is nothing left to tell apart."""
    n_cpu = psutil.cpu_count(logical=True) or 1
    n_children, child_cpu_s = 8, 0.3
    t0 = os.times()
    machine0, ours0 = _machine_busy_s(), _ours_s()
    watcher = LoadWatcher(interval_s=0.5).start()
    for _ in range(n_children):
        subprocess.run([sys.executable, "-c", _CHILD.format(cpu_s=child_cpu_s)], check=True)
    time.sleep(0.6)
    s = watcher.stop()
    others_s = (_machine_busy_s() - machine0) - (_ours_s() - ours0)
    t1 = os.times()
    children_s = (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system)
    assert children_s >= n_children * child_cpu_s and s.samples >= 5, (children_s, s)
    seen_s, t_prev = 0.0, 0.0
    for x in watcher.samples:
        seen_s += x.other_cpu_fraction * (x.t_s - t_prev) * n_cpu
        t_prev = x.t_s
    # the old reading put the children's ~2.6 CPU seconds on top of the others'
    assert seen_s < others_s + 0.25 * children_s, (
        f"the watcher saw {seen_s:.2f} CPU s of other programs, they used {others_s:.2f} (our children: "
        f"{children_s:.2f})", [round(x.other_cpu_fraction, 2) for x in watcher.samples])


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


def test_foreign_processes_leaves_our_own_tree_out():
    from tuner.hardware.host import foreign_processes

    with Burner(total_s=3.0) as burner:
        found = dict(foreign_processes("python"))
        # the burner was re-parented outside our tree: another program; this process is never listed
        assert burner.pid in found and os.getpid() not in found


def test_a_watch_shorter_than_one_interval_still_sees_another_program():
    """The doctor's self-test takes 0.2 s on a fast CPU: a watch of 0.08 s at 0.1 s intervals keeps the part
    before ``stop()`` as a sample and calls a machine with a core busy elsewhere busy. On
    one CI machine the 0.5 s interval and a 0.2 s least partial left the self-test with no sample at all."""
    with Burner(total_s=5.0, min_burst_s=5.0, max_burst_s=5.0):
        time.sleep(0.3)
        watcher = LoadWatcher(interval_s=0.1).start()
        time.sleep(0.08)
        s = watcher.stop()
    assert s.samples >= 1, s
    assert s.busy, s


def test_an_early_question_is_answered_from_the_interval_in_progress():
    """A sweep plans its protocol after the first warm-up, 0.6–1.0 s in with a small model, before the watcher's
    first whole 1 s interval: ``summary(early=True)`` answers from the interval in progress (a core busy
    elsewhere: busy), where ``summary()`` has no sample and says idle (issue 28's busy quality runs all planned
    as idle beside the burner). Once a whole interval is there, ``early`` changes nothing."""
    with Burner(total_s=5.0, min_burst_s=5.0, max_burst_s=5.0):
        time.sleep(0.3)
        watcher = LoadWatcher(interval_s=1.0).start()
        time.sleep(0.6)
        plain, early = watcher.summary(), watcher.summary(early=True)
        assert plain.samples == 0 and not plain.busy, plain
        assert early.samples == 1 and early.busy, early
        time.sleep(1.0)
        later, later_early = watcher.summary(), watcher.summary(early=True)
        watcher.stop()
    assert later.samples >= 1 and later_early == later, (later, later_early)
