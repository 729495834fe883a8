"""The speculative counters of the last requests served, for the Monitor's live prediction (no Qt).

llama-server folds a request's generated tokens and its speculative counters into ``/metrics`` when the request
ends (tools/server/server-context.cpp ``metrics_on_prediction`` and the ``n_accepted_per_pos`` fold at slot
release), so every poll interval whose generated-token counter grew ended at least one request. The window keeps
the counter differences of the last :data:`WINDOW_REQUESTS` such intervals and sums them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tuner.telemetry.samplers import MetricsRates

#: Request intervals kept: enough for a verdict several times over (the advice needs 10), few enough that the
#: prediction follows a change in what clients send within minutes.
WINDOW_REQUESTS = 50


@dataclass(frozen=True)
class SpecTotals:
    """Speculative counters summed over the window.

    Attributes:
        requests: poll intervals in which requests ended: the number of requests, at least (two requests
            ending within one poll count once; with one slot and 1 Hz polls that takes sub-second requests).
        generated_tokens: Δ``tokens_predicted_total`` (tokens).
        drafts: Δ``spec_decode_num_drafts_total`` (verification steps with a draft).
        draft_tokens: Δ``spec_decode_num_draft_tokens_total``.
        accepted_tokens: Δ``spec_decode_num_accepted_tokens_total``.
        accepted_per_pos: Δ``spec_decode_num_accepted_tokens_per_pos_total`` by position.
    """

    requests: int = 0
    generated_tokens: float = 0.0
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()


class SpecWindow:
    """The last ``size`` poll intervals that ended a request, with their speculative counter differences."""

    def __init__(self, size: int = WINDOW_REQUESTS) -> None:
        self._ticks: deque[MetricsRates] = deque(maxlen=max(1, int(size)))

    def add(self, m: MetricsRates | None) -> None:
        """Keep ``m`` when requests ended in its interval (its generated-token counter grew)."""
        if m is not None and (m.generated_tokens or 0) > 0:
            self._ticks.append(m)

    def clear(self) -> None:
        """Forget every interval (another server, another configuration)."""
        self._ticks.clear()

    def totals(self) -> SpecTotals:
        """The window's counters summed (all zero when empty)."""
        n = max((len(m.accepted_per_pos) for m in self._ticks), default=0)
        per_pos = [0.0] * n
        for m in self._ticks:
            for i, v in enumerate(m.accepted_per_pos):
                per_pos[i] += v
        return SpecTotals(
            requests=len(self._ticks),
            generated_tokens=sum(m.generated_tokens or 0.0 for m in self._ticks),
            drafts=sum(m.drafts or 0.0 for m in self._ticks),
            draft_tokens=sum(m.draft_tokens or 0.0 for m in self._ticks),
            accepted_tokens=sum(m.accepted_tokens or 0.0 for m in self._ticks),
            accepted_per_pos=tuple(per_pos),
        )
