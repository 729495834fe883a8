"""Does ``--cache-ram`` bound llama-server's RAM on a desktop? (issue 15)

llama-server b11434 keeps the prompt state of idle slots in a host-RAM prompt cache (``--cache-ram``,
default 8192 MiB; ``--cache-idle-slots`` on). Chat traffic with many different prompts fills it, so
the server's resident memory grows request by request up to that limit. This bench starts the real
server on the same GGUF side by side with three limits — off (0), Draftwise's desktop default
(``tuner.settings.DEFAULT_CACHE_RAM_MIB``) and b11434's default (no ``-cram``) — sends each the same
sequence of distinct long prompts (one slot, as speculation needs), and prints each server's RSS
growth, measured with the project's psutil adapter (``tuner.process.tree_usage``).

Usage::

    python -m bench.prompt_cache_ram                       # the real Gemma 3 270M (fetched into the test cache)
    python -m bench.prompt_cache_ram --model FILE.gguf --requests 40 --limit-mib 64 [--server PATH] [--threads 1]

Prints one JSON line; the ratios are growth ÷ growth of the server without a limit, in one run.

Measured on the 2-core build box (busy with other work; wall 307 s), ``--requests 20 --limit-mib 32``:
RSS growth 17.3 MiB with the cache off, 54.6 MiB with a 32 MiB limit, 209.2 MiB with b11434's default
(ratios 0.08 / 0.26 / 1.0): without a limit the server keeps about 10 MiB per distinct conversation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.common import add_server_arg, add_threads_arg, gemma_model, note_machine, server_binary
from tuner.process import tree_usage
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor
from tuner.settings import DEFAULT_CACHE_RAM_MIB

WORDS = ("river mountain lantern copper violet engine harbor meadow signal winter orchard canvas "
         "falcon ember quartz willow thunder pepper marble compass").split()


def prompt(i: int, n_words: int) -> str:
    """A distinct prompt per request (no shared prefix beyond the first word, so no cache reuse)."""
    return f"Story {i}: " + " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n_words))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="GGUF to serve (default: Gemma 3 270M)")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--words", type=int, default=300, help="words per prompt")
    ap.add_argument("--limit-mib", type=int, default=DEFAULT_CACHE_RAM_MIB,
                    help="the bounded configuration's --cache-ram (default: Draftwise's desktop default)")
    ap.add_argument("--ctx", type=int, default=2048)
    add_server_arg(ap)
    add_threads_arg(ap)
    args = ap.parse_args(argv)
    model = args.model or gemma_model()
    binary = server_binary(args)
    note_machine("before")
    configs = {"off (0)": 0, f"limit {args.limit_mib} MiB": args.limit_mib, "b11434 default (8192)": None}
    sups: dict[str, Supervisor] = {}
    try:
        for name, cram in configs.items():
            sup = Supervisor(binary)
            sup.start(ServerConfig(model_path=model, n_ctx=args.ctx, n_parallel=1, threads=args.threads,
                                   cache_ram_mib=cram))
            sups[name] = sup
        for sup in sups.values():
            sup.wait_ready(timeout_s=300)
        clients = {name: sup.client(timeout_s=600) for name, sup in sups.items()}
        rss0 = {name: tree_usage(sup.pid)[0] for name, sup in sups.items()}
        t0 = time.monotonic()
        for i in range(args.requests):
            for name, c in clients.items():  # same request to each server, interleaved
                c.completion(prompt(i, args.words), n_predict=8, temperature=0)
        wall = time.monotonic() - t0
        time.sleep(1.0)
        rss1 = {name: tree_usage(sup.pid)[0] for name, sup in sups.items()}
    finally:
        for sup in sups.values():
            sup.stop()
    growth = {name: (rss1[name] - rss0[name]) / 2**20 for name in sups}
    ref = growth["b11434 default (8192)"]
    print(json.dumps({
        "model": Path(model).name, "requests": args.requests, "words_per_prompt": args.words, "wall_s": round(wall, 1),
        "rss_start_mib": {k: round(v / 2**20, 1) for k, v in rss0.items()},
        "rss_growth_mib": {k: round(v, 1) for k, v in growth.items()},
        "growth_ratio_vs_default": {k: (round(v / ref, 2) if ref > 0 else None) for k, v in growth.items()},
    }))
    note_machine("after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
