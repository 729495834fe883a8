"""The served workload without a server: the context-size rule, sampling wording, the multi-turn prompt
format and its flattening rule, long-context sizing, and the profile's new staleness keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.calibration.prompts import PromptFileError, flatten_messages, load_prompts
from tuner.calibration.sampling import GREEDY, Sampling
from tuner.calibration.workload import (
    Workload,
    chat_messages,
    fit_long_prompt,
    long_context_prompts,
    request_seed,
)
from tuner.ctxsize import default_ctx_size, resolve_ctx_size
from tuner.profiles import ModelFileKey, Profile, StalenessKeys, stale_reasons
from tuner.settings import Settings, SettingsError, from_json


def test_default_context_is_the_training_context_capped_at_8192_never_below_4096_unless_smaller():
    assert default_ctx_size(32768) == 8192  # Gemma 3 270M
    assert default_ctx_size(131072) == 8192
    assert default_ctx_size(6000) == 6000
    assert default_ctx_size(4096) == 4096
    assert default_ctx_size(2048) == 2048  # the model's own is smaller: never above it
    assert default_ctx_size(None) == 4096
    assert resolve_ctx_size(None, 2048)[1] is not None  # said so
    assert resolve_ctx_size(16384, 8192) == (16384, resolve_ctx_size(16384, 8192)[1])
    assert "exceeds" in resolve_ctx_size(16384, 8192)[1]
    with pytest.raises(ValueError, match="--ctx-size 100"):
        resolve_ctx_size(100, 8192)


def test_settings_keys_for_context_and_sampling():
    s = from_json({"ctx_size": 16384, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.0})
    assert (s.ctx_size, s.temperature, s.top_k, s.top_p, s.min_p) == (16384, 0.7, 20, 0.9, 0.0)
    assert Settings().ctx_size is None and Sampling.from_settings(Settings()).uses_server_defaults
    for bad in ({"ctx_size": 10}, {"ctx_size": "big"}, {"temperature": -1}, {"top_p": 2}, {"top_k": -3}):
        with pytest.raises(SettingsError) as e:
            from_json(bad, Path("/x/settings.json"))
        assert e.value.key == next(iter(bad)) and "settings.json" in str(e.value)


def test_sampling_states_the_server_defaults_and_sends_only_what_is_set():
    d = Sampling()
    assert d.body() == {} and not d.is_greedy
    assert d.describe() == "temperature 0.8, top_k 40, top_p 0.95, min_p 0.05 (llama-server's defaults)"
    # the binary's own values (from /props) win over the built-in wording
    assert d.describe({"temperature": 0.6, "top_k": 20}).startswith("temperature 0.6, top_k 20")
    u = Sampling(temperature=0.7, top_p=0.9)
    assert u.body() == {"temperature": 0.7, "top_p": 0.9} and "llama-server" not in u.describe()
    assert GREEDY.is_greedy and GREEDY.describe() == "greedy (temperature 0)"
    assert Workload(chat=True, sampling=d).key() == "chat;server-defaults" and Workload(chat=False, sampling=u).key() \
        == "completion;temperature=0.7,top_p=0.9"
    assert request_seed(2, 1) == request_seed(2, 1) != request_seed(1, 2)


def test_multi_turn_jsonl_and_the_flattening_rule(tmp_path: Path):
    f = tmp_path / "p.jsonl"
    conv = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."},
            {"role": "assistant", "content": "7"}, {"role": "user", "content": "Another?"}]
    f.write_text(json.dumps({"messages": conv, "category": "chat"}) + "\n"
                 + json.dumps({"prompt": "plain", "category": "code"}) + "\n")
    ps = load_prompts(f)
    p = ps.prompts[0]
    assert p.category == "chat" and p.messages == tuple((m["role"], m["content"]) for m in conv)
    assert p.text == flatten_messages(p.messages) == (
        "System: You are terse.\n\nUser: Name a prime.\n\nAssistant: 7\n\nUser: Another?\n\nAssistant:")
    msgs = chat_messages(p, 1)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == "Request 2.\nYou are terse." and msgs[3]["content"] == "Another?"
    assert chat_messages(ps.prompts[1], 0) == [{"role": "user", "content": "Request 1.\nplain"}]
    # a changed turn changes the prompt-set hash (a staleness key)
    conv2 = [*conv[:3], {"role": "user", "content": "And another?"}]
    f.write_text(json.dumps({"messages": conv2, "category": "chat"}) + "\n"
                 + json.dumps({"prompt": "plain", "category": "code"}) + "\n")
    assert load_prompts(f).sha256 != ps.sha256


@pytest.mark.parametrize("messages, needle", [
    ([], "non-empty list"),
    ([{"role": "robot", "content": "x"}], "messages[1]: 'role'"),
    ([{"role": "user", "content": ""}], "messages[1]: 'content'"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "last turn"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}],
     "messages[2]: a 'system' turn"),
])
def test_bad_conversations_name_the_line_and_turn(tmp_path: Path, messages, needle):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "fine"}) + "\n" + json.dumps({"messages": messages}) + "\n")
    with pytest.raises(PromptFileError) as e:
        load_prompts(f)
    assert e.value.line == 2 and needle in str(e.value)


def test_long_prompts_are_sized_between_half_the_context_and_what_still_fits():
    doc, code = long_context_prompts()
    assert (doc.category, code.category) == ("long document", "long code") and doc.fill == 0.5
    words = lambda t: len(t.split())  # noqa: E731 - a stand-in tokenizer: one token per word
    for n_ctx in (512, 4096, 8192, 32768):  # 32768 needs more than the text: it repeats, marked
        for p in (doc, code):
            text = fit_long_prompt(p, n_ctx, 256 if n_ctx > 512 else 32, words)
            n = words(text)
            assert n_ctx / 2 <= n <= n_ctx - (256 if n_ctx > 512 else 32) - 64, (p.category, n_ctx, n)
            assert text.endswith(p.question)
    assert "(continued, part 2)" in fit_long_prompt(doc, 32768, 256, words)
    # deterministic: every candidate gets the same request
    assert fit_long_prompt(code, 4096, 256, words) == fit_long_prompt(code, 4096, 256, words)


def _keys(n_ctx, workload="completion;server-defaults"):
    return StalenessKeys("hw", "bin", "b1", "d", (ModelFileKey("/m.gguf", 1, 1),), "p", n_ctx=n_ctx,
                         workload=workload)


def test_context_size_and_workload_are_staleness_keys():
    assert stale_reasons(_keys(8192), _keys(8192)) == []
    r = stale_reasons(_keys(8192), _keys(4096))
    assert r == ["the context size changed (tuned at 8192, now 4096 tokens)"]
    assert "measured requests changed" in stale_reasons(_keys(8192), _keys(8192, "chat;server-defaults"))[0]


def test_a_schema_1_profile_is_read_and_stale_with_its_old_context():
    old = {"schema_version": 1, "target_path": "/m.gguf", "keys": {k: v for k, v in _keys(None).to_json().items()
                                                                  if k not in ("n_ctx", "workload")},
           "winner": {"spec_type": "none"}, "server_config": {"model_path": "/m.gguf", "n_ctx": 2048},
           "argv": ["llama-server", "-c", "2048"], "decision": {}}
    p = Profile.from_json(old)
    assert p.keys.n_ctx == 2048 and p.schema_version == 1
    reasons = stale_reasons(p.keys, _keys(8192))
    assert "the context size changed (tuned at 2048, now 8192 tokens)" in reasons
    assert any("older protocol" in r for r in reasons)


def test_the_depth_sentence_only_when_long_requests_differ_beyond_noise():
    from tuner.calibration.candidates import Candidate
    from tuner.calibration.decide import CategoryResult, Decision
    from tuner.calibration.report import describe_depth

    def dec(long_speedup):
        cats = (CategoryResult("code", 10, 14, 1.4, 0.8), CategoryResult("long code", 10, long_speedup * 10,
                                                                          long_speedup, 0.7))
        return Decision(winner=Candidate(spec_type="ngram-mod"), gen_tokens_per_s=13, baseline_gen_tokens_per_s=10,
                        speedup=1.3, speedup_ci_low=1.2, speedup_ci_high=1.4, reason="", per_category=cats)

    assert describe_depth(dec(1.32), ("long code",)) is None  # within 5 % of the overall 1.30×
    text = describe_depth(dec(1.05), ("long code",))
    assert text == "At depth (≥ half the context: long code 1.05×) the speedup differs from the overall 1.30×."
    assert describe_depth(dec(1.05), ("long document",)) is None  # not measured


def test_long_context_requests_are_left_out_when_the_budget_cannot_afford_them():
    from tuner.calibration.sentences import Slot
    from tuner.calibration.wording import words
    from tuner.calibration.workload import LongContextPlan

    slow = LongContextPlan(budget_s=180.0)
    # Gemma 3 270M on one loaded CPU thread here: ~64 prompt tokens/s, ~12 generated tokens/s
    assert slow.decide(2, 4096, 64.0, 12.0, 256) is False
    assert slow.left_out is not None and slow.left_out.slot == Slot.SWEEP
    assert slow.left_out.kind == "sweep.long_context_left_out" and slow.left_out.params["budget_s"] == 180.0
    assert words(slow.left_out) == (
        "The long-context requests were left out: one would take about 85 s here (4096 prompt tokens at 64 tokens/s, "
        "then 256 generated at 12 tokens/s), more than a 180 s budget affords; the decision holds for short requests "
        "only.")
    assert slow.decide(2, 4096, 10_000.0, 500.0, 256) is False  # decided once for the whole sweep
    fast = LongContextPlan(budget_s=180.0)
    assert fast.decide(2, 4096, 2000.0, 100.0, 256) is True and fast.left_out is None
    assert LongContextPlan().decide(2, 4096, 64.0, 12.0, 256) is True  # no budget: kept
