"""Cross-check with llama-server itself: its start-up projection and allocated buffers, run with exactly
the argv the server would get; a deliberately wrong plan must be reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.hardware.conftest import cpu_only_devices, dense_spec, gpu_devices
from tuner.crosscheck.fit_params import fit_params_argv
from tuner.crosscheck.lines import plan_check_lines
from tuner.crosscheck.server_check import check_argv, server_config_for, server_cross_check
from tuner.hardware import memory
from tuner.hardware.buffers import parse_startup_projection
from tuner.hardware.memory import GIB, MIB, MemoryRequest, load_model_spec

# b11434 -lv 4 --fit on, Gemma 3 270M + a 2-block draft (lines as the server printed them)
LOG = [
    "0.00.005.197 I common_params_fit_impl: getting device memory data for initial parameters:",
    "0.00.668.888 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
    "0.00.668.939 I common_memory_breakdown_print: |   - Host               |                  272 =   222 +      27 +      23                |",
    "0.00.668.955 I common_memory_breakdown_print: |   - CPU_REPACK         |                   12 =    12 +       0 +       0                |",
    "0.00.700.000 I common_params_fit_impl: getting device memory data for the extra model at a context size of 4096:",
    "0.00.800.000 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
    "0.00.800.001 I common_memory_breakdown_print: |   - Host               |                  197 =   176 +       2 +      19                |",
    "0.00.807.813 I common_params_fit_impl: projected to use 469 MiB of host memory vs. 24105 MiB of total host memory",
]


def test_parse_startup_projection_target_and_draft_tables():
    p = parse_startup_projection(LOG)
    assert [(r.place, r.model_bytes // MIB, r.context_bytes // MIB, r.compute_bytes // MIB) for r in p.target] == [
        ("Host", 222, 27, 23), ("CPU_REPACK", 12, 0, 0)]
    assert [(r.place, r.total_bytes // MIB) for r in p.draft] == [("Host", 197)]
    gpu = ["I common_params_fit_impl: getting device memory data for initial parameters:",
           "I common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |",
           "I common_memory_breakdown_print: |   - CUDA0 (RTX 4060 Laptop GPU) | 8188 = 2000 + (5900 = 5500 +  300 +  100) + 288 |",
           "I common_memory_breakdown_print: |   - Host                        |                 400 =  380 +    0 +   20       |"]
    rows = parse_startup_projection(gpu).target
    assert (rows[0].place, rows[0].model_bytes // MIB, rows[0].context_bytes // MIB, rows[0].compute_bytes // MIB) \
        == ("CUDA0", 5500, 300, 100)
    with pytest.raises(ValueError, match="-lv 4"):
        parse_startup_projection(["I srv  llama_server: model loaded"])


def test_check_argv_keeps_the_server_argv_and_fit_params_gets_its_subset():
    server = ["/b/llama-server", "-m", "/m/t.gguf", "--host", "127.0.0.1", "--port", "8080", "-c", "4096",
              "-np", "1", "-ngl", "20", "--fit", "off", "--metrics", "--spec-type", "draft-simple",
              "--spec-draft-model", "/m/d.gguf", "--n-cpu-moe", "3"]
    chk = check_argv(server, 9999)
    assert chk[:7] == ["/b/llama-server", "-m", "/m/t.gguf", "--host", "127.0.0.1", "--port", "9999"]
    assert "off" not in chk and chk[-5:] == ["--fit", "on", "-lv", "4", "--no-warmup"]
    assert "--spec-draft-model" in chk and "--n-cpu-moe" in chk
    fp = fit_params_argv(server, "/b/llama-fit-params")
    assert fp == ["/b/llama-fit-params", "-m", "/m/t.gguf", "-c", "4096", "-np", "1", "-ngl", "20",
                  "--n-cpu-moe", "3"]


def test_injected_gpu_projection_is_compared_per_device():
    t = dense_spec("t", file_bytes=4 * GIB, n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128,
                   n_ff=14336, n_vocab=128256)
    t = replace(t, path="/m/t.gguf")
    devs = gpu_devices(("CUDA0", 8192, 8000))
    req = MemoryRequest(target=t, n_ctx=4096)
    plan = memory.plan_memory(req, devs)
    gpu, host = plan.devices[0].need, plan.host.need

    def lines(gpu_model_mib: int) -> list[str]:
        return ["I common_params_fit_impl: getting device memory data for initial parameters:",
                "I common_memory_breakdown_print: | memory breakdown [MiB] | total free self model context compute unaccounted |",
                f"I common_memory_breakdown_print: |   - CUDA0 (Fake GPU) | 8192 = 100 + (9999 = {gpu_model_mib} + "
                f"{gpu.target_kv_bytes // MIB} + {gpu.compute_bytes // MIB}) + 0 |",
                f"I common_memory_breakdown_print: |   - Host | 1 = {host.target_weights_bytes // MIB} + 0 + "
                f"{host.compute_bytes // MIB} |"]

    from tuner.server.dialect import parse_help

    dialect = parse_help("--spec-type TYPE  [none,draft-simple]\n-m FNAME\n--host H\n--port N\n-c N\n-np N\n"
                         "-ngl N\n-t N\n-ctk T\n-ctv T\n--fit on|off\n--metrics\n--slots\n--spec-draft-model F\n")
    good = server_cross_check(req, devs, "/b/llama-server", dialect=dialect, use_cache=False,
                              runner=lambda argv, timeout_s: lines(gpu.target_weights_bytes // MIB))
    assert good.ok and good.agrees, good.disagreements
    assert {p.place for p in good.parts} == {"CUDA0", "Host"}
    bad = server_cross_check(req, devs, "/b/llama-server", dialect=dialect, use_cache=False,
                             runner=lambda argv, timeout_s: lines(gpu.target_weights_bytes // MIB * 2))
    assert bad.ok and bad.agrees is False
    assert any("target weights on CUDA0" in d and "-50%" in d for d in bad.disagreements)


@pytest.mark.server
def test_real_server_agrees_and_a_patched_formula_is_reported(llama_server_bin, gemma3_270m, tmp_path, monkeypatch):
    """Gemma 3 270M + a draft of its first 2 blocks, n_ctx 4096, on the real CPU server: the plan agrees
    with the server's own projection and buffers; with the old compute formula (logits for every ubatch
    token) the same, cached, server report disagrees, and says where."""
    from tests.synth import write_first_blocks_gguf
    from tuner.server.argv import build_argv
    from tuner.server.dialect import probe_dialect

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    CPU_ONLY = cpu_only_devices(llama_server_bin)
    draft = write_first_blocks_gguf(gemma3_270m, tmp_path / "gemma-first2.gguf", 2)
    req = MemoryRequest(target=load_model_spec(gemma3_270m), draft=load_model_spec(draft),
                        spec_type="draft-simple", n_ctx=4096, n_parallel=1)
    r = server_cross_check(req, CPU_ONLY, llama_server_bin)
    assert r.ok, r.note
    # exactly the server's argv (build_argv of the same request), plus the check's own flags
    server_argv = build_argv(llama_server_bin, server_config_for(req, binary=llama_server_bin).with_port(1),
                             probe_dialect(llama_server_bin))
    expect = check_argv(server_argv, 2)
    got = list(r.argv)
    port_at = got.index("--port") + 1
    got[port_at] = "2"
    assert got == expect
    assert {(p.source, p.model) for p in r.parts} >= {("start-up projection", "target"),
                                                      ("start-up projection", "draft"),
                                                      ("allocated buffers", "target"), ("allocated buffers", "draft")}
    assert r.agrees, r.disagreements
    assert not r.cached and r.cost_s > 0
    again = server_cross_check(req, CPU_ONLY, llama_server_bin)
    assert again.cached and again.agrees
    # the bug of issue 12: the reserve graph was assumed to output logits for all 512 ubatch tokens
    monkeypatch.setattr(memory, "reserve_outputs", lambda n_tokens, n_batch, n_parallel, n_draft: n_tokens)
    wrong = server_cross_check(req, CPU_ONLY, llama_server_bin)
    assert wrong.cached and wrong.ok and wrong.agrees is False
    assert any(d.startswith("target compute on Host") for d in wrong.disagreements), wrong.disagreements
    lines = plan_check_lines(req, CPU_ONLY, llama_server_bin)
    (line,) = [x for x in lines if x.disagrees]
    assert line.kind == "disagrees" and line.text.startswith("llama-server DISAGREES with this plan: ")
    assert "target compute" in line.text, lines


@pytest.mark.server
def test_a_cached_disagreement_reaches_the_tune_log(llama_server_bin, gemma3_270m, tmp_path, monkeypatch):
    """With the old compute formula patched back in, the server check of the target alone disagrees, and
    the sweep's plan notes (the tune log) carry that disagreement, read from the cache."""
    from tuner.calibration.pipeline.placement import cross_check_lines

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    CPU_ONLY = cpu_only_devices(llama_server_bin)
    monkeypatch.setattr(memory, "reserve_outputs", lambda n_tokens, n_batch, n_parallel, n_draft: n_tokens)
    req = MemoryRequest(target=load_model_spec(gemma3_270m), n_ctx=4096)
    assert server_cross_check(req, CPU_ONLY, llama_server_bin).agrees is False
    lines = cross_check_lines(gemma3_270m, CPU_ONLY, 4096, llama_server_bin)
    assert any(x.startswith("memory plan: llama-server DISAGREES") and "target compute" in x for x in lines), lines
    monkeypatch.undo()
    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home2"))
    assert cross_check_lines(gemma3_270m, CPU_ONLY, 4096, llama_server_bin) == []
