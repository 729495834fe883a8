"""Each option declared once (issue 24 item 5) with issue 27's bounds: one change of one bound reaches argparse,
the settings, ``TuneRequest`` and the window; no sampling bound or default is written anywhere else in tuner/;
NaN and the infinities are refused for every float option; every out-of-range value of issue 27's list is one
line naming its flag (exit 2) or an error naming its setting key.

Real CLI calls (``tuner.cli.main``), real GGUF files, the real window offscreen; no llama-server except where
marked (``plan`` asks the discovered one for its devices before it can check ``--margin-mib``)."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import re
from pathlib import Path

import pytest

from tuner import options as O
from tuner.cli import main

REPO = Path(__file__).resolve().parent.parent
TUNER = REPO / "tuner"
BIG = "99999999999999999999999"


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    rc = main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


# ---------------------------------------------------------------------------------------- the declarations


def test_every_declaration_is_consistent_with_its_consumers() -> None:
    """Defaults and llama-server's defaults lie in their own ranges; every setting key is a Settings field and
    every request option a TuneRequest (or Sampling) field."""
    from tuner.calibration.request import TuneRequest
    from tuner.calibration.sampling import SAMPLING_KEYS
    from tuner.settings import Settings

    settings = {f.name for f in dataclasses.fields(Settings)}
    request = {f.name for f in dataclasses.fields(TuneRequest)} | set(SAMPLING_KEYS)
    for opt in O.OPTIONS.values():
        for value in (opt.default, opt.server_default):
            if value is not None:
                O.check(opt.name, value, where=opt.name)
        assert opt.setting is None or opt.setting in settings, opt
        assert not opt.in_request or opt.name in request, opt
    assert Settings().tune_budget_s == O.option("budget_s").default == 300
    assert TuneRequest(models_dir=Path(".")).budget_s == 300.0


@pytest.mark.parametrize("name", [n for n, o in O.OPTIONS.items() if o.kind is float])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e309")])
def test_nan_and_infinities_are_refused_for_every_float_option(name: str, value: float) -> None:
    with pytest.raises(O.OptionError) as e:
        O.check(name, value, where=f"--{name}")
    assert e.value.where == f"--{name}" and str(e.value).startswith(f"--{name} {value:g}: must be ")


FLOAT_FLAGS = [
    (["tune", "--models", "{tmp}"], "--budget"), (["tune", "--models", "{tmp}"], "--temperature"),
    (["tune", "--models", "{tmp}"], "--top-p"), (["tune", "--models", "{tmp}"], "--min-p"),
    (["tune", "--models", "{tmp}"], "--long-share"), (["serve", "--target", "{model}"], "--ready-timeout"),
    (["serve", "--target", "{model}"], "--liveness-timeout"), (["doctor", "--no-self-test"], "--timeout"),
]


@pytest.mark.parametrize("argv, flag", FLOAT_FLAGS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e309"])
def test_every_float_flag_refuses_nan_and_infinities(argv: list[str], flag: str, text: str, tmp_path: Path,
                                                     stories260k_session: Path, capsys) -> None:
    """argparse's ``type=float`` accepts these; the check after parsing refuses them in one line."""
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{model}", str(stories260k_session)) for a in argv]
    rc, err = run(capsys, [*argv, f"{flag}={text}"])
    shown = f"{float(text):g}"
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"draftwise {argv[0]}: {flag} {shown}: must be "), err


@pytest.mark.parametrize("key", [o.setting for o in O.OPTIONS.values() if o.setting and o.kind is float])
def test_every_float_setting_refuses_nan_and_infinities(key: str) -> None:
    from tuner.settings import Settings, SettingsError

    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(SettingsError) as e:
            Settings(**{key: value})
        assert e.value.key == key and "must be" in e.value.reason


def test_the_request_refuses_nan_and_infinities(tmp_path: Path) -> None:
    from tuner.calibration.request import TuneError, TuneRequest
    from tuner.calibration.sampling import Sampling

    for fields, words in (({"budget_s": math.nan}, "budget_s nan: must be between 10 and 86400 seconds"),
                          ({"long_share": math.inf}, "long_share inf: must be between 0 and 1"),
                          ({"sampling": Sampling(min_p=-math.inf)}, "min_p -inf: must be between 0 and 1")):
        with pytest.raises(TuneError) as e:
            TuneRequest.create(tmp_path, **fields)
        assert str(e.value) == words and e.value.bad_input


