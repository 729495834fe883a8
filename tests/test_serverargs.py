"""The user's own llama-server flags (issue 23, item 4): the ``=`` form on the command line and its error for the
space form, the allow-list and each refused class named in the one-line error, values, the settings key, the
profile check that shares the declaration, and the staleness key. No server: the rule is pure."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tuner import serverargs
from tuner.serverargs import ServerArgError, check_known, check_server_argv, parse_server_args


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def _parse(command: str, *argv: str) -> argparse.Namespace:
    from tuner.cli import build_parser

    return build_parser(only=command).parse_args([command, *argv])


@pytest.mark.parametrize("command, needed", [("tune", ["--models", "m"]), ("serve", []),
                                             ("plan", ["--target", "t.gguf"])])
def test_the_equals_form_repeats_and_the_space_form_says_to_use_equals(command: str, needed: list[str],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(command, *needed, "--server-arg=--no-mmap", "--server-arg=-tb=2", "--server-arg=--no-repack")
    assert args.server_args == ["--no-mmap", "-tb=2", "--no-repack"]
    assert parse_server_args(args.server_args) == ("--no-mmap", "-tb", "2", "--no-repack")
    assert _parse(command, *needed).server_args is None  # not given: the setting applies
    # argparse reads a word starting with '-' after a space as an option: --server-arg is left empty
    for space_form in (["--server-arg", "--no-mmap"], ["--server-arg", "-tb=2"], ["--server-arg"]):
        with pytest.raises(SystemExit) as exc:
            _parse(command, *needed, *space_form)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--server-arg" in err and "after '='" in err and "--server-arg=--no-mmap" in err, err


def test_the_help_says_the_flag_replaces_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("tune", "serve", "plan"):
        with pytest.raises(SystemExit):
            _parse(command, "--help")
        text = " ".join(capsys.readouterr().out.split())
        assert "--server-arg=--no-repack" in text and "replaces the server_args setting" in text, text


@pytest.mark.parametrize("spec, named, why", [
    ("--host=0.0.0.0", "--host", "where or to whom llama-server listens"),
    ("--port=80", "--port", "where or to whom"),
    ("--path=/srv", "--path", "where or to whom"),
    ("--api-prefix=/x", "--api-prefix", "where or to whom"),
    ("--reuse-port", "--reuse-port", "where or to whom"),
    ("--ssl-key-file=k.pem", "--ssl-key-file", "where or to whom"),
    ("--api-key=secret", "--api-key", "API key"),
    ("--api-key-file=/tmp/k", "--api-key-file", "API key"),
    ("--api_key=secret", "--api-key", "API key"),  # llama.cpp reads '_' as '-' in -- flags
    ("--cors-origins=*", "--cors-origins", "web pages"),
    ("--tools=all", "--tools", "tools"),
    ("--webui", "--webui", "tools"),
    ("--agent", "--agent", "tools"),
    ("-m=x.gguf", "-m", "Draftwise sets it itself"),
    ("-md=d.gguf", "-md", "Draftwise sets it itself"),
    ("-c=4096", "-c", "Draftwise sets it itself"),
    ("--ctx-size=4096", "--ctx-size", "use --ctx-size"),
    ("-np=4", "-np", "Draftwise sets it itself"),
    ("-t=8", "-t", "use --threads"),
    ("-td=8", "-td", "Draftwise sets it itself"),
    ("--threads-draft=8", "--threads-draft", "Draftwise sets it itself"),
    ("-ngl=99", "-ngl", "use --ngl"),
    ("--n-gpu-layers=99", "--n-gpu-layers", "Draftwise sets it itself"),
    ("--spec-type=ngram-mod", "--spec-type", "Draftwise sets it itself"),
    ("--spec-draft-n-max=8", "--spec-draft-n-max", "Draftwise sets it itself"),
    ("--spec-draft-sampling=probabilistic", "--spec-draft-sampling", "Draftwise sets it itself"),
    ("--spec-synth-len=3", "--spec-synth-len", "Draftwise sets it itself"),
    ("--draft-max=8", "--draft-max", "Draftwise sets it itself"),
    ("--sleep-idle-seconds=60", "--sleep-idle-seconds", "Draftwise sets it itself"),
    ("--log-prompts-dir=/tmp", "--log-prompts-dir", "Draftwise sets it itself"),
    ("--alias=x", "--alias", "Draftwise sets it itself"),
    ("-cram=0", "-cram", "the cache_ram_mib setting"),
    ("--metrics", "--metrics", "Draftwise sets it itself"),
    ("--rpc=h:1", "--rpc", "Draftwise sets it itself"),
    ("--grammar=x", "--grammar", "not on the list of flags Draftwise passes through"),
])
def test_each_refused_class_is_named_in_one_line(spec: str, named: str, why: str) -> None:
    with pytest.raises(ServerArgError) as exc:
        parse_server_args([spec])
    msg = str(exc.value)
    assert exc.value.flag == named and f"--server-arg={named}: refused" in msg and why in msg, msg
    assert "\n" not in msg


def test_the_allow_list_and_values() -> None:
    assert parse_server_args(["--no-repack", "-nr", "--repack", "-tb=2", "--threads-batch=3", "--load-mode=none",
                              "--mlock", "--no_warmup", "-fa=on", "--temp=0.7", "--seed=-1", ""]) == (
        "--no-repack", "-nr", "--repack", "-tb", "2", "--threads-batch", "3", "--load-mode", "none", "--mlock",
        "--no-warmup", "-fa", "on", "--temp", "0.7", "--seed", "-1")
    assert parse_server_args([]) == () and parse_server_args(["", "  "]) == ()  # --server-arg= means none
    cases = [(["-tb"], "-tb: takes a value: --server-arg=-tb=VALUE"), (["-tb="], "takes a value"),
             (["--no-repack=1"], "--no-repack: is a switch and takes no value"),
             (["-tb 2"], "give a flag's value after '=' (--server-arg=-tb=VALUE), not after a space"),
             (["no-repack"], "not a llama-server flag"), (["-"], "not a llama-server flag"),
             (["--no-repack\n--host=0.0.0.0"], "control character or line break"),
             (["-tb=2\x00"], "control character"), (["-tb=2\r"], "control character"),
             (["-tb=1", "-tb=2"], "-tb: given twice")]
    for specs, want in cases:
        with pytest.raises(ServerArgError, match=r".*") as exc:
            parse_server_args(specs)
        assert want in str(exc.value), (specs, str(exc.value))
    # the argv-word form (a TuneRequest, a profile's key) follows the same rule
    assert check_server_argv(["--no-repack", "-tb", "2"]) == ("--no-repack", "-tb", "2")
    with pytest.raises(ServerArgError, match="-tb: takes a value"):
        check_server_argv(["-tb"])
    with pytest.raises(ServerArgError, match="--host: refused"):
        check_server_argv(["--host", "0.0.0.0"])


@pytest.mark.parametrize("spec, want", [
    ("-tb=abc", "--server-arg=-tb needs a whole number, not 'abc'"),
    ("-tb=2x", "needs a whole number, not '2x'"),  # std::stoi would read 2 and ignore the rest
    ("--batch-size=1.5", "--server-arg=--batch-size needs a whole number"),
    ("--temp=hot", "--server-arg=--temp needs a number (e.g. 0.8), not 'hot'"),
    ("-lm=fast", "--server-arg=-lm needs one of auto, none, mmap, mlock, mmap+mlock, dio, not 'fast'"),
])
def test_a_value_llama_server_would_refuse_at_start_is_refused_here(spec: str, want: str) -> None:
    """llama-server reads an N with std::stoi and exits "bad value for -tb: stoi" at start (common/arg.cpp
    ``common_params_parse_ex``): refused when written, naming the flag and the value."""
    with pytest.raises(ServerArgError) as exc:
        parse_server_args([spec])
    assert str(exc.value) == want or want in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)
    with pytest.raises(ServerArgError, match="Extra llama-server flags: -tb needs a whole number, not 'abc'"):
        parse_server_args(["-tb=abc"], where="Extra llama-server flags")
    assert parse_server_args(["-tb=-1", "--temp=.5", "--top-p=1e-3", "-lm=mmap+mlock", "-ub=+64"]) == (
        "-tb", "-1", "--temp", ".5", "--top-p", "1e-3", "-lm", "mmap+mlock", "-ub", "+64")


def test_the_cli_refuses_a_bad_value_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tuner.cli import main

    rc = main(["tune", "--models", str(tmp_path), "--server-arg=-tb=abc"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == "draftwise tune: --server-arg=-tb needs a whole number, not 'abc'", err


def test_one_declaration_for_the_profile_and_the_user_lists() -> None:
    from tuner.calibration import serving
    from tuner.calibration.serving import check_profile_extra_args
    from tuner.profiles import ProfileError

    assert serving.PROFILE_EXTRA_ARGS_ALLOWED is serverargs.PROFILE_EXTRA_ARGS_ALLOWED
    assert serverargs.SERVER_ARGS_ALLOWED == serverargs.PROFILE_EXTRA_ARGS_ALLOWED | set(serverargs.USER_ONLY_ARGS)
    assert {"--no-repack", "--repack", "-nr", "--no-mmap", "--mlock", "-tb"} <= set(serverargs.user_allowed())
    assert not {"--spec-draft-sampling", "--alias", "-a", "--cache-ram", "-cram"} & set(serverargs.user_allowed())
    # a saved profile tuned with the user's flags passes the profile check; the refused ones still fail it
    words = ["--spec-draft-sampling", "probabilistic", "--no-repack", "-tb", "2", "--load-mode", "none"]
    assert check_profile_extra_args(words, "p") == tuple(words)
    for bad in (["--host", "0.0.0.0"], ["--no-repack", "--tools", "all"], ["--threads-draft", "2"]):
        with pytest.raises(ProfileError, match="may not set"):
            check_profile_extra_args(bad, "p")


def test_a_flag_the_binary_does_not_list_is_refused_naming_it_and_the_binary() -> None:
    from tuner.server.dialect import parse_help

    help_dir = Path(__file__).resolve().parent / "server" / "data"  # the --help texts of real builds
    b11434 = help_dir / "llama-server-help-b11434.txt"
    legacy = help_dir / "llama-server-help-legacy-4227c9b.txt"
    new, old = parse_help(b11434.read_text()), parse_help(legacy.read_text())
    words = parse_server_args(["--no-repack", "-tb=2", "--no-mmap"])
    check_known(words, old.has, "/opt/old/llama-server")  # the legacy build lists all three
    with pytest.raises(ServerArgError) as exc:
        check_known(words, new.has, "/opt/new/llama-server")
    msg = str(exc.value)
    assert exc.value.flag == "--no-mmap" and "/opt/new/llama-server does not know this flag" in msg
    assert "--server-arg=--load-mode=none" in msg  # b11434 spells it so
    with pytest.raises(ServerArgError, match="--load-mode: /opt/old/llama-server does not know"):
        check_known(parse_server_args(["--load-mode=none"]), old.has, "/opt/old/llama-server")


def test_the_setting_is_validated_with_the_same_rule_naming_the_key(tmp_path: Path) -> None:
    import json

    from tuner import settings as S

    assert S.Settings().server_args == ()
    st = S.from_json({"server_args": ["--no-repack", "-tb=2"]})
    assert st.server_args == ("--no-repack", "-tb=2")
    S.save_settings(st)
    assert S.load_settings().server_args == ("--no-repack", "-tb=2")
    for bad, want in ((["--host=0.0.0.0"], "--host: refused"), (["-tb"], "-tb: takes a value: -tb=VALUE"),
                      ("--no-repack", "expected a list"), (["--no-repack\n"], "control character"),
                      ([3], "expected FLAG or FLAG=VALUE")):
        with pytest.raises(S.SettingsError) as exc:
            S.from_json({"server_args": bad}, tmp_path / "settings.json")
        assert exc.value.key == "server_args" and want in str(exc.value), str(exc.value)
        assert "\n" not in str(exc.value).replace("'--no-repack\\n'", "")
    # a bad value in the file costs only its own key
    S.settings_path().write_text(json.dumps({"server_args": ["--api-key=x"], "port": 9001}))
    loaded = S.load_settings_keeping_valid()
    assert loaded.settings.server_args == () and loaded.settings.port == 9001
    assert [e.key for e in loaded.problems] == ["server_args"]


def test_the_cli_and_the_app_give_the_same_request(tmp_path: Path) -> None:
    from tuner.calibration.request import TuneError, TuneRequest, request_from_settings
    from tuner.cli.hardware import server_args_arg
    from tuner.cli.tune import request_from_args
    from tuner.settings import Settings, save_settings

    save_settings(Settings(server_args=("--no-repack",)))
    args = _parse("tune", "--models", str(tmp_path))
    assert server_args_arg(args, "tune") == ("--no-repack",)  # not given: the setting
    given = _parse("tune", "--models", str(tmp_path), "--server-arg=-tb=2")
    assert server_args_arg(given, "tune") == ("-tb", "2")  # given: replaces the setting
    assert server_args_arg(_parse("tune", "--models", str(tmp_path), "--server-arg="), "tune") == ()
    app = request_from_settings(Settings(server_args=("--no-repack", "-tb=2")), tmp_path)
    cli = request_from_args(args, server_args=("--no-repack", "-tb", "2"))
    assert app == cli and app.server_args == ("--no-repack", "-tb", "2")
    with pytest.raises(TuneError, match="server_args: --port: refused") as exc:
        TuneRequest.create(tmp_path, server_args=("--port", "80"))
    assert exc.value.bad_input


def test_a_refused_flag_is_one_line_and_exit_2_on_every_command(tmp_path: Path, stories260k: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything is started (no llama-server runs here)."""
    from tuner.cli import main

    for argv in (["tune", "--models", str(tmp_path)], ["serve", "--target", str(stories260k)],
                 ["plan", "--target", str(stories260k)]):
        capsys.readouterr()
        rc = main([*argv, "--server-arg=--cors-origins=*"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err[-1].startswith(f"draftwise {argv[0]}: --server-arg=--cors-origins: refused"), err


def test_another_list_makes_a_profile_stale() -> None:
    from tuner.profiles import ModelFileKey, StalenessKeys, stale_reasons

    def keys(words: tuple[str, ...]) -> StalenessKeys:
        return StalenessKeys("hw", "bin", "b1", "d", (ModelFileKey("/m.gguf", 1, 1),), "p", n_ctx=4096,
                             workload="chat;server-defaults", server_args=words)

    assert stale_reasons(keys(("--no-repack",)), keys(("--no-repack",))) == []
    assert stale_reasons(keys(()), keys(("--no-repack",))) == [
        "the extra llama-server flags changed (tuned with none, now --no-repack)"]
    assert stale_reasons(keys(("-tb", "2")), keys(())) == [
        "the extra llama-server flags changed (tuned with -tb 2, now none)"]
    # written and read back; a profile from before the key reads as tuned with none
    assert StalenessKeys.from_json(keys(("-tb", "2")).to_json()) == keys(("-tb", "2"))
    old = {k: v for k, v in keys(()).to_json().items() if k != "server_args"}
    assert StalenessKeys.from_json(old) == keys(())
    with pytest.raises(TypeError):
        StalenessKeys.from_json({**old, "server_args": "--no-repack"})
