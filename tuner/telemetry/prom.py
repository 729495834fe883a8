"""Parse llama-server's ``/metrics`` (the one adapter over ``prometheus_client``'s text parser).

Metric names and meanings: tools/server/server-task.cpp ``server_task_result_metrics::to_metrics``
(all carry the ``llamacpp:`` prefix). Counters are cumulative since the server started; the
speculative counters are folded in when a slot is released, i.e. at request end
(server-context.cpp), so acceptance must come from *counter deltas* between scrapes. The
``predicted_tokens_seconds`` gauge resets on every scrape and is deliberately not used.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tuner.errors import DraftwiseError

PREFIX = "llamacpp:"


class MetricsParseError(DraftwiseError, ValueError):
    """The ``/metrics`` body is not Prometheus text; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"/metrics: {reason}")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of ``/metrics``. Counter fields are totals since server start; None = absent.

    Attributes:
        prompt_tokens_total: ``llamacpp:prompt_tokens_total``.
        prompt_seconds_total: ``llamacpp:prompt_seconds_total`` (prompt processing time, s).
        tokens_predicted_total: ``llamacpp:tokens_predicted_total`` (generated tokens).
        tokens_predicted_seconds_total: ``llamacpp:tokens_predicted_seconds_total`` (generation time, s).
        draft_tokens_total: ``llamacpp:spec_decode_num_draft_tokens_total`` (drafted tokens, incl. rejected).
        accepted_tokens_total: ``llamacpp:spec_decode_num_accepted_tokens_total``.
        drafts_total: ``llamacpp:spec_decode_num_drafts_total`` (verification steps).
        accepted_per_pos_total: ``..._accepted_tokens_per_pos_total{position=i}`` for i = 0 … the
            highest position listed (a position not listed counts 0); empty until the first
            speculative request finishes.
        requests_processing: gauge, requests being decoded now.
        requests_deferred: gauge, requests waiting for a slot.
    """

    prompt_tokens_total: float | None = None
    prompt_seconds_total: float | None = None
    tokens_predicted_total: float | None = None
    tokens_predicted_seconds_total: float | None = None
    draft_tokens_total: float | None = None
    accepted_tokens_total: float | None = None
    drafts_total: float | None = None
    accepted_per_pos_total: tuple[float, ...] = ()
    requests_processing: float | None = None
    requests_deferred: float | None = None


_FIELDS = {
    "prompt_tokens_total": "prompt_tokens_total",
    "prompt_seconds_total": "prompt_seconds_total",
    "tokens_predicted_total": "tokens_predicted_total",
    "tokens_predicted_seconds_total": "tokens_predicted_seconds_total",
    "spec_decode_num_draft_tokens_total": "draft_tokens_total",
    "spec_decode_num_accepted_tokens_total": "accepted_tokens_total",
    "spec_decode_num_drafts_total": "drafts_total",
    "requests_processing": "requests_processing",
    "requests_deferred": "requests_deferred",
}
_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse a ``/metrics`` body.

    Args:
        text: Prometheus text format 0.0.4 as served by llama-server ``--metrics``.

    Returns:
        A :class:`MetricsSnapshot`; metrics that are absent stay None (or ``()`` for per-position).

    Raises:
        MetricsParseError: the text is not valid Prometheus exposition format.
    """
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name.startswith(PREFIX):
                    name = name[len(PREFIX):]
                if name == _PER_POS:
                    try:
                        per_pos[int(sample.labels.get("position", ""))] = float(sample.value)
                    except ValueError:
                        continue
                elif name in _FIELDS:
                    values[_FIELDS[name]] = float(sample.value)
    except ValueError as exc:  # the parser raises ValueError on malformed lines
        raise MetricsParseError(str(exc)) from exc
    return MetricsSnapshot(
        **values,
        accepted_per_pos_total=tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else (),
    )
