"""Samplers that turn raw readings into per-interval rates (no Qt).

* :class:`MetricsSampler`: llama-server ``/metrics`` counters → generation tokens/s, draft acceptance
  rate (from counter deltas: Δaccepted ÷ Δdrafted, the formula of server-context.cpp's
  ``draft acceptance`` log line), requests in flight (decoding + queued).
* :class:`ProcessSampler`: RSS and CPU of one process tree (the llama-server child) from a
  ``(rss_bytes, cpu_seconds)`` reader; the default reader is :func:`tuner.process` /
  :mod:`tuner.hardware.host`'s psutil adapter when present.
* :class:`VramSampler`: used device memory from a reader (NVML through ``tuner.hardware.nvml``).

Every sampler returns None for "unknown" instead of raising, so a dead server shows as a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.telemetry.prom import MetricsParseError, MetricsSnapshot, parse_metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricsRates:
    """Rates over the interval between two ``/metrics`` scrapes; None = unknown or nothing happened.

    Attributes:
        t_s: time of the newer scrape, seconds.
        interval_s: seconds since the previous scrape (None for the first).
        gen_tokens_per_s: Δtokens_predicted ÷ Δtokens_predicted_seconds (speed while generating).
        throughput_tokens_per_s: Δtokens_predicted ÷ interval_s (wall-clock output rate).
        acceptance_rate: Δaccepted ÷ Δdrafted in 0..1 (None when no draft tokens in the interval).
        draft_tokens: Δdrafted tokens in the interval (None for the first scrape).
        accepted_tokens: Δaccepted draft tokens in the interval.
        requests_processing: gauge at the newer scrape (requests being decoded).
        requests_deferred: gauge at the newer scrape (requests queued for a slot: with ``-np 1``,
            which speculation needs, every concurrent request but one waits here).
        requests_in_flight: processing + deferred at the newer scrape, and at least 1 when tokens
            were generated or prompts processed during the interval (a burst that started and
            ended between two scrapes still counts); None when the gauges are absent.
        generated_tokens: Δtokens_predicted in the interval (None for the first scrape).
        drafts: Δ``spec_decode_num_drafts_total`` (verification steps with a draft) in the interval.
        accepted_per_pos: Δ``spec_decode_num_accepted_tokens_per_pos_total`` by position 0, 1, … in the interval
            (``()`` until the server lists them; a position missing on one side counts 0).
    """

    t_s: float
    interval_s: float | None = None
    gen_tokens_per_s: float | None = None
    throughput_tokens_per_s: float | None = None
    acceptance_rate: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    requests_in_flight: float | None = None
    generated_tokens: float | None = None
    drafts: float | None = None
    accepted_per_pos: tuple[float, ...] = ()


def in_flight(processing: float | None, deferred: float | None, active_in_interval: bool = False) -> float | None:
    """Requests in flight: decoding (``requests_processing``) plus queued (``requests_deferred``,
    server-context.cpp counts the deferred task queue), at least 1 when the counters show work
    during the interval. None when neither gauge is known and nothing happened."""
    if processing is None and deferred is None:
        return 1.0 if active_in_interval else None
    n = (processing or 0.0) + (deferred or 0.0)
    return max(n, 1.0) if active_in_interval else n


def _delta(new: float | None, old: float | None) -> float | None:
    if new is None or old is None:
        return None
    return new - old


class MetricsSampler:
    """Turns successive ``/metrics`` scrapes into :class:`MetricsRates`.

    Args:
        fetch: returns the ``/metrics`` body (e.g. ``ServerClient.metrics_text``); may raise on
            connection errors, which become an all-None sample.

    A counter that goes down means the server restarted: the baseline is reset and that interval
    reports None rates.
    """

    def __init__(self, fetch: Callable[[], str]) -> None:
        self._fetch = fetch
        self._prev: MetricsSnapshot | None = None
        self._prev_t: float | None = None
        self.last_error: str | None = None

    def reset(self) -> None:
        """Forget the previous scrape (call after a server restart)."""
        self._prev = None
        self._prev_t = None

    def sample(self, t_s: float) -> MetricsRates:
        """Scrape once and return the rates since the previous scrape (never raises)."""
        try:
            snap = parse_metrics(self._fetch())
        except MetricsParseError as exc:
            self.last_error = str(exc)
            return MetricsRates(t_s=t_s)
        except Exception as exc:  # connection refused, HTTP 501 without --metrics, timeouts
            log.debug("/metrics scrape failed", exc_info=True)
            self.last_error = f"/metrics unavailable: {exc}"
            self.reset()
            return MetricsRates(t_s=t_s)
        self.last_error = None
        return self.update(snap, t_s)

    def update(self, snap: MetricsSnapshot, t_s: float) -> MetricsRates:
        """Fold one already-parsed snapshot taken at ``t_s`` (seconds) and return the interval rates."""
        prev, prev_t = self._prev, self._prev_t
        self._prev, self._prev_t = snap, t_s
        gauges: dict[str, Any] = dict(requests_processing=snap.requests_processing,
                                      requests_deferred=snap.requests_deferred)
        if prev is None or prev_t is None:
            return MetricsRates(t_s=t_s, requests_in_flight=in_flight(snap.requests_processing, snap.requests_deferred),
                                **gauges)
        d_tok = _delta(snap.tokens_predicted_total, prev.tokens_predicted_total)
        d_sec = _delta(snap.tokens_predicted_seconds_total, prev.tokens_predicted_seconds_total)
        d_draft = _delta(snap.draft_tokens_total, prev.draft_tokens_total)
        d_acc = _delta(snap.accepted_tokens_total, prev.accepted_tokens_total)
        if any(d is not None and d < 0 for d in (d_tok, d_sec, d_draft, d_acc)):
            # counters went backwards: the server restarted; this snapshot is the new baseline
            return MetricsRates(t_s=t_s, requests_in_flight=in_flight(snap.requests_processing, snap.requests_deferred),
                                **gauges)
        d_steps = _delta(snap.drafts_total, prev.drafts_total)
        if snap.draft_tokens_total is not None and prev.draft_tokens_total is None:
            d_draft, d_acc, d_steps = snap.draft_tokens_total, snap.accepted_tokens_total, snap.drafts_total
        interval = t_s - prev_t
        gen = d_tok / d_sec if d_tok and d_sec and d_sec > 0 else None
        thr = d_tok / interval if d_tok is not None and interval > 0 else None
        acc = d_acc / d_draft if d_acc is not None and d_draft else None
        d_prompt = _delta(snap.prompt_tokens_total, prev.prompt_tokens_total)
        active = bool(d_tok and d_tok > 0) or bool(d_prompt and d_prompt > 0)
        return MetricsRates(
            t_s=t_s,
            interval_s=interval,
            gen_tokens_per_s=gen,
            throughput_tokens_per_s=thr,
            acceptance_rate=acc,
            draft_tokens=d_draft,
            accepted_tokens=d_acc,
            requests_in_flight=in_flight(snap.requests_processing, snap.requests_deferred, active),
            generated_tokens=d_tok,
            drafts=d_steps,
            accepted_per_pos=_per_pos_delta(snap.accepted_per_pos_total, prev.accepted_per_pos_total),
            **gauges,
        )


def _per_pos_delta(new: tuple[float, ...], old: tuple[float, ...]) -> tuple[float, ...]:
    """Per-position counters gained between two scrapes (a position missing on one side counts 0)."""
    n = max(len(new), len(old))
    return tuple((new[i] if i < len(new) else 0.0) - (old[i] if i < len(old) else 0.0) for i in range(n))


@dataclass(frozen=True)
class ProcessUsage:
    """One reading of a process tree: resident memory (bytes) and cumulative CPU time (seconds)."""

    rss_bytes: int
    cpu_seconds: float


@dataclass(frozen=True)
class ProcessRates:
    """RSS at ``t_s`` and CPU use over the interval in percent of one core (100 = one full core)."""

    t_s: float
    rss_bytes: int | None = None
    cpu_percent: float | None = None


class ProcessSampler:
    """CPU % and RSS of a process from successive :class:`ProcessUsage` readings.

    Args:
        read: returns the current usage, or None / raises when the process is gone.
    """

    def __init__(self, read: Callable[[], ProcessUsage | None]) -> None:
        self._read = read
        self._prev: tuple[float, float] | None = None

    def sample(self, t_s: float) -> ProcessRates:
        """Read once (never raises); CPU % is None for the first reading and after the process vanished."""
        try:
            u = self._read()
        except Exception:
            log.debug("process usage reading failed", exc_info=True)
            u = None
        if u is None:
            self._prev = None
            return ProcessRates(t_s=t_s)
        cpu = None
        if self._prev is not None and t_s > self._prev[0]:
            cpu = max(0.0, (u.cpu_seconds - self._prev[1]) / (t_s - self._prev[0]) * 100.0)
        self._prev = (t_s, u.cpu_seconds)
        return ProcessRates(t_s=t_s, rss_bytes=u.rss_bytes, cpu_percent=cpu)


class VramSampler:
    """Used device memory (bytes, summed over devices) from a reader; None when unknown (no NVML, no GPU).

    Args:
        read: returns used bytes or None; exceptions become None.
    """

    def __init__(self, read: Callable[[], int | None]) -> None:
        self._read = read

    def sample(self) -> int | None:
        """One reading in bytes, or None."""
        try:
            return self._read()
        except Exception:
            log.debug("VRAM reading failed", exc_info=True)
            return None
