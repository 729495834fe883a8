"""A measured verify-cost curve: the cost of one verification step at each draft length, on this machine.

llama-server b11434's ``--spec-synth-rates P0,…`` accepts drafted tokens at given per-position rates instead
of by match with the target ("benchmarking only": tools/server/server-context.cpp
``server_sample_and_accept_synth``). The server needs a speculative configuration to start with it, and the
list has exactly the effective ``n_max`` entries, each in [0, 1] and non-increasing (common/speculative.cpp
``common_speculative_synth_rates_resolve``); ``/metrics`` and ``timings`` then count the synthetic drafts and
acceptances as real ones. So for a draft model or an MTP head (they draft on every step; n-gram types draft
only on matches and are never measured here), the time of one step is measured directly:

- the target alone (``spec_type`` none): ``t`` seconds per token;
- at each ``n_max`` of :data:`LENGTHS` with every rate 0: each step drafts ``k`` tokens and accepts none, so
  its time ÷ ``t`` is the cost of drafting and verifying ``k`` tokens (``cost(k)``, target-token times);
- at the longest with every rate :data:`HIGH_RATE`: the extra time per accepted token
  (``per_accepted_token``: the draft catching up on the accepted tokens).

:class:`VerifyCostCurve` implements :class:`~tuner.calibration.predict.StepCost` and replaces the
:class:`~tuner.calibration.predict.CostModel` fitted to the sweep's own runs. It is a machine fact, cached once
per (llama-server build, target, draft or head, placement and layers, threads) in
``paths.data_dir() / "verify-costs.json"`` (:func:`known_curve`, :func:`store_curve`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tuner.errors import Cancelled

from .candidates import Candidate
from .measure import Launch, measure_request
from .predict import PerPositionCounts, parse_spec_metrics
from .prompts import Prompt

log = logging.getLogger(__name__)

SYNTH_FLAG = "--spec-synth-rates"
"""The b11434 flag (common/arg.cpp); a build without it gets no curve (the fitted cost model stays)."""

LENGTHS = (1, 4, 12)
"""Draft lengths measured at acceptance 0; the others are interpolated (linearly, extrapolated past 12)."""

HIGH_RATE = 1.0
"""The per-position rate of the launch that separates the accepted tokens' cost (every draft accepted)."""

N_PREDICT = 32
"""Generated tokens per request."""

PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived",
    "The three most important ideas in the history of science are",
)
"""The short greedy requests of every launch (the same for each, so the steps compare)."""

STORE_NAME = "verify-costs.json"
MAX_ENTRIES = 64
MAX_STORE_BYTES = 256 * 1024

SynthLaunch = Callable[[Candidate, tuple[str, ...], threading.Event], Launch]
"""``launch(candidate, extra_args, cancel) -> Launch``: start the candidate with ``extra_args`` added (the
synthetic-acceptance flag; empty for the target alone). Raises ``LaunchError`` / ``Cancelled``."""


def synth_args(n_max: int, rate: float) -> tuple[str, ...]:
    """``("--spec-synth-rates", "r,r,…")`` with ``n_max`` entries (the count llama-server demands)."""
    return (SYNTH_FLAG, ",".join(f"{rate:g}" for _ in range(n_max)))


MEASURED_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-mtp"})
"""Types whose curve is measured: they draft on every step, and their effective ``n_max`` is the configured one
(the rates list must match the effective one: common/speculative.cpp ``common_speculative_init`` resolves it
from the initialized implementations). DFlash and DSpark heads clamp ``n_max`` to their block (S5 in the
reference), and so may a multi-head MTP: such a launch exits, the stage says so, and the fit stays."""


def measurable(c: Candidate) -> bool:
    """True for a candidate whose step cost the synthetic rates can measure: one of :data:`MEASURED_TYPES`
    alone (not a chain, not an n-gram type: they draft only on matches; not run-time autotune)."""
    return c.spec_type in MEASURED_TYPES and not c.autotune


