"""The router's preset, argv and environment, without a server: every key Draftwise writes is a flag of
b11434's ``--help``, a section says what the single-model argv says, values the INI format cannot carry and
flags that widen exposure are refused with the key named, the key never reaches an argv or the file, and the
router's answers (``/models`` rows, its log) are read right."""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path

import pytest

from tests.server.conftest import help_text
from tuner.server.argv import tuned_argv
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help
from tuner.server.preset import (
    FLAG_KEYS,
    REFUSED_FLAGS,
    TAGS_KEY,
    PresetError,
    RouterModel,
    RouterPlan,
    flag_pairs,
    model_id,
    render_preset,
    section_pairs,
    section_words,
)
from tuner.server.router_launch import router_argv, router_env, router_problem, write_preset
from tuner.server.router_log import RouterLog, own_lines
from tuner.server.router_status import parse_models

B11434 = parse_help(help_text("b11434"))
BIN = "/opt/llama/llama-server"
TUNED = ServerConfig(Path("/m/target.gguf"), draft_path=Path("/m/draft.gguf"), spec_type="draft-simple", n_max=4,
                     p_min=0.0, n_ctx=512, threads=1, cache_ram_mib=1024, no_repack=True,
                     extra_args=("--spec-draft-sampling", "temp=0.8", "-tb", "2"))


def test_every_key_written_is_a_flag_of_the_binary() -> None:
    # a flag the binary does not list is refused before a key is written (b11434 has no --no-mmap / --mlock)
    keys = {key for flag, (key, _takes) in FLAG_KEYS.items() if flag in B11434.flags}
    keys |= {"repack", "cont-batching", TAGS_KEY}
    missing = sorted(k for k in keys if not ({f"--{k}", f"-{k}"} & B11434.flags))
    assert missing == [] and len(keys) > 30


def test_a_section_says_what_the_single_model_argv_says() -> None:
    words = section_words(BIN, TUNED, B11434)
    single = tuned_argv(BIN, TUNED, B11434)[1:]
    # the same words, less what the router sets for every model (metrics, slots, CORS, alias, idle sleep)
    assert [w for w in single if w not in ("--metrics", "--slots", "--cors-origins", "localhost")] == words
    pairs = dict(section_pairs(RouterModel("target", TUNED, True), BIN, B11434))
    assert pairs == {"model": "/m/target.gguf", "ctx-size": "512", "parallel": "1", "threads": "1",
                     "spec-draft-threads": "1",
                     "repack": "false", "cache-ram": "1024", "spec-type": "draft-simple",
                     "spec-draft-model": "/m/draft.gguf", "spec-draft-n-max": "4", "spec-draft-p-min": "0",
                     "spec-draft-sampling": "temp=0.8", "tb": "2", "tags": "tuned"}


def test_the_preset_text() -> None:
    plan = RouterPlan((RouterModel("target", TUNED, True),
                       RouterModel("stories260K", ServerConfig(Path("/m/stories260K.gguf"), n_ctx=256), False)),
                      sleep_idle_s=900, api_key="secret-key")
    text = render_preset(plan, BIN, B11434)
    assert text.splitlines()[1:7] == ["version = 1", "", "[*]", "metrics = true", "slots = true",
                                      "sleep-idle-seconds = 900"]
    assert "[target]" in text and "[stories260K]" in text and "tags = untuned" in text
    assert "secret-key" not in text and "host" not in text and "port" not in text and "alias" not in text


@pytest.mark.parametrize("path", ["/m/a;b/t.gguf", "/m/x #1/t.gguf", "/m/new\nline.gguf", "/m/t.gguf "])
def test_a_value_the_format_cannot_carry_is_refused_naming_the_key(path: str) -> None:
    model = RouterModel("t", replace(TUNED, model_path=Path(path)), True)
    with pytest.raises(PresetError, match=r"^t: model = .* cannot be written into llama-server's model preset"):
        section_pairs(model, BIN, B11434)


@pytest.mark.parametrize("extra", [("--host", "0.0.0.0"), ("--port", "9"), ("--api-key", "k"), ("--rpc", "h:1"),
                                   ("--cors-origins", "*"), ("--tools", "all"), ("--no-such-flag",)])
def test_flags_that_widen_exposure_or_are_unknown_are_refused(extra: tuple[str, ...]) -> None:
    with pytest.raises(PresetError, match=f"t: {extra[0]} cannot go into llama-server's model preset"):
        flag_pairs("t", ["-m", "/m/t.gguf", *extra], B11434)
    assert {"--host", "--port", "--api-key", "--rpc", "--cors-origins"} <= REFUSED_FLAGS


