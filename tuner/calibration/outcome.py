"""What a sweep found, handed from the search to the decision and the report in one frozen object.

The search fills a :class:`SearchOutcome` (``tuner.calibration.search.run_search``); ``decide`` reads
its measurements with the statistics' settings it ran under (``tuner.calibration.decide.decide``),
and the report appends the sentences about the sweep itself (``tuner.calibration.report.finish_decision``).
Nothing reads a search's attributes after it ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .candidates import Candidate
from .pairing import ALPHA, FINALISTS, MAX_PAIRS, MIN_GAIN, SIDE_BY_SIDE, Mix
from .results import Measurement
from .sentences import Sentence
from .threads import ThreadChoice
from .verifycost import VerifyCurve


@dataclass(frozen=True)
class SearchOutcome:
    """One sweep's findings.

    Attributes:
        measurements: every measurement, in launch order (pairing needs the order); the baseline's first.
        unmeasured: speculative candidates the time budget left unmeasured.
        min_gain: the bar a winner's interval must clear is ``1 + min_gain``.
        alpha: the sequential test's total error.
        max_pairs: looks per finalist of the sequential test (the decision must use the search's).
        finalists: finalists the paired rounds were planned for (the error is split over them).
        layout: how the paired rounds ran (``tuner.calibration.sequential.SIDE_BY_SIDE``: both servers up, one
            request apart; ``ALTERNATING``: launches A B B A): the sequential test's drift prior follows it.
        mix: the served mix every ratio was weighted by (``None`` = every request the same).
        baseline_unsteady: the model alone measured inconsistently across launches and no
            re-measurement settled it (screening comparisons are then no evidence either way).
        notes: sentences about the sweep itself (a re-measured baseline, the time limit).
        protocol: what the search planned from the first warm-up (prompts, ``n_predict``, pairs).
        server_sampling: the server's own sampling defaults as ``/props`` gave them (for wording).
        long_context: why the long-context requests were left out, ``None`` when they were kept.
        cancelled: the user cancelled: ``measurements`` holds what ran before, nothing is decided.
        threads: the thread stage's finding (``tuner.calibration.search.threads``); None when it did not run.
        verify_curves: ``{draft group: verify-cost curve}`` measured or reused by the sweep
            (``tuner.calibration.search.verify``; the group is ``Record.group`` of the draft's candidates).
    """

    measurements: tuple[Measurement, ...]
    unmeasured: tuple[Candidate, ...] = ()
    min_gain: float = MIN_GAIN
    alpha: float = ALPHA
    max_pairs: int = MAX_PAIRS
    finalists: int = FINALISTS
    layout: str = SIDE_BY_SIDE
    mix: Mix | None = None
    baseline_unsteady: bool = False
    notes: tuple[Sentence, ...] = ()
    protocol: Mapping[str, object] = field(default_factory=dict)
    server_sampling: Mapping[str, float | int] = field(default_factory=dict)
    long_context: Sentence | None = None
    cancelled: bool = False
    threads: ThreadChoice | None = None
    verify_curves: Mapping[str, VerifyCurve] = field(default_factory=dict)

    @classmethod
    def of(cls, measurements: Iterable[Measurement], **fields: Any) -> SearchOutcome:
        """An outcome of ``measurements`` (any iterable), the other fields as keywords; sequences given
        for ``unmeasured`` and ``notes`` become tuples (tests build outcomes from lists)."""
        for name in ("unmeasured", "notes"):
            if name in fields:
                fields[name] = tuple(fields[name])
        return cls(measurements=tuple(measurements), **fields)


__all__ = ["SearchOutcome"]
