"""The sweep plan: GPU placements of draft candidates from the hardware memory plan (no GPU needed: devices are
given), what the memory plan drops before launch, the plan event and the search's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.synth import make_family
from tuner.calibration.candidates import (
    DraftOption,
    apply_memory_check,
    plan_candidates,
)
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.placement import memory_check, place_on_gpu, plan_sweep
from tuner.calibration.request import TuneEvent
from tuner.calibration.sampling import GREEDY
from tuner.calibration.search import SearchSettings
from tuner.hardware.devices import Device, Devices

MIB = 1024 * 1024
TYPES = ("none", "draft-simple", "ngram-mod", "ngram-simple")


@pytest.fixture(scope="module")
def small_family(tmp_path_factory: pytest.TempPathFactory):
    return make_family(tmp_path_factory.mktemp("small-family"), n_embd=256, n_layers=8, draft_layers=2,
                       dtype="f16")


def _devices(budget_bytes: int) -> Devices:
    gpu = Device(index=0, name="CUDA0", backend="CUDA", total_bytes=budget_bytes, free_bytes=budget_bytes,
                 budget_bytes=budget_bytes, source="test")
    return Devices(devices=(gpu,), ram_total_bytes=64 * 1024 * MIB, ram_available_bytes=32 * 1024 * MIB,
                   cpu_cores=8)


def _plan(fam, devices):
    drafts = [DraftOption(str(fam.good_draft.resolve()), fam.good_draft.stat().st_size)]
    notes: list[str] = []
    check = memory_check(fam.target.resolve(), devices, 1024, notes)
    plan = plan_candidates(fam.target.resolve(), drafts, spec_types=TYPES, gpu=True)
    plan = place_on_gpu(plan, Path(fam.target).resolve(), devices, 1024, notes)
    assert check is not None
    return apply_memory_check(plan, check, drafts_only=True), notes


def test_everything_fits_keeps_one_placement_with_all_layers(small_family):
    plan, notes = _plan(small_family, _devices(64 * 1024 * MIB))
    assert [c.placement for c in plan.drafts] == ["draft-on-gpu"], notes
    assert plan.drafts[0].ngl is not None and plan.drafts[0].ngl >= 9  # 8 blocks + output layer


def test_tight_gpu_offers_both_placements(small_family):
    # Between "nothing fits" and "everything fits" lies a band of GPU sizes where the target can be
    # whole only with the draft on the CPU: there both placements are offered.
    both = []
    for mib in range(1024, 1200, 4):
        plan, notes = _plan(small_family, _devices(mib * MIB))
        by = {c.placement: c for c in plan.drafts}
        if set(by) == {"draft-on-gpu", "target-whole"}:
            both.append(by)
    assert both, "no GPU size gave both placements"
    for by in both:
        assert by["draft-on-gpu"].ngl < 9 and by["draft-on-gpu"].draft_ngl is None
        assert by["target-whole"].ngl == 9 and by["target-whole"].draft_ngl == 0


def test_a_gpu_too_small_for_anything_drops_drafts_with_the_reason(small_family):
    plan, notes = _plan(small_family, _devices(1024 * MIB + 1 * MIB))
    assert [c.placement for c in plan.drafts] == ["draft-on-gpu"] or plan.drafts == ()
    for d in plan.dropped:
        assert "does not fit in memory" in d.reason and "MiB" in d.reason


def test_the_sweep_plan_on_a_cpu_only_machine(resolve: Any) -> None:
    """Draft and n-gram probes planned, the plan event naming them and the prompts, settings from the
    request: side by side without a GPU, at most 2 × repetitions pairs, the share carried over."""
    events: list[TuneEvent] = []
    inputs = resolve(n_predict=48, repetitions=5, long_share=0.2)
    plan = plan_sweep(inputs, None, Events(events.append))
    labels = [c.label for c in plan.candidates.all_probes]
    assert labels[0] == "no speculation" and "draft-simple stories-draft.gguf n_max 16" in labels
    assert {"ngram-mod", "ngram-simple"} <= {c.spec_type for c in plan.candidates.ngram}
    assert plan.dropped == () and plan.budget_s == inputs.request.budget_s
    assert (plan.settings.n_predict, plan.settings.max_pairs, plan.settings.side_by_side) == (48, 10, True)
    assert plan.settings.long_share == 0.2
    (event,) = [e for e in events if e.kind == "plan"]
    assert event.detail["probes"] == labels and event.detail["prompts"] == [i for i, _ in inputs.prompts.chosen]
    c = plan.candidates  # llama-server's default sampling is not greedy: the draft has its probabilistic twin
    assert [d.draft_sampling for d in c.drafts] == [None, "probabilistic"]
    assert event.message == f"{len(labels)} configurations to probe (2 draft, {len(c.ngram)} n-gram), 0 dropped before launch"
    given = SearchSettings(n_predict=8)
    assert plan_sweep(resolve(), given, Events(None)).settings is given


def test_a_machine_too_small_drops_the_draft_before_launch_and_greedy_settings_add_no_twin(
        resolve: Any, quiet_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import tuner.hardware

    tiny = dataclasses.replace(quiet_machine, ram_total_bytes=1 * MIB, ram_available_bytes=1 * MIB)
    monkeypatch.setattr(tuner.hardware, "detect_devices", lambda *a, **k: tiny)
    plan = plan_sweep(resolve(), None, Events(None)).candidates
    assert plan.drafts == () and all("does not fit in memory" in d.reason for d in plan.dropped)
    assert any(d.candidate.is_baseline and d.reason.endswith("(kept: the baseline is always measured)")
               for d in plan.dropped)
    monkeypatch.setattr(tuner.hardware, "detect_devices", lambda *a, **k: quiet_machine)
    greedy = plan_sweep(resolve(sampling=GREEDY), None, Events(None)).candidates
    assert [c.draft_sampling for c in greedy.drafts] == [None]


def test_without_devices_the_server_places_every_launch(resolve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.hardware

    def fails(*a: object, **k: object) -> Devices:
        raise RuntimeError("no /proc here")

    monkeypatch.setattr(tuner.hardware, "detect_devices", fails)
    events: list[TuneEvent] = []
    inputs = resolve(events=events)
    assert inputs.devices is None and "hardware detection failed: no /proc here" in [e.message for e in events]
    plan = plan_sweep(inputs, None, Events(None)).candidates
    assert plan.dropped == () and all(c.ngl is None for c in plan.all_probes)


def test_the_thread_stage_is_planned_unless_the_threads_are_chosen(resolve: Any, monkeypatch: pytest.MonkeyPatch
                                                                    ) -> None:
    import tuner.crosscheck.cpu_buffers as cpu_buffers

    monkeypatch.setattr(cpu_buffers, "build_uses_openmp", lambda binary, dialect=None: True)
    settings = plan_sweep(resolve(threads=None), None, Events(None)).settings
    assert (settings.thread_cores, settings.thread_openmp) == (2, True)  # the quiet machine's 2 physical cores
    assert plan_sweep(resolve(threads=1), None, Events(None)).settings.thread_cores is None  # the user's count
