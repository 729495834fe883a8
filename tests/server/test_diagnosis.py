"""Diagnosis of exit codes and logs, on the wordings llama.cpp prints."""

from __future__ import annotations

import pytest

from tuner.server.diagnosis import diagnose, speculation_reason, speculators_initialized

CASES = [
    (1, ['error while handling argument "--draft-max": the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max', "", "usage:"],
     "flag_removed"),
    (1, ["error: invalid argument: --spec-draft-cpu-range-batch"], "flag_unknown"),
    (1, ["E srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
         "E srv  llama_server: exiting due to HTTP server error"], "port_busy"),
    (1, ["E gguf_init_from_file: failed to open GGUF file '/x/missing.gguf' (No such file or directory)",
         "llama_model_load: error loading model: llama_model_loader: failed to load model from /x/missing.gguf",
         "E srv    load_model: failed to load model, '/x/missing.gguf'"], "model_missing"),
    (1, ["llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' data is not within the file bounds",
         "E srv  llama_server: exiting due to model loading error"], "model_load_failed"),
    (1, ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory",
         "llama_model_load: error loading model: unable to allocate CUDA0 buffer"], "oom_weights"),
    (1, ["ggml_vulkan: Device memory allocation of size 4294967296 failed.",
         "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache"], "oom_kv"),
    (1, ["ggml_metal_graph_compute: command buffer 0 failed with status 5",
         "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"], "oom"),
    (1, ["ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 123456789012",
         "llama_init_from_model: failed to allocate compute pp buffers"], "oom_compute"),
    (1, ["I common_speculative_init_result: loading draft model '/x/d.gguf'",
         "E common_speculative_init_result: failed to load draft model, '/x/d.gguf'",
         "E srv    load_model: failed to load draft model"], "draft_load_failed"),
    (1, ["W llama_init_from_model: context type MTP requested but model doesn't contain MTP layers",
         "E srv    load_model: failed to create MTP context"], "mtp_missing"),
    (None, ["E spec   common_speculative_are_compatible: draft model vocab type must match target model to use speculation",
            "E srv    load_model: failed to initialize speculative decoding context: draft model vocab type must match target model to use speculation"],
     "draft_incompatible"),
    (1, ["unknown speculative type: draft-bogus"], "spec_type_unknown"),
    (-9, ["I srv  llama_server: listening on http://127.0.0.1:1"], "killed"),
    (-15, ["I srv  llama_server: listening on http://127.0.0.1:1"], "crashed"),
    (3, ["nothing useful"], "exited"),
]


@pytest.mark.parametrize("rc,lines,code", CASES, ids=[c[2] for c in CASES])
def test_codes(rc, lines, code) -> None:
    d = diagnose(rc, lines)
    assert d.code == code, d
    assert d.message and "\n" not in d.message
    assert d.evidence and d.evidence[-1] == lines[-1].rstrip("\n")
    assert d.returncode == rc


def test_removed_flag_names_replacement() -> None:
    d = diagnose(1, [CASES[0][1][0]])
    assert d.flag == "--draft-max" and d.replacement == "--spec-draft-n-max"
    assert "flag removed" in d.message and "use --spec-draft-n-max" in d.message


def test_missing_model_names_the_file() -> None:
    d = diagnose(1, CASES[3][1])
    assert d.message == "model file missing or unreadable: /x/missing.gguf (No such file or directory)"


def test_removed_env_variable() -> None:
    d = diagnose(1, ['error while handling environment variable "LLAMA_ARG_DRAFT_MAX": the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max'])
    assert d.code == "flag_removed" and d.flag == "LLAMA_ARG_DRAFT_MAX"


def test_speculation_reason() -> None:
    assert "vocab type must match" in speculation_reason(CASES[11][1])
    assert "no speculator" in speculation_reason(["I srv listening"])


@pytest.mark.parametrize(
    "line, expected",
    [
        ("E srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
         "port busy: another process already listens on 127.0.0.1:8080"),
        ("E srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: -1",
         "cannot listen on 127.0.0.1:-1: not a TCP port (1-65535)"),
        ("E srv    start: couldn't bind HTTP server socket", "port busy: another process already listens on the requested port"),
    ],
)
def test_port_busy_message_is_a_whole_sentence(line: str, expected: str) -> None:
    d = diagnose(1, [line, "E srv  llama_server: exiting due to HTTP server error"])
    assert d.code == "port_busy" and d.message == expected and d.flag == "--port"


def test_ik_speculators_initialized_counts_only_built_ones() -> None:
    # lines as ik_llama.cpp's llama-server logs them (server_context::init), one per slot
    lines = ["slot         init: id  0 | task -1 | speculative decoding context initialized",
             "slot         init: id  1 | task -1 | speculative decoding context not initialized",
             "MTP enabled via flag, but model has 0 NextN layers. Disabling speculative."]
    assert speculators_initialized(lines) == 1
    assert speculators_initialized(lines[1:]) == 0
