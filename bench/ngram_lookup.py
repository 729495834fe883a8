"""n-gram settings the sweep does not vary, on code-editing traffic (issue 28's served-traffic row, its section 4).

    python -m bench.ngram_lookup [--server PATH] [--threads 1] [--n-predict 96] [--requests 10]

The sweep varies an n-gram type's draft length (``NGRAM_LENGTHS``: the server's default and 16) but never its
lookup length: how many of the last tokens must match earlier text before it drafts (ngram-simple's
``--spec-ngram-simple-size-n``, 12 by default; ngram-mod's ``--spec-ngram-mod-n-match``, 24: llama-server b11434,
common/arg.cpp). A rename changes one identifier every few tokens, and each change costs the lookup that many
tokens before it matches again, so a shorter lookup may draft more on such traffic.

All configurations below are served at once on the real Gemma 3 270M Q4_K_M (one thread each, one slot; the
requests go one at a time, so only one computes at a time) and each of ``--requests`` rename requests of
``bench/served_traffic.py`` (numbers 40 on, not the ones that bench captures or measures) is sent to every
configuration, the order rotating per request. Printed per configuration: generation tokens/s pooled over the
requests (Σ tokens ÷ Σ generation seconds, the ``timings`` of each answer), its ratio to the model alone and to
ngram-mod ``n_max`` 16 (the profile the built-in prompts tune to on this model), the range of the per-request
ratios to the model alone, and how many answers differ from the model alone's text. A measurement only: no
exit status but 0, nothing it prints decides anything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import add_server_arg, add_threads_arg, gemma_model, note_machine, private_home, server_binary
from bench.served_traffic import N_CTX, rename_request

FIRST_REQUEST = 40
REFERENCE = "ngram-mod 16"

CONFIGS: dict[str, dict[str, Any]] = {
    "alone": {"spec_type": "none"},
    "ngram-mod 16": {"spec_type": "ngram-mod", "n_max": 16},
    "ngram-mod 16, match 8": {"spec_type": "ngram-mod", "n_max": 16,
                              "extra_args": ("--spec-ngram-mod-n-match", "8")},
    "ngram-simple 16": {"spec_type": "ngram-simple", "n_max": 16},
    "ngram-simple 8": {"spec_type": "ngram-simple", "n_max": 8},
    "ngram-simple 32": {"spec_type": "ngram-simple", "n_max": 32},
    "ngram-simple 16, lookup 6": {"spec_type": "ngram-simple", "n_max": 16,
                                  "extra_args": ("--spec-ngram-simple-size-n", "6")},
    "ngram-simple 16, lookup 4": {"spec_type": "ngram-simple", "n_max": 16,
                                  "extra_args": ("--spec-ngram-simple-size-n", "4")},
    "ngram-simple 16, lookup 3": {"spec_type": "ngram-simple", "n_max": 16,
                                  "extra_args": ("--spec-ngram-simple-size-n", "3")},
}
"""Name → :class:`~tuner.server.config.ServerConfig` fields (with the model, context and threads added)."""


def _measure(binary: Any, model: Path, threads: int | None, n_predict: int, requests: int) -> dict[str, list]:
    """Serve every configuration at once and send each request to all; per configuration the list of
    ``(generated tokens, generation seconds, text)`` of each request, in request order."""
    from tuner.calibration.pairing import generated_tokens_and_s
    from tuner.server.config import ServerConfig
    from tuner.server.supervisor import Supervisor

    sups = {name: Supervisor(binary.path) for name in CONFIGS}
    out: dict[str, list] = {name: [] for name in CONFIGS}
    try:
        for name, fields in CONFIGS.items():
            cfg = ServerConfig(model_path=model, n_ctx=N_CTX, n_parallel=1, threads=threads, **fields)
            sups[name].start_and_wait(cfg, timeout_s=120)
        names = list(CONFIGS)
        for k in range(requests):
            prompt, _ = rename_request(FIRST_REQUEST + k)
            for name in names[k % len(names):] + names[:k % len(names)]:
                with sups[name].client() as client:
                    answer = client.completion(prompt, n_predict, timeout_s=300, temperature=0.0, cache_prompt=False)
                t = answer.get("timings") or {}
                tokens, secs = generated_tokens_and_s(t.get("predicted_n"), t.get("predicted_ms")) or (0.0, 0.0)
                out[name].append((tokens, secs, answer.get("content", "")))
    finally:
        for sup in sups.values():
            sup.stop()
    return out


def _report(runs: dict[str, list]) -> None:
    """Print the table of the module docstring."""
    tps = {name: sum(r[0] for r in rs) / max(sum(r[1] for r in rs), 1e-9) for name, rs in runs.items()}
    alone = runs["alone"]
    print(f"{'configuration':28} {'tokens/s':>9} {'/alone':>7} {'/' + REFERENCE:>15}  per request /alone  differ")
    for name, rs in runs.items():
        per = [(r[0] / max(r[1], 1e-9)) / (a[0] / max(a[1], 1e-9)) for r, a in zip(rs, alone, strict=True)]
        differ = sum(r[2] != a[2] for r, a in zip(rs, alone, strict=True))
        print(f"{name:28} {tps[name]:9.1f} {tps[name] / tps['alone']:6.2f}x {tps[name] / tps[REFERENCE]:14.2f}x"
              f"  {min(per):.2f}-{max(per):.2f}x{differ:12d}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arg(ap)
    add_threads_arg(ap)
    ap.add_argument("--n-predict", type=int, default=96, help="tokens per request")
    ap.add_argument("--requests", type=int, default=10, help="rename requests, each sent to every configuration")
    args = ap.parse_args(argv)
    model = gemma_model()
    assert model is not None
    private_home(Path(tempfile.mkdtemp(prefix="dw-ngram-lookup-")))
    binary = server_binary(args)
    note_machine("before")
    t0 = time.monotonic()
    runs = _measure(binary, model, args.threads, args.n_predict, args.requests)
    note_machine("after")
    print(f"\n{args.requests} rename requests, {args.n_predict} tokens each, greedy, {args.threads} thread(s); "
          f"{time.monotonic() - t0:.0f} s")
    _report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
