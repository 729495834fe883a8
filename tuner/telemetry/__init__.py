"""tuner.telemetry: samplers (``/metrics``, NVML, psutil) into bounded ring buffers; no Qt.

Public API, importable from this package (each module is loaded on first use, so a tune that only parses
``/metrics`` does not load the collector): :class:`~tuner.telemetry.ring.RingBuffer` and
:func:`~tuner.telemetry.ring.with_breaks`, :func:`~tuner.telemetry.prom.parse_metrics`,
:class:`~tuner.telemetry.samplers.MetricsSampler` / ``ProcessSampler`` / ``ProcessUsage`` / ``VramSampler``,
:class:`~tuner.telemetry.watch.AcceptanceWatch`, :class:`~tuner.telemetry.watch.CollapseWatch` and
:func:`~tuner.telemetry.watch.collapse_words`, :class:`~tuner.telemetry.collector.Collector` with its
``TelemetryTick`` and thresholds (``IDLE_AFTER_S``, ``NO_DRAFT_WINDOW_S``, ``NO_DRAFT_MIN_TOKENS``),
:class:`~tuner.telemetry.spec_window.SpecWindow` / ``SpecTotals`` (the speculative counters of the last requests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.lazyface import lazy_getattr

if TYPE_CHECKING:  # the names as the type checker sees them; at run time __getattr__ loads them
    from tuner.telemetry.collector import IDLE_AFTER_S, NO_DRAFT_MIN_TOKENS, NO_DRAFT_WINDOW_S, Collector, TelemetryTick  # noqa: F401
    from tuner.telemetry.prom import MetricsParseError, MetricsSnapshot, parse_metrics  # noqa: F401
    from tuner.telemetry.ring import RingBuffer, with_breaks  # noqa: F401
    from tuner.telemetry.samplers import MetricsSampler, ProcessSampler, ProcessUsage, VramSampler  # noqa: F401
    from tuner.telemetry.spec_window import SpecTotals, SpecWindow  # noqa: F401
    from tuner.telemetry.watch import AcceptanceWatch, CollapseWatch, collapse_words  # noqa: F401

_EXPORTS = {
    "Collector": "tuner.telemetry.collector",
    "TelemetryTick": "tuner.telemetry.collector",
    "IDLE_AFTER_S": "tuner.telemetry.collector",
    "NO_DRAFT_WINDOW_S": "tuner.telemetry.collector",
    "NO_DRAFT_MIN_TOKENS": "tuner.telemetry.collector",
    "parse_metrics": "tuner.telemetry.prom",
    "MetricsSnapshot": "tuner.telemetry.prom",
    "MetricsParseError": "tuner.telemetry.prom",
    "RingBuffer": "tuner.telemetry.ring",
    "with_breaks": "tuner.telemetry.ring",
    "MetricsSampler": "tuner.telemetry.samplers",
    "ProcessSampler": "tuner.telemetry.samplers",
    "ProcessUsage": "tuner.telemetry.samplers",
    "VramSampler": "tuner.telemetry.samplers",
    "SpecWindow": "tuner.telemetry.spec_window",
    "SpecTotals": "tuner.telemetry.spec_window",
    "AcceptanceWatch": "tuner.telemetry.watch",
    "CollapseWatch": "tuner.telemetry.watch",
    "collapse_words": "tuner.telemetry.watch",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