# ---------------------------------------------------------------------------------------- one bound, every consumer


@pytest.fixture
def make_window(qapp, _home: Path):
    """Factory: the whole app offscreen (controller, tray, window) built when called; torn down after the test."""
    from tuner import app as app_mod

    built = []

    def make():
        built.append(app_mod.build(single_instance=False, tray_available=False))
        return built[-1].window

    yield make
    for a in built:
        a.controller.shutdown()
        a.tray.hide()
        a.window.allow_close = True
        a.window.close()
        a.window.deleteLater()


def test_one_bound_changed_in_the_declaration_reaches_every_consumer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                     capsys, make_window) -> None:
    """Temperature at most 1.5 instead of 2: the flag, the setting, the request and both tabs' spin boxes follow."""
    from tuner.calibration.request import TuneError, TuneRequest
    from tuner.calibration.sampling import Sampling
    from tuner.settings import Settings, SettingsError
    from tuner.ui.options import spin_box

    monkeypatch.setitem(O.OPTIONS, "temperature", dataclasses.replace(O.option("temperature"), high=1.5))
    rc, err = run(capsys, ["tune", "--models", str(tmp_path), "--temperature", "1.8"])
    assert rc == 2 and err == ["draftwise tune: --temperature 1.8: must be between 0 and 1.5"], err
    rc, err = run(capsys, ["tune", "--models", str(tmp_path), "--temperature", "1.4"])  # allowed: the folder is next
    assert rc == 2 and "--temperature" not in err[-1] and "no LLM GGUF file" in err[-1], err
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    assert "between 0 and 1.5" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SettingsError) as e:
        Settings(temperature=1.8)
    assert e.value.key == "temperature" and "between 0 and 1.5, got 1.8" in str(e.value)
    with pytest.raises(TuneError, match=r"^temperature 1.8: must be between 0 and 1.5$"):
        TuneRequest.create(tmp_path, sampling=Sampling(temperature=1.8))
    window = make_window()
    assert window.serve_tab.temp_spin.maximum() == 1.5 == window.chat_tab.temp_spin.maximum()
    assert spin_box("temperature", None).maximum() == 1.5 and "between 0 and 1.5" in window.serve_tab.temp_spin.toolTip()


def test_the_tabs_spin_boxes_carry_the_declared_ranges(make_window) -> None:
    """Unchanged declarations: the Serve tab's temperature is 0..2 with "server default" below it (unset), the
    context 256..2^24 with "automatic", the prompt cache -1 ("no limit") .. this machine's RAM in MiB."""
    from tuner.ui.options import spin_value

    window = make_window()
    tab = window.serve_tab
    assert (tab.temp_spin.minimum(), tab.temp_spin.maximum()) == (-0.05, 2.0)
    assert tab.temp_spin.text().startswith("server default (0.8)") and spin_value(tab.temp_spin) is None
    assert (tab.ctx_spin.minimum(), tab.ctx_spin.maximum()) == (255, 1 << 24)
    ram_mib = O.machine_limits().ram_bytes // (1 << 20)
    assert (tab.cache_ram_spin.minimum(), tab.cache_ram_spin.maximum()) == (-1, ram_mib)
    tab.cache_ram_spin.setValue(-1)
    assert tab.cache_ram_spin.text() == "no limit" and spin_value(tab.cache_ram_spin) == -1
    assert (window.tune_tab.budget.minimum(), window.tune_tab.budget.maximum()) == (1, 1440)  # minutes
    assert window.tune_tab._budget_s() == 300
    chat = window.chat_tab
    assert (chat.temp_spin.minimum(), chat.temp_spin.maximum(), chat.top_k_spin.maximum()) == (0.0, 2.0, 10**6)
    assert "between 0 and 2" in tab.temp_spin.toolTip()


# ---------------------------------------------------------------------------------------- declared once


