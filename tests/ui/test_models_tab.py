"""Models tab roles: a draft appears once, under its target, as a draft (not also as a "target with
no drafts" row); the unrelated draft and a broken file are shown with their reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import corrupt_copy, make_family
from tuner.ui import flow

pytestmark = [pytest.mark.gui]


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("models-tab-family")
    make_family(d, n_embd=128, n_layers=6, draft_layers=2, eps=0.05)
    corrupt_copy(d / "draft-good.gguf", d / "half-downloaded.gguf", truncate_to=4096)
    return d


def rows(tree):
    """(depth, name, role, details) of every row, depth-first."""
    out = []

    def walk(item, depth):
        out.append((depth, item.text(0), item.text(1), item.text(3)))
        for i in range(item.childCount()):
            walk(item.child(i), depth + 1)

    for i in range(tree.topLevelItemCount()):
        walk(tree.topLevelItem(i), 0)
    return out


@pytest.mark.server
def test_drafts_listed_once_with_their_role(make_app, qtbot, family_dir):
    app = make_app(tray_available=True)
    result = flow.scan(family_dir)
    app.controller.selected_target = family_dir / "target.gguf"
    tab = app.window.models_tab
    tab.show_scan(result)
    got = rows(tab.tree)
    targets = [r for r in got if r[2].startswith("target")]
    drafts = [r for r in got if r[2].startswith("draft")]
    assert len(targets) == 1 and targets[0][2] == "target (selected)", got
    assert "2 draft candidates" in targets[0][3], targets
    assert len(drafts) == 2 and all(r[0] == targets[0][0] + 1 for r in drafts), got
    assert all(r[2] == f"draft for {targets[0][1]}" for r in drafts), drafts
    assert all("draft rank score" in r[3] for r in drafts), drafts
    assert not any("0 draft candidates" in r[3] for r in got), got
    family = [r for r in got if r[0] == 0 and r[1].endswith(" tokens")]
    assert family and "1 target, 2 drafts" in family[0][3], got
    broken = [r for r in got if r[2] == "broken"]
    assert broken and broken[0][1] == "half-downloaded.gguf" and broken[0][3], got
