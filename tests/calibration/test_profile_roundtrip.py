"""Every configuration the sweep can save must load back through the profile checks unchanged (the
allow-list of issue 16 against the candidates of issues 11 and 14)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.serving import (
    ProfileError,
    candidate_config,
    config_to_json,
    profile_server_config,
)

CANDIDATES = [
    Candidate(),
    Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12),
    Candidate(spec_type="draft-simple", draft_path="/m/draft.gguf", n_max=4, draft_sampling="probabilistic"),
    Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/draft.gguf", n_max=4, ngram_n_max=16),
    Candidate(spec_type="draft-mtp", n_max=2),
]


@pytest.mark.parametrize("cand", CANDIDATES, ids=lambda c: c.label)
def test_a_saved_winner_loads_back_unchanged(cand):
    cfg = candidate_config(cand, "/m/target.gguf", n_ctx=8192)
    prof = SimpleNamespace(path="/p/profile.json", target_path="/m/target.gguf", server_config=config_to_json(cfg))
    assert profile_server_config(prof) == cfg


def test_new_fields_are_type_checked():
    cfg = candidate_config(CANDIDATES[1], "/m/target.gguf", n_ctx=8192)
    obj = config_to_json(cfg) | {"ngram_n_max": "16"}
    with pytest.raises(ProfileError, match="ngram_n_max"):
        profile_server_config(SimpleNamespace(path="/p/x.json", target_path="/m/target.gguf", server_config=obj))
