"""``draftwise devices`` and ``draftwise plan`` through the real CLI dispatcher."""

from __future__ import annotations

import json

import pytest

from tests.hardware.conftest import gpu_devices
from tuner import cli
from tuner.cli import hardware as command
from tuner.hardware.memory import load_model_spec


@pytest.mark.server
def test_devices_human_and_json_here(capsys):
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "Host:" in out and "RAM" in out and "GPUs: none (CPU-only" in out
    assert cli.main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"] == [] and data["ram_total_bytes"] > 0 and data["cpu_cores"] >= 1
    assert data["ram_available_bytes"] <= data["ram_total_bytes"]


def _stand_in_binary(tmp_path):
    """An executable file for ``--server`` (devices are faked, so it is never run)."""
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    return str(exe)


def test_devices_json_fields_with_a_gpu(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(command, "detect_devices", lambda binary, *a, **k: gpu_devices(("CUDA0", 8192, 7000)))
    assert cli.main(["devices", "--json", "--server", _stand_in_binary(tmp_path)]) == 0
    (d,) = json.loads(capsys.readouterr().out)["devices"]
    for key in ("name", "backend", "total_bytes", "free_bytes", "budget_bytes", "source", "notes"):
        assert key in d
    assert d["budget_bytes"] == 7000 * 1024 * 1024


@pytest.mark.server
def test_plan_stories_cpu_only(stories260k_session, capsys):
    rc = cli.main(["plan", "--target", str(stories260k_session), "--ctx-size", "512"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "stories260K.gguf (5 blocks" in out and "host RAM" in out and "Verdict: fits, headroom " in out
    assert cli.main(["plan", "--target", str(stories260k_session), "--ctx-size", "512", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    spec = load_model_spec(stories260k_session)
    assert data["fits"] is True and data["n_ctx"] == 512
    assert data["host"]["need"]["target_weights_bytes"] == spec.weights_bytes
    assert data["host"]["need"]["target_kv_bytes"] == 5 * 512 * 32 * 2 * 2


def test_plan_that_does_not_fit_exits_1(stories260k_session, monkeypatch, capsys, tmp_path):
    tiny = gpu_devices(("CUDA0", 1024, 1000))  # 1000 MiB free < the 1024 MiB margin
    monkeypatch.setattr(command, "detect_devices", lambda binary, *a, **k: tiny)
    rc = cli.main(["plan", "--target", str(stories260k_session), "--draft", str(stories260k_session),
                   "--ctx-size", "512", "--server", _stand_in_binary(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1 and "does NOT fit, short by" in out and "CUDA0" in out and "Largest target ngl" in out


def test_plan_bad_file_names_it(tmp_path, capsys):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf at all")
    assert cli.main(["plan", "--target", str(bad)]) == 2
    assert "broken.gguf" in capsys.readouterr().err


def test_plan_counts_every_shard_of_a_split_set(tmp_path, capsys):
    from tests.synth import write_llama_gguf, write_split_gguf

    whole = load_model_spec(write_llama_gguf(tmp_path / "whole.gguf", n_layers=2, n_embd=64, seed=0,
                                             general_name="tiny"))
    shards = write_split_gguf(tmp_path / "split", "tiny", 3)
    split = load_model_spec(shards[0])
    assert split.weights_bytes == whole.weights_bytes and split.block_bytes == whole.block_bytes
    shards[1].unlink()
    assert cli.main(["plan", "--target", str(shards[0]), "--no-cross-check"]) == 2
    err = capsys.readouterr().err
    assert "tiny-00002-of-00003.gguf" in err and "missing shard" in err


@pytest.mark.server
def test_plan_rejects_inconsistent_flags(stories260k_session, capsys):
    t = str(stories260k_session)
    cases = [
        (["--spec-type", "bogus"], "--spec-type 'bogus'"),
        (["--spec-type", "draft-simple"], "--draft"),
        (["--draft-ngl", "3"], "--draft-ngl"),
        (["--draft", t, "--spec-type", "ngram-mod"], "--draft"),
        (["--margin-mib", "-1"], "--margin-mib"),
        (["--ctx-size", "0"], "--ctx-size 0: must be between 256"),
    ]
    for extra, needle in cases:
        assert cli.main(["plan", "--target", t, "--no-cross-check", *extra]) == 2, extra
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("draftwise plan:")]
        assert len(err) == 1 and needle in err[0], (extra, err)


def test_a_named_server_that_is_missing_is_an_error(stories260k_session, tmp_path, capsys):
    gone = str(tmp_path / "no-such-llama-server")
    assert cli.main(["devices", "--server", gone]) == 2
    assert f"--server {gone}" in capsys.readouterr().err
    assert cli.main(["plan", "--target", str(stories260k_session), "--server", gone]) == 2
    assert f"--server {gone}" in capsys.readouterr().err


@pytest.mark.server
def test_plan_default_ctx_is_capped_at_the_training_context(stories260k_session, capsys):
    """stories260K was trained with context_length 2048: the default n_ctx is 2048, not 4096, and says so."""
    spec = load_model_spec(stories260k_session)
    assert spec.context_length == 2048
    assert cli.main(["plan", "--target", str(stories260k_session), "--json"]) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["n_ctx"] == 2048 and "training context" in data["n_ctx_note"]
    assert cli.main(["plan", "--target", str(stories260k_session)]) == 0
    out = capsys.readouterr().out
    assert "n_ctx 2048" in out and "note: n_ctx 2048: the model's training context" in out


@pytest.mark.server
def test_plan_warns_when_ctx_exceeds_the_training_context(stories260k_session, capsys):
    assert cli.main(["plan", "--target", str(stories260k_session), "--ctx-size", "8192"]) == 0
    out = capsys.readouterr().out
    assert "n_ctx 8192" in out and "warning: --ctx-size 8192 exceeds the model's training context 2048" in out
    assert cli.main(["plan", "--target", str(stories260k_session), "--ctx-size", "1024"]) == 0
    assert "training context" not in capsys.readouterr().out


def test_plan_n_ctx_rule():
    assert command.plan_n_ctx(None, None) == (4096, None)
    assert command.plan_n_ctx(None, 131072) == (8192, None)
    assert command.plan_n_ctx(None, 6000) == (6000, None)
    assert command.plan_n_ctx(None, 512)[0] == 512
    assert command.plan_n_ctx(600, 512)[1] is not None and command.plan_n_ctx(512, 512) == (512, None)


def test_plan_json_carries_the_context_vs_layers_trade(gemma3_270m, monkeypatch, capsys, tmp_path):
    """Gemma 3 270M on an injected GPU with 1400 MiB free (376 MiB after the 1 GiB margin): at 4096 the
    whole model fits, at 32768 it does not; with a draft of its first 2 blocks fewer layers fit."""
    from tests.synth import write_first_blocks_gguf
    from tuner.hardware.memory import MemoryRequest, plan_memory

    gpu = gpu_devices(("CUDA0", 2048, 1400))
    monkeypatch.setattr(command, "detect_devices", lambda binary, *a, **k: gpu)
    draft = write_first_blocks_gguf(gemma3_270m, tmp_path / "first2.gguf", 2)
    server = _stand_in_binary(tmp_path)

    def plan(*extra):
        rc = cli.main(["plan", "--target", str(gemma3_270m), "--json", "--no-cross-check", "--server", server, *extra])
        return rc, json.loads(capsys.readouterr().out)

    rc, short = plan("--ctx-size", "4096")
    assert rc == 0 and short["max_ngl_at_ctx"] == 19 and short["max_target_ngl"] == 19
    top = short["max_ctx_all_on_gpu"]
    assert 4096 <= top < 32768 and top % 256 == 0 and short["ctx_ceiling"] == 32768
    rc, long = plan("--ctx", "32768")
    assert rc == 1 and long["fits"] is False and long["max_ctx_all_on_gpu"] == top and long["max_ngl_at_ctx"] < 19
    spec = load_model_spec(gemma3_270m)
    assert plan_memory(MemoryRequest(target=spec, n_ctx=top), gpu).fits
    assert not plan_memory(MemoryRequest(target=spec, n_ctx=top + 256), gpu).fits
    rc, both = plan("--ctx", "4096", "--draft", str(draft))
    assert both["max_ngl_at_ctx"] <= short["max_ngl_at_ctx"] and both["max_ctx_all_on_gpu"] < top
    assert both["fits"] is (rc == 0) and both["draft_ngl"] == 3  # the draft all on the GPU (2 blocks + output)
    assert cli.main(["plan", "--target", str(gemma3_270m), "--ctx", "32768", "--no-cross-check",
                     "--server", server]) == 1  # all layers at 32768 do not fit: exit 1
    out = capsys.readouterr().out
    assert f"Largest target ngl that fits at n_ctx 32768: {long['max_ngl_at_ctx']} (of 19)" in out
    assert f"Largest context with the whole target on the GPU: {top}" in out


@pytest.mark.server
def test_plan_takes_a_model_name_in_the_models_folder(stories260k_session, capsys):
    """`plan --models DIR --target NAME` finds the file as `tune` does (name or stem); a wrong name lists the
    folder's files."""
    folder = stories260k_session.parent
    assert cli.main(["plan", "--models", str(folder), "--target", "stories260K", "--ctx-size", "512",
                     "--no-cross-check"]) == 0
    size = (folder / "stories260K.gguf").stat().st_size / 2**20
    # the tensors and the file they are in: two sizes, each named (stop 12: "three sizes for one file")
    assert "Plan: target stories260K (5 blocks, " in (out := capsys.readouterr().out)
    assert f" of tensors in a {size:.1f} MiB file)" in out, out
    assert cli.main(["plan", "--models", str(folder), "--target", "nope.gguf", "--no-cross-check"]) == 2
    err = capsys.readouterr().err
    assert "--target 'nope.gguf': no such model in" in err and "stories260K.gguf" in err


def test_plan_without_target_plans_the_target_tune_picks(monkeypatch, capsys, tmp_path):
    """``plan --models DIR`` without ``--target`` plans the target ``tune --models DIR`` would tune (the largest
    model with a compatible draft), says which on stderr; without --models either, one line naming --target."""
    from tests.synth import make_family
    from tuner.catalog.folder import default_target, scan_models

    make_family(tmp_path / "fam", n_embd=64, n_layers=4, draft_layers=1)
    scanned = scan_models(tmp_path / "fam")
    picked = default_target(scanned.models, scanned.families)
    assert picked is not None and picked.path.name == "target.gguf"
    monkeypatch.setattr(command, "detect_devices", lambda binary, *a, **k: gpu_devices(("CUDA0", 8192, 7000)))
    rc = cli.main(["plan", "--models", str(tmp_path / "fam"), "--server", _stand_in_binary(tmp_path),
                   "--no-cross-check"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "target: target.gguf (the one tune picks" in err and "Plan: target target.gguf (4 blocks" in out
    assert cli.main(["plan", "--no-cross-check"]) == 2
    assert capsys.readouterr().err.strip() == ("draftwise plan: plan needs --target T (a path), or --models DIR to "
                                               "plan the target tune picks there")
    (tmp_path / "empty").mkdir()
    assert cli.main(["plan", "--models", str(tmp_path / "empty"), "--no-cross-check"]) == 2
    assert "no LLM GGUF file in this folder (give --target)" in capsys.readouterr().err
