"""The Monitor's collapse watch: the live speed below 0.3× the profile's for 10 s while other programs use more
than half a core. Unit cases here; a recorded collapse (real /metrics scrapes of llama-server at its default
threads with one core busy, and the CPU meter's readings) replayed through the Collector in
test_collapse_recorded.py."""

from __future__ import annotations

import pytest

from tuner.telemetry.watch import CollapseWatch, collapse_words


def _feed(w: CollapseWatch, rows: list[tuple[float, float | None, float | None]]) -> list:
    return [w.feed(t, tps, other) for t, tps, other in rows]


def test_it_alerts_once_after_10_s_slow_and_busy_and_again_only_after_recovering() -> None:
    w = CollapseWatch(99.0)
    vs = _feed(w, [(float(t), 1.5, 1.0) for t in range(0, 12)])
    assert [v.alert for v in vs].index(True) == 10 and sum(v.alert for v in vs) == 1
    assert vs[-1].collapsed
    assert not w.feed(12.0, 90.0, 1.0).collapsed  # recovered: the watch re-arms
    vs = _feed(w, [(float(t), 2.0, 1.0) for t in range(13, 24)])
    assert sum(v.alert for v in vs) == 1


def test_slow_alone_or_busy_alone_is_no_collapse() -> None:
    w = CollapseWatch(99.0)
    assert not any(v.collapsed for v in _feed(w, [(float(t), 1.5, 0.3) for t in range(30)]))  # others: 0.3 core
    w = CollapseWatch(99.0)
    assert not any(v.collapsed for v in _feed(w, [(float(t), 40.0, 1.0) for t in range(30)]))  # 0.4× the profile


def test_gaps_neither_keep_nor_reset_and_one_long_slow_request_counts_whole() -> None:
    w = CollapseWatch(99.0)
    vs = _feed(w, [(0.0, 1.5, 1.0), (4.0, None, 1.0), (8.0, 1.5, None), (10.0, 1.5, 1.0)])
    assert [v.collapsed for v in vs] == [False, False, False, True]
    w = CollapseWatch(99.0)
    assert w.feed(100.0, 1.5, 1.0, gen_s=42.0).alert  # a 64-token request at 1.5 tokens/s, reported when it ended


def test_the_notice_says_what_happened_then_what_to_do() -> None:
    w = CollapseWatch(99.0)
    v = w.feed(0.0, 1.5, 1.0, gen_s=20.0)
    title, body = collapse_words(v, w.profile_tps)
    assert "slowing the model down" in title
    assert body.startswith("The model generates 1.5 tokens/s instead of the 99 it was tuned at")
    assert "--threads" in body and "re-tune" in body
    with pytest.raises(ValueError):
        CollapseWatch(0.0)
