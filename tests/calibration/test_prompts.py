"""Prompt files: JSONL and '---' text, clear errors naming file and line, the built-in set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.calibration.prompts import PromptFileError, default_prompts, load_prompts


def test_default_set_covers_the_five_categories():
    ps = default_prompts()
    assert set(ps.categories) == {"code", "math", "translation", "creative", "chat"}
    assert len(ps) >= 10
    assert ps.source == "default" and len(ps.sha256) == 64


def test_plain_text_with_separators(tmp_path: Path):
    f = tmp_path / "p.txt"
    f.write_text("First prompt\nsecond line\n---\n\n  Second prompt  \n---\nThird\n", encoding="utf-8")
    ps = load_prompts(f)
    assert [p.text for p in ps.prompts] == ["First prompt\nsecond line", "Second prompt", "Third"]
    assert [p.line for p in ps.prompts] == [1, 5, 7]
    assert all(p.category is None for p in ps.prompts)


def test_plain_text_empty_prompt_names_the_line(tmp_path: Path):
    f = tmp_path / "p.txt"
    f.write_text("One\n---\n\n---\nTwo\n", encoding="utf-8")
    with pytest.raises(PromptFileError) as ei:
        load_prompts(f)
    assert ei.value.line == 4 and str(f) in str(ei.value)


def test_jsonl_with_categories(tmp_path: Path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "def f():", "category": "code"}\n\n{"prompt": "Hello"}\n', encoding="utf-8")
    ps = load_prompts(f)
    assert [(p.text, p.category, p.line) for p in ps.prompts] == [("def f():", "code", 1), ("Hello", None, 3)]
    assert ps.categories == ("code",)


@pytest.mark.parametrize(
    "body, line, words",
    [
        ('{"prompt": "ok"}\n{"prompt": "broken"\n', 2, "not valid JSON"),
        ('{"prompt": "ok"}\n{"text": "no prompt key"}\n', 2, "'prompt'"),
        ('{"prompt": ""}\n', 1, "empty"),
        ('{"prompt": "x", "category": 3}\n', 1, "category"),
        ('["a list"]\n', 1, "object"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, body: str, line: int, words: str):
    f = tmp_path / "bad.jsonl"
    f.write_text(body, encoding="utf-8")
    with pytest.raises(PromptFileError) as ei:
        load_prompts(f)
    assert ei.value.line == line
    assert f"{f}:{line}" in str(ei.value) and words in str(ei.value)


def test_missing_empty_and_binary_files(tmp_path: Path):
    with pytest.raises(PromptFileError, match="cannot read"):
        load_prompts(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(empty)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(PromptFileError) as ei:
        load_prompts(binary)
    assert ei.value.line == 2


def test_hash_depends_on_content_not_path(tmp_path: Path):
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_text("One\n---\nTwo\n", encoding="utf-8")
    b.write_text("One\n\n---\n\nTwo\n", encoding="utf-8")
    assert load_prompts(a).sha256 == load_prompts(b).sha256
    b.write_text("One\n---\nTwo!\n", encoding="utf-8")
    assert load_prompts(a).sha256 != load_prompts(b).sha256