SAMPLING_NAMES = {"temperature", "temp", "top_p", "top_k", "min_p"}
_WORDS = re.compile(r"\b(temperature|top[_-]p|top[_-]k|min[_-]p)\b[\s=:]*\(?(-?\d+(?:\.\d+)?)", re.I)
GREEDY = {("temperature", 0.0), ("temp", 0.0), ("top_k", 1.0)}
"""Greedy decoding (temperature 0, top_k 1: llama.cpp samples greedily, common/common.h
``common_params_sampling::temp``) is a rule of llama.cpp, not a bound or default of Draftwise."""


def _number(node: ast.AST) -> float | None:
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node, sign = node.operand, -1.0
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * node.value
    return None


def sampling_numbers(root: Path, skip: Path | None = None) -> list[tuple[str, int, str]]:
    """Numbers written beside a sampling name under ``root`` (``skip``: the declaration): a dict entry
    ``"top_p": 0.95``, a keyword ``temperature=0.8``, a sampling spin box's ``setRange(0, 1000)``, or words
    such as ``"temperature 0.8"`` in a string. Greedy's temperature 0 and top_k 1 are not counted."""
    found = []

    def add(path: Path, line: int, name: str, value: float | None, text: str) -> None:
        if value is not None and (name.lower().replace("-", "_"), value) not in GREEDY:
            found.append((path.relative_to(root.parent).as_posix(), line, text))

    for path in sorted(root.rglob("*.py")):
        if path == skip:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value in SAMPLING_NAMES:
                        add(path, v.lineno, str(k.value), _number(v), ast.unparse(v))
            elif isinstance(node, ast.keyword) and node.arg in SAMPLING_NAMES:
                add(path, node.value.lineno, node.arg, _number(node.value), ast.unparse(node))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr.startswith(("setRange", "setMinimum", "setMaximum", "setSingleStep")):
                target = ast.unparse(node.func.value)
                name = next((n for n in ("temp", "top_p", "top_k", "min_p") if n in target), None)
                for arg in node.args if name else ():
                    add(path, node.lineno, "spin box", _number(arg), ast.unparse(node))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in _WORDS.finditer(node.value):
                    add(path, node.lineno, m.group(1), float(m.group(2)), m.group(0))
    return found


def test_each_sampling_bound_and_default_is_written_once() -> None:
    """Outside tuner/options.py no number stands beside a sampling name (plain 0.8 elsewhere is not one)."""
    assert sampling_numbers(TUNER, skip=TUNER / "options.py") == []


def test_the_declared_once_rule_finds_what_it_looks_for(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        'D = {"temperature": 0.8, "top_k": 40}\n'
        'call(top_p=0.95, temperature=0.0, n=0.8)\n'
        'spin.temp_spin.setRange(-0.05, 2.0)\n'
        'HELP = "default: temperature 0.8, min-p 0.05; greedy: temperature 0"\n'
        'X = 0.8\n', encoding="utf-8")
    found = {text for _, _, text in sampling_numbers(pkg)}
    assert found == {"0.8", "40", "top_p=0.95", "spin.temp_spin.setRange(-0.05, 2.0)", "temperature 0.8",
                     "min-p 0.05"}, found


# ---------------------------------------------------------------------------------------- issue 27: out of range


