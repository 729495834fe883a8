"""The doctor's speculation self-test: prove that speculative decoding happens on this build, in a few
seconds, with a tiny *quantized* model as both target and draft (``draft-simple``, ``n_max`` 4).

The model (``resources/selftest/selftest-q4_0.gguf``, made by packaging/make_selftest_model.py) is a
2-block Llama with the stories tokenizer whose Q4_0 matrices ggml copies into its extra CPU buffer types on
x86 (``AMX`` on a build with AMX kernels, ``CPU_REPACK`` on an AVX2 build), so the self-test runs the
repacked kernels a user's quantized model runs: a CPU that crashes in them fails here, and the supervisor's
``--no-repack`` retry records the workaround before the first tune. (The F32 demo model, stories260K, never
reaches those kernels.) ``draftwise doctor`` (tuner/cli/serve.py) runs it and prints the result.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tuner.server.argv import UnsupportedConfigError
from tuner.server.config import ServerConfig
from tuner.server.dialect import Dialect
from tuner.server.discovery import ServerBinary
from tuner.server.supervisor import ServerStartError, Supervisor

SELFTEST_PROMPT = "Once upon a time, there was a little girl named Lily."
"""The self-test's prompt (the model drafts for itself, so the draft agrees whatever it continues with)."""


def selftest_model() -> Path:
    """The self-test's quantized model, ``resources/selftest/selftest-q4_0.gguf`` (may be missing in a
    broken install: callers check ``is_file``)."""
    from tuner.resources import resource_path

    return resource_path("selftest", "selftest-q4_0.gguf")


def load_log_args(dialect: Dialect) -> tuple[str, ...]:
    """``("-lv", "4")`` where the build has ``-lv`` (libllama's load lines, the ``model buffer size`` ones
    among them, are TRACE = verbosity 4 in llama-server: common/log.cpp), else nothing (ik_llama.cpp has
    no ``-lv``)."""
    return ("-lv", "4") if dialect.has("-lv") else ()


def self_test(binary: ServerBinary, dialect: Dialect, model: Path | None = None,
              timeout_s: float = 60.0) -> dict[str, Any]:
    """Prove speculation happens on the repacked CPU kernels' path: :func:`selftest_model` as target and
    draft, ``draft-simple``, n_max 4, :func:`load_log_args` (the load lines name the buffers the weights
    went to).

    Returns a dict: ``ok`` (bool), ``model``, ``speculative`` (``/slots`` flag), ``draft_n``,
    ``draft_n_accepted``, ``acceptance_rate`` (0..1), ``gen_tokens_per_s``, ``seconds``, ``error``
    (a message when not ok), ``diagnosis_code``, ``evidence`` (log lines of a failed start), ``argv``
    (what ran, after the supervisor's workarounds and retries) and ``load_lines`` (the target's
    ``system_info`` and ``model buffer size`` lines, for ``tuner.hardware.buffers.parse_cpu_build``).
    Never raises: every failure is ``ok`` False with its ``error``.
    """
    model = model or selftest_model()
    out: dict[str, Any] = {"ok": False, "model": str(model), "speculative": None, "draft_n": None,
                           "draft_n_accepted": None, "acceptance_rate": None, "gen_tokens_per_s": None,
                           "seconds": None, "error": None, "diagnosis_code": None, "argv": None, "load_lines": []}
    t0 = time.monotonic()
    if not model.is_file():
        out["error"] = f"self-test model missing: {model}"
        return out
    cfg = ServerConfig(model_path=model, draft_path=model, spec_type="draft-simple", n_max=4, n_ctx=256,
                       n_parallel=1, extra_args=load_log_args(dialect))
    sup = Supervisor(binary, dialect)
    try:
        sup.start(cfg, startup_timeout_s=timeout_s)
        sup.wait_ready(timeout_s=timeout_s)
        with sup.client(timeout_s=timeout_s) as c:
            slots = c.slots()
            # ik_llama.cpp: no /slots speculative field; the supervisor's ready check read its start-up log
            out["speculative"] = (bool(slots) and all(bool(s.get("speculative")) for s in slots)
                                  if dialect.spec_on_slots else True)
            send = c.oai_completion if dialect.draft_counts_endpoint == "/v1/completions" else c.completion
            res = send(SELFTEST_PROMPT, 48, temperature=0.0, cache_prompt=False, timeout_s=timeout_s)
        t = res.get("timings", {})
        out["draft_n"] = int(t.get("draft_n", 0))
        out["draft_n_accepted"] = int(t.get("draft_n_accepted", 0))
        if out["draft_n"]:
            out["acceptance_rate"] = out["draft_n_accepted"] / out["draft_n"]
        out["gen_tokens_per_s"] = t.get("predicted_per_second")
        out["ok"] = bool(out["speculative"]) and out["draft_n"] > 0
        if not out["ok"]:
            out["error"] = ("speculation inactive: /slots speculative is false" if not out["speculative"]
                            else "no tokens were drafted (timings.draft_n is 0)")
    except UnsupportedConfigError as exc:
        out["error"] = str(exc)
    except ServerStartError as exc:
        out["error"] = exc.diagnosis.message
        out["diagnosis_code"] = exc.diagnosis.code
        out["evidence"] = list(exc.diagnosis.evidence[-10:])
    except Exception as exc:  # client errors: report, do not crash the doctor
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        sup.stop(grace_s=3.0)
        out["seconds"] = round(time.monotonic() - t0, 2)
        out["argv"] = list(sup.argv or [])
        out["load_lines"] = _load_lines(sup.log_path)
    return out


_LOAD_KEYS = ("system_info:", "model buffer size", "loading draft model")


def _load_lines(log_path: Path | None) -> list[str]:
    """The lines of the self-test's log that say where the weights went (empty without a log)."""
    if log_path is None:
        return []
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            return [ln.rstrip("\n") for ln in fh if any(k in ln for k in _LOAD_KEYS)]
    except OSError:
        return []


__all__ = ["SELFTEST_PROMPT", "load_log_args", "self_test", "selftest_model"]
