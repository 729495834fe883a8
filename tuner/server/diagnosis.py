"""Classify why a llama-server failed, from its exit code and log lines (pure).

Every rule quotes the log text llama.cpp prints (file/function in the rule's comment); see
/work/shared/reference/llama-server.md §6. :func:`diagnose` returns the first matching rule in
priority order, so the most specific cause wins (e.g. "draft failed to load" before "model load
failed", an out-of-memory line before the generic load failure).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: How many trailing log lines a Diagnosis keeps as evidence.
EVIDENCE_LINES = 20


@dataclass(frozen=True)
class Diagnosis:
    """Why a server did not become (or stay) ready.

    Fields:
        code: stable machine name, one of ``flag_removed``, ``flag_unknown``, ``bad_argument``,
            ``spec_type_unknown``, ``port_busy``, ``model_missing``, ``model_load_failed``,
            ``oom_weights``, ``oom_kv``, ``oom_compute``, ``oom``, ``draft_load_failed``,
            ``draft_incompatible``, ``mtp_missing``, ``speculation_inactive``, ``load_hang``,
            ``not_ours``, ``request_failed``, ``crashed``, ``exited``, ``cancelled``,
            ``not_executable`` (the binary could not be started at all).
        message: one plain-language line for people.
        evidence: the last log lines (and/or the HTTP answer) that support it.
        flag: the offending flag for flag errors (e.g. ``"--draft-max"``), else None.
        replacement: the flag to use instead when llama.cpp names one, else None.
        returncode: the child's exit status (negative = killed by that signal), None if alive.
    """

    code: str
    message: str
    evidence: tuple[str, ...] = ()
    flag: str | None = None
    replacement: str | None = None
    returncode: int | None = None


_OOM_LINE = re.compile(
    r"out of memory|cudaMalloc failed|ggml_vulkan: Device memory allocation of size \d+ failed|"
    r"failed to allocate buffer of size|unable to allocate .* buffer|"
    r"failed to allocate buffer for kv cache|failed to allocate compute|"
    r"kIOGPUCommandBufferCallbackErrorOutOfMemory|ggml_metal.*(?:failed to allocate|error: .*memory)|"
    r"std::bad_alloc|ErrorOutOfDeviceMemory|hipMalloc failed",
    re.IGNORECASE,
)


def _tail(lines: Sequence[str], n: int = EVIDENCE_LINES) -> tuple[str, ...]:
    return tuple(line.rstrip("\n") for line in lines[-n:])


def _find(lines: Sequence[str], pattern: str | re.Pattern[str]) -> re.Match[str] | None:
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    for line in lines:
        m = rx.search(line)
        if m:
            return m
    return None


def _matching(lines: Sequence[str], pattern: str | re.Pattern[str], n: int = 6) -> tuple[str, ...]:
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return tuple(line.rstrip("\n") for line in lines if rx.search(line))[-n:]


def _evidence(lines: Sequence[str], pattern: str | re.Pattern[str] | None = None) -> tuple[str, ...]:
    """Matching lines older than the tail, then the last lines (oldest first)."""
    tail = _tail(lines)
    first = _matching(lines[: max(0, len(lines) - len(tail))], pattern) if pattern is not None else ()
    return first + tail


def diagnose(returncode: int | None, log_lines: Iterable[str]) -> Diagnosis:
    """Classify a failed start or a crash.

    Args:
        returncode: the exit status (negative: killed by that signal), or None if the process
            is still running (then only log-visible non-fatal causes are reported).
        log_lines: the server's stderr/stdout lines, oldest first.

    Returns:
        The most specific :class:`Diagnosis`; ``exited``/``crashed`` when nothing matched.
    """
    lines = [str(line).rstrip("\n") for line in log_lines]

    # removed flag: common/arg.cpp, handler of removed flags → "the argument has been removed. <hint>"
    m = _find(lines, r'error while handling (?:argument|environment variable) "([^"]+)": the argument has been removed\.?\s*(.*)')
    if m:
        flag, hint = m.group(1), m.group(2).strip()
        rep = re.search(r"use (?:the respective )?(--?[\w*-]+)", hint)
        replacement = rep.group(1) if rep else None
        what = "environment variable" if "environment variable" in m.group(0) else "flag"
        msg = f"{what} {flag} was removed from this llama-server build"
        if replacement:
            msg = f"flag removed: {flag} no longer exists in this llama-server build, use {replacement}"
            if hint and hint != f"use {replacement}":
                msg += f" (llama.cpp says: {hint})"
        return Diagnosis("flag_removed", msg, _evidence(lines, "removed"), flag, replacement, returncode)

    # unknown flag: common/arg.cpp common_params_parse_ex → "error: invalid argument: <flag>"
    m = _find(lines, r"error: invalid argument: (\S+)")
    if m:
        flag = m.group(1)
        return Diagnosis("flag_unknown", f"unknown flag {flag}: this llama-server build does not accept it",
                         _evidence(lines, "invalid argument"), flag, None, returncode)

    # unknown --spec-type value: common/speculative.cpp common_speculative_types_from_names
    m = _find(lines, r"unknown speculative type: (\S+)")
    if m:
        return Diagnosis("spec_type_unknown",
                         f"speculation type {m.group(1)!r} is not known to this llama-server build (--spec-type)",
                         _evidence(lines, "unknown speculative type"), "--spec-type", None, returncode)

    # port busy: tools/server/server-http.cpp start() → "couldn't bind HTTP server socket"
    m = _find(lines, r"couldn't bind HTTP server socket(?:, hostname: (\S+), port: (-?\d+))?")
    if m:
        if m.group(2) is None:
            message = "port busy: another process already listens on the requested port"
        elif 1 <= int(m.group(2)) <= 65535:
            message = f"port busy: another process already listens on {m.group(1)}:{m.group(2)}"
        else:
            message = f"cannot listen on {m.group(1)}:{m.group(2)}: not a TCP port (1-65535)"
        return Diagnosis("port_busy", message,
                         _evidence(lines, "couldn't bind"), "--port", None, returncode)

    # MTP requested on a model without MTP layers: src/llama-context.cpp llama_init_from_model
    if _find(lines, r"context type MTP requested but model doesn't contain MTP layers"):
        return Diagnosis("mtp_missing",
                         "draft-mtp requested, but the target model has no MTP layers (nextn_predict_layers)",
                         _evidence(lines, "MTP"), "--spec-type", None, returncode)

    # draft model failed to load: common/speculative.cpp common_speculative_init_result,
    # tools/server/server-context.cpp load_model
    m = _find(lines, r"failed to load draft model(?:, '([^']*)')?")
    if m:
        oom = _find(lines, _OOM_LINE)
        msg = "the draft model failed to load" + (f" ({m.group(1)})" if m.group(1) else "")
        msg += " (out of memory)" if oom else ""
        missing = _find(lines, r"failed to open GGUF file|No such file")
        if missing and not oom:
            msg += ": file missing or unreadable"
        return Diagnosis("draft_load_failed", msg, _evidence(lines, r"draft|GGUF|alloc"), "--spec-draft-model",
                         None, returncode)
    if _find(lines, r"failed to create MTP context") and returncode not in (None, 0):
        oom = _find(lines, _OOM_LINE)
        msg = "the draft/MTP context could not be created" + (" (out of memory)" if oom else "")
        return Diagnosis("draft_load_failed", msg, _evidence(lines, r"MTP|alloc|memory"), None, None, returncode)

    # out of memory, most specific first
    if _find(lines, r"failed to allocate buffer for kv cache|failed to initialize the context: .*kv cache"):
        return Diagnosis("oom_kv", "out of memory for the KV cache: lower the context size (-c) or quantize the KV cache",
                         _evidence(lines, _OOM_LINE), None, None, returncode)
    if _find(lines, r"failed to allocate compute.*buffers?|compute buffer.*failed"):
        return Diagnosis("oom_compute", "out of memory for the compute buffers: lower -ngl, the batch size or the context",
                         _evidence(lines, _OOM_LINE), None, None, returncode)
    if _find(lines, r"error loading model: unable to allocate .* buffer|unable to allocate \S+ buffer"):
        return Diagnosis("oom_weights", "out of memory loading the model weights: offload fewer layers (-ngl)",
                         _evidence(lines, _OOM_LINE), None, None, returncode)
    if _find(lines, _OOM_LINE):
        return Diagnosis("oom", "out of memory (device or host)", _evidence(lines, _OOM_LINE), None, None, returncode)

    # model file missing / corrupt: ggml/src/gguf.cpp gguf_init_from_file, src/llama.cpp llama_model_load
    m = _find(lines, r"failed to open GGUF file '([^']*)'(?: \(([^)]*)\))?")
    if m:
        why = f" ({m.group(2)})" if m.group(2) else ""
        return Diagnosis("model_missing", f"model file missing or unreadable: {m.group(1)}{why}",
                         _evidence(lines, r"GGUF|load"), "-m", None, returncode)
    m = _find(lines, r"error loading model: (.*)|failed to load model|exiting due to model loading error")
    if m:
        why = m.group(1) if m.lastindex and m.group(1) else "see log"
        return Diagnosis("model_load_failed", f"the model failed to load (corrupt or unsupported file?): {why}",
                         _evidence(lines, r"error|failed"), "-m", None, returncode)

    # other argument errors: common/arg.cpp "error while handling argument"
    m = _find(lines, r'error while handling (?:argument|environment variable) "([^"]+)": (.*)')
    if m:
        return Diagnosis("bad_argument", f"bad value for {m.group(1)}: {m.group(2).strip()}",
                         _evidence(lines, "error while handling"), m.group(1), None, returncode)

    # incompatible draft (server keeps running without speculation):
    # server-context.cpp load_model "failed to initialize speculative decoding context"
    if _find(lines, r"vocabs are not compatible|vocab type must match|bos tokens must match|eos tokens must match"):
        return Diagnosis("draft_incompatible",
                         "the draft model's vocabulary is not compatible with the target: speculation is off",
                         _evidence(lines, r"vocab|speculative|tokens must match"), "--spec-draft-model", None,
                         returncode)

    if returncode is None:
        return Diagnosis("exited", "no failure found in the log", _tail(lines), None, None, None)
    if returncode < 0:
        return Diagnosis("crashed", f"llama-server was killed by signal {-returncode}", _tail(lines), None, None,
                         returncode)
    if returncode == 0:
        return Diagnosis("exited", "llama-server exited (status 0)", _tail(lines), None, None, returncode)
    return Diagnosis("exited", f"llama-server exited with status {returncode}", _tail(lines), None, None, returncode)


def speculation_reason(log_lines: Iterable[str]) -> str:
    """Why speculation is inactive on a running server, from its log (best effort).

    Reads the non-fatal lines of server-context.cpp ``load_model`` ("failed to initialize
    speculative decoding context: <msg>", "speculative decoding not supported by this context")
    and the vocab-check warnings of common/speculative.cpp ``common_speculative_are_compatible``.
    """
    lines = [str(line) for line in log_lines]
    for pat in (r"(draft model (?:vocab type|bos tokens|eos tokens) must match[^\n]*)",
                r"(the target and draft vocabs are not compatible)",
                r"failed to initialize speculative decoding context: (.*)",
                r"(speculative decoding not supported by this context)"):
        m = _find(lines, pat)
        if m:
            return m.group(1).strip()
    return "no speculator was built (no reason in the log; is the draft/type supported by this model?)"


_IK_SPEC_INIT = re.compile(r"\bspeculative decoding context initialized\s*$")


def speculators_initialized(log_lines: Iterable[str]) -> int:
    """How many slots of an ik_llama.cpp server built a speculator, from its log.

    ik_llama.cpp has no ``/slots[].speculative``; ``server_context::init``
    (examples/server/server-context.cpp) logs ``speculative decoding context initialized`` for each slot
    whose ``common_speculative_init`` returned a speculator (also for ``-mtp``) and ``... not initialized``
    otherwise. Returns the count of the former (0 when none).
    """
    return sum(1 for line in log_lines if _IK_SPEC_INIT.search(str(line)))


def load_hang(timeout_s: float, log_lines: Iterable[str], returncode: int | None = None) -> Diagnosis:
    """The diagnosis for a server still not ready after ``timeout_s`` seconds."""
    lines = [str(line) for line in log_lines]
    return Diagnosis("load_hang", f"load hang: llama-server was not ready after {timeout_s:.0f} s",
                     _tail(lines), None, None, returncode)