ISSUE_27 = [
    # (argv, the flag named, the start of the reason)
    (["plan", "--target", "{model}", "--no-cross-check", "--n-max", "-1"], "--n-max -1", "must be between 1 and 64"),
    (["plan", "--target", "{model}", "--no-cross-check", "--n-max", "0"], "--n-max 0", "must be between 1 and 64"),
    (["plan", "--target", "{model}", "--no-cross-check", "--ctx-size", "3"], "--ctx-size 3",
     "must be between 256 and 16777216 tokens"),
    (["plan", "--target", "{model}", "--no-cross-check", "--ngl", BIG], f"--ngl {BIG}",
     "must be between 0 and 6 (stories260K.gguf's 5 blocks + 1)"),
    (["plan", "--target", "{model}", "--no-cross-check", "--n-cpu-moe", BIG], f"--n-cpu-moe {BIG}",
     "must be between 0 and 5 (stories260K.gguf's 5 blocks)"),
    (["plan", "--models", "", "--target", "{model}"], "--models ''", "must name a folder"),
    (["serve", "--target", "{model}", "--ngl", "-1"], "--ngl -1", "must be at least 0, auto or all"),
    (["serve", "--target", "{model}", "--ngl", "7"], "--ngl 7", "must be between 0 and 6 (stories260K.gguf's"),
    (["serve", "--target", "{model}", "--draft", "{model}", "--draft-ngl", "-1"], "--draft-ngl -1",
     "must be at least 0, auto or all"),
    (["serve", "--target", "{model}", "--ready-timeout", "inf"], "--ready-timeout inf",
     "must be between 1 and 86400 seconds"),
    (["serve", "--target", "{model}", "--ready-timeout", "1e309"], "--ready-timeout inf", "must be between 1"),
    (["serve", "--target", "{model}", "--ready-timeout", "1e23"], "--ready-timeout 1e+23", "must be between 1"),
    (["serve", "--target", "{model}", "--ready-timeout", "nan"], "--ready-timeout nan", "must be between 1"),
    (["serve", "--target", "{model}", "--liveness-timeout", "inf"], "--liveness-timeout inf",
     "must be 0 (off) or between 4 and 3600 seconds"),
    (["serve", "--target", "{model}", "--liveness-timeout", "1.5"], "--liveness-timeout 1.5",
     "must be 0 (off) or between 4 and 3600 seconds"),
    (["serve", "--models", ""], "--models ''", "must name a folder"),
    (["serve", "--target", "{model}", "--host", "127.0.0.1 x"], "--host '127.0.0.1 x'", "must be one address"),
    (["tune", "--models", "{tmp}", "--threads", BIG], f"--threads {BIG}",
     f"must be between 1 and {4 * (os.cpu_count() or 1)} (4 × the {os.cpu_count()} logical CPUs)"),
    (["tune", "--models", "{tmp}", "--ctx-size", BIG], f"--ctx-size {BIG}", "must be between 256 and 16777216"),
    (["tune", "--models", ""], "--models ''", "must name a folder"),
    (["tune", "--models", "{tmp}", "--top-k", str(10**6 + 1)], f"--top-k {10**6 + 1}", "must be between 0 and 1000000"),
    (["tune", "--models", "{tmp}", "--temperature", "2.5"], "--temperature 2.5", "must be between 0 and 2"),
    (["tune", "--models", "{tmp}", "--budget", "5"], "--budget 5", "must be between 10 and 86400 seconds"),
    (["rpc-host", "--threads", BIG], f"--threads {BIG}", "must be between 1 and"),
    (["rpc-host", "--port", "0"], "--port 0", "must be between 1 and 65535"),
    (["doctor", "--timeout", "0"], "--timeout 0", "must be between 1 and 3600 seconds"),
    # the other edge of each bound of the issue's Deliver list
    (["plan", "--target", "{model}", "--no-cross-check", "--n-max", "65"], "--n-max 65", "must be between 1 and 64"),
    (["plan", "--target", "{model}", "--draft", "{model}", "--no-cross-check", "--draft-ngl", BIG], f"--draft-ngl {BIG}",
     "must be between 0 and 6 (stories260K.gguf's 5 blocks + 1)"),
    (["serve", "--target", "{model}", "--draft", "{model}", "--draft-ngl", "7"], "--draft-ngl 7",
     "must be between 0 and 6 (stories260K.gguf's 5 blocks + 1), auto or all"),
    (["plan", "--target", "{model}", "--no-cross-check", "--cache-ram", "-2"], "--cache-ram -2",
     "must be -1 (no limit) or between 0 and"),
    (["plan", "--target", "{model}", "--no-cross-check", "--cache-ram", BIG], f"--cache-ram {BIG}",
     "must be -1 (no limit) or between 0 and"),
    (["serve", "--target", "{model}", "--ctx-size", str(2**24 + 1)], f"--ctx-size {2**24 + 1}",
     "must be between 256 and 16777216 tokens"),
    (["tune", "--models", "{tmp}", "--top-k", "-1"], "--top-k -1", "must be between 0 and 1000000"),
    (["tune", "--models", "{tmp}", "--threads", "0"], "--threads 0", "must be between 1 and"),
    (["tune", "--models", "{tmp}", "--budget", "86401"], "--budget 86401", "must be between 10 and 86400 seconds"),
    (["serve", "--target", "{model}", "--ready-timeout", "0"], "--ready-timeout 0", "must be between 1 and 86400"),
    (["serve", "--target", "{model}", "--ready-timeout", "86401"], "--ready-timeout 86401",
     "must be between 1 and 86400 seconds"),
    (["serve", "--target", "{model}", "--liveness-timeout", "3"], "--liveness-timeout 3",
     "must be 0 (off) or between 4 and 3600 seconds"),
    (["serve", "--target", "{model}", "--liveness-timeout", "3601"], "--liveness-timeout 3601",
     "must be 0 (off) or between 4 and 3600 seconds"),
]


