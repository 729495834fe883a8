"""The measured verify-cost curve: what one verification step costs at each draft length (issue 28 item 3).

llama-server b11434 can be told to accept drafted tokens at given synthetic per-position rates instead of by
matching them (``--spec-synth-rates P0,P1,…``, "benchmarking only": tools/server/server-context.cpp
``server_sample_and_accept_synth``; the list has exactly ``n_max`` entries, common/speculative.cpp, and the server
needs a speculative configuration to start with it). At rate 0 every drafted token is rejected, so each step
drafts ``k`` tokens (a draft model at ``p_min`` 0 drafts all ``n_max``), has the target verify them, and yields
exactly one token: the run's tokens/s is one step's speed, and the target alone's tokens/s on the same request ÷
that is the cost of one step drafting ``k`` tokens, in target-token times. Measured once per (binary, target,
draft, placement, threads) — :func:`curve_key` — the curve replaces the cost model fitted to the sweep's own runs
(:func:`tuner.calibration.predict.fit_cost_model`): on a CPU the step cost is not smooth in ``k`` (2.99 at 5 and
3.96 at 6 measured by ``bench/n_max_prediction.py`` on a 12-block F16 target), which a line through two runs
cannot follow. It holds for draft models and MTP heads, which draft on every step; n-gram types draft only on a
match, so their cost still comes from their real runs.

The synthetic flags are never part of a served configuration: only the sweep's verify-cost launches
(:class:`tuner.calibration.search.verify.VerifyCostStage`) set ``Candidate.synth_rates``, those launches are never
measurements a decision reads, and ``Candidate.from_json`` never reads the field back.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import DraftwiseError

LENGTHS = (1, 16, 8, 4, 2, 12, 3, 5, 6)
"""The draft lengths measured, in the order they are measured (a budget that ends early still leaves a curve
spanning 1–16, linear between its points): every length the bench needed — interpolating 1, 2, 4, 8, 12, 16 missed
``n_max`` 4 and 5 by 17–19 % on a CPU (``bench/n_max_prediction.py``). After the two ends, the middle of the widest
gap first (8, then 4): the cost is concave in ``k``, so a straight line over a wide gap overprices the lengths inside
it, and the sweep's pruning then rules out the best ones (issue 28's quality runs, whose 12 % share measures four
points: with 1, 2, 4 and 16 the line put ``k`` 7.7 at 4.01 target tokens where it measured 3.69, and pruned draft
lengths 8 and 9 as "at most 1.28×, 1.24×" against a chain's 1.49× — the grid measures 8 among the best)."""

SYNTH_FLAG = "--spec-synth-rates"
"""llama-server b11434's flag (common/arg.cpp); never on a served argv."""


def synth_args(rates: Sequence[float]) -> tuple[str, ...]:
    """The argv words of a synthetic-acceptance launch: ``("--spec-synth-rates", "0,0,0")`` for ``rates``
    ``(0, 0, 0)`` (one rate per draft position, ``n_max`` of them); empty for no rates."""
    if not rates:
        return ()
    return (SYNTH_FLAG, ",".join(f"{r:g}" for r in rates))


def file_id(path: Path | str | None) -> str:
    """``name:size`` of a model file (``-`` for none; size -1 when it cannot be read)."""
    if path is None:
        return "-"
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = -1
    return f"{p.name}:{size}"


def sweep_identity(binary: Path | str, build: str, target: Path | str, threads: int | None) -> str:
    """What every curve of one tune shares: the binary (path and build), the target (:func:`file_id`) and the
    tune's own ``threads`` (``None``: the thread stage's or llama-server's choice)."""
    return "|".join((str(binary), build, file_id(target), f"threads {threads}"))


def curve_key(identity: str, draft: Path | str | None, placement: str, threads: str) -> str:
    """The identity a curve is measured once for: a short hash of :func:`sweep_identity`, the draft
    (:func:`file_id`), the placement (its ``ngl`` words) and the sweep's thread setting. A file that changes size,
    another binary or other threads: another key, another measurement."""
    words = "|".join((identity, file_id(draft), placement, threads))
    return hashlib.sha256(words.encode()).hexdigest()[:16]


class CurveError(DraftwiseError, ValueError):
    """A stored verify-cost curve is not one: the message names the key that is wrong."""


