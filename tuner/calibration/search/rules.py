"""The sweep's rules about what is worth a launch, as pure functions of its :class:`Record`.

An n-gram type that never drafted on these prompts is not launched again at another length, nor as the
n-gram member of a chain; an n-gram variant or a draft length that cannot beat the leader on these prompts is
not launched (:func:`cannot_beat_leader`); a screening run far below the baseline on the same requests is
stopped early; a run that drafted nothing is the model alone, so when it disagrees with the baseline launch
the baseline is measured again, and :func:`recheck_verdict` says which launch to believe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from ..candidates import Candidate
from ..pairing import HEAD_TO_HEAD, Look, pooled_tokens_per_s
from ..predict import CostModel, StepCost, fit_run_cost, predicted_ratio
from ..results import Measurement, Sample
from ..sentences import JsonValue
from .record import Record

BASELINE_DISAGREES = 1.5
"""A run that drafted nothing is the model alone (plus a lookup that found nothing); when its tokens/s on
the same requests differ from the baseline launch's by more than this factor either way, one of the two
ran while something else had the machine, and the baseline is measured once more
(:meth:`tuner.calibration.search.screening.Screening.recheck_baseline`). Seen on a busy 2-core box: the
baseline's only launch at 22.8 tokens/s, an n-gram probe that never drafted at 741.7, the model's real
speed ~700."""

NGRAM_MOD_N_MIN = 48
"""llama-server's default ``--spec-ngram-mod-n-min`` (common/common.h ``common_params_speculative_ngram_mod``)."""

