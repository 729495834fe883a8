"""The verify-cost stage: the cost of one verification step at each draft length, measured with synthetic
acceptance (issue 28 item 3; :mod:`tuner.calibration.verifycost`).

It runs after the probes, for the draft (model or MTP head: both draft on every step) whose probe screened
fastest, once per (binary, target, draft, placement, threads): a curve a profile of this target already keeps
for the same key is reused, with no launch. Otherwise each length of :data:`~tuner.calibration.verifycost.LENGTHS`
is one launch of that draft at ``p_min`` 0 with every drafted token rejected (``--spec-synth-rates 0,…``): a
warm-up and the first :data:`PROMPTS` prompts at the sweep's ``n_predict``, whose pooled tokens/s against the
model alone's on the same requests (the screening baseline) is the step's cost. The launches are paid from the
budget: the stage keeps the paired rounds' reserve and spends at most :data:`SHARE` of the budget, lengths in the
order of ``LENGTHS`` (1 and 16 first, so an early end still spans them, then the middle of the widest gap; once
started, it measures both ends). Not while other programs use the CPU (the sweep's ``busy``): a curve measured
then is kept for later tunes too, and the budget is worth more as paired rounds (a busy 111 s sweep spent 12 s on
lengths 1 and 16, then could not tell the chain from the single draft it served).

The curve then replaces the draft's fitted cost model (:meth:`~tuner.calibration.search.screening.Screening.predict`):
the draft lengths it predicts and the ones the pruning rule skips come from it, and the profile keeps it for the
Monitor's live prediction. Its launches are not measurements: no decision, chart or pair reads them, and the
synthetic flag never reaches a served server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tuner.errors import Cancelled

from ..candidates import Candidate
from ..measure import LaunchError, LaunchFn, RequestError, measure_request, warm_up
from ..pairing import pooled_tokens_per_s
from ..predict import parse_spec_metrics
from ..results import Sample
from ..verifycost import LENGTHS, VerifyCurve, curve_from_runs, curve_key
from ..workload import Workload
from .protocol import Requests
from .rules import screening_ratio
from .stage import Stage, SweepState

SHARE = 0.12
"""At most this share of the budget goes to the verify-cost launches."""

PROMPTS = 2
"""Requests per length, pooled: in ``bench/n_max_prediction.py`` one request read the cost at ``n_max`` 6 10 % above
the pooled rounds' (4.48 against 4.07 target tokens). With two, the stage's costs still read 1–14 % above the pooled
rounds' (run 2): the model alone's reference launch ran minutes earlier, and the machine drifts between them."""

WARM_UP_TOKENS = 8


class VerifyCostStage(Stage):
    """The verify-cost stage of one sweep (module docstring).

    Args:
        launch_fn: the measurer's launch function (at the sweep's thread setting, bounded by the hard time limit).
        workload, requests: the requests' shape and the sweep's prompts (the first :data:`PROMPTS` are sent).
        state: the sweep's state; the stage runs only when ``settings.verify_identity`` is set.
    """

    def __init__(self, launch_fn: LaunchFn, workload: Workload, requests: Requests, state: SweepState) -> None:
        super().__init__(state)
        self.launch_fn = launch_fn
        self.workload = workload
        self.requests = requests

    def run(self, probes: Sequence[Candidate], thread_words: str = "") -> None:
        """Find or measure the curve of the fastest-screened draft among ``probes`` (the draft models' and MTP's
        probes) and keep it in ``record.verify_curves`` under its draft group; ``thread_words``: the sweep's thread
        setting, part of the curve's key.

        Raises:
            Cancelled: the user cancelled.
        """
        probe = self._fastest(probes)
        if not self.s.verify_identity or probe is None:
            return
        key = curve_key(self.s.verify_identity, probe.draft_path, f"{probe.placement} ngl {probe.ngl}",
                        thread_words)
        group = self.record.group(probe)
        known = next((c for c in self.s.known_curves if c.key == key), None)
        if known is not None:
            self.record.verify_curves[group] = known
            self.events("verify_cost", f"{probe.label}: the cost of checking drafts was measured before on this "
                        "machine, with this server, model and draft; reused", candidate=probe,
                        detail={"curve": known.to_json(), "reused": True})
            return
        if self.busy():
            self.events("skipped", f"{probe.label}: the cost of checking drafts not measured, other programs are using "
                        "the CPU: a curve measured now would be kept for later tunes too; the budget goes to more paired "
                        "rounds, and a tune on a quieter machine measures it", candidate=probe)
            return
        curve = self._measure(probe, key)
        if curve is not None:
            self.record.verify_curves[group] = curve
            self.events("verify_cost", f"{probe.label}: one check of k drafted tokens costs "
                        + ", ".join(f"{c:.2f} (k {x:g})" for x, c in curve.points) + " target tokens' time",
                        candidate=probe, detail={"curve": curve.to_json(), "reused": False})

    def _fastest(self, probes: Sequence[Candidate]) -> Candidate | None:
        """The probe whose run drafted and screened fastest against the baseline (``None``: none did)."""
        best: tuple[float, Candidate] | None = None
        for c in probes:
            m = next((m for m in self.record.runs_of(c) if m.candidate == c and m.counts and m.counts.drafts_total),
                     None)
            r = screening_ratio(self.record, m) if m is not None else None
            if m is not None and r is not None and (best is None or r > best[0]):
                best = (r, c)
        return best[1] if best is not None else None

    def _estimate_s(self, probe: Candidate, k: int) -> float:
        """One launch at length ``k``: load, warm-up, :data:`PROMPTS` requests of ``n_predict`` tokens, one token a
        step (acceptance 0) at the step cost the probe's fitted cost model gives (exact at the probe's own length;
        a guess of ``1 + k ÷ 8`` target tokens where it is lower or there is none). The guess alone priced a
        16-token step at 3 target tokens where the CPU's costs 7: a 35 s sweep's stage took 8.5 s, not its 4.2."""
        tps = self.estimates.tps() or 1.0
        model = self.record.cost_models.get(self.record.group(probe))
        step = max(1.0 + k / 8, model.step_cost(k) if model is not None else 0.0)
        return self.estimates.launch_s() + PROMPTS * self.requests.n_predict * step / tps

    def _measure(self, probe: Candidate, key: str) -> VerifyCurve | None:
        """One launch per length while the stage's share and the budget last; the curve of what they measured
        (each length's pooled tokens/s rescaled to the screening baseline's on the same requests)."""
        start = self.budget.elapsed_s()
        runs: dict[float, float] = {}
        base: float | None = None
        ends = self._estimate_s(probe, LENGTHS[0]) + self._estimate_s(probe, LENGTHS[1])
        if ends > SHARE * self.budget.budget_s or not self.estimates.fits(self.budget, ends, optional=True,
                                                                          busy=self.busy()):
            self.events("skipped", f"{probe.label}: the cost of checking drafts not measured, the time budget is too "
                        f"short for even two lengths (about {ends:.0f} s); its cost is fitted to its runs",
                        candidate=probe)
            return None
        for k in LENGTHS:
            if self.cancel.is_set():
                raise Cancelled()
            est = self._estimate_s(probe, k)
            spent = self.budget.elapsed_s() - start
            ends = len(runs) < 2 and k in LENGTHS[:2]  # once started, both ends: one point is no curve
            if (spent + est > SHARE * self.budget.budget_s and not ends) or not self.estimates.fits(
                    self.budget, est, optional=True, busy=self.busy()):
                self.events("skipped", f"{probe.label}: the cost of checking {k} drafted tokens not measured, "
                            "the time budget is spent", candidate=probe)
                break
            got = self._one(replace(probe, n_max=k, p_min=0.0, synth_rates=(0.0,) * k))
            if got is None:
                continue
            drafted, samples = got
            base = base or self.record.baseline_tps_on(samples)
            tps = pooled_tokens_per_s(samples)
            if base and tps:
                runs[drafted] = tps
        return curve_from_runs(base or 0.0, runs, key)

    def _one(self, c: Candidate) -> tuple[float, list[Sample]] | None:
        """One synthetic launch: ``(drafted tokens per step, its requests)``, ``None`` when it failed or drafted
        nothing (then said in an event)."""
        self.events("launch", f"verify cost: starting {c.label}", candidate=c)
        try:
            launch = self.launch_fn(c, self.cancel)
        except LaunchError as exc:
            self.events("verify_cost", f"{c.label}: could not start ({exc})", candidate=c)
            return None
        try:
            timeout = self.budget.request_timeout(self.s.request_timeout_s)
            warm_up(launch.client, WARM_UP_TOKENS, timeout, self.workload)
            before = parse_spec_metrics(launch.client.metrics_text())
            samples = [measure_request(launch.client, idx, prompt, 0, self.requests.n_predict, timeout, self.workload)
                       for idx, prompt in self.requests.prompts[:PROMPTS]]
            counts = parse_spec_metrics(launch.client.metrics_text()).minus(before)
        except (RequestError, ValueError, OSError) as exc:
            self.events("verify_cost", f"{c.label}: {exc}", candidate=c)
            return None
        finally:
            launch.stop()
        if not counts.drafts_total:
            self.events("verify_cost", f"{c.label}: drafted nothing, so it says nothing about the cost", candidate=c)
            return None
        return counts.drafted_per_step or float(c.n_max or 1), samples


__all__ = ["PROMPTS", "SHARE", "VerifyCostStage"]