@pytest.mark.parametrize("argv, named, reason", ISSUE_27, ids=[f"{a[0]} {named}" for a, named, _ in ISSUE_27])
def test_an_out_of_range_value_is_one_line_naming_its_flag(argv: list[str], named: str, reason: str,
                                                           tmp_path: Path, stories260k_session: Path, capsys) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{model}", str(stories260k_session)) for a in argv]
    rc, err = run(capsys, argv)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"draftwise {argv[0]}: {named}: {reason}"), err


@pytest.mark.server
def test_plan_refuses_a_margin_beyond_the_largest_device(stories260k_session: Path, capsys) -> None:
    """The margin's bound is the largest device's memory (host RAM on a CPU-only machine), known once the
    discovered llama-server listed the devices."""
    rc, err = run(capsys, ["plan", "--target", str(stories260k_session), "--no-cross-check", "--margin-mib", BIG])
    err = [line for line in err if line.startswith("draftwise plan:")]
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"draftwise plan: --margin-mib {BIG}: must be between 0 "
                                                           "and "), err
    assert err[0].endswith("MiB (the largest device's memory)"), err


@pytest.mark.parametrize("key, value, words", [
    ("cache_ram_mib", 10**30, "must be -1 (no limit) or between 0 and "),
    ("cache_ram_mib", -2, "must be -1 (no limit) or between 0 and "),
    ("ctx_size", 10**18, "must be null (automatic) or between 256 and 16777216 tokens"),
    ("top_k", 10**40, "must be null (llama-server's default) or between 0 and 1000000"),
    ("temperature", 2.5, "must be null (llama-server's default) or between 0 and 2"),
    ("tune_budget_s", 5, "must be between 10 and 86400 seconds"),
    ("tune_budget_s", 86401, "must be between 10 and 86400 seconds"),
    ("tune_budget_s", 300.5, "must be a whole number between 10 and 86400 seconds"),
    ("port", 0, "must be between 1 and 65535"),
    ("long_share", 1.5, "must be null (the prompt set's own) or between 0 and 1"),
])
def test_an_out_of_range_setting_names_its_key_and_the_others_are_kept(key: str, value: object, words: str) -> None:
    from tuner import settings as S

    with pytest.raises(S.SettingsError) as e:
        S.Settings(**{key: value})
    assert e.value.key == key and e.value.reason.startswith(words), e.value
    assert e.value.reason.endswith(f", got {value!r}"), e.value
    others = {k: v for k, v in {"port": 9321, "ctx_size": 4096, "top_k": 20}.items() if k != key}
    p = S.settings_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({**others, key: value}))
    loaded = S.load_settings_keeping_valid(repair=False)
    assert [e.key for e in loaded.problems] == [key]
    assert loaded.settings == S.Settings(**others)
    assert f"'{key}': {words}" in (loaded.message() or "")


@pytest.mark.server
def test_serve_binds_a_host_given_with_a_trailing_space(stories260k_session: Path, llama_server_bin: Path,
                                                        tmp_path: Path, _home: Path) -> None:
    """``serve --host '127.0.0.1 '`` raised socket.gaierror at the bind (the loopback check stripped the host,
    the bind did not); now both see 127.0.0.1 and it serves there, without an API key."""
    import signal
    import subprocess
    import sys

    env = {**os.environ, "DRAFTWISE_HOME": str(_home), "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "tuner", "serve", "--target", str(stories260k_session), "--host",
                          "127.0.0.1 ", "--server", str(llama_server_bin), "--ready-timeout", "60"], cwd=REPO, env=env,
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout is not None
        endpoint = p.stdout.readline().strip()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert endpoint.startswith("http://127.0.0.1:") and endpoint.endswith("/v1"), err
    assert p.returncode == 0 and "Traceback" not in err and "--api-key" not in err.split("argv: ")[-1], err
