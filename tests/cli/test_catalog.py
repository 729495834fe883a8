"""``draftwise scan`` and ``draftwise compat``: output shapes and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import (
    stories_model_path,
    stories_tokenizer,
    write_llama_gguf,
    write_split_gguf,
    write_vocab_gguf,
)
from tuner.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    write_llama_gguf(d / "target.gguf", n_embd=128, n_layers=4)
    write_llama_gguf(d / "draft.gguf", n_embd=32, n_layers=1)
    write_split_gguf(d / "split", "big", 2)
    (d / "broken.gguf").write_text("<html>oops</html>")
    return d


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_scan_json(capsys, folder: Path) -> None:
    rc, out, _ = run(capsys, ["scan", str(folder), "--json"])
    assert rc == 0
    data = json.loads(out)
    assert set(data) == {"models", "families"}
    by_name = {Path(m["path"]).name: m for m in data["models"]}
    assert set(by_name) == {"target.gguf", "draft.gguf", "big-00001-of-00002.gguf", "broken.gguf"}
    split = by_name["big-00001-of-00002.gguf"]
    assert split["shards"] == 2 and split["kind"] == "llm"
    assert split["size_bytes"] == sum(p.stat().st_size for p in (folder / "split").iterdir())
    assert by_name["broken.gguf"]["kind"] == "broken" and "HTML" in by_name["broken.gguf"]["error"]
    assert "error" not in by_name["target.gguf"]
    t = by_name["target.gguf"]
    for key in ("path", "kind", "shards", "size_bytes", "architecture", "n_layers", "mtp_layers", "tokenizer"):
        assert key in t
    assert t["n_layers"] == 4 and t["mtp_layers"] == 0 and t["architecture"] == "llama"
    assert set(t["tokenizer"]) >= {"model", "pre", "n_tokens", "bos", "eos", "add_bos", "add_eos", "fingerprint"}
    assert t["tokenizer"]["n_tokens"] == 512 and t["tokenizer"]["bos"] == 1 and t["tokenizer"]["add_bos"] is True
    assert len(data["families"]) == 1
    fam = data["families"][0]
    assert Path(fam["members"][0]).name == "target.gguf"
    first = fam["targets"][0]
    assert Path(first["target"]).name == "target.gguf"
    assert [Path(d["path"]).name for d in first["drafts"]][0] == "draft.gguf"


def test_scan_table(capsys, folder: Path) -> None:
    rc, out, _ = run(capsys, ["scan", str(folder)])
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["KIND", "SIZE", "ARCH"]
    assert any(line.startswith("llm") and "target.gguf" in line for line in lines)
    assert any("big-00001-of-00002.gguf (2 shards)" in line for line in lines)
    assert any("broken.gguf: not a GGUF file" in line for line in lines)
    assert any(line.strip().startswith("draft draft.gguf") for line in lines)


def test_scan_shared_models_lists_stories(capsys) -> None:
    rc, out, _ = run(capsys, ["scan", str(stories_model_path().parent), "--json"])
    assert rc == 0
    models = json.loads(out)["models"]
    stories = [m for m in models if Path(m["path"]).name == "stories260K.gguf"]
    assert len(stories) == 1
    assert stories[0]["kind"] == "llm" and stories[0]["tokenizer"]["n_tokens"] == 512


def test_scan_missing_dir(capsys, tmp_path: Path) -> None:
    rc, _, err = run(capsys, ["scan", str(tmp_path / "nope")])
    assert rc == 2 and "not found" in err


def test_compat_json_and_exit_codes(capsys, tmp_path: Path) -> None:
    s = stories_tokenizer()
    t = write_vocab_gguf(tmp_path / "t.gguf", s)
    ok = write_vocab_gguf(tmp_path / "ok.gguf", replace(s, pre="other"))
    bad = write_vocab_gguf(tmp_path / "bad.gguf", s.with_token(9, "<nine>"))
    rc, out, _ = run(capsys, ["compat", str(t), str(ok), "--json"])
    assert rc == 0 and json.loads(out)["compatible"] is True and json.loads(out)["rule"] is None
    rc, out, _ = run(capsys, ["compat", str(t), str(bad), "--json"])
    data = json.loads(out)
    assert rc == 0 and set(data) == {"compatible", "rule", "message"}
    assert data["compatible"] is False and data["rule"] == "token-text" and "id 9" in data["message"]
    rc, out, _ = run(capsys, ["compat", str(t), str(bad)])
    assert rc == 0 and "token-text" in out
    (tmp_path / "junk.gguf").write_bytes(b"\0" * 100)
    rc, out, err = run(capsys, ["compat", str(t), str(tmp_path / "junk.gguf"), "--json"])
    # with --json a failure is still one JSON object on stdout (tuner.cli._json_error), the line on stderr
    assert rc == 2 and "junk.gguf" in err and "junk.gguf" in json.loads(out)["error"]
    assert json.loads(out)["code"] == "bad_input"
    rc, out, err = run(capsys, ["compat", str(tmp_path / "missing.gguf"), str(t)])
    assert rc == 2 and "missing.gguf" in err


def test_real_command_process(folder: Path, tmp_path: Path) -> None:
    env = dict(os.environ, DRAFTWISE_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "scan", str(folder), "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["models"]) == 4
    assert (tmp_path / "home" / "cache" / "scan-cache.json").is_file()


def test_scan_empty_folder_says_so(capsys, tmp_path: Path) -> None:
    rc, out, _ = run(capsys, ["scan", str(tmp_path)])
    assert rc == 0 and out.strip() == f"No .gguf files found under {tmp_path}."


def test_compat_refuses_an_incomplete_split_set(capsys, tmp_path: Path) -> None:
    shards = write_split_gguf(tmp_path, "part", 3)
    rc, out, _ = run(capsys, ["compat", str(shards[0]), str(shards[0]), "--json"])
    assert rc == 0 and json.loads(out)["compatible"] is True
    shards[1].unlink()
    rc, out, err = run(capsys, ["compat", str(stories_model_path()), str(shards[0]), "--json"])
    assert rc == 2 and "missing shard part-00002-of-00003.gguf" in err and "draft" in err
    assert "missing shard part-00002-of-00003.gguf" in json.loads(out)["error"]  # --json: the error as JSON


def test_compat_human_output_says_compatible_once(capsys, tmp_path: Path) -> None:
    s = stories_tokenizer()
    t = write_vocab_gguf(tmp_path / "t.gguf", s)
    ok = write_vocab_gguf(tmp_path / "ok.gguf", replace(s, pre="other"))
    bad = write_vocab_gguf(tmp_path / "bad.gguf", s.with_token(9, "<nine>"))
    rc, out, _ = run(capsys, ["compat", str(t), str(ok)])
    assert rc == 0 and out.lower().count("compatible") == 1
    assert out.startswith("Compatible: ok.gguf can draft for t.gguf.") and "vocabulary" in out
    rc, out, _ = run(capsys, ["compat", str(t), str(bad)])
    assert out.startswith("NOT compatible: bad.gguf cannot draft for t.gguf (rule: token-text).")
    assert out.lower().count("compatible") == 1 and "id 9" in out
