"""DFlash and DSpark heads on the real llama-server b11434 (CPU): generated heads for a generated target,
matched by the catalog, planned as ``draft-dflash`` / ``draft-dspark`` candidates, launched through the
project's own launch path, and drafting.

b11434 runs both: common/speculative.cpp maps ``draft-dflash`` / ``draft-dspark`` to
``common_speculative_impl_draft_dflash`` (DSpark = a DFlash head with ``markov_w1.weight``,
src/models/dflash.cpp ``load_arch_tensors``), loaded with ``-md`` like a draft model
(``--spec-type draft-dflash --spec-draft-model HEAD``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.synth import write_dflash_head, write_lookup_target
from tuner.calibration.candidates import Candidate, plan_candidates
from tuner.calibration.measure import measure_candidate
from tuner.calibration.pipeline.inputs import head_options
from tuner.calibration.pipeline.launchers import supervisor_launch_fn
from tuner.calibration.prompts import Prompt
from tuner.catalog.families import group_families
from tuner.catalog.scan import scan_folder
from tuner.server.dialect import probe_dialect
from tuner.server.supervisor import Supervisor

pytestmark = pytest.mark.server

PROMPTS = [(0, Prompt("Once upon a time", "creative")), (1, Prompt("Lily and Tom went to the park.", "chat"))]
N_PREDICT = 48


@pytest.fixture(scope="module")
def head_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dflash")
    write_lookup_target(d / "target.gguf", n_layers=2)
    write_dflash_head(d / "dflash.gguf", target_layers=(0, 1))
    write_dflash_head(d / "dflash-random.gguf", target_layers=(0, 1), random_weights=True, seed=5)
    write_dflash_head(d / "dspark.gguf", target_layers=(0, 1), dspark=True)
    write_dflash_head(d / "dspark-random.gguf", target_layers=(0, 1), dspark=True, random_weights=True, seed=5)
    write_dflash_head(d / "dflash-bad-layer.gguf", target_layers=(0, 7))
    return d


def test_dflash_and_dspark_heads_launch_and_draft(head_folder: Path, llama_server_bin: Path) -> None:
    [fam] = group_families(scan_folder(head_folder, cache=False))
    [entry] = fam.targets
    kinds = {h.model.path.name: h.spec_type for h in entry.heads}
    assert kinds == {"dflash.gguf": "draft-dflash", "dflash-random.gguf": "draft-dflash",
                     "dspark.gguf": "draft-dspark", "dspark-random.gguf": "draft-dspark"}, kinds
    [(bad, verdict)] = entry.mismatched_heads  # layer 7 of a 2-layer target: refused before launch
    assert bad.path.name == "dflash-bad-layer.gguf" and verdict.rule == "target-layer-range", verdict
    dialect = probe_dialect(llama_server_bin)
    assert {"draft-dflash", "draft-dspark"} <= set(dialect.spec_types)
    heads, _notes = head_options(entry, entry.target.path)
    plan = plan_candidates(entry.target.path, [], spec_types=dialect.spec_types, heads=heads, ngram_lengths=(None,))
    probes = {Path(c.draft_path).name: c for c in plan.drafts if c.draft_path}
    assert "dflash-bad-layer.gguf" not in probes
    dflash = probes["dflash.gguf"].with_n_max(3)
    dspark = probes["dspark.gguf"].with_n_max(3)
    rand = probes["dspark-random.gguf"].with_n_max(3)
    drand = probes["dflash-random.gguf"].with_n_max(3)
    assert (dflash.spec_type, dspark.spec_type, dspark.p_min) == ("draft-dflash", "draft-dspark", 0.0)

    sup = Supervisor(llama_server_bin, dialect)
    fn = supervisor_launch_fn(sup, entry.target.path, 512, 1, lambda *a, **k: None, 60.0)
    cancel = threading.Event()
    try:
        base = measure_candidate(fn, Candidate(), PROMPTS, [0], N_PREDICT, cancel)
        assert base.ok, base.error
        outputs = {(s.prompt_index, s.repetition): s.content for s in base.samples}
        got = {c.spec_type + ":" + Path(c.draft_path).name: measure_candidate(
            fn, c, PROMPTS, [0], N_PREDICT, cancel, baseline_outputs=outputs) for c in (dflash, dspark, rand, drand)}
    finally:
        sup.stop()
    for label, m in got.items():
        assert m.ok, f"{label}: {m.error}"
        assert m.speculative_active is True, label  # /slots[].speculative
        assert m.draft_n > 0, label  # it drafted
        assert m.lossless is True, label
    md, ms = got["draft-dflash:dflash.gguf"], got["draft-dspark:dspark.gguf"]
    mdr, mr = got["draft-dflash:dflash-random.gguf"], got["draft-dspark:dspark-random.gguf"]
    # the heads made for this target copy the anchor: the first token of each 3-token block is the
    # target's next token (about 1 in 3 accepted); random heads of the same shapes almost never are
    for m in (md, ms):
        assert m.acceptance is not None and 0.2 < m.acceptance, (m.candidate.label, m.acceptance)
    for m in (mdr, mr):
        assert m.acceptance is not None and m.acceptance < 0.1, (m.candidate.label, m.acceptance)
    print(f"\nDFlash acceptance {md.acceptance:.3f} ({md.draft_n_accepted}/{md.draft_n}), random DFlash "
          f"{mdr.acceptance:.3f}; DSpark {ms.acceptance:.3f} ({ms.draft_n_accepted}/{ms.draft_n}), random DSpark "
          f"{mr.acceptance:.3f}; tok/s base {base.gen_tokens_per_s:.1f} dflash {md.gen_tokens_per_s:.1f} "
          f"dspark {ms.gen_tokens_per_s:.1f}")