@dataclass(frozen=True)
class SynthRun:
    """One launch's totals: ``n_max`` and the rate it ran at (``None``: the target alone), its generated tokens
    after each request's first (Σ ``predicted_n − 1``), their seconds (Σ ``predicted_ms`` ÷ 1000), the accepted
    tokens (Σ ``draft_n_accepted``) and ``/metrics``' counters over the launch (``None`` when unreadable)."""

    n_max: int | None
    rate: float | None
    generated: int
    seconds: float
    accepted: int
    counts: PerPositionCounts | None = None

    def step_s(self) -> float:
        """Seconds per verification step: each step yields its accepted tokens and one more."""
        steps = self.generated - self.accepted
        if steps <= 0 or self.seconds <= 0:
            raise ValueError(f"no steps measured at n_max {self.n_max}")
        return self.seconds / steps

    def drafted_per_step(self) -> float:
        """Mean drafted tokens per step from the counters, else ``n_max``."""
        d = self.counts.drafted_per_step if self.counts is not None else None
        return float(d) if d else float(self.n_max or 0)


@dataclass(frozen=True)
class VerifyCostCurve:
    """The measured cost of one verification step (a :class:`~tuner.calibration.predict.StepCost`).

    Attributes:
        lengths: the draft lengths measured (mean drafted tokens per step of each launch), increasing.
        costs: each one's step cost at acceptance 0, in target-token times (the target alone's token = 1).
        per_accepted_token: extra cost of a step per accepted token, target-token times (≥ 0).
        baseline_gen_tokens_per_s: the target alone's tokens/s (the measurement's own; a sweep sets its own).
    """

    lengths: tuple[float, ...]
    costs: tuple[float, ...]
    per_accepted_token: float
    baseline_gen_tokens_per_s: float

    def step_cost(self, k: float) -> float:
        """Step cost drafting ``k`` tokens (accepting none): linear between the measured lengths, the end
        segments' slopes beyond them (never below 1, never below the slope's end value at 0 drafts)."""
        xs, ys = self.lengths, self.costs
        if len(xs) == 1:
            return max(1.0, ys[0] * k / xs[0]) if xs[0] else ys[0]
        i = 0 if k <= xs[0] else min(len(xs) - 2, max(j for j in range(len(xs) - 1) if xs[j] <= k))
        x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
        y = y0 + (y1 - y0) * (k - x0) / (x1 - x0) if x1 > x0 else y0
        return max(1.0, y)

    def per_length(self, n_max: int) -> tuple[float, ...]:
        """The step cost at each draft length 1..``n_max`` (what the evidence shows)."""
        return tuple(round(self.step_cost(k), 4) for k in range(1, n_max + 1))

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (the cache's and the profile's evidence)."""
        return {"lengths": list(self.lengths), "costs": list(self.costs),
                "per_accepted_token": self.per_accepted_token,
                "baseline_gen_tokens_per_s": self.baseline_gen_tokens_per_s}

    @classmethod
    def from_json(cls, obj: object) -> VerifyCostCurve:
        """The inverse of :meth:`to_json`. Raises ``ValueError`` on any other shape."""
        if not isinstance(obj, dict):
            raise ValueError("a verify-cost curve must be an object")
        try:
            xs = tuple(float(x) for x in obj["lengths"])
            ys = tuple(float(y) for y in obj["costs"])
            curve = cls(xs, ys, float(obj["per_accepted_token"]), float(obj["baseline_gen_tokens_per_s"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a verify-cost curve lacks {exc}") from None
        if not xs or len(xs) != len(ys) or list(xs) != sorted(xs) or curve.baseline_gen_tokens_per_s <= 0:
            raise ValueError("a verify-cost curve needs increasing lengths, one cost each, and a baseline speed")
        return curve


def curve_from_runs(runs: Sequence[SynthRun]) -> VerifyCostCurve:
    """The curve from the launches of :func:`measure_curve`: one with ``rate`` None (the target alone), one or
    more at rate 0, optionally one at :data:`HIGH_RATE` (else ``per_accepted_token`` is 0).

    Raises:
        ValueError: no baseline run, no run at rate 0, or a run without steps.
    """
    base = next((r for r in runs if r.rate is None), None)
    zero = sorted((r for r in runs if r.rate == 0.0), key=lambda r: r.drafted_per_step())
    if base is None or not zero:
        raise ValueError("a verify-cost curve needs the target alone and a run at acceptance 0")
    t = base.step_s()
    points = {round(r.drafted_per_step(), 3): r.step_s() / t for r in zero}
    lengths = tuple(sorted(points))
    curve = VerifyCostCurve(lengths, tuple(points[k] for k in lengths), 0.0, 1.0 / t)
    high = next((r for r in runs if r.rate is not None and r.rate > 0 and r.accepted), None)
    if high is not None:
        steps = high.generated - high.accepted
        a = high.accepted / steps
        extra = (high.step_s() / t - curve.step_cost(high.drafted_per_step())) / a
        curve = replace(curve, per_accepted_token=max(0.0, extra))
    return curve


def _run(launch: SynthLaunch, c: Candidate, extra: tuple[str, ...], rate: float | None,
         cancel: threading.Event, timeout_s: float) -> SynthRun:
    """One launch of ``c`` with ``extra`` args, the :data:`PROMPTS` greedy, its totals."""
    if cancel.is_set():
        raise Cancelled()
    lch = launch(c, extra, cancel)
    try:
        measure_request(lch.client, 0, Prompt(PROMPTS[0]), -1, 8, timeout_s, greedy=True)  # warm-up
        before = _counts(lch)
        samples = [measure_request(lch.client, i, Prompt(p), 0, N_PREDICT, timeout_s, greedy=True)
                   for i, p in enumerate(PROMPTS)]
        after = _counts(lch)
    finally:
        lch.stop()
    gen = sum(max(0, (s.predicted_n or 0) - 1) for s in samples)
    secs = sum((s.predicted_ms or 0.0) for s in samples) / 1000.0
    acc = sum(s.draft_n_accepted or 0 for s in samples)
    counts = after.minus(before) if after is not None else None
    return SynthRun(c.n_max if rate is not None else None, rate, gen, secs, acc, counts)


def _counts(lch: Launch) -> PerPositionCounts | None:
    try:
        return parse_spec_metrics(lch.client.metrics_text())
    except Exception:  # noqa: BLE001 - the counters only refine the drafted length; n_max stands in
        return None


def measure_curve(launch: SynthLaunch, c: Candidate, cancel: threading.Event, lengths: Sequence[int] = LENGTHS,
                  timeout_s: float = 60.0) -> VerifyCostCurve:
    """Measure ``c``'s curve (module docstring): ``len(lengths) + 2`` launches of a few seconds each.

    Raises:
        ValueError: ``c`` is not :func:`measurable`, or a launch measured no steps.
        tuner.calibration.measure.LaunchError, RequestError: a launch or a request failed.
        Cancelled: ``cancel`` was set.
    """
    if not measurable(c):
        raise ValueError(f"{c.label}: only a draft model or head of {sorted(MEASURED_TYPES)} can be measured with "
                         "synthetic acceptance")
    base = Candidate(ngl=c.ngl, threads=c.threads, omp_passive=c.omp_passive, poll=c.poll, rpc=c.rpc)
    runs = [_run(launch, base, (), None, cancel, timeout_s)]
    for k in lengths:
        runs.append(_run(launch, replace(c, n_max=k, p_min=0.0), synth_args(k, 0.0), 0.0, cancel, timeout_s))
    k = max(lengths)
    runs.append(_run(launch, replace(c, n_max=k, p_min=0.0), synth_args(k, HIGH_RATE), HIGH_RATE, cancel, timeout_s))
    return curve_from_runs(runs)


def launches_needed(lengths: Sequence[int] = LENGTHS) -> int:
    """Launches one curve takes (the target alone, each length at 0, the longest at the high rate)."""
    return len(lengths) + 2


# --------------------------------------------------------------------------------------------------
# The cached fact

def curve_key(binary_path: str | Path, c: Candidate, target_path: str | Path, threads: int | None) -> str:
    """The cache key: a hash of the build's identity (``tuner.server.workarounds.binary_identity``), the
    target and the draft or head (resolved path, size, mtime), the candidate's type, placement and layers,
    and the threads."""
    from tuner.server.workarounds import binary_identity

    try:
        build: object = binary_identity(Path(binary_path))
    except OSError:
        build = str(binary_path)
    blob = json.dumps([build, _file_id(target_path), _file_id(c.draft_path), c.spec_type, c.placement, c.ngl,
                       c.draft_ngl, list(c.rpc), threads], default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _file_id(path: str | Path | None) -> object:
    if path is None:
        return None
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return str(p)
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def _store_path() -> Path:
    from tuner import paths

    return paths.data_dir() / STORE_NAME


def _entries() -> list[dict[str, Any]]:
    from tuner.storage import load_json

    path = _store_path()
    if not path.exists():
        return []
    try:
        data = load_json(path, limit_bytes=MAX_STORE_BYTES, what="the verify-cost facts")
    except (OSError, ValueError):
        log.warning("the verify-cost facts cannot be read; measuring again", exc_info=True)
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def known_curve(key: str) -> VerifyCostCurve | None:
    """The cached curve under ``key`` (:func:`curve_key`), else None; never raises."""
    for e in reversed(_entries()):
        if e.get("key") == key:
            try:
                return VerifyCostCurve.from_json(e.get("curve"))
            except ValueError:
                return None
    return None


def store_curve(key: str, curve: VerifyCostCurve) -> None:
    """Keep ``curve`` under ``key`` (the newest :data:`MAX_ENTRIES` entries; atomic write); never raises."""
    from tuner.storage import atomic_write_json

    entries = [e for e in _entries() if e.get("key") != key]
    entries = (entries + [{"key": key, "curve": curve.to_json()}])[-MAX_ENTRIES:]
    try:
        atomic_write_json(_store_path(), {"version": 1, "entries": entries})
    except OSError:
        log.warning("cannot save the verify-cost fact", exc_info=True)


__all__ = ["HIGH_RATE", "LENGTHS", "SYNTH_FLAG", "CurveSource", "SynthLaunch", "SynthRun", "VerifyCostCurve", "curve_from_runs",
           "curve_key", "known_curve", "launches_needed", "measurable", "measure_curve", "store_curve", "synth_args"]


@dataclass
class CurveSource:
    """Where a sweep gets each draft's curve: the cache, else a measurement (which it then caches).

    Args:
        launch: the synthetic-acceptance launch function (:data:`SynthLaunch`).
        key_of: the cache key of a candidate (:func:`curve_key` with the tune's binary, target and threads).
        lengths: the draft lengths measured at acceptance 0.

    Attributes:
        measured: the candidates measured by this source (tests read it).
    """

    launch: SynthLaunch
    key_of: Callable[[Candidate], str]
    lengths: tuple[int, ...] = LENGTHS
    measured: list[Candidate] | None = None

    def known(self, c: Candidate) -> VerifyCostCurve | None:
        """The cached curve of ``c`` (starts nothing)."""
        return known_curve(self.key_of(c))

    def measure(self, c: Candidate, cancel: threading.Event) -> VerifyCostCurve:
        """Measure ``c``'s curve (:func:`measure_curve`, its errors) and cache it."""
        curve = measure_curve(self.launch, c, cancel, self.lengths)
        store_curve(self.key_of(c), curve)
        if self.measured is not None:
            self.measured.append(c)
        return curve
