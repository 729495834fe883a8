"""Which finalist's next pairs could settle the decision's chain rule (issue 25 item 2: a budget spent where
it can win).

The decision serves a chained candidate (``ngram-mod,draft-simple`` …) that came out fastest only when its
pairs show it faster than the best single-type winner beyond noise (``tuner.calibration.decide._chain_rule``);
otherwise the simpler one is served. Each finalist's paired rounds end as soon as its own test against the
model alone is conclusive, so a chain confirmed "faster" after two pairs next to a single type confirmed after
four left that contrast undecided while budget was left (the greedy 180 s bench of the issue's family: the chain
measured 1.42×, ngram-mod 1.26×, contrast 1.14× with interval 0.96–1.35×, 48 s unspent; ngram-mod was served).
:func:`chain_to_settle` names the side that should get the next pair, so the paired rounds go on while the
contrast is undecided, the budget fits another pair and a side has fewer than ``max_pairs`` pairs. These pairs
may use the time kept back for the thread stage (``Budget.held_s``): which configuration is served outranks
measuring its thread settings, and without that time the thread stage serves the model alone's setting and says
so (``tuner.calibration.threads.ThreadChoice.of_baseline``). (The same bench's next run: the chain 1.62×,
ngram-mod 1.40×, contrast 1.15× with interval 1.01–1.32×; one more pair did not fit beside the thread stage's
share, which then used 10 of its 27 s.)

The contrast is looked at after each added pair and once more at decision time; the looks are few (at most
``max_pairs`` − the pairs already run, in steps of one launch), and an error there serves a chain that is faster
than the model alone (both sides passed their own test) but not 3 % faster than the single type.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..candidates import Candidate
from ..pairing import Comparison, compare, head_to_head
from ..sequential import CHAIN_MIN_GAIN, contrast
from .stage import SweepState


def _winners(state: SweepState, finalists: Sequence[Candidate]) -> list[Comparison]:
    """The finalists whose paired test says "faster", as the decision compares them (``final`` looks)."""
    s, t, rec = state.settings, state.tracker, state.record
    out = []
    for c in finalists:
        cmp_ = compare(rec.measurements, c, s.min_gain, s.alpha, t.max_pairs, t.finalists, mix=rec.mix,
                       layout=s.layout, final=True)
        if cmp_ is not None and cmp_.paired and cmp_.look is not None and cmp_.look.verdict == "faster":
            out.append(cmp_)
    return out


def _chain_and_single(state: SweepState, finalists: Sequence[Candidate]) -> tuple[Comparison, Comparison] | None:
    """``(fastest, best single)`` of the "faster" finalists when the fastest is chained and a single type passed too
    (the decision's chain rule applies), else ``None``."""
    winners = _winners(state, finalists)
    if not winners:
        return None
    fastest = max(winners, key=lambda x: x.speedup or 0.0)
    singles = [x for x in winners if not x.candidate.is_chained]
    if not fastest.candidate.is_chained or not singles:
        return None
    single = max(singles, key=lambda x: x.speedup or 0.0)
    assert fastest.look is not None and single.look is not None
    return fastest, single


def chain_to_settle(state: SweepState, finalists: Sequence[Candidate]) -> Candidate | None:
    """The finalist that should get the next paired round so the decision's chain rule can settle, or ``None``.

    ``None`` unless the fastest "faster" finalist (pooled speedup) is chained, a single-type finalist also
    passed, and the contrast of the two (``tuner.calibration.sequential.contrast`` at ``CHAIN_MIN_GAIN``, the
    decision's own test) is inconclusive; then the side with fewer pairs (the chain on a tie) below the tracker's
    ``max_pairs`` — ``None`` when both reached it.
    """
    sides = _chain_and_single(state, finalists)
    if sides is None:
        return None
    return _side_below_max_pairs(state, *sides)


def _side_below_max_pairs(state: SweepState, fastest: Comparison, single: Comparison) -> Candidate | None:
    """:func:`chain_to_settle`'s answer for these two sides."""
    assert fastest.look is not None and single.look is not None
    if contrast(fastest.look, single.look, CHAIN_MIN_GAIN, state.settings.alpha).verdict != "inconclusive":
        return None
    for side in sorted((fastest, single), key=lambda x: (x.look.n if x.look else 0, not x.candidate.is_chained)):
        if side.look is not None and side.look.n < state.tracker.max_pairs:
            return side.candidate
    return None


HEAD_TO_HEAD_PAIRS = 4
"""Head-to-head pairs of the chain and the single type at most (two launches of two repetitions)."""


def head_to_head_next(state: SweepState, finalists: Sequence[Candidate]) -> tuple[Candidate, Candidate] | None:
    """``(chain, single)`` when the decision's chain rule is still undecided after both sides reached ``max_pairs``
    against the model alone (:func:`chain_to_settle` has nothing left to run) and fewer than
    :data:`HEAD_TO_HEAD_PAIRS` head-to-head pairs ran; else ``None``.

    Why: the contrast of two looks against the model alone carries both baselines' noise; requests run by the chain
    and the single type one apart in time carry neither, and pooled with it (``sequential.contrast``'s ``direct``)
    they narrow the interval fastest. Measured with ``bench/tune_quality.py --busy`` (0.12 share): the chain 1.38×,
    ngram-mod 1.23×, contrast 1.11× with interval 0.99–1.26× after 6 pairs each, 17 s of the budget unspent;
    ngram-mod was served at 0.936 of the best configuration."""
    sides = _chain_and_single(state, finalists)
    if sides is None or _side_below_max_pairs(state, *sides) is not None:
        return None
    fastest, single = sides
    assert fastest.look is not None and single.look is not None
    rec, s = state.record, state.settings
    direct = head_to_head(rec.measurements, fastest.candidate, single.candidate, rec.mix, s.layout)
    if direct is not None and direct.n >= HEAD_TO_HEAD_PAIRS:
        return None
    if contrast(fastest.look, single.look, CHAIN_MIN_GAIN, s.alpha, direct).verdict != "inconclusive":
        return None
    return fastest.candidate, single.candidate


def settle_words(c: Candidate) -> str:
    """The ``"progress"`` event of one more launch for the chain rule (both paired-round layouts say it)."""
    return f"{c.label}: one more pair, to tell whether the chain is faster than the single type beyond noise"


__all__ = ["HEAD_TO_HEAD_PAIRS", "chain_to_settle", "head_to_head_next", "settle_words"]
