"""The sweep's time, as tables: the one budget holder, the estimates and reserves, the ETA and its progress.

The figures here are worked out by hand from the formulas the docstrings state (a repetition: prompts ×
(n_predict ÷ tokens/s + 0.05 s); a launch: the mean load + a 16-token warm-up), so a change of a rule shows up
as a changed row, not as a silently moved number.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.scripted_server import SimClock
from tuner.calibration.candidates import Candidate
from tuner.calibration.pairing import LOOK_STEP, MAX_PAIRS, MIN_PAIRS, Look
from tuner.calibration.prompts import Prompt
from tuner.calibration.search import HARD_LIMIT, Budget
from tuner.calibration.search.budget import Estimates
from tuner.calibration.search.eta import ConfirmTracker, Eta
from tuner.calibration.search.protocol import Requests
from tuner.calibration.search.record import Record

PROMPTS = [(0, Prompt("p", "code")), (1, Prompt("q", "chat"))]
GOOD = Candidate(spec_type="draft-simple", draft_path="/m/good.gguf", n_max=4, p_min=0.0)
OTHER = Candidate(spec_type="ngram-mod")


def estimates(side_by_side: bool = True, ngram_only: bool = False, base_tps: float | None = 50.0) -> Estimates:
    """2 prompts × 100 tokens at 50 tokens/s, loads of 2 s: a repetition 4.1 s, a launch 2.32 s."""
    return Estimates(Requests(list(PROMPTS), 100), Record(base_tps=base_tps), side_by_side, ngram_only,
                     load_s=[2.0])


def test_the_budget_counts_from_its_start_on_its_clock() -> None:
    clock = SimClock()
    budget = Budget(60.0, clock)
    clock.advance(15.0)
    assert budget.elapsed_s() == 15.0 and budget.remaining_s() == 45.0
    clock.advance(50.0)
    assert budget.remaining_s() == -5.0  # overrun: negative, not clipped
    assert budget.limit_s == pytest.approx(HARD_LIMIT * 60.0)


def test_the_hard_limit_runs_on_real_time_from_the_sweeps_start() -> None:
    clock = SimClock()
    budget = Budget(10.0, clock)
    assert budget.hard_deadline_s is None and not budget.past_hard_limit()
    assert budget.request_timeout(300.0) == 300.0  # not armed: the request's own timeout
    clock.advance(HARD_LIMIT * 10.0 - 0.5)  # simulated: half a second of the limit is left
    before = time.monotonic()
    budget.arm_hard_limit()
    assert budget.hard_deadline_s is not None
    assert before + 0.4 <= budget.hard_deadline_s <= time.monotonic() + 0.5
    assert budget.request_timeout(300.0) == 1.0  # never past the limit, never below 1 s
    cancel = threading.Event()
    starting = budget.until_deadline(cancel)
    assert not starting.is_set()
    cancel.set()
    assert starting.is_set()  # the user's cancel ends a launch's start-up wait too
    time.sleep(0.55)
    assert budget.past_hard_limit() and budget.until_deadline(threading.Event()).is_set()


@pytest.mark.parametrize("tps,expect", [(50.0, 4.1), (None, 4.1), (200.0, 2 * (0.5 + 0.05))])
def test_a_repetition_costs_every_prompt_once(tps: float | None, expect: float) -> None:
    assert estimates().rep_s(tps) == pytest.approx(expect)


def test_speeds_come_from_the_baseline_then_the_warm_up_then_a_default() -> None:
    e = estimates(base_tps=None)
    assert e.tps() is None and e.rep_s() == pytest.approx(2 * (100 / 20.0 + 0.05))  # 20 tokens/s assumed
    e.warmup_tps = 25.0
    assert e.tps() == 25.0
    e.record.base_tps = 50.0
    assert e.tps() == 50.0
    assert Estimates(Requests([], 8), Record()).load() == 5.0  # no load timed yet


@pytest.mark.parametrize("side_by_side,ngram_only,pair_s", [
    (True, False, 8.2 + 2.32 / 2),  # a repetition on each side, both servers up: a fresh candidate launch
                                    # every LOOK_STEP (2) pairs
    (True, True, 8.2 + 2.32),      # an n-gram leader: a fresh launch per pair (its pool must not carry over)
    (False, False, 8.2 + 2.32),    # alternating launches
])
def test_a_pair_costs_two_repetitions_and_maybe_a_launch(side_by_side: bool, ngram_only: bool, pair_s: float) -> None:
    e = estimates(side_by_side, ngram_only)
    assert e.launch_s() == pytest.approx(2.32)
    assert e.pair_s() == pytest.approx(pair_s)


@pytest.mark.parametrize("side_by_side,optional,busy,pairs", [
    (True, False, False, 4), (True, True, False, 4),   # idle: two looks of the sequential test (2 and 4 pairs)
    (True, False, True, 4), (True, True, True, 6),     # busy: the same; optional steps a third look
    (False, False, False, 4), (False, True, True, 6),  # alternating: the same pairs
])
def test_the_paired_rounds_reserve(side_by_side: bool, optional: bool, busy: bool, pairs: int) -> None:
    assert (MIN_PAIRS, LOOK_STEP) == (2, 2)  # the table's figures
    e = estimates(side_by_side)
    # side by side the baseline's server (the candidate's launches are in pair_s); alternating the first launch
    opening = 2.32 if side_by_side else 2.0 + 16 / 50 + 4.1
    assert e.reserve_s(optional, busy) == pytest.approx(pairs * e.pair_s() + opening)
    e.finalists = 2  # an optional step also keeps the second finalist's first look (MIN_PAIRS pairs), idle or busy
    more = MIN_PAIRS if optional else 0
    assert e.reserve_s(optional, busy) == pytest.approx((pairs + more) * e.pair_s() + opening)


def test_a_step_fits_the_budget_left_less_the_reserve() -> None:
    clock = SimClock()
    budget = Budget(60.0, clock)
    e = estimates()
    reserve = e.reserve_s(False, False)  # 39.76 s
    assert e.fits(budget, 60.0 - reserve) and not e.fits(budget, 60.0 - reserve + 0.1)
    assert e.fits(budget, 60.0, reserve=False)  # the paired rounds themselves keep nothing back
    assert e.fits(budget, 60.0 - reserve, busy=True)  # busy: the same for a screening step…
    assert not e.fits(budget, 60.0 - reserve, optional=True, busy=True)  # …an optional one keeps a look more
    clock.advance(59.0)
    assert not e.fits(budget, 2.0, reserve=False)


def test_the_eta_is_unknown_until_a_speed_is_known_and_then_counts_pending_work() -> None:
    clock = SimClock()
    budget = Budget(300.0, clock)
    e, eta, tracker = estimates(base_tps=None), Eta(pending_s=20.0), ConfirmTracker(MAX_PAIRS, 2, next_rep=1)
    idle = lambda: False  # noqa: E731
    assert eta.remaining_s(budget, e, tracker, idle) is None
    e.warmup_tps = 50.0
    eta.queued_probes = (2, 1)  # two probes of one repetition still to run: 6.42 s each
    # then the paired rounds' first look: MIN_PAIRS pairs and the baseline's server
    rounds = MIN_PAIRS * e.pair_s() + e.launch_s()
    assert e.rounds_s() == pytest.approx(rounds)
    assert eta.remaining_s(budget, e, tracker, idle) == pytest.approx(20.0 + 2 * 6.42 + rounds)
    eta.finished = True
    assert eta.remaining_s(budget, e, tracker, idle) == 20.0


def test_progress_never_reaches_100_percent_before_finished_and_never_moves_back() -> None:
    eta = Eta()
    rows = [("launch", 0.0, None, 0.0), ("budget", 10.0, 90.0, 0.1), ("measured", 50.0, 0.0, 0.99),
            ("skipped", 60.0, 540.0, 0.99),  # the ETA grew: the bar does not move back
            ("finished", 70.0, 0.0, 1.0)]
    for kind, elapsed, eta_s, shown in rows:
        assert eta.progress(kind, elapsed, eta_s) == pytest.approx(shown), (kind, elapsed, eta_s)


def _look(n: int, verdict: str, pairs_needed: int | None = None) -> Look:
    return Look(n=n, verdict=verdict, mean_ratio=1.3, low=1.1, high=1.5, alpha_look=0.01, pairs_needed=pairs_needed)


@pytest.mark.parametrize("look,busy,left_s,more", [
    (_look(3, "faster"), True, 100.0, True),           # busy, budget left: more pairs for the estimate
    (_look(3, "faster"), False, 100.0, False),         # idle: a conclusive look ends the rounds
    (_look(3, "inconclusive"), True, 100.0, False),    # only a "faster" verdict is extended
    (_look(MAX_PAIRS, "faster"), True, 100.0, False),  # the last look
    (_look(3, "faster"), True, 9.0, False),            # no room for another pair (9.36 s)
    (None, True, 100.0, False),
])
def test_more_pairs_while_busy(look: Look | None, busy: bool, left_s: float, more: bool) -> None:
    clock = SimClock()
    budget = Budget(left_s, clock)
    tracker = ConfirmTracker(MAX_PAIRS, 1, next_rep=1, left=[GOOD])
    assert tracker.more_pairs_while_busy(look, lambda: busy, budget, estimates()) is more


def test_the_confirm_eta_is_the_pairs_the_test_needs_not_the_budget_left() -> None:
    clock = SimClock()
    budget = Budget(300.0, clock)
    e = estimates()
    pair = 8.2 + 2.32 / 2  # side by side: a candidate launch every two pairs
    tracker = ConfirmTracker(MAX_PAIRS, 2, next_rep=1, left=[GOOD, OTHER])
    idle = lambda: False  # noqa: E731
    later = MIN_PAIRS * pair + 2.32  # the second finalist: MIN_PAIRS pairs and its launch
    tracker.next_finalist(GOOD, clock())
    # before its first look: MIN_PAIRS pairs and the server to start
    assert tracker.expected_s(e, budget, idle) == pytest.approx(MIN_PAIRS * pair + 2.32 + later)
    clock.advance(5.0)  # 5 s into a pair
    tracker.saw(_look(2, "inconclusive", pairs_needed=4), clock() - 5.0)
    assert tracker.expected_s(e, budget, idle) == pytest.approx((pair - 5.0) + 1 * pair + later)
    tracker.saw(_look(4, "faster"), clock())  # concluded: nothing more for this one
    assert tracker.expected_s(e, budget, idle) == pytest.approx(later)
    tracker.next_finalist(OTHER, clock())
    assert tracker.left == [OTHER] and tracker.look is None
    assert tracker.expected_s(e, budget, idle) == pytest.approx(MIN_PAIRS * pair + 2.32)
    assert [tracker.take_rep(), tracker.take_rep()] == [1, 2]


@pytest.mark.parametrize("look,left,left_s,room", [
    (_look(2, "inconclusive"), [GOOD, OTHER], 40.0, True),   # 2 more pairs (18.72 s) and OTHER's first look (21.04 s)
    (_look(2, "inconclusive"), [GOOD, OTHER], 39.0, False),  # ... do not both fit: OTHER's first look goes first
    (_look(3, "inconclusive"), [GOOD, OTHER], 39.0, True),   # between look points: the look under way finishes
    (_look(1, "inconclusive"), [GOOD, OTHER], 5.0, True),    # before the first look
    (_look(2, "faster"), [GOOD, OTHER], 5.0, True),          # only an inconclusive test gives way
    (_look(2, "inconclusive"), [GOOD], 5.0, True),           # the last finalist: nobody to give way to
    (None, [GOOD, OTHER], 5.0, True),
])
def test_an_inconclusive_finalist_leaves_the_next_one_its_first_look(look: Look | None, left: list[Candidate],
                                                                     left_s: float, room: bool) -> None:
    budget = Budget(left_s, SimClock())
    tracker = ConfirmTracker(MAX_PAIRS, len(left), next_rep=1, left=list(left))
    assert tracker.leaves_room(look, budget, estimates()) is room
    if not room:
        assert tracker.room_words() == f"; the budget left goes to {OTHER.label}'s first look"


def test_an_extended_last_look_keeps_the_busy_estimate_pairs_and_looks_only_at_its_points() -> None:
    """A busy side-by-side sweep's last look moved to 8 (``extend_last_look``): a "faster" finalist still pairs on
    only up to the 6 planned; an inconclusive one at 4 gives way unless the 4 pairs to the look at 8 fit with the
    next finalist's first look; the ETA counts to that look."""
    clock = SimClock()
    e = estimates()
    pair = 8.2 + 2.32 / 2
    tracker = ConfirmTracker(MAX_PAIRS, 2, next_rep=1, left=[GOOD, OTHER])
    tracker.extend_last_look(MAX_PAIRS + 2)
    tracker.extend_last_look(MAX_PAIRS)  # never moves back
    assert (tracker.max_pairs, tracker.planned_pairs) == (8, MAX_PAIRS)
    busy = lambda: True  # noqa: E731
    assert tracker.more_pairs_while_busy(_look(5, "faster"), busy, Budget(100.0, clock), e)
    assert not tracker.more_pairs_while_busy(_look(6, "faster"), busy, Budget(100.0, clock), e)
    later = MIN_PAIRS * pair + 2.32
    assert not tracker.leaves_room(_look(4, "inconclusive"), Budget(later + 3.5 * pair, clock), e)
    assert tracker.leaves_room(_look(4, "inconclusive"), Budget(later + 4 * pair + 0.1, clock), e)
    assert tracker.leaves_room(_look(6, "inconclusive"), Budget(5.0, clock), e)  # not a look point of 2, 4, 8
    budget = Budget(300.0, clock)
    tracker.next_finalist(GOOD, clock())
    tracker.saw(_look(4, "inconclusive", pairs_needed=6), clock())
    assert tracker.expected_s(e, budget, lambda: False) == pytest.approx(4 * pair + later)
