"""The prompt-cache setting (desktop default, validation naming the key) and the opt-in chat
history file (0600, deleted when turned off)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tuner import chat_history
from tuner import settings as S


def test_cache_ram_default_round_trip_and_bad_values():
    assert S.Settings().cache_ram_mib == S.DEFAULT_CACHE_RAM_MIB == 1024
    assert S.Settings().keep_chat_history is False
    st = S.Settings(cache_ram_mib=0, keep_chat_history=True)
    S.save_settings(st)
    assert S.load_settings() == st
    for bad in (-2, "1024", True, 1.5):
        S.settings_path().write_text(json.dumps({"cache_ram_mib": bad}))
        with pytest.raises(S.SettingsError) as ei:
            S.load_settings()
        assert ei.value.key == "cache_ram_mib" and str(S.settings_path()) in str(ei.value)
    S.settings_path().write_text(json.dumps({"keep_chat_history": "yes"}))
    with pytest.raises(S.SettingsError) as ei:
        S.load_settings()
    assert ei.value.key == "keep_chat_history"


def test_history_file_is_private_and_replaces_by_conversation():
    assert chat_history.load_history() == []
    conv = {"started_unix": 1.0, "model": "stories260K", "messages": [{"role": "user", "content": "hi"}]}
    p = chat_history.save_conversation(conv)
    if os.name == "posix":
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    conv2 = dict(conv, messages=conv["messages"] + [{"role": "assistant", "content": "hello"}])
    chat_history.save_conversation(conv2)
    chat_history.save_conversation({"started_unix": 2.0, "model": "m", "messages": []})
    got = chat_history.load_history()
    assert [c["started_unix"] for c in got] == [1.0, 2.0]
    assert got[0]["messages"][-1]["content"] == "hello"
    assert chat_history.delete_history() is True
    assert not p.exists() and chat_history.delete_history() is False


def test_bad_history_shape_names_the_file():
    p = chat_history.history_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text('{"conversations": 3}')
    with pytest.raises(ValueError, match="chat_history.json"):
        chat_history.load_history()
    # saving over a bad file starts a new one instead of failing
    chat_history.save_conversation({"started_unix": 5.0, "model": "m", "messages": []})
    assert [c["started_unix"] for c in chat_history.load_history()] == [5.0]


@pytest.mark.server
def test_memory_plan_text_counts_the_prompt_cache(stories260k_session):
    from tuner.catalog.scan import scan_folder
    from tuner.ui import flow

    model = next(m for m in scan_folder(stories260k_session.parent) if m.is_llm)
    assert "--cache-ram" not in flow.memory_plan_text(model)
    assert "prompt cache: up to 1.0 GiB of host RAM" in flow.memory_plan_text(model, cache_ram_mib=1024)
    assert "prompt cache: off" in flow.memory_plan_text(model, cache_ram_mib=0)


def test_chat_sampling_reads_the_served_workload_keys_when_they_exist():
    from types import SimpleNamespace

    from tuner.ui.tab_chat import SAMPLING_DEFAULTS, sampling_from_settings

    assert sampling_from_settings(S.Settings()) == SAMPLING_DEFAULTS == {
        "temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05}  # llama-server b11434 --help
    got = sampling_from_settings(SimpleNamespace(temperature=0.2, top_k=0, top_p=None))
    assert got == {"temperature": 0.2, "top_p": 0.95, "top_k": 0, "min_p": 0.05}


def test_reply_figures_wording():
    from tuner.ui.tab_chat import reply_figures

    tm = {"predicted_n": 48, "predicted_per_second": 31.25, "draft_n": 40, "draft_n_accepted": 30}
    assert reply_figures(tm, True) == "48 tokens · 31.2 tokens/s · draft tokens accepted 30 / drafted 40"
    plain = {"predicted_n": 1, "predicted_per_second": 0.0}
    assert reply_figures(plain, False) == "1 token · no speculation"  # one token has no speed
    assert reply_figures({"predicted_n": 9, "predicted_per_second": 5.0}, True) == \
        "9 tokens · 5.0 tokens/s · no draft tokens in this reply"
    assert reply_figures(None, True, 120) == "stopped after 120 characters (no timings for a stopped reply)"
