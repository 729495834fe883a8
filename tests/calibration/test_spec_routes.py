"""Every speculation route as a candidate: n-gram lengths, chains with a length per component, heads,
MTP — the plan, the launch configuration and the exact argv for the b11434 dialect."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.calibration.test_candidates import B11434_TYPES
from tests.server.conftest import help_text
from tuner.calibration.candidates import (
    Candidate,
    DraftOption,
    HeadOption,
    apply_memory_check,
    plan_candidates,
)
from tuner.calibration.serving import candidate_config, config_from_json, config_to_json
from tuner.server.argv import UnsupportedConfigError, build_argv
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help

CURRENT = parse_help(help_text("b11434"))
LEGACY = parse_help(help_text("legacy-4227c9b"))
T = "/m/t.gguf"


def spec_part(argv: list[str]) -> list[str]:
    return argv[argv.index("--spec-type"):]


def argv_of(c: Candidate, dialect=CURRENT) -> list[str]:
    return build_argv("srv", candidate_config(c, T).with_port(1), dialect)


def test_plan_has_heads_mtp_and_chains_with_a_length_per_component() -> None:
    plan = plan_candidates(T, [DraftOption("/m/d.gguf", 10)], spec_types=B11434_TYPES, mtp_layers=1,
                           heads=[HeadOption("/m/e3.gguf", "draft-eagle3", 5)])
    assert [(c.spec_type, c.draft_path, c.n_max) for c in plan.drafts] == [
        ("draft-simple", "/m/d.gguf", 16), ("draft-eagle3", "/m/e3.gguf", 16)]
    assert plan.draft_sizes_bytes == {"/m/d.gguf": 10, "/m/e3.gguf": 5}
    chains = [(c.spec_type, c.draft_path, c.n_max) for c in plan.ngram if c.is_chained]
    assert chains == [("ngram-mod,draft-simple", "/m/d.gguf", 4), ("ngram-mod,draft-mtp", None, 4),
                      ("ngram-mod,draft-eagle3", "/m/e3.gguf", 4)]
    assert plan.mtp is not None
    # a binary without ngram-mod (or without the head type) drops the chain with the reason
    no_mod = plan_candidates(T, [DraftOption("/m/d.gguf")], spec_types=("none", "draft-simple", "ngram-simple"),
                             heads=[HeadOption("/m/e3.gguf", "draft-eagle3")])
    assert not any(c.is_chained for c in no_mod.ngram)
    reasons = {d.candidate.spec_type: d.reason for d in no_mod.dropped}
    assert "not supported" in reasons["ngram-mod,draft-simple"] and "not supported" in reasons["draft-eagle3"]
    # chains off, lengths off: the old plan
    old = plan_candidates(T, [DraftOption("/m/d.gguf")], spec_types=B11434_TYPES, chains=False, ngram_lengths=(None,))
    assert [c.spec_type for c in old.ngram] == ["ngram-mod", "ngram-simple"]


def test_memory_check_covers_chains_even_when_only_drafts_are_checked() -> None:
    plan = plan_candidates(T, [DraftOption("/m/d.gguf")], spec_types=B11434_TYPES)
    checked = apply_memory_check(plan, lambda c: "too big" if c.draft_path else None, drafts_only=True)
    assert checked.drafts == () and not any(c.is_chained for c in checked.ngram)
    assert len(checked.ngram) == 4  # the pure n-gram candidates stay


def test_exact_argv_per_candidate_type() -> None:
    cases = {
        Candidate(): ["--spec-type", "none"],
        Candidate(spec_type="ngram-mod"): ["--spec-type", "ngram-mod"],
        Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12):
            ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "16", "--spec-ngram-mod-n-min", "12"],
        Candidate(spec_type="ngram-simple", ngram_n_max=16): ["--spec-type", "ngram-simple",
                                                              "--spec-ngram-simple-size-m", "16"],
        Candidate(spec_type="ngram-map-k4v", ngram_n_max=8): ["--spec-type", "ngram-map-k4v",
                                                              "--spec-ngram-map-k4v-size-m", "8"],
        Candidate(spec_type="ngram-cache"): ["--spec-type", "ngram-cache"],
        Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=6, p_min=0.0):
            ["--spec-type", "draft-simple", "--spec-draft-model", "/m/d.gguf", "--spec-draft-n-max", "6",
             "--spec-draft-p-min", "0"],
        Candidate(spec_type="draft-mtp", n_max=2, p_min=0.0):
            ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2", "--spec-draft-p-min", "0"],
        Candidate(spec_type="draft-eagle3", draft_path="/m/e3.gguf", n_max=5):
            ["--spec-type", "draft-eagle3", "--spec-draft-model", "/m/e3.gguf", "--spec-draft-n-max", "5"],
        Candidate(spec_type="draft-dflash", draft_path="/m/df.gguf", n_max=7):
            ["--spec-type", "draft-dflash", "--spec-draft-model", "/m/df.gguf", "--spec-draft-n-max", "7"],
        # a chain: each component its own length, the n-gram's never leaking into --spec-draft-n-max
        Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4, p_min=0.0, ngram_n_max=24,
                  ngram_n_min=18):
            ["--spec-type", "ngram-mod,draft-simple", "--spec-draft-model", "/m/d.gguf", "--spec-draft-n-max", "4",
             "--spec-draft-p-min", "0", "--spec-ngram-mod-n-max", "24", "--spec-ngram-mod-n-min", "18"],
        Candidate(spec_type="ngram-simple,draft-mtp", n_max=2):
            ["--spec-type", "ngram-simple,draft-mtp", "--spec-draft-n-max", "2"],
    }
    for c, want in cases.items():
        assert spec_part(argv_of(c)) == want, c.label


def test_server_config_lengths_fall_back_only_without_a_draft_type() -> None:
    single = ServerConfig(model_path=Path(T), spec_type="ngram-mod", n_max=16, n_min=2, port=1)
    assert spec_part(build_argv("x", single, CURRENT)) == [
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "16", "--spec-ngram-mod-n-min", "2"]
    chained = ServerConfig(model_path=Path(T), draft_path=Path("/m/d.gguf"), spec_type="ngram-mod,draft-simple",
                           n_max=3, port=1)
    assert spec_part(build_argv("x", chained, CURRENT)) == [
        "--spec-type", "ngram-mod,draft-simple", "--spec-draft-model", "/m/d.gguf", "--spec-draft-n-max", "3"]
    with pytest.raises(UnsupportedConfigError, match="fixed draft length of 8"):
        build_argv("x", ServerConfig(model_path=Path(T), spec_type="ngram-cache", ngram_n_max=4, port=1), CURRENT)
    with pytest.raises(UnsupportedConfigError) as e:
        build_argv("x", chained, LEGACY)
    assert "ngram-mod" in str(e.value)
    # the config survives the profile's JSON round trip with both lengths
    c = candidate_config(Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4,
                                   ngram_n_max=24), T)
    assert config_from_json(config_to_json(c)) == c and c.ngram_n_max == 24 and c.n_max == 4


def test_candidate_labels_and_json() -> None:
    c = Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4, ngram_n_max=24)
    assert c.label == "ngram-mod,draft-simple ngram n_max 24 d.gguf n_max 4"
    assert Candidate.from_json(c.to_json()) == c and c.key != Candidate.from_json({**c.to_json(), "ngram_n_max": 8}).key
    assert Candidate(spec_type="ngram-mod", ngram_n_max=16).label == "ngram-mod ngram n_max 16"
