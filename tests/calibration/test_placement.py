"""GPU placements of draft candidates from the hardware memory plan (no GPU needed: devices are given)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import make_family
from tuner.calibration.candidates import (
    DraftOption,
    apply_memory_check,
    plan_candidates,
)
from tuner.calibration.engine import (
    _memory_check_factory,
    _place_on_gpu,
    hardware_fingerprint,
)
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
    check = _memory_check_factory(fam.target.resolve(), devices, 1024, notes)
    plan = plan_candidates(fam.target.resolve(), drafts, spec_types=TYPES, gpu=True)
    plan = _place_on_gpu(plan, Path(fam.target).resolve(), devices, 1024, notes)
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


def test_hardware_fingerprint_ignores_free_memory():
    a = _devices(8 * 1024 * MIB)
    b = Devices(devices=(Device(0, "CUDA0", "CUDA", 8 * 1024 * MIB, 1 * MIB, 1 * MIB, "test"),),
                ram_total_bytes=a.ram_total_bytes, ram_available_bytes=1, cpu_cores=8)
    assert hardware_fingerprint(a) == hardware_fingerprint(b)
    assert hardware_fingerprint(a) != hardware_fingerprint(_devices(16 * 1024 * MIB))
