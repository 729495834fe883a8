"""Candidate plan: baseline always, n-gram types, draft probes, MTP, drops with reasons; prompt selection."""

from __future__ import annotations

from tuner.calibration.candidates import (
    LONG_DRAFT_N_MAX,
    Candidate,
    DraftOption,
    plan_candidates,
)
from tuner.calibration.prompts import Prompt, make_prompt_set, select_prompts
from tuner.calibration.serving import candidate_config, config_from_json, config_to_json

B11434_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
                "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def test_plan_for_a_current_build():
    drafts = [DraftOption("/m/good.gguf", 30_000_000, 0.6), DraftOption("/m/other.gguf", 30_000_000, 0.5)]
    plan = plan_candidates("/m/target.gguf", drafts, spec_types=B11434_TYPES)
    assert plan.baseline == Candidate() and plan.baseline.is_baseline
    assert [(c.spec_type, c.ngram_n_max, c.ngram_n_min) for c in plan.ngram if not c.is_chained] == [
        ("ngram-mod", None, None), ("ngram-mod", 16, 12), ("ngram-simple", None, None), ("ngram-simple", 16, None)]
    [chain] = [c for c in plan.ngram if c.is_chained]
    assert (chain.spec_type, chain.draft_path, chain.n_max) == ("ngram-mod,draft-simple", "/m/good.gguf", 4)
    every = plan_candidates("/m/target.gguf", [], spec_types=B11434_TYPES, ngram_types=("ngram-cache", "ngram-bogus"))
    assert [c.spec_type for c in every.ngram] == ["ngram-cache"]
    assert "ngram-bogus" in every.dropped[0].reason
    assert [c.draft_path for c in plan.drafts] == ["/m/good.gguf", "/m/other.gguf"]
    assert all(c.n_max == LONG_DRAFT_N_MAX and c.p_min == 0.0 for c in plan.drafts)
    assert plan.mtp is None and plan.dropped == ()
    assert plan.all_probes[0].is_baseline


def test_legacy_build_drops_ngram_with_reason_and_mtp_when_target_has_layers():
    plan = plan_candidates("/m/t.gguf", [DraftOption("/m/d.gguf")], spec_types=("none", "draft-simple"),
                           mtp_layers=1)
    assert plan.ngram == () and plan.mtp is None
    reasons = {d.candidate.spec_type: d.reason for d in plan.dropped}
    assert "not supported by this llama-server" in reasons["ngram-mod"]
    assert "draft-mtp" in reasons
    plan2 = plan_candidates("/m/t.gguf", [], spec_types=B11434_TYPES, mtp_layers=1)
    assert plan2.mtp is not None and plan2.mtp.spec_type == "draft-mtp"


def test_memory_check_drops_before_launch_but_keeps_the_baseline():
    def check(c: Candidate) -> str | None:
        return "does not fit in memory (short by about 512 MiB)" if (c.draft_path or c.is_baseline) else None

    plan = plan_candidates("/m/t.gguf", [DraftOption("/m/big-draft.gguf")], spec_types=B11434_TYPES,
                           memory_check=check)
    assert plan.drafts == ()
    assert plan.baseline.is_baseline
    labels = {d.candidate.label: d.reason for d in plan.dropped}
    assert any("big-draft.gguf" in k and "512 MiB" in v for k, v in labels.items())
    assert any("kept" in v for k, v in labels.items() if k == "no speculation")


def test_gpu_adds_the_target_whole_placement():
    plan = plan_candidates("/m/t.gguf", [DraftOption("/m/d.gguf")], spec_types=B11434_TYPES, gpu=True)
    assert [c.placement for c in plan.drafts] == ["draft-on-gpu", "target-whole"]


def test_candidate_config_and_json_round_trip():
    c = Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=6, p_min=0.0)
    cfg = candidate_config(c, "/m/t.gguf", n_ctx=1024)
    assert cfg.spec_type == "draft-simple" and str(cfg.draft_path) == "/m/d.gguf" and cfg.n_max == 6
    assert cfg.n_parallel == 1 and cfg.n_ctx == 1024 and cfg.port is None
    assert config_from_json(config_to_json(cfg)) == cfg
    ng = candidate_config(Candidate(spec_type="ngram-mod"), "/m/t.gguf")
    assert ng.draft_path is None and ng.n_max is None
    assert Candidate.from_json(c.to_json()) == c
    assert c.label == "draft-simple d.gguf n_max 6" and Candidate().label == "no speculation"


def test_select_prompts_spreads_over_categories():
    ps = make_prompt_set([Prompt(f"c{i}", "code") for i in range(3)] + [Prompt("m0", "math"), Prompt("w0", "chat")])
    picked = select_prompts(ps, 3)
    assert {p.category for _, p in picked} == {"code", "math", "chat"}
    assert [i for i, _ in picked] == sorted(i for i, _ in picked)
    assert len(select_prompts(ps, None)) == 5


def test_draft_mtp_gets_a_probabilistic_drafts_twin_at_sampled_settings():
    """b11434 builds the MTP drafter from the draft-model parameters (common/speculative.cpp
    ``common_speculative_impl_draft_mtp``), so ``--spec-draft-sampling probabilistic`` applies to it too."""
    from tests.server.conftest import help_text
    from tuner.calibration.candidates import add_draft_sampling_variants
    from tuner.calibration.sampling import GREEDY, Sampling
    from tuner.calibration.workload import Workload
    from tuner.server.argv import build_argv
    from tuner.server.dialect import parse_help

    current, legacy = parse_help(help_text("b11434")), parse_help(help_text("legacy-4227c9b"))
    plan = plan_candidates("/m/t.gguf", [DraftOption("/m/d.gguf")], spec_types=B11434_TYPES, mtp_layers=1)
    hot = Workload(sampling=Sampling(temperature=0.8))
    twin = add_draft_sampling_variants(plan, hot, current)
    assert twin.mtp == plan.mtp and twin.mtp is not None and twin.mtp.draft_sampling is None
    assert [(c.spec_type, c.draft_sampling) for c in twin.drafts] == [
        ("draft-simple", None), ("draft-simple", "probabilistic"), ("draft-mtp", "probabilistic")]
    mtp_twin = twin.drafts[-1]
    assert mtp_twin.label == "draft-mtp n_max 16 probabilistic drafts"
    argv = build_argv("/bin/llama-server", candidate_config(mtp_twin, "/m/t.gguf", n_ctx=4096).with_port(8080),
                      current)
    assert argv == ["/bin/llama-server", "-m", "/m/t.gguf", "--host", "127.0.0.1", "--port", "8080", "-c", "4096",
                    "-np", "1", "--metrics", "--slots", "--cors-origins", "localhost", "--spec-type", "draft-mtp",
                    "--spec-draft-n-max", "16", "--spec-draft-p-min", "0", "--spec-draft-sampling", "probabilistic"]
    assert Candidate.from_json(mtp_twin.to_json()) == mtp_twin
    # greedy serving, or a build without the flag: no twin
    assert add_draft_sampling_variants(plan, Workload(sampling=GREEDY), current) == plan
    assert add_draft_sampling_variants(plan, hot, legacy) == plan
