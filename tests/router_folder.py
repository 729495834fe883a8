"""A models folder for the router tests: two tuned targets and an untuned one, each with a saved profile as
``draftwise tune`` writes it (built here: a sweep per target would take minutes).

- ``target.gguf`` (a synthetic family's target, tests/synth.py) tuned to ``draft-simple`` with
  ``draft-good.gguf`` at ``n_max`` 4;
- ``stories260K.gguf`` tuned to ``draft-simple`` with itself as the draft at ``n_max`` 2 (a draft that always
  agrees: every reply drafts);
- ``draft-good.gguf``, an LLM too, left untuned.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.synth import make_family
from tuner.calibration.serving import config_to_json
from tuner.profiles import Profile, ProfileStore
from tuner.profiles.profile import ModelFileKey, StalenessKeys
from tuner.server.config import ServerConfig

#: The two tuned targets' ids and draft lengths.
TUNED = {"target": 4, "stories260K": 2}
UNTUNED = "draft-good"


def save_profile(config: ServerConfig, speedup: float, store: ProfileStore | None = None) -> Profile:
    """Save a profile whose winner is ``config`` (a draft model; without one, the model alone), as a sweep would
    have."""
    winner = {"spec_type": config.spec_type or "none",
              "draft_path": str(config.draft_path) if config.draft_path else None,
              "n_max": config.n_max, "p_min": config.p_min}
    label = f"{config.spec_type} {Path(config.draft_path).name} n_max {config.n_max}" if config.draft_path else "none"
    keys = StalenessKeys("hw", "bin", "b11434", "d", (ModelFileKey.of(config.model_path),), "prompts",
                         n_ctx=config.n_ctx)
    prof = Profile(str(config.model_path), keys, winner, config_to_json(config), (),
                   {"speedup": speedup, "label": label, "winner": winner,
                    "kind": "speculate" if config.spec_type else "none"},
                   created_unix_s=time.time())
    (store or ProfileStore()).save(prof)
    return prof


def router_folder(root: Path, stories: Path) -> Path:
    """The folder of the module docstring under ``root`` (profiles saved in the current DRAFTWISE_HOME)."""
    folder = root / "models"
    make_family(folder, n_embd=128, n_layers=4, draft_layers=2, eps=0.02)
    (folder / "draft-unrelated.gguf").unlink()
    shutil.copyfile(stories, folder / "stories260K.gguf")
    common = dict(spec_type="draft-simple", p_min=0.0, n_ctx=256, threads=1)
    save_profile(ServerConfig(folder / "target.gguf", draft_path=folder / "draft-good.gguf", n_max=TUNED["target"],
                              **common), 1.6)
    save_profile(ServerConfig(folder / "stories260K.gguf", draft_path=folder / "stories260K.gguf",
                              n_max=TUNED["stories260K"], **common), 1.2)
    return folder
