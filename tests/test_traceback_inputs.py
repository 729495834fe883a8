"""No traceback for any input of issue 27, item 2: one line naming the flag or path, exit status 2.

- a path longer than NAME_MAX (``scan``, ``scan --json``, ``compat``, ``serve --target``/``--draft``/``--models``,
  ``plan``, ``tune``) raised ``OSError: [Errno 36] File name too long``;
- a file name that is not UTF-8 in an error line made the log handler print ``--- Logging error --- …
  UnicodeEncodeError: surrogates not allowed`` (``compat``, ``plan --target``, ``serve --target``); the log
  now keeps a safe form of it;
- ``install-desktop-entry --exec ''`` (or a word with a newline) raised ``ValueError``.
(``serve --host '127.0.0.1 '``: tests/test_options.py ``test_serve_binds_a_host_given_with_a_trailing_space``.)
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.cli import main

LONG = "a" * 300  # one name longer than NAME_MAX (255 bytes on Linux file systems)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("m") / "t.gguf", n_embd=32, n_layers=1)


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_one_line(err: str, *needles: str) -> None:
    assert "Traceback" not in err and "this is a bug" not in err and "Logging error" not in err, err
    assert err.count("\n") == 1 and err.startswith("draftwise "), err
    for needle in needles:
        assert needle in err, (needle, err)


# ------------------------------------------------------------------ a name longer than NAME_MAX


@pytest.mark.parametrize("argv, flag", [
    (["scan", "{long}"], ""),
    (["compat", "{long}", "{model}"], "cannot read target "),
    (["compat", "{model}", "{long}"], "cannot read draft "),
    (["serve", "--target", "{long}"], "--target "),
    (["serve", "--target", "{model}", "--draft", "{long}"], "--draft "),
    (["serve", "--models", "{long}"], "--models "),
    (["plan", "--target", "{long}", "--no-cross-check"], "--target "),
    (["plan", "--target", "{model}", "--draft", "{long}", "--no-cross-check"], "--draft "),
    (["tune", "--models", "{long}"], "--models "),
    (["tune", "--models", "{dir}", "--target", "{long}"], "--target "),
    (["tune", "--models", "{dir}", "--prompts", "{long}"], "--prompts "),
])
def test_a_name_longer_than_name_max_is_one_line(argv: list[str], flag: str, capsys, tmp_path: Path,
                                                 model: Path) -> None:
    long = str(tmp_path / LONG)
    args = [a.format(long=long, model=model, dir=model.parent) for a in argv]
    rc, out, err = run(capsys, args)
    assert rc == 2 and out == ""
    assert_one_line(err, f"{flag}{long}: name too long")


def test_scan_json_with_a_long_name_is_one_json_error(capsys, tmp_path: Path) -> None:
    long = str(tmp_path / LONG)
    rc, out, err = run(capsys, ["scan", "--json", long])
    assert rc == 2
    assert_one_line(err, long)
    answer = json.loads(out)
    assert answer["code"] == "bad_input" and answer["exit_status"] == 2 and "name too long" in answer["error"]


# ------------------------------------------------------------------ a file name that is not UTF-8


@pytest.fixture
def not_utf8(tmp_path: Path) -> Path:
    """``printf GGUF > $'\\xff\\xfe.gguf'``: a 4-byte file whose name's bytes are not UTF-8."""
    raw = os.fsencode(tmp_path) + b"/\xff\xfe.gguf"
    with open(raw, "wb") as fh:
        fh.write(b"GGUF")
    return Path(os.fsdecode(raw))


@pytest.mark.parametrize("argv, flag", [
    (["compat", "{bad}", "{model}"], "cannot read target "),
    (["plan", "--target", "{bad}", "--no-cross-check"], "--target "),
    (["serve", "--target", "{bad}"], "--target "),
])
def test_a_non_utf8_file_name_is_one_line_and_logged_safely(argv: list[str], flag: str, capsys, not_utf8: Path,
                                                            model: Path, _home: Path) -> None:
    args = [a.format(bad=not_utf8, model=model) for a in argv]
    rc, out, err = run(capsys, args)
    assert rc == 2 and out == ""
    shown = str(not_utf8.parent) + r"/\xff\xfe.gguf"
    assert_one_line(err, f"{flag}{shown}: truncated")
    for handler in logging.getLogger("tuner").handlers:
        handler.flush()
    log = (_home / "logs" / "draftwise.log").read_text(encoding="utf-8")
    assert f"{flag}{shown}: truncated" in log  # the line, as its bytes' escapes


def test_the_log_handler_never_fails_on_a_file_name(tmp_path: Path, _home: Path, capsys) -> None:
    """A record whose arguments hold surrogates (a non-UTF-8 name) and an escape sequence is written, one line."""
    from tuner.logs import setup_logging

    path = setup_logging()
    logging.getLogger("tuner.test").warning("cannot read %s: %s", Path("/m/\udcff\udcfe.gguf"), "x\x1b[2J\nFAKE")
    for handler in logging.getLogger("tuner").handlers:
        handler.flush()
    assert "Logging error" not in capsys.readouterr().err
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[-1].endswith(r"cannot read /m/\xff\xfe.gguf: x\x1b[2J\nFAKE")


# ------------------------------------------------------------------ install-desktop-entry --exec


@pytest.mark.parametrize("words", [[""], ["draftwise", "a\nb"], ["a\rb"]])
def test_an_exec_word_a_desktop_entry_cannot_hold_is_one_line(words: list[str], capsys, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    rc, out, err = run(capsys, ["install-desktop-entry", "--exec", *words])
    assert rc == 2 and out == ""
    assert_one_line(err, "--exec: cannot put ")
    assert not (tmp_path / "data").exists()  # nothing written
