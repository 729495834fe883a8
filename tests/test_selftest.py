"""The doctor's self-test takes the users' path: a tiny *quantized* model whose matrices ggml repacks on
x86, committed under resources/selftest/ with the script that made it; the doctor loads it and reports
where its weights went (a CPU_REPACK buffer on this machine's AVX2 build)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "resources" / "selftest" / "selftest-q4_0.gguf"


def test_the_selftest_model_has_the_shapes_ggml_repacks_and_is_what_the_script_makes(tmp_path):
    """Q4_0 attention and output matrices that AMX and CPU_REPACK both take, 680-row FFN matrices only
    CPU_REPACK takes, nothing else repacked; the stories tokenizer (so it drafts for itself); small; and
    packaging/make_selftest_model.py writes exactly the committed bytes."""
    from tests.synth import stories_tokenizer
    from tuner.catalog.header import read_header
    from tuner.hardware.memory import extra_buffer_class, load_model_spec
    from tuner.server.selftest import selftest_model

    assert selftest_model() == MODEL and MODEL.stat().st_size < 2 * 2**20
    h = read_header(MODEL)
    classes = {}
    for t in h.tensors:
        kind = t.name.split(".")[-2]
        classes.setdefault(kind, set()).add((t.ggml_type, extra_buffer_class(t.ggml_type, t.shape, t.n_bytes, False)))
    amx_and_repack = {"attn_q", "attn_k", "attn_v", "attn_output", "output"}
    for kind in amx_and_repack:
        ((qtype, (flag, amx)),) = classes[kind]
        assert qtype == 2 and flag == "avx2" and amx >= 0, kind  # Q4_0, rows % 32, columns % 32
    for kind in ("ffn_gate", "ffn_up"):
        assert classes[kind] == {(2, ("avx2", -1))}, kind  # 680 rows: AMX refuses, CPU_REPACK takes
    assert classes["ffn_down"] == {(1, ("", -1))}  # F16 with 680 columns: AMX's F16 path refuses it too
    # what the plan counts: per block 4 attention matrices in both types, 2 FFN ones in CPU_REPACK only;
    # the output in both; the token embeddings (GET_ROWS) in neither
    spec = load_model_spec(MODEL)
    groups = {(layer, flag, amx >= 0) for layer, flag, amx, _, _ in spec.extra_buffer_weights}
    assert groups == {(-1, "avx2", True)} | {(i, "avx2", amx) for i in (0, 1) for amx in (True, False)}
    assert h.kv["general.file_type"] == 2 and h.kv["llama.block_count"] == 2
    assert tuple(h.kv["tokenizer.ggml.tokens"].texts()) == stories_tokenizer().tokens
    out = tmp_path / "again.gguf"
    subprocess.run([sys.executable, str(REPO / "packaging" / "make_selftest_model.py"), str(out)], check=True,
                   cwd=REPO, capture_output=True)
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(out) == digest(MODEL)


@pytest.mark.server
def test_doctor_runs_the_quantized_self_test_and_reads_its_load_log(llama_server_bin, tmp_path, monkeypatch,
                                                                    capsys):
    """``draftwise doctor`` on this machine: the self-test loads the quantized model as target and draft,
    speculation is active, its load log shows the repacked buffer (CPU_REPACK on an AVX2 build; AMX beside
    it on an AMX build), and no --no-repack is on the argv of a build that does not trap."""
    from tuner import cli
    from tuner.crosscheck.cpu_buffers import current_cpu_workaround
    from tuner.hardware.buffers import parse_cpu_build

    monkeypatch.setenv("DRAFTWISE_HOME", str(tmp_path / "home"))
    rc = cli.main(["doctor", "--json", "--server", str(llama_server_bin)])
    report = json.loads(capsys.readouterr().out)
    st = report["self_test"]
    assert rc == 0 and st["ok"], st
    assert Path(st["model"]) == MODEL and st["argv"].count(str(MODEL)) == 2  # target and draft
    build = parse_cpu_build(st["load_lines"])
    if "avx2" in build.build_flags and current_cpu_workaround(llama_server_bin) is None:  # else --no-repack
        assert "CPU_REPACK" in build.extra_types and "CPU_REPACK" in st["buffers"]
    if "amx_int8" in build.build_flags and current_cpu_workaround(llama_server_bin) is None:
        assert build.extra_types[0] == "AMX"
    cpu = report["devices"]["cpu_buffers"]
    assert cpu["source"] == "load log" and cpu["types"] == list(build.extra_types) or cpu["no_repack"]
    if current_cpu_workaround(llama_server_bin) is None:
        assert "--no-repack" not in st["argv"] and not cpu["no_repack"]
