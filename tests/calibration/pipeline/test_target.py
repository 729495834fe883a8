"""The models folder scanned once and the target chosen: the caller's scan reused for the same folder in
another spelling, the ``--target`` name checked early, the folder's own problems named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.calibration.pipeline.target import check_target_name, choose_target, scan_folder
from tuner.calibration.request import TuneError
from tuner.catalog.folder import scan_models


@pytest.fixture
def twins(tmp_path: Path) -> Path:
    """Two different files called model.gguf (a/ and b/, the same size)."""
    root = tmp_path / "twins"
    write_llama_gguf(root / "a" / "model.gguf", n_embd=64, n_layers=2)
    write_llama_gguf(root / "b" / "model.gguf", n_embd=64, n_layers=2, seed=1)
    return root


def test_the_callers_scan_is_used_for_the_same_folder_in_any_spelling(family: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The request's folder arrives resolved; the caller (the app) may have scanned it under another name."""
    link = tmp_path / "link-to-models"
    link.symlink_to(family)
    monkeypatch.chdir(tmp_path)
    for spelling in (family, link, Path("models"), Path("link-to-models/../models")):
        scanned = scan_models(spelling)
        assert scan_folder(family.resolve(), scanned) is scanned, spelling
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fresh = scan_folder(family, scan_models(elsewhere))
    assert fresh is not None and Path(fresh.folder).resolve() == family.resolve() and len(fresh.models) == 2
    assert scan_folder(tmp_path / "missing", None) is None and scan_folder(family / "stories260K.gguf", None) is None


def test_an_ambiguous_name_is_refused_before_anything_else_and_the_default_says_which(twins: Path) -> None:
    scan = scan_folder(twins, None)
    for name in ("model", "model.gguf"):
        with pytest.raises(TuneError, match="is ambiguous") as info:
            check_target_name(scan, name)
        assert info.value.bad_input and str(twins / "a" / "model.gguf") in str(info.value)
    assert check_target_name(scan, str(twins / "b" / "model.gguf")) is None  # a path is no name
    note = check_target_name(scan, None)
    assert note is not None and note.startswith("default target: ") and "2 files are named model.gguf" in note
    assert check_target_name(None, "model") is None  # no folder: choose_target says so, after the prompts


def test_the_target_by_path_name_stem_or_default(family: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan = scan_folder(family, None)
    target = (family / "stories260K.gguf").resolve()
    monkeypatch.chdir(family)
    for given in (None, "stories260K.gguf", "stories260K", str(target), "./stories260K.gguf"):
        choice = choose_target(family, given, scan)
        assert choice.path == target and choice.scan is scan, given
        assert choice.entry is not None and [Path(d.model.path).name for d in choice.entry.drafts] == [
            "stories-draft.gguf"]
    assert check_target_name(scan, None) is None  # one file of that name: nothing to say


def test_the_folders_own_problems_name_the_flag(family: Path, tmp_path: Path) -> None:
    cases = {
        "a file": (family / "stories260K.gguf", None,
                   f"--models {family / 'stories260K.gguf'}: is a file; give the folder that holds it "
                   "(and --target stories260K.gguf)"),
        "missing": (tmp_path / "nowhere", None, f"--models {tmp_path / 'nowhere'}: no such folder"),
        "not there": (family, "nope", f"--target 'nope': no such LLM in {family}; LLMs there: "),
    }
    for name, (folder, target, words) in cases.items():
        with pytest.raises(TuneError) as info:
            choose_target(folder, target, scan_folder(folder, None))
        assert str(info.value).startswith(words) and info.value.bad_input, name
    empty = tmp_path / "no-llm"
    empty.mkdir()
    (empty / "broken.gguf").write_bytes(b"not a gguf file at all, just text")
    with pytest.raises(TuneError) as info:
        choose_target(empty, None, scan_folder(empty, None))
    assert str(info.value).startswith(f"--models {empty}: no LLM GGUF file in this folder; found: broken.gguf (")
