"""Draft heads and chained types on the real llama-server (CPU): a generated EAGLE-3 head matched to
its generated target, launched through the project's own launch path, drafting with a stated
acceptance; a random head of the right shape for contrast; a mismatched head refused before launch;
a chain (n-gram in front of the head) that runs and is compared by the decision."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.synth import write_eagle3_head, write_lookup_target
from tuner.calibration.candidates import Candidate, plan_candidates
from tuner.calibration.decide import MIN_GAIN, decide
from tuner.calibration.measure import measure_candidate
from tuner.calibration.outcome import SearchOutcome
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
    d = tmp_path_factory.mktemp("eagle3")
    write_lookup_target(d / "target.gguf", n_layers=2)
    write_eagle3_head(d / "eagle3-good.gguf", target_layers=(0, 1, 1), agreement=0.8)
    write_eagle3_head(d / "eagle3-random.gguf", target_layers=(0, 1, 1), random_weights=True, seed=5)
    write_eagle3_head(d / "eagle3-wrong-width.gguf", target_layers=(0, 1, 1), target_hidden_size=256)
    return d


def test_eagle3_head_matched_launched_and_drafting(head_folder: Path, llama_server_bin: Path) -> None:
    models = scan_folder(head_folder, cache=False)
    [fam] = group_families(models)
    [entry] = fam.targets
    assert sorted(h.model.path.name for h in entry.heads) == ["eagle3-good.gguf", "eagle3-random.gguf"]
    [(bad, verdict)] = entry.mismatched_heads
    assert bad.path.name == "eagle3-wrong-width.gguf" and verdict.rule == "target-hidden-size"
    heads, errors = head_options(entry, entry.target.path)
    assert any("eagle3-wrong-width.gguf" in e and "rule: target-hidden-size" in e for e in errors)
    dialect = probe_dialect(llama_server_bin)
    plan = plan_candidates(entry.target.path, [], spec_types=dialect.spec_types, heads=heads, ngram_lengths=(None,))
    launched = {Path(c.draft_path).name for c in plan.all_probes if c.draft_path}
    assert "eagle3-wrong-width.gguf" not in launched  # refused before launch
    assert {"eagle3-good.gguf", "eagle3-random.gguf"} <= launched
    chain = next(c for c in plan.ngram if c.is_chained and c.draft_path.endswith("eagle3-good.gguf"))
    assert chain.spec_type == "ngram-mod,draft-eagle3"

    good = next(c for c in plan.drafts if c.draft_path.endswith("eagle3-good.gguf")).with_n_max(3)
    rand = next(c for c in plan.drafts if c.draft_path.endswith("eagle3-random.gguf")).with_n_max(3)
    sup = Supervisor(llama_server_bin, dialect)
    fn = supervisor_launch_fn(sup, entry.target.path, 512, 1, lambda *a, **k: None, 60.0)
    cancel = threading.Event()
    try:
        base = measure_candidate(fn, Candidate(), PROMPTS, [0, 1], N_PREDICT, cancel)
        assert base.ok, base.error
        outputs = {(s.prompt_index, s.repetition): s.content for s in base.samples}
        mg = measure_candidate(fn, good, PROMPTS, [0, 1], N_PREDICT, cancel, baseline_outputs=outputs)
        mr = measure_candidate(fn, rand, PROMPTS, [0, 1], N_PREDICT, cancel, baseline_outputs=outputs)
        mc = measure_candidate(fn, chain, PROMPTS, [0, 1], N_PREDICT, cancel, baseline_outputs=outputs)
    finally:
        sup.stop()
    for m in (mg, mr, mc):
        assert m.ok, f"{m.candidate.label}: {m.error}"
        assert m.speculative_active is True, m.candidate.label  # /slots[].speculative
        assert m.lossless is True, m.candidate.label
    # the head made for this target drafts with high acceptance (dial 0.8: ~0.6-0.9 per drafted token);
    # a random head of the same shapes drafts too, but is almost never accepted
    assert mg.draft_n > 0 and mg.acceptance is not None and mg.acceptance > 0.5, mg.acceptance
    assert mr.acceptance is not None and mr.acceptance < 0.2, mr.acceptance
    assert mc.draft_n > 0 and mc.acceptance is not None and mc.acceptance > 0.3, mc.acceptance
    print(f"\nEAGLE-3 acceptance: good head {mg.acceptance:.3f} ({mg.draft_n_accepted}/{mg.draft_n}), random head "
          f"{mr.acceptance:.3f}, chain ngram-mod,draft-eagle3 {mc.acceptance:.3f}; tok/s base "
          f"{base.gen_tokens_per_s:.1f} good {mg.gen_tokens_per_s:.1f} chain {mc.gen_tokens_per_s:.1f}")
    # the chain is compared like any other candidate: it wins only with a speedup interval above the bar
    d = decide(SearchOutcome.of([base, mg, mr, mc]))
    if d.winner.key == chain.key:
        assert d.speedup_ci_low is not None and d.speedup_ci_low > 1.0 + MIN_GAIN
    assert d.winner.key != rand.key