NGRAM_DEFAULT_N_MAX = {"ngram-mod": 64, "ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48, "ngram-cache": 8}
"""llama-server's default draft length per n-gram type (common/common.h ``common_params_speculative_ngram_mod``
``n_max``, ``common_params_speculative_ngram_map`` ``size_m``; ngram-cache drafts 8)."""

PRUNE_SLACK = 0.10
"""A candidate is not launched when its predicted speedup, this much higher, is still below the leader's: the
margin covers the noise of the one screening run each figure rests on and the prediction's own error."""

PRUNE_SLACK_BUSY = 0.30
"""The margin while other programs use the CPU: screening runs minutes apart then differ by far more (a probe
at 3.05× the baseline's re-measured speed on a loaded 2-core box, its own lengths predicted at 2×)."""


@dataclass(frozen=True)
class Pruned:
    """A candidate the search did not launch because it could not beat the leader on these prompts.

    Attributes:
        label: the candidate's label.
        at_most: its predicted speedup over the target alone (:func:`~tuner.calibration.predict.predicted_ratio`).
        basis: the label of the measured run the prediction rests on (its per-position acceptance counters).
        leader: the label of the best screened configuration so far; leader_ratio: its screening speedup.
    """

    label: str
    at_most: float
    basis: str
    leader: str
    leader_ratio: float

    def to_json(self) -> dict[str, JsonValue]:
        """The facts as the ``sweep.pruned`` sentence holds them."""
        return {"label": self.label, "at_most": self.at_most, "basis": self.basis, "leader": self.leader,
                "leader_ratio": self.leader_ratio}


def generated_tokens(m: Measurement) -> float:
    """Tokens a run generated after each request's first (Σ ``predicted_n − 1``, as its timings count them)."""
    return float(sum(max(1, (s.predicted_n or 1) - 1) for s in m.samples))


def draft_length(c: Candidate) -> int | None:
    """The draft length ``c`` verifies per step: ``n_max`` for a draft model or MTP, ``ngram_n_max`` (or the
    server's default, :data:`NGRAM_DEFAULT_N_MAX`) for a plain n-gram type; ``None`` for a chain or autotune."""
    if c.is_chained or c.autotune:
        return None
    if c.spec_type.startswith("ngram"):
        return c.ngram_n_max or NGRAM_DEFAULT_N_MAX.get(c.spec_type)
    return c.n_max


def cannot_beat_leader(c: Candidate, basis: Measurement, cost: StepCost, leader: tuple[str, float],
                       slack: float = PRUNE_SLACK, basis_ratio: float | None = None) -> Pruned | None:
    """The one pruning rule: ``c`` is not launched when its predicted speedup at its draft length — from the
    per-position acceptance counters of ``basis`` (a measured run of the same draft or n-gram type at another
    length) and the cost of a verification step ``cost`` (:class:`~tuner.calibration.predict.StepCost`: the
    draft's fitted :class:`~tuner.calibration.predict.CostModel`, the n-gram run's own, or a measured
    verify-cost curve of the target) — is below the ``leader``'s ``(label, screening speedup)`` even when
    ``slack`` higher (:data:`PRUNE_SLACK`). ``basis_ratio``: the basis run's own screening speedup, which puts
    the prediction in the leader's units (:func:`screening_scale`). ``None``: launch it (also when nothing can
    be predicted)."""
    k = draft_length(c)
    if k is None or basis.counts is None or not basis.samples:
        return None
    ratio = predicted_ratio(basis.counts, generated_tokens(basis), k, cost)
    if ratio is None:
        return None
    ratio *= screening_scale(basis, cost, basis_ratio)
    if ratio * (1.0 + slack) >= leader[1]:
        return None
    return Pruned(c.label, ratio, basis.candidate.label, leader[0], leader[1])


def screening_scale(basis: Measurement, cost: StepCost, basis_ratio: float | None) -> float:
    """The factor (≥ 1) that turns a prediction from ``basis``'s counters into a screening speedup: the basis
    run's measured screening speedup ``basis_ratio`` ÷ the prediction at its own draft length; 1 without one.

    Why: a prediction priced by a measured verify-cost curve is in true units (acceptance counters and the
    target's step cost, no timing of the baseline), while the leader's figure is a screening run's tokens/s ÷
    the baseline launch's. When the baseline launch ran slow, every screening speedup reads high by the same
    factor, and true-unit predictions compared with them prune lengths that would win (issue 28's idle 16:
    baseline 122 tokens/s against 160–172 in later launches of the model alone, the chain leading at 1.66×,
    the draft's n_max 10, 11 and 15 pruned at 1.25–1.34×, its n_max 16 probe served at 0.888 of the best).
    The basis ran against that same baseline, so the ratio of its measured to its predicted speedup carries the
    baseline's error and cancels it. Never below 1: a length pruned wrongly costs the decision its winner, one
    launched needlessly costs one short launch. With a cost fitted to the basis run itself it is 1."""
    return max(1.0, screening_factor(basis, cost, basis_ratio) or 1.0)


def screening_factor(basis: Measurement, cost: StepCost, basis_ratio: float | None) -> float | None:
    """``basis``'s measured screening speedup ``basis_ratio`` ÷ the prediction at its own draft length under
    ``cost`` (either way of 1; :func:`screening_scale` keeps only the upward part); ``None`` when either is
    missing."""
    own_k = draft_length(basis.candidate)
    if basis_ratio is None or own_k is None or basis.counts is None:
        return None
    own = predicted_ratio(basis.counts, generated_tokens(basis), own_k, cost)
    return basis_ratio / own if own else None


def finalists(contenders: Sequence[tuple[float, Candidate]], keep: int,
              ruled_out: Mapping[str, float] | None = None) -> list[Candidate]:
    """The ``keep`` candidates the paired rounds confirm, from ``contenders`` (``(screening ratio, candidate)``,
    fastest first): the fastest of each draft group (:meth:`Record.group`: type, draft, placement) first, in
    their order, then the next fastest of any group while places are left. ``ruled_out``: the basis of each
    :class:`Pruned` record (its label) and the leader's screening ratio it was pruned against (the highest when
    several); a group with such a member whose fastest screening stays below that ratio — its own acceptance
    said its lengths cannot beat the leader, and none of its runs did — gets no place of its own and waits with
    the rest. One whose fastest run beat that leader keeps its place: pruning a few of its lengths does not
    rule out the lengths it measured (a clean-clone suite run, issue 28: the draft's ``n_max`` 5 pruned on
    ``n_max`` 16's acceptance against ngram-mod at 1.18×, while ``n_max`` 16 itself screened at 1.49×; the
    draft lost its place to ngram-mod and a chain at 1.19× was served).

    Why: the lengths of one draft near its best are within a few per cent of each other (the quality family's
    draft n_max 4–12 at 2 threads, idle: one screening run each, 235–303 tokens/s in one grid pass, their order
    changing from pass to pass), so two of them confirmed against the baseline spend the paired rounds on a
    difference the decision cannot resolve, while one screening run of another kind — a chain, an n-gram type —
    hides a real one (ngram-mod + draft n_max 4 screened 235 tokens/s against the draft's 300–385, then measured
    15–25 % faster than the draft's best lengths over four interleaved rounds, issue 28's quality runs).
    """
    ruled_out = ruled_out or {}
    fastest: dict[object, float] = {}
    for ratio, c in contenders:
        fastest.setdefault(Record.group(c), ratio)
    seen = {Record.group(c) for _r, c in contenders
            if c.label in ruled_out and fastest[Record.group(c)] < ruled_out[c.label]}
    firsts: list[Candidate] = []
    rest: list[Candidate] = []
    for _ratio, c in contenders:
        g = Record.group(c)
        (rest if g in seen else firsts).append(c)
        seen.add(g)
    return (firsts + rest)[:keep]


def pruned_against(pruned: Sequence[Mapping[str, JsonValue]]) -> dict[str, float]:
    """Each :class:`Pruned` record's basis label → the highest leader ratio it was pruned against (the
    ``ruled_out`` of :func:`finalists`; ``pruned``: the records' JSON, :attr:`Record.pruned`)."""
    out: dict[str, float] = {}
    for p in pruned:
        ratio = p.get("leader_ratio")
        ratio = float(ratio) if isinstance(ratio, (int, float)) else 0.0
        out[str(p["basis"])] = max(out.get(str(p["basis"]), 0.0), ratio)
    return out


def standing(finalists: Sequence[Candidate], looks: Mapping[Candidate, Look],
             go_on: Callable[[Candidate], bool]) -> list[Candidate]:
    """The finalists whose paired rounds go on after the first pass (``go_on``), the highest mean ratio over their
    pairs first (``looks``: each one's latest look; screening order among equals)."""
    left = [c for c in finalists if go_on(c)]
    left.sort(key=lambda c: -(looks[c].mean_ratio or 0.0))
    return left


def standing_words(c: Candidate, look: Look) -> str:
    """The ``"progress"`` event's sentence for the finalist whose rounds go on first (:func:`standing`)."""
    return (f"{c.label}: {look.mean_ratio or 0:.2f}× over its first {look.n} pairs, the fastest of the finalists: "
            "the paired rounds go on with it")


def screening_ratio(record: Record, m: Measurement) -> float | None:
    """``m``'s tokens/s ÷ the baseline's on the same requests (Σ tokens ÷ Σ time each), ``None`` when the
    baseline ran none of them."""
    base = record.baseline_tps_on(m.samples)
    tps = pooled_tokens_per_s(m.samples)
    return tps / base if base and tps else None


def falls_back_to(chain: Candidate, single: Candidate) -> bool:
    """True when ``single`` is a member of ``chain`` as the decision's chain rule would serve it instead: one
    speculation type of the chain's at the same placement, with the chain's draft file (an n-gram member has
    none). A chain is served only when its pairs show it faster than the best single type beyond noise
    (``tuner.calibration.decide``), so a member is what is served whenever the chain's lead is within noise."""
    if not chain.is_chained or single.is_chained or single.is_baseline or single.placement != chain.placement:
        return False
    own_draft = single.draft_path is None if single.spec_type.startswith("ngram") else single.draft_path == chain.draft_path
    return single.spec_type in chain.spec_types and own_draft


def leader(record: Record, other_than: Candidate | None = None) -> tuple[str, float] | None:
    """The best screened speculative run so far: ``(label, speedup on the same requests as the baseline)``;
    runs stopped early, failed or cut short do not lead, nor (``other_than``) those of the candidate's own draft
    group (``Record.group``: its other lengths are what the prediction is made from, so a length is never ruled
    out against its own draft's screening run, whose ratio carries the machine's drift since the baseline ran),
    nor a chain the candidate is a member of (:func:`falls_back_to`: when the chain's lead is within noise the
    member is served, so its lengths must be tuned, not ruled out against the chain; issue 28's idle 24 served
    a draft's untuned ``n_max`` 16 probe at 0.80 of its best length that way)."""
    best: tuple[str, float] | None = None
    own = record.group(other_than) if other_than is not None else None
    for m in record.measurements:
        if (m.candidate.is_baseline or not m.ok or m.stopped_early or m.cut_short
                or m.stage in ("confirm", HEAD_TO_HEAD)):
            continue
        if own is not None and record.group(m.candidate) == own:
            continue
        if other_than is not None and falls_back_to(m.candidate, other_than):
            continue
        r = screening_ratio(record, m)
        if r is not None and (best is None or r > best[1]):
            best = (m.candidate.label, r)
    return best


def ngram_basis(record: Record, c: Candidate) -> tuple[Measurement, CostModel] | None:
    """For a plain n-gram type ``c``: an earlier screening run of the same type and placement at another length,
    with acceptance counters, whose lookups were no stricter than ``c``'s (ngram-mod drops drafts shorter than
    its ``n_min``: a variant with a smaller ``n_min`` can draft where that run did not, so it has none), and that
    run's own cost of a verification step (:func:`~tuner.calibration.predict.fit_run_cost`); else ``None``."""
    if not c.spec_type.startswith("ngram") or c.is_chained or c.autotune:
        return None
    for m in record.measurements:
        mc = m.candidate
        if (mc.spec_type != c.spec_type or mc.placement != c.placement or mc.autotune or not m.ok
                or m.counts is None or not m.counts.drafts_total or mc == c):
            continue
        if c.spec_type == "ngram-mod" and (c.ngram_n_min or NGRAM_MOD_N_MIN) < (mc.ngram_n_min or NGRAM_MOD_N_MIN):
            continue
        ratio = screening_ratio(record, m)
        cost = fit_run_cost(m.counts, generated_tokens(m), ratio) if ratio else None
        if cost is not None:
            return m, cost
    return None


def agree(a: float, b: float) -> bool:
    """True when two tokens/s figures of the model alone are within :data:`BASELINE_DISAGREES` of each other."""
    return 1 / BASELINE_DISAGREES <= a / b <= BASELINE_DISAGREES


def _ngram_run_that_never_drafted(record: Record, spec_type: str, c: Candidate) -> Measurement | None:
    """An earlier run of the plain n-gram type ``spec_type`` at ``c``'s placement that never drafted, with
    lookups no stricter than ``c``'s (for ngram-mod: an ``n_min`` no larger than ``c``'s), else ``None``."""
    for m in record.measurements:
        if not (m.no_drafts_at and m.candidate.spec_type == spec_type and m.candidate.placement == c.placement):
            continue
        if spec_type == "ngram-mod" and (c.ngram_n_min or NGRAM_MOD_N_MIN) < (m.candidate.ngram_n_min
                                                                             or NGRAM_MOD_N_MIN):
            continue
        return m
    return None


def never_drafted_type(record: Record, c: Candidate) -> Measurement | None:
    """An earlier run of the same plain n-gram type as ``c`` (same placement) that never drafted at the
    served sampling, and whose lookups were no stricter than ``c``'s, else ``None``.

    Whether an n-gram type drafts depends on its lookup finding a match, not on its draft length
    (common/speculative.cpp ``common_speculative_impl_ngram_simple`` drafts the m-gram after a found
    n-gram; ngram-map likewise). ngram-mod is the exception: it drops a draft shorter than its
    ``n_min`` (``common_speculative_impl_ngram_mod::draft``), so a variant with a smaller
    ``ngram_n_min`` than the run that drafted nothing (default 48) is still measured. Chains and draft
    models never match."""
    if not c.spec_type.startswith("ngram") or "," in c.spec_type:
        return None
    return _ngram_run_that_never_drafted(record, c.spec_type, c)


def chain_member_never_drafted(record: Record, c: Candidate) -> Measurement | None:
    """For a chain (``c.spec_types`` with an n-gram type and a draft model, ``--spec-type a,b``): an earlier
    run of its n-gram member alone that never drafted on these prompts (same placement; for ngram-mod,
    at an ``n_min`` no larger than the chain's), else ``None``. The chain then drafts only through
    its other member, and serving it would add a lookup that finds nothing (measured on a slow target:
    a chain with an ngram-mod that never drafted won over 3 pairs while the plain draft went
    unconfirmed; the decision then named an n-gram lookup that contributed nothing)."""
    if len(c.spec_types) < 2:
        return None
    for t in c.spec_types:
        if t.startswith("ngram") and (m := _ngram_run_that_never_drafted(record, t, c)) is not None:
            return m
    return None


def clear_loser(record: Record, samples: Sequence[Sample], ratio: float) -> bool:
    """True when the requests so far run below ``ratio`` × the baseline's tokens/s on the same requests
    (Σ tokens ÷ Σ time on each side; the screening baseline's speed when it ran none of them)."""
    if record.base_tps is None or not samples:
        return False
    toks = sum(max(1, (s.predicted_n or 1) - 1) for s in samples)
    secs = sum((s.predicted_ms or 0.0) for s in samples) / 1000.0
    tps = toks / secs if secs > 0 else min(s.gen_tokens_per_s for s in samples)
    ref = record.baseline_tps_on(samples) or record.base_tps
    return tps < ratio * ref


class RecheckVerdict(Enum):
    """What a second launch of the model alone says about the first (:func:`recheck_verdict`)."""

    FIRST_STANDS = "first_stands"
    """It agrees with the first launch: the run that drafted nothing was the disturbed one."""
    SUPERSEDED = "superseded"
    """It agrees with the run that drafted nothing and not with the first: the first was disturbed."""
    UNSTEADY = "unsteady"
    """It agrees with neither: the model's own speed varied with the machine's load."""


def recheck_verdict(first: float, idle: float, again: float) -> RecheckVerdict:
    """The verdict on a baseline measured again, from the model alone's tokens/s on the same requests in
    the ``first`` baseline launch, in the ``idle`` run (drafted nothing) and in the second launch
    (``again``); each figure > 0."""
    agrees_idle = agree(again, idle)
    agrees_first = agree(again, first)
    if agrees_idle and not agrees_first:
        return RecheckVerdict.SUPERSEDED
    if not agrees_first:
        return RecheckVerdict.UNSTEADY
    return RecheckVerdict.FIRST_STANDS


__all__ = [
    "BASELINE_DISAGREES",
    "NGRAM_DEFAULT_N_MAX",
    "NGRAM_MOD_N_MIN",
    "PRUNE_SLACK",
    "PRUNE_SLACK_BUSY",
    "Pruned",
    "RecheckVerdict",
    "agree",
    "cannot_beat_leader",
    "chain_member_never_drafted",
    "clear_loser",
    "draft_length",
    "leader",
    "never_drafted_type",
    "ngram_basis",
    "pruned_against",
    "recheck_verdict",
    "screening_ratio",
    "screening_scale",
    "standing",
    "standing_words",
]