@dataclass(frozen=True)
class VerifyCurve:
    """The cost of one verification step at each measured draft length (a :class:`~tuner.calibration.predict.StepCost`).

    Attributes:
        points: ``(drafted tokens per step, cost in target-token times)``, ``k`` increasing, at least two points;
            between them the cost is linear, beyond them it follows the nearest segment (never below 1).
        key: :func:`curve_key` of what it was measured for.
        baseline_gen_tokens_per_s: the target alone's tokens/s the costs are relative to (when measured).
    """

    points: tuple[tuple[float, float], ...]
    key: str = ""
    baseline_gen_tokens_per_s: float = 0.0

    def step_cost(self, k: float) -> float:
        """Cost of one verification step drafting ``k`` tokens, in target-token times (≥ 1): linear between the
        measured points, the end segments continued beyond them; past the longest point the cost never falls
        below that point's (a last segment read downward by noise would make longer drafts look free)."""
        pts = self.points
        i = 0
        while i < len(pts) - 2 and k > pts[i + 1][0]:
            i += 1
        (x0, y0), (x1, y1) = pts[i], pts[i + 1]
        if k > x1 and y1 < y0:
            return max(1.0, y1)
        return max(1.0, y0 + (y1 - y0) * (k - x0) / (x1 - x0))

    @property
    def lengths(self) -> tuple[float, ...]:
        """The measured drafted tokens per step."""
        return tuple(x for x, _ in self.points)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (the profile's ``live_prediction.verify_cost``)."""
        return {"key": self.key, "points": [[x, y] for x, y in self.points],
                "baseline_gen_tokens_per_s": self.baseline_gen_tokens_per_s}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> VerifyCurve:
        """Inverse of :meth:`to_json`.

        Raises:
            CurveError: ``points`` is not a list of at least two ``[k, cost]`` pairs with ``k`` increasing and
                finite costs in 0.5–1000 (a one-line message naming the key).
        """
        raw = obj.get("points") if isinstance(obj, Mapping) else None
        if not isinstance(raw, list) or len(raw) < 2:
            raise CurveError("verify_cost.points: needs at least two [draft length, cost] pairs")
        pts: list[tuple[float, float]] = []
        for p in raw:
            if not (isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p)):
                raise CurveError("verify_cost.points: every entry must be [draft length, cost]")
            x, y = float(p[0]), float(p[1])
            if not (math.isfinite(x) and math.isfinite(y) and 0.0 < x <= 1024 and 0.5 <= y <= 1000.0):
                raise CurveError(f"verify_cost.points: [{p[0]}, {p[1]}] is out of range")
            if pts and x <= pts[-1][0]:
                raise CurveError("verify_cost.points: draft lengths must increase")
            pts.append((x, y))
        base = obj.get("baseline_gen_tokens_per_s", 0.0)
        return cls(tuple(pts), str(obj.get("key", "")), float(base) if isinstance(base, (int, float)) else 0.0)


def curve_from_runs(baseline_gen_tokens_per_s: float, runs: Mapping[float, float], key: str = "") -> VerifyCurve | None:
    """The curve of synthetic runs at acceptance 0: ``runs`` maps drafted tokens per step to the run's tokens/s
    (one token per step), each cost the target alone's ``baseline_gen_tokens_per_s`` ÷ it, at least 1 (a step
    never costs less than one plain token: a faster reading is noise). ``None`` with fewer than two usable runs
    or no baseline."""
    if baseline_gen_tokens_per_s <= 0:
        return None
    pts = sorted((float(k), max(1.0, baseline_gen_tokens_per_s / tps)) for k, tps in runs.items() if tps > 0 and k > 0)
    if len(pts) < 2:
        return None
    return VerifyCurve(tuple(pts), key, baseline_gen_tokens_per_s)


CURVES_KEY = "verify_costs"
"""The key of a saved profile's ``decision`` that keeps every curve its sweep measured or reused."""


def curves_in(decision: Mapping[str, Any]) -> tuple[tuple[VerifyCurve, ...], list[str]]:
    """The curves a saved profile's ``decision`` keeps (:data:`CURVES_KEY`) and a one-line problem per entry that
    is not a curve (it is left out: the curve is measured again)."""
    raw = decision.get(CURVES_KEY) if isinstance(decision, Mapping) else None
    if not isinstance(raw, list):
        return (), []
    out: list[VerifyCurve] = []
    problems: list[str] = []
    for i, obj in enumerate(raw):
        try:
            out.append(VerifyCurve.from_json(obj))
        except CurveError as exc:
            problems.append(f"decision.{CURVES_KEY}[{i}]: {exc}")
    return tuple(out), problems


@dataclass(frozen=True)
class PricedCurve:
    """A :class:`VerifyCurve` with the baseline tokens/s a prediction is made against: the same questions as
    :class:`~tuner.calibration.predict.CostModel` (the sweep's draft-length curve asks either)."""

    curve: VerifyCurve
    baseline_gen_tokens_per_s: float

    def step_cost(self, k: float) -> float:
        """:meth:`VerifyCurve.step_cost`."""
        return self.curve.step_cost(k)

    def predict_gen_tokens_per_s(self, accepted_per_step: float, k: float) -> float:
        """Predicted tokens/s drafting ``k`` tokens per step and accepting ``accepted_per_step`` of them."""
        return self.baseline_gen_tokens_per_s * (1.0 + accepted_per_step) / self.step_cost(k)


__all__ = ["CURVES_KEY", "LENGTHS", "SYNTH_FLAG", "curves_in", "CurveError", "PricedCurve", "VerifyCurve", "curve_from_runs", "curve_key",
           "file_id", "sweep_identity", "synth_args"]
