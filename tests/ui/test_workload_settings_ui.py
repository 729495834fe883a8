"""The context size and the served temperature in the window: the Serve tab's settings rows, and the
context shown with the Models tab's memory plan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tuner import settings as S
from tuner.ui import flow


def test_context_and_temperature_rows_save_the_settings(make_app):
    a = make_app()
    tab = a.window.serve_tab
    assert tab.ctx_spin.text() == "automatic" and S.load_settings().ctx_size is None
    tab.ctx_spin.setValue(16384)
    tab._save_ctx()
    assert S.load_settings().ctx_size == 16384 and "next time" in tab.settings_msg.text()
    tab.ctx_spin.setValue(tab.ctx_spin.minimum())
    tab._save_ctx()
    assert S.load_settings().ctx_size is None
    assert tab.temp_spin.text().startswith("server default")
    tab.temp_spin.setValue(0.7)
    tab._save_temperature()
    assert S.load_settings().temperature == 0.7
    assert tab.share_spin.text() == "the prompt set's own" and S.load_settings().long_share is None
    tab.share_spin.setValue(40)
    tab._save_long_share()
    assert S.load_settings().long_share == 0.4
    # a new window shows what is saved
    b = make_app()
    assert b.window.serve_tab.temp_spin.value() == 0.7 and b.window.serve_tab.ctx_spin.text() == "automatic"
    assert b.window.serve_tab.share_spin.value() == 40
    b.window.serve_tab.share_spin.setValue(-1)
    b.window.serve_tab._save_long_share()
    assert S.load_settings().long_share is None


@pytest.mark.server
def test_models_tab_context_text(stories260k_session):
    from tuner.catalog.scan import scan_folder

    stories = next(m for m in scan_folder(stories260k_session.parent) if m.path.name == "stories260K.gguf")
    assert flow.context_text(stories) == "Context size 2048 tokens (automatic: the model's training context 2048)"
    gemma_like = SimpleNamespace(context_length=32768)
    assert flow.context_text(gemma_like) == ("Context size 8192 tokens (automatic: the model's training context "
                                             "32768, capped at 8192)")
    assert flow.context_text(gemma_like, 16384) == "Context size 16384 tokens (your setting)"
    assert flow.memory_plan_text(stories, 1024).startswith("Context size 1024 tokens (your setting). ")


def test_the_prompt_editor_keeps_a_conversation(tmp_path):
    import json

    from tuner.calibration.prompts import load_prompts
    from tuner.ui.tab_prompts import to_jsonl

    conv = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                         {"role": "user", "content": "Tell me a joke."}], "category": "chat"}
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(conv) + "\n")
    text = to_jsonl(load_prompts(f))
    assert json.loads(text) == conv
    g = tmp_path / "q.jsonl"
    g.write_text(text)
    assert load_prompts(g).sha256 == load_prompts(f).sha256
