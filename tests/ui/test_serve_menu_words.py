"""The tray's *Serve* submenu says what each saved decision is, from the decision's stored kind (issue 26): a
"for now" decision is not "fastest", a stale profile needs a re-tune, and a model the folder only knows as a
draft is not offered as a target to tune (unless it has a saved profile of its own)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.synth import make_family
from tuner.calibration.serving import config_to_json
from tuner.profiles import Profile, ProfileStore
from tuner.profiles.profile import ModelFileKey, StalenessKeys
from tuner.server.config import ServerConfig
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.serve_targets import STALE_WORDS, menu_choices, stale_check

pytestmark = pytest.mark.gui


def _save(target: Path, kind: str, speedup: float, draft: Path | None = None) -> None:
    """A profile whose decision's headline sentence is of ``kind`` (as ``tuner.calibration.decide`` stores it)."""
    cfg = ServerConfig(target, draft_path=draft, spec_type="draft-simple" if draft else None, n_max=4 if draft else None,
                       n_ctx=256, threads=1)
    winner = {"spec_type": "draft-simple" if draft else "none", "draft_path": str(draft) if draft else None}
    keys = StalenessKeys("hw", "bin", "b11434", "d", (ModelFileKey.of(target),), "prompts", n_ctx=256)
    decision = {"speedup": speedup, "kind": kind.replace(".", "_") if kind.startswith("alone.") else "speculate",
                "sentences": [{"slot": "HEADLINE", "kind": kind, "params": {}}],
                # the prose a reader must not parse: it would say the model alone "is fastest" for every kind
                "reason": "Fastest here: the model alone."}
    ProfileStore().save(Profile(str(target), keys, winner, config_to_json(cfg), (), decision, created_unix_s=time.time()))


@pytest.fixture
def family(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    make_family(folder, n_embd=64, n_layers=2, draft_layers=1, eps=0.02)
    return folder


def test_each_entry_follows_the_saved_decisions_kind(family: Path, make_app, qtbot) -> None:
    _save(family / "target.gguf", "alone.not_enough_evidence", 1.3)
    _save(family / "draft-unrelated.gguf", "alone.slower", 0.8)
    words = {c.name: c.words for c in menu_choices(flow.scan(family)) if c.tuned}
    assert words == {"target.gguf": "on its own for now (not sure yet)", "draft-unrelated.gguf": "fastest on its own"}
    _save(family / "target.gguf", "headline.serving", 1.64, draft=family / "draft-good.gguf")
    _save(family / "draft-unrelated.gguf", "alone.never_drafted", 1.0)
    choices = menu_choices(flow.scan(family))
    assert {c.name: c.words for c in choices if c.tuned} == {"target.gguf": "draft model draft-good.gguf speeds up 1.6×",
                                                             "draft-unrelated.gguf": "fastest on its own"}
    stale = menu_choices(flow.scan(family), lambda scanned, target: ("the llama-server binary changed",))
    assert {c.words for c in stale if c.tuned} == {STALE_WORDS}

    app = make_app(tray_available=True)
    app.controller.serve_targets.items = choices
    app.tray.menu.aboutToShow.emit()
    assert "target.gguf — draft model draft-good.gguf speeds up 1.6×" in app.tray.serve_actions()
    assert not any("is fastest" in t for t in app.tray.serve_actions())


def test_a_model_known_only_as_a_draft_is_not_offered_to_tune(family: Path) -> None:
    names = [c.name for c in menu_choices(flow.scan(family))]
    assert names == ["target.gguf"]  # both drafts share its tokenizer and are smaller: the Models tab's drafts
    _save(family / "draft-good.gguf", "alone.slower", 0.9)  # tuned as a target of its own: it stays servable
    kept = {c.name: c for c in menu_choices(flow.scan(family))}
    assert kept["draft-good.gguf"].tuned and kept["draft-good.gguf"].words == "fastest on its own"


@pytest.mark.server
def test_a_stale_profile_says_it_needs_a_re_tune(family: Path, llama_server_bin: Path) -> None:
    """The real check *Serve at start* asks: a profile tuned with another llama-server, hardware, prompts."""
    _save(family / "target.gguf", "headline.serving", 1.6, draft=family / "draft-good.gguf")
    check = stale_check(Settings(models_dir=family, server_binary=llama_server_bin), None, {})
    assert check(flow.scan(family), family / "target.gguf")
    target = next(c for c in menu_choices(flow.scan(family), check) if c.name == "target.gguf")
    assert target.words == STALE_WORDS
