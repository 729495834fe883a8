"""Text from model files, file names and llama-server reaches the terminal escaped (issue 27, item 1).

The issue's sequences: a GGUF whose ``general.architecture`` (or ``tokenizer.ggml.model``) is
``"evil\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31m\\nFAKE LINE"`` set the terminal's title, cleared the screen and
printed a fake table row; a file named ``$'evil\\e]0;PWNED\\a\\e[2J\\nFAKE-ROW.gguf'`` did the same. Here they go
through ``scan`` (table, problems, families), ``compat``, ``serve``'s state lines and the llama-server lines
it relays (the real server), always through the real command line; ``--json`` stays exact.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.synth import stories_tokenizer, write_llama_gguf
from tuner.cli import main
from tuner.safetext import SafeStream, error_text, is_safe, safe_text

REPO = Path(__file__).resolve().parents[1]
EVIL = "evil\x1b]0;PWNED\x07\x1b[2J\x1b[31m\nFAKE LINE"
EVIL_FILE = "evil\x1b]0;PWNED\x07\x1b[2J\nFAKE-ROW.gguf"
SHOWN = r"evil\x1b]0;PWNED\x07\x1b[2J\x1b[31m\nFAKE LINE"
SHOWN_FILE = r"evil\x1b]0;PWNED\x07\x1b[2J\nFAKE-ROW.gguf"
# what must never reach a terminal: C0 controls but newline and tab, DEL, C1, bidi controls, separators
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def assert_clean(text: str) -> None:
    """No control character a terminal acts on, and no line that starts with the injected words."""
    assert RAW.search(text) is None, repr(RAW.search(text))
    assert not any(line.startswith("FAKE") for line in text.splitlines()), text


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


@pytest.fixture
def evil_folder(tmp_path: Path) -> Path:
    """Three small real GGUFs: the sequence as ``general.architecture``, as ``tokenizer.ggml.model``, and in
    the file name."""
    d = tmp_path / "models"
    write_llama_gguf(d / "arch.gguf", n_embd=32, n_layers=1, architecture=EVIL)
    write_llama_gguf(d / "tok.gguf", n_embd=32, n_layers=1, tokenizer=replace(stories_tokenizer(), model=EVIL))
    write_llama_gguf(d / EVIL_FILE, n_embd=32, n_layers=1)
    return d


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------------------ the one function


def test_safe_text_escapes_every_class_and_leaves_plain_text_alone() -> None:
    assert safe_text(EVIL) == SHOWN
    assert safe_text("llama 3.1 8B — Q4_K_M, ünïcödé, 模型") == "llama 3.1 8B — Q4_K_M, ünïcödé, 模型"
    assert safe_text("\x00\x7f\x9b\x85") == r"\x00\x7f\x9b\x85"  # NUL, DEL, CSI (C1), NEL (C1)
    assert safe_text("a\u202eb\u2066c\u2069\u200fd\u2028e") == r"a\u202eb\u2066c\u2069\u200fd\u2028e"
    assert safe_text("x\ty\rz") == r"x\ty\rz"
    assert safe_text(Path("/m/\udcff\udcfe.gguf")) == r"/m/\xff\xfe.gguf"  # a non-UTF-8 file name's bytes
    assert safe_text("one\ntwo\x1b", keep="\n") == "one\ntwo\\x1b"
    assert is_safe("plain") and not is_safe(EVIL)
    too_long = OSError(36, "File name too long", "/m/" + "a" * 300)
    assert error_text(too_long).startswith("/m/aaa") and "name too long" in error_text(too_long)
    assert error_text(too_long, with_path=False).startswith("name too long")
    assert error_text(ValueError(EVIL)) == SHOWN


def test_safe_stream_escapes_what_its_writers_left_and_keeps_their_layout(tmp_path: Path) -> None:
    raw = tmp_path / "out.txt"
    with raw.open("w", encoding="utf-8") as fh:
        stream = SafeStream(fh)
        assert stream.write("\r[###] 50%  " + EVIL + "\n") == len(EVIL) + 13
        stream.write("col\tcol\n")
        assert stream.fileno() == fh.fileno()
    text = raw.read_bytes().decode("utf-8")
    # the writer's own progress-bar return, newline and tab pass; the ESC/BEL inside are escaped
    assert text == "\r[###] 50%  " + r"evil\x1b]0;PWNED\x07\x1b[2J\x1b[31m" + "\nFAKE LINE\ncol\tcol\n"


# ------------------------------------------------------------------------------ scan and compat


def test_scan_table_shows_header_strings_and_file_names_escaped(capsys, evil_folder: Path) -> None:
    rc, out, err = run(capsys, ["scan", "--no-cache", str(evil_folder)])
    assert rc == 0
    assert_clean(out + err)
    table = out.split("\n\n")[0].splitlines()  # the rows, before the problems and the families
    assert len(table) == 4  # the heading and three rows: no fake one
    rows = {line.split()[-1]: line for line in table[1:]}
    assert SHOWN in rows["arch.gguf"]  # the ARCH column
    assert SHOWN + " 512" in rows["tok.gguf"]  # the VOCAB column: tokenizer.ggml.model and its size
    assert SHOWN_FILE in rows  # the FILE column
    problems = out.split("Problems:")[1]
    assert f"arch.gguf: architecture '{SHOWN}' (general.architecture) is not known" in problems
    assert f"({SHOWN} vocabulary, 512 tokens" in out
    assert f"target {SHOWN_FILE}" in out


def test_scan_through_a_pipe_carries_no_escape_byte(evil_folder: Path, tmp_path: Path) -> None:
    """``draftwise scan DIR | cat -v`` showed ``^[]0;PWNED^G^[[2J``: the bytes a terminal would get."""
    env = dict(os.environ, PYTHONPATH=str(REPO), DRAFTWISE_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-m", "tuner", "scan", "--no-cache", str(evil_folder)],
                          capture_output=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout + done.stderr and b"\x07" not in done.stdout + done.stderr
    assert not any(line.startswith(b"FAKE") for line in done.stdout.splitlines())
    assert SHOWN_FILE.encode() in done.stdout


def test_scan_json_stays_exact(capsys, evil_folder: Path) -> None:
    rc, out, _ = run(capsys, ["scan", "--no-cache", "--json", str(evil_folder)])
    assert rc == 0
    models = {Path(m["path"]).name: m for m in json.loads(out)["models"]}
    assert models["arch.gguf"]["architecture"] == EVIL  # the value itself, in JSON's own escapes
    assert models["tok.gguf"]["tokenizer"]["model"] == EVIL
    assert EVIL_FILE in models
    assert "\x1b" not in out  # JSON escapes it as \u001b


def test_compat_names_and_reason_escaped(capsys, evil_folder: Path) -> None:
    rc, out, err = run(capsys, ["compat", str(evil_folder / EVIL_FILE), str(evil_folder / "tok.gguf")])
    assert rc == 0
    assert_clean(out + err)
    assert out.startswith(f"NOT compatible: tok.gguf cannot draft for {SHOWN_FILE} (rule: vocab-type).")
    assert SHOWN in out  # the draft's tokenizer.ggml.model, quoted by the reason
    rc, out, err = run(capsys, ["compat", "--json", str(evil_folder / EVIL_FILE), str(evil_folder / "tok.gguf")])
    assert json.loads(out)["rule"] == "vocab-type" and EVIL in json.loads(out)["message"]


def test_an_unreadable_evil_file_is_one_escaped_error_line(capsys, tmp_path: Path) -> None:
    bad = tmp_path / EVIL_FILE
    bad.write_bytes(b"GGUF")
    rc, out, err = run(capsys, ["compat", str(bad), str(bad)])
    assert rc == 2 and out == ""
    assert_clean(err)
    assert err.count("\n") == 1 and SHOWN_FILE in err and "truncated" in err


# ------------------------------------------------------------------------------ serve (the real server)


def _serve(argv: list[str], home: Path, until: str) -> str:
    """Run ``draftwise serve`` in a subprocess until a stderr line contains ``until`` (or it exits), then
    Ctrl-C; stderr as bytes decoded, with stdout appended."""
    env = dict(os.environ, PYTHONPATH=str(REPO), DRAFTWISE_HOME=str(home))
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=REPO)
    lines: list[bytes] = []
    try:
        assert p.stderr is not None and p.stdout is not None
        for line in p.stderr:
            lines.append(line)
            if until.encode() in line:
                break
        p.send_signal(signal.SIGINT)
        rest_err = p.stderr.read()
        out = p.stdout.read()
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    raw = b"".join(lines) + rest_err + out
    assert b"\x1b" not in raw and b"\x07" not in raw
    return raw.decode("utf-8", "replace")


@pytest.mark.server
def test_serve_state_lines_show_an_evil_file_name_escaped(llama_server_bin: Path, stories260k: Path,
                                                         _home: Path) -> None:
    target = stories260k.with_name(EVIL_FILE)
    stories260k.rename(target)
    text = _serve(["--target", str(target), "--server", str(llama_server_bin), "--ready-timeout", "120"], _home,
                  until="model id (--alias)")
    assert_clean(text)
    assert f"ready: serving {SHOWN_FILE}" in text  # the state line
    assert f"note: {SHOWN_FILE} has no chat template" in text
    assert "model id (--alias): " + SHOWN_FILE.removesuffix(".gguf") in text
    assert "argv: " in text and SHOWN_FILE in text.split("argv: ")[1].splitlines()[0]


@pytest.mark.server
def test_relayed_llama_server_lines_show_a_header_string_escaped(llama_server_bin: Path, tmp_path: Path,
                                                                 _home: Path) -> None:
    """llama-server quotes the unknown ``general.architecture`` in its log; serve relays those lines."""
    model = write_llama_gguf(tmp_path / "arch.gguf", n_embd=32, n_layers=1, architecture=EVIL)
    text = _serve(["--target", str(model), "--server", str(llama_server_bin), "--ready-timeout", "120"], _home,
                  until="full log:")
    assert_clean(text)
    relayed = [line for line in text.splitlines() if line.startswith("  | ")]
    # llama-server breaks its own line at the value's newline: the part before it, escaped
    quoted = "unknown model architecture: '" + SHOWN.split(r"\n")[0]
    assert any(quoted in line for line in relayed), relayed
    assert "failed: the model failed to load" in text
