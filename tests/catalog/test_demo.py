"""The demo folder (tuner/catalog/demo.py, ``draftwise demo DIR``): the bundled model and the generated
target + draft pair, deterministic, paired by the catalog, labelled, and a draft that agrees at the
server's default sampling."""

from __future__ import annotations

import contextlib
import hashlib
import io
import threading
from pathlib import Path

import pytest

from tests.synth import raw_llama_server
from tuner.catalog import demo, read_header
from tuner.catalog.folder import scan_models
from tuner.cli import main
from tuner.errors import Cancelled

#: A small recipe (seconds less to write) for the tests of the writing itself; the real one is tested below.
TINY = demo.DemoRecipe(n_embd=64, n_layers=3, draft_layers=1, seed=3)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.gguf"))}


@pytest.fixture(scope="module")
def demo_cli(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, str]:
    """``draftwise demo DIR`` run once with the real recipe: (DIR, exit status, stdout, stderr)."""
    d = tmp_path_factory.mktemp("demo") / "new-folder"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["demo", str(d)])
    return d, rc, out.getvalue(), err.getvalue()


def test_demo_command_writes_the_folder(demo_cli) -> None:
    d, rc, out, err = demo_cli
    assert rc == 0, err
    assert sorted(p.name for p in d.iterdir()) == sorted([demo.BUNDLED_FILE, demo.TARGET_FILE, demo.DRAFT_FILE])
    assert (d / demo.BUNDLED_FILE).read_bytes() == demo.resource_path("demo", demo.BUNDLED_FILE).read_bytes()
    assert demo.DEMO_LABEL in out and f"draftwise tune --models {d}" in out
    assert "100 %" in err  # progress on stderr
    target_mib = (d / demo.TARGET_FILE).stat().st_size / 2**20
    draft_mib = (d / demo.DRAFT_FILE).stat().st_size / 2**20
    assert 100 <= target_mib + draft_mib <= 200, (target_mib, draft_mib)
    assert draft_mib < target_mib / 4


def test_generated_files_say_what_they_are(demo_cli) -> None:
    d = demo_cli[0]
    for name in (demo.TARGET_FILE, demo.DRAFT_FILE):
        h = read_header(d / name)
        assert "text is noise, speedup is real" in str(h.kv["general.name"])
        assert demo.DEMO_LABEL in str(h.kv["general.description"])
        assert h.kv[demo.RECIPE_KEY] == demo.DEMO_RECIPE.tag
        assert demo.is_current(d / name, demo.DEMO_RECIPE)
        assert not demo.is_current(d / name, TINY)


def test_the_catalog_pairs_target_and_draft_and_keeps_the_bundled_model_apart(demo_cli) -> None:
    d = demo_cli[0]
    result = scan_models(d)
    by_target = {e.target.path.name: e for fam in result.families for e in fam.targets}
    entry = by_target[demo.TARGET_FILE]
    assert [c.model.path.name for c in entry.drafts] == [demo.DRAFT_FILE]
    assert [(m.path.name, v.rule) for m, v in entry.incompatible] == [(demo.BUNDLED_FILE, "bos")]
    stories = by_target[demo.BUNDLED_FILE]
    assert not stories.drafts  # still a target of its own
    assert result.families[0].members[0].path.name == demo.TARGET_FILE  # the default target's family first


def test_scan_command_shows_the_pair(demo_cli, capsys) -> None:
    d = demo_cli[0]
    assert main(["scan", str(d)]) == 0
    out = capsys.readouterr().out
    block = out[out.index(f"target {demo.TARGET_FILE}"):]
    assert block.splitlines()[1].split()[:2] == ["draft", demo.DRAFT_FILE], out


def test_a_second_run_keeps_current_files(demo_cli, capsys) -> None:
    d = demo_cli[0]
    before = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    assert main(["demo", str(d), "--json"]) == 0
    assert '"generated": false' in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before


def test_same_recipe_same_bytes(tmp_path: Path) -> None:
    seen = []
    a = demo.write_demo_folder(tmp_path / "a", TINY, progress=seen.append)
    b = demo.write_demo_folder(tmp_path / "b", TINY)
    assert a.generated and b.generated
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    assert seen and seen[-1].done_bytes == seen[-1].total_bytes and seen[-1].fraction == 1.0
    assert [p.done_bytes for p in seen] == sorted(p.done_bytes for p in seen)
    assert {p.file_name for p in seen} == {demo.TARGET_FILE, demo.DRAFT_FILE}
    other = demo.write_demo_folder(tmp_path / "c", demo.DemoRecipe(n_embd=64, n_layers=3, draft_layers=1, seed=4))
    assert _digests(tmp_path / "c")[demo.TARGET_FILE] != _digests(tmp_path / "a")[demo.TARGET_FILE]
    assert other.generated


def test_the_real_recipe_gives_the_same_bytes_again(demo_cli, tmp_path: Path) -> None:
    again = demo.write_demo_folder(tmp_path / "again")
    assert again.generated
    assert _digests(tmp_path / "again") == _digests(demo_cli[0])


def test_a_changed_recipe_or_a_truncated_file_is_written_again(tmp_path: Path) -> None:
    demo.write_demo_folder(tmp_path, TINY)
    target = tmp_path / demo.TARGET_FILE
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    assert not demo.is_current(target, TINY)
    again = demo.write_demo_folder(tmp_path, TINY)
    assert again.generated and target.read_bytes() == data


def test_cancel_leaves_no_partial_file(tmp_path: Path) -> None:
    cancel = threading.Event()

    def progress(p: demo.DemoProgress) -> None:
        cancel.set()

    with pytest.raises(Cancelled):
        demo.write_demo_folder(tmp_path, TINY, progress=progress, cancel=cancel)
    assert sorted(p.name for p in tmp_path.iterdir()) == [demo.BUNDLED_FILE]


def test_a_file_in_the_way_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["demo", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftwise demo: ") and "not a folder" in err and len(err.splitlines()) == 1
    assert main(["demo", ""]) == 2
    assert "must name a folder" in capsys.readouterr().err


@pytest.mark.server
def test_the_draft_agrees_at_the_default_sampling(demo_cli, llama_server_bin: Path) -> None:
    """Acceptance at llama-server's default sampling (no sampling field sent: temperature 0.8, top_k 40,
    top_p 0.95, min_p 0.05), the property the demo exists for; at least 60 % of the drafted tokens accepted."""
    d = demo_cli[0]
    args = ["-m", d / demo.TARGET_FILE, "-md", d / demo.DRAFT_FILE, "--spec-type", "draft-simple",
            "--spec-draft-n-max", "8", "-c", "1024", "-np", "1"]
    drafted = accepted = 0
    texts = []
    with raw_llama_server(llama_server_bin, args, ready_timeout_s=300, client_timeout_s=300) as client:
        for i, prompt in enumerate(("Once upon a time", "def main():\n    print(")):
            r = client.post("/completion", json={"prompt": prompt, "n_predict": 64, "seed": i, "cache_prompt": False})
            r.raise_for_status()
            body = r.json()
            texts.append(body["content"])
            drafted += body["timings"].get("draft_n", 0)
            accepted += body["timings"].get("draft_n_accepted", 0)
    assert all(texts), texts
    assert drafted >= 32 and accepted / drafted >= 0.6, (accepted, drafted)
