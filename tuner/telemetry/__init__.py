"""tuner.telemetry: samplers (``/metrics``, NVML, psutil) into bounded ring buffers; no Qt.

Public API: :class:`~tuner.telemetry.ring.RingBuffer`, :func:`~tuner.telemetry.prom.parse_metrics`,
:class:`~tuner.telemetry.samplers.MetricsSampler` / ``ProcessSampler`` / ``VramSampler``,
:class:`~tuner.telemetry.watch.AcceptanceWatch`, :class:`~tuner.telemetry.watch.CollapseWatch` and its
:func:`~tuner.telemetry.watch.collapse_words`, :class:`~tuner.telemetry.collector.Collector`.
"""

from tuner.telemetry.watch import CollapseWatch, collapse_words

__all__ = ["CollapseWatch", "collapse_words"]
