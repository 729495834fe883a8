"""Captured requests as a sweep's prompt set (issue 28, item 2): what each file becomes, the set's key (the
source, never the text), the workload's shape, and which captured requests count as long-context ones. The
real-server path is tests/cli/test_tune_served.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tuner.calibration.pairing import Mix
from tuner.calibration.prompts import PromptFileError, captured_prompt_set
from tuner.calibration.results import Sample
from tuner.calibration.workload import Workload, long_prompt_tokens
from tuner.server import capture


def _capture(model_id: str, texts: list[str], start_unix_s: float) -> Path:
    folder = capture.log_prompts_dir(model_id)
    for i, text in enumerate(texts):
        path = folder / f"{1000 + i:012d}.txt"
        path.write_text(text, encoding="utf-8")
        os.utime(path, (start_unix_s + 60 * i, start_unix_s + 60 * i))
    return folder


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))


def test_captured_files_become_raw_prompts_token_arrays_stay_tokens_other_json_is_left_out() -> None:
    t0 = time.time() - 3600
    _capture("m", ["<start_of_turn>user\nhi<end_of_turn>\n", "[\n  1,\n  2,\n  3\n]",
                   '[\n  "two",\n  "prompts"\n]', "<start_of_turn>user\nhi<end_of_turn>\n", "plain text"], t0)
    ps = captured_prompt_set("m")
    assert ps.source == "served:m" and ps.captured
    # the repeated text once (its newest copy); the several-prompts JSON left out; the oldest, the newest, then
    # the middle (every prefix spans the period: a short sweep keeps the first ones)
    assert [p.token_ids for p in ps.prompts] == [(1, 2, 3), None, None]
    assert [p.text for p in ps.prompts][1:] == ["plain text", "<start_of_turn>user\nhi<end_of_turn>\n"]
    assert [p.captured_unix_s for p in ps.prompts] == pytest.approx([t0 + 60, t0 + 240, t0 + 180])
    assert all(p.category == "served" and p.fill is None for p in ps.prompts)


def test_the_set_is_sampled_over_time_and_its_key_holds_no_text() -> None:
    t0 = time.time() - 3600
    _capture("m", [f"request {i}" for i in range(20)], t0)
    ps = captured_prompt_set("m", max_prompts=5)
    assert [p.text for p in ps.prompts] == ["request 0", "request 19", "request 10", "request 5", "request 14"]
    key = ps.sha256
    _capture("m", [f"other {i}" for i in range(3)], t0 + 7200)  # new captures
    assert captured_prompt_set("m", max_prompts=5).sha256 == key


def test_no_captures_is_an_error_naming_the_folder() -> None:
    with pytest.raises(PromptFileError, match="no captured requests of model 'x'"):
        captured_prompt_set("x")


def test_the_captured_workload_is_raw_even_for_chat_and_has_its_own_key() -> None:
    wl = Workload(chat=False, captured=True, n_ctx=1024)
    assert wl.endpoint == "/completion" and wl.key().startswith("captured-completion;")
    assert wl.describe().startswith("captured requests replayed as raw completions (/completion)")
    assert Workload().key() != wl.key()


def test_a_captured_request_is_long_by_its_prompt_tokens_against_the_context() -> None:
    t0 = time.time() - 3600
    _capture("m", ["short", "long one"], t0)
    ps = captured_prompt_set("m")
    mix = Mix.of(list(enumerate(ps.prompts)), 0.5, long_prompt_tokens(1000))
    assert long_prompt_tokens(1000) == 500

    def sample(i: int, prompt_n: int) -> Sample:
        return Sample(prompt_index=i, category="served", repetition=0, gen_tokens_per_s=10.0, prompt_n=prompt_n)

    assert not mix.is_long(sample(0, 12)) and mix.is_long(sample(1, 600)) and not mix.is_long(sample(1, 499))
    assert mix.weights([sample(0, 12), sample(1, 600)]) == [1.0, 1.0]  # half and half: each weighs the same


def test_every_prefix_of_the_spread_order_spans_the_range() -> None:
    from tuner.calibration.prompts import spread_order

    for n in range(12):
        order = spread_order(n)
        assert sorted(order) == list(range(n))
        if n >= 2:
            assert order[:2] == [0, n - 1]
        if n >= 5:  # three kept of five or more: the oldest, the newest and one from the middle third
            assert n / 3 <= order[2] <= 2 * n / 3