def test_a_placement_over_rpc_hosts_is_not_a_section() -> None:
    with pytest.raises(PresetError, match="served as one model"):
        section_pairs(RouterModel("t", replace(TUNED, rpc=("10.0.0.2:50052",)), True), BIN, B11434)


def test_a_flag_the_binary_lacks_is_refused() -> None:
    legacy = parse_help(help_text("b10434"))
    with pytest.raises(PresetError, match="does not list --spec-draft-sampling"):
        flag_pairs("t", ["--spec-draft-sampling", "x"], legacy)


def test_the_last_of_repeated_switches_counts() -> None:
    assert dict(flag_pairs("t", ["--no-repack", "--repack"], B11434)) == {"repack": "true"}
    assert dict(flag_pairs("t", ["--repack", "-nr"], B11434)) == {"repack": "false"}


def test_model_ids_are_plain_and_unique() -> None:
    assert model_id("/m/Qwen3-8B-Q4_K_M-00001-of-00003.gguf") == "Qwen3-8B-Q4_K_M"
    assert model_id("/m/My Model [v2]:q4.gguf") == "My-Model-v2-q4"
    assert model_id("/m/a/target.gguf", taken=["target"]) == "target-2"
    assert model_id("/m/;;.gguf") == "model"
    with pytest.raises(PresetError, match="not a model id"):
        section_pairs(RouterModel("a]b", TUNED, True), BIN, B11434)
    with pytest.raises(PresetError, match="both named 'x'"):
        render_preset(RouterPlan((RouterModel("x", TUNED, True), RouterModel("x", TUNED, False))), BIN, B11434)


def test_the_router_argv_and_environment_keep_the_key_off_the_command_line(tmp_path: Path) -> None:
    plan = RouterPlan((RouterModel("t", TUNED, True),), models_max=2, port=8088, api_key="secret-key")
    argv = router_argv(BIN, plan, tmp_path / "models.ini", B11434)
    assert argv == [BIN, "--models-preset", str(tmp_path / "models.ini"), "--models-max", "2", "--host", "127.0.0.1",
                    "--port", "8088", "--cors-origins", "localhost"]
    env = router_env({"PATH": "/bin", "LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_API_KEY": "theirs"}, "secret-key",
                     tmp_path / "empty")
    assert env == {"PATH": "/bin", "LLAMA_CACHE": str(tmp_path / "empty"), "LLAMA_API_KEY": "secret-key"}
    assert "LLAMA_API_KEY" not in router_env({"LLAMA_API_KEY": "theirs"}, None, tmp_path)


def test_the_preset_file_is_private(tmp_path: Path) -> None:
    plan = RouterPlan((RouterModel("t", TUNED, True),), port=8088, api_key="secret-key")
    path = write_preset(plan, BIN, B11434, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "secret-key" not in path.read_text()


def test_who_cannot_be_a_router(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"\x7fELF")
    assert router_problem(binary, B11434, "127.0.0.1") is None
    assert "no --models-preset" in (router_problem(binary, parse_help(help_text("ik-0.1.5")), "127.0.0.1") or "")
    assert "open to the network" in (router_problem(binary, B11434, "0.0.0.0") or "")
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text("#!/bin/sh\nexec llama-server \"$@\"\n")
    assert "wrapper script" in (router_problem(wrapper, B11434, "127.0.0.1") or "")


def test_the_routers_models_and_log_are_read_right() -> None:
    rows = [{"id": "a", "tags": ["tuned"], "status": {"value": "loaded", "args": ["x", "--port", "4711"]}},
            {"id": "b", "status": {"value": "unloaded", "failed": True, "exit_code": 1, "args": []}},
            {"status": {"value": "loaded"}}]
    models = parse_models(rows)
    assert set(models) == {"a", "b"} and models["a"].port == 4711 and models["a"].running
    assert models["b"].failed and models["b"].exit_code == 1 and not models["b"].running
    log = RouterLog(keep_lines=2)
    heard: list[str] = []
    log.listen(4711, heard.append)
    for line in ["[ 4711] one", "[ 4711] two", "[ 4711] three", "[   80] other",
                 "0.02.450.032 I srv  run: instance name=a exited with status 1", "router line"]:
        log.on_line(line)
    assert log.lines(4711) == ["two", "three"] and log.lines(80) == ["other"] and heard == ["one", "two", "three"]
    assert log.take_exits() == [("a", 1)] and log.take_exits() == []
    assert own_lines(["[ 4711] x", "router line"]) == ["router line"]
