"""Flag dialects from captured --help texts, and the exact argv per dialect."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.server.conftest import help_text
from tuner.process import clean_env
from tuner.server.argv import UnsupportedConfigError, build_argv
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help, probe_dialect

CURRENT = parse_help(help_text("b11434"))
B10434 = parse_help(help_text("b10434"))
LEGACY = parse_help(help_text("legacy-4227c9b"))

T = Path("/models/target.gguf")
D = Path("/models/draft.gguf")


def test_styles_and_types() -> None:
    assert CURRENT.spec_style == "current" and B10434.spec_style == "current"
    assert LEGACY.spec_style == "legacy"
    assert "draft-simple" in CURRENT.spec_types and "ngram-mod" in CURRENT.spec_types
    assert CURRENT.spec_types[0] == "none" and len(CURRENT.spec_types) == 11
    assert LEGACY.spec_types == ("none", "draft-simple")
    assert CURRENT.has_fit and not LEGACY.has_fit
    for d in (CURRENT, B10434, LEGACY):
        assert d.has_metrics and d.has_slots and d.has_list_devices


def test_removed_flags_are_not_accepted_flags() -> None:
    assert not CURRENT.has("--draft-max")
    assert CURRENT.removed_hint("--draft-max") == "use --spec-draft-n-max or --spec-ngram-mod-n-max"
    assert CURRENT.has("--spec-draft-n-max") and CURRENT.has("-ngld") and CURRENT.has("--spec-draft-ngl")
    assert LEGACY.has("--draft-max") and LEGACY.has("-ngld") and not LEGACY.has("--spec-type")
    assert LEGACY.removed_hint("--draft-max") is None


def test_build_specific_flags() -> None:
    assert CURRENT.has("--log-jsonl") and not B10434.has("--log-jsonl")
    assert CURRENT.has("--spec-draft-sampling") and not B10434.has("--spec-draft-sampling")
    assert CURRENT.help_sha256 != B10434.help_sha256


SPEC = ServerConfig(model_path=T, draft_path=D, spec_type="draft-simple", n_max=8, n_min=1, p_min=0.5,
                    ngl=99, draft_ngl=99, n_ctx=512, port=8123)


def test_argv_current_exact() -> None:
    argv = build_argv("/bin/llama-server", SPEC, CURRENT)
    assert argv == [
        "/bin/llama-server", "-m", str(T), "--host", "127.0.0.1", "--port", "8123", "-c", "512", "-np", "1",
        "-ngl", "99", "--metrics", "--slots", "--cors-origins", "localhost",
        "--spec-type", "draft-simple", "--spec-draft-model", str(D), "--spec-draft-n-max", "8",
        "--spec-draft-n-min", "1", "--spec-draft-p-min", "0.5", "--spec-draft-ngl", "99",
    ]
    # b10434 has the same flags for this configuration
    assert build_argv("/bin/llama-server", SPEC, B10434) == argv


def test_cors_locked_down_where_the_flag_exists() -> None:
    """b11434 gets --cors-origins localhost by default, or the one origin of the settings; builds
    without the flag (the legacy dialect) are reported open (cors_locked False) and get no flag."""
    from dataclasses import replace

    from tuner.server.argv import cors_locked

    assert cors_locked(CURRENT) and cors_locked(B10434) and not cors_locked(LEGACY)
    argv = build_argv("/bin/llama-server", replace(SPEC, cors_origins="http://localhost:3000"), CURRENT)
    i = argv.index("--cors-origins")
    assert argv[i + 1] == "http://localhost:3000" and argv.count("--cors-origins") == 1
    assert "--cors-origins" not in build_argv("/bin/llama-server", SPEC, LEGACY)


def test_argv_legacy_exact() -> None:
    argv = build_argv("/bin/llama-server", SPEC, LEGACY)
    assert argv == [
        "/bin/llama-server", "-m", str(T), "--host", "127.0.0.1", "--port", "8123", "-c", "512", "-np", "1",
        "-ngl", "99", "--metrics", "--slots",
        "-md", str(D), "--draft-max", "8", "--draft-min", "1", "--draft-p-min", "0.5", "-ngld", "99",
    ]
    assert "--spec-type" not in argv


def test_baseline_passes_spec_type_none_explicitly() -> None:
    cfg = ServerConfig(model_path=T, port=9000)
    argv = build_argv("x", cfg, CURRENT)
    i = argv.index("--spec-type")
    assert argv[i + 1] == "none"
    legacy = build_argv("x", cfg, LEGACY)
    assert "-md" not in legacy and "--draft-max" not in legacy


def test_ngram_types_map_to_their_own_length_flags() -> None:
    mod = build_argv("x", ServerConfig(model_path=T, spec_type="ngram-mod", n_max=16, n_min=2, port=1), CURRENT)
    assert mod[mod.index("--spec-type") + 1] == "ngram-mod"
    assert mod[mod.index("--spec-ngram-mod-n-max") + 1] == "16"
    assert mod[mod.index("--spec-ngram-mod-n-min") + 1] == "2"
    assert "--spec-draft-n-max" not in mod and "--spec-draft-model" not in mod
    simple = build_argv("x", ServerConfig(model_path=T, spec_type="ngram-simple", n_max=7, port=1), CURRENT)
    assert simple[simple.index("--spec-ngram-simple-size-m") + 1] == "7"


def test_unsupported_configs_raise_naming_the_flag() -> None:
    with pytest.raises(UnsupportedConfigError) as e:
        build_argv("x", ServerConfig(model_path=T, spec_type="ngram-mod", port=1), LEGACY)
    assert e.value.flag == "--spec-type" and "ngram-mod" in str(e.value)
    with pytest.raises(UnsupportedConfigError) as e:
        build_argv("x", ServerConfig(model_path=T, spec_type="draft-simple", port=1), CURRENT)
    assert "draft" in str(e.value)
    # a draft without a type that uses it would be loaded and never used (S1)
    with pytest.raises(UnsupportedConfigError):
        build_argv("x", ServerConfig(model_path=T, draft_path=D, port=1), CURRENT)
    with pytest.raises(UnsupportedConfigError) as e:
        build_argv("x", ServerConfig(model_path=T, fit=True, port=1), LEGACY)
    assert e.value.flag == "--fit"
    with pytest.raises(ValueError):
        build_argv("x", ServerConfig(model_path=T), CURRENT)


def test_fit_and_extra_args() -> None:
    argv = build_argv("x", ServerConfig(model_path=T, fit=False, port=1, extra_args=("--foo", "1")), CURRENT)
    assert argv[argv.index("--fit") + 1] == "off"
    assert argv[-2:] == ["--foo", "1"]


def test_clean_env_strips_llama_arg() -> None:
    env = {"PATH": "/bin", "LLAMA_ARG_SPEC_TYPE": "ngram-simple", "LLAMA_ARG_N_PARALLEL": "4", "HOME": "/h"}
    assert clean_env(env) == {"PATH": "/bin", "HOME": "/h"}


def test_probe_dialect_caches_by_size_and_mtime(tmp_path: Path, fake_server_bin: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import tuner.server.dialect as dialect_mod

    d1 = probe_dialect(fake_server_bin, use_cache=False)
    assert d1.spec_style == "current" and d1.help_sha256 == CURRENT.help_sha256
    cached = list((Path(os.environ["DRAFTWISE_HOME"]) / "cache" / "dialect").glob("*.json"))
    assert len(cached) == 1
    # the disk cache answers without running the binary again
    monkeypatch.setattr(dialect_mod, "_memory_cache", {})

    def no_run(path, timeout_s=30.0):
        raise AssertionError("--help was run although the cache is fresh")

    with monkeypatch.context() as m:
        m.setattr(dialect_mod, "read_help_text", no_run)
        assert probe_dialect(fake_server_bin) == d1
    # a different binary (legacy help) at another path is probed on its own
    legacy_exe = tmp_path / "legacy-server"
    legacy_exe.write_text("#!/bin/sh\ncat " + str(Path(__file__).parent / "data" / "llama-server-help-legacy-4227c9b.txt") + "\n")
    legacy_exe.chmod(0o755)
    assert probe_dialect(legacy_exe).spec_style == "legacy"
    # rewriting the binary (size/mtime change) invalidates the cache
    legacy_exe.write_text("#!/bin/sh\ncat " + str(Path(__file__).parent / "data" / "llama-server-help-b10434.txt") + "\n\n")
    assert probe_dialect(legacy_exe).spec_style == "current"


def test_api_key_goes_in_a_file_on_every_dialect() -> None:
    cfg = ServerConfig(model_path=T, port=8080, api_key="k-123")
    for d in (CURRENT, B10434, LEGACY):
        assert d.has("--api-key-file")
        argv = build_argv("/bin/llama-server", cfg, d, api_key_file="/run/key.txt")
        assert argv[argv.index("--api-key-file") + 1] == "/run/key.txt"
        assert "k-123" not in argv and "--api-key" not in argv
        # without a file (the caller could not write one) the key goes on the command line
        argv = build_argv("/bin/llama-server", cfg, d)
        assert argv[argv.index("--api-key") + 1] == "k-123"
    # no key: neither flag, even when a file is offered
    argv = build_argv("/bin/llama-server", ServerConfig(model_path=T, port=8080), CURRENT, api_key_file="/x")
    assert "--api-key-file" not in argv and "--api-key" not in argv


@pytest.mark.parametrize("content", ["[]", "{\"key\": 5}", "{\"key\": [], \"help\": 3}", "\"x\"", "{bad"])
def test_a_damaged_dialect_cache_is_ignored(content: str, fake_server_bin: Path) -> None:
    """Issue 16 item 4: a dialect cache holding [] made serve and doctor crash."""
    from tuner import paths
    from tuner.server import dialect as dialect_mod

    first = dialect_mod.probe_dialect(fake_server_bin, use_cache=True)
    dialect_mod._memory_cache.clear()
    for f in (paths.cache_dir() / "dialect").glob("*.json"):
        f.write_text(content)
    assert dialect_mod.probe_dialect(fake_server_bin, use_cache=True) == first


def test_thread_setting_on_argv_draft_threads_follow_and_poll_is_checked() -> None:
    base = ServerConfig(model_path=Path("/m/t.gguf"), threads=2, port=8080)
    argv = build_argv("llama-server", base, CURRENT)
    assert argv[argv.index("-t") + 1] == "2" and "-td" not in argv and "--poll" not in argv
    drafted = ServerConfig(model_path=Path("/m/t.gguf"), draft_path=Path("/m/d.gguf"), spec_type="draft-simple",
                           threads=1, poll=0, port=8080)
    argv = build_argv("llama-server", drafted, CURRENT)
    assert argv[argv.index("-td") + 1] == "1" and argv[argv.index("--poll") + 1] == "0"
    with pytest.raises(ValueError, match="poll"):
        ServerConfig(model_path=Path("/m/t.gguf"), poll=101)
    with pytest.raises(TypeError, match="omp_passive"):
        ServerConfig(model_path=Path("/m/t.gguf"), omp_passive="yes")  # type: ignore[arg-type]
