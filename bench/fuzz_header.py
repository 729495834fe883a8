"""Fuzz the GGUF header reader longer than the suite does, and measure its memory on hostile files.

1. Seeded mutations (the suite's mutator, tests/catalog/test_hostile.py ``_mutate``) of the real
   stories260K, a generated Llama GGUF and, when present, the real Gemma 3 270M header, for
   ``--seconds`` per seed over ``--seeds`` seeds: every failure must be ``GGUFError`` and
   ``scan_file`` must return a row. Counts by outcome and by reason are printed.
2. Peak RSS growth of a fresh interpreter reading each hostile file (2 GiB sparse files whose
   lengths claim most of the file, a 64 MiB string claim, a 4M-entry string array), against the
   same probe on the real stories260K as the reference: ratios side by side in one run.

Exit 1 when any non-GGUFError escaped or an RSS growth exceeds ``RSS_BOUND_KIB`` (48 MiB).

Usage: ``python -m bench.fuzz_header [--seconds 20] [--seeds 5]``
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.common import gemma_model, note_machine, stories_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="fuzz seconds per seed")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)

    from tests.catalog.test_hostile import RSS_BOUND_KIB, _head, _kv_str_array, _mutate, _rss_probe, _s
    from tests.synth import write_llama_gguf
    from tuner.catalog.header import GGUFError, read_header
    from tuner.catalog.scan import classify_header, scan_file

    note_machine("before")
    stories = stories_model()
    gemma = gemma_model(fetch=False)  # its header too, when the test cache holds it
    failed = False
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        sources = [stories, write_llama_gguf(tmp / "synth.gguf")]
        bases = []
        for src in sources:  # the header and a little tensor data: fast to write
            end = read_header(src).data_offset
            with open(src, "rb") as fh:
                bases.append((fh.read(end + 4096), end))
        if gemma is not None:
            h = read_header(gemma)
            with open(gemma, "rb") as fh:
                bases.append((fh.read(h.data_offset + 4096), h.data_offset))
        p = tmp / "mutant.gguf"
        reasons: collections.Counter[str] = collections.Counter()
        cases = ok = errors = 0
        escaped: list[str] = []
        t_all = time.monotonic()
        for seed in range(1, args.seeds + 1):
            rng = random.Random(seed)
            t_end = time.monotonic() + args.seconds
            while time.monotonic() < t_end:
                # the Gemma header (6 MB, 262,144 tokens) is slow to write and walk: 1 case in 10
                data, end = bases[-1] if len(bases) > 2 and rng.random() < 0.1 else rng.choice(bases[:2])
                mutant = _mutate(rng, data, end)
                if rng.random() < 0.3:
                    mutant = _mutate(rng, mutant, end)
                p.write_bytes(mutant)
                cases += 1
                try:
                    hh = read_header(p, check_data=rng.random() < 0.3)
                    classify_header(hh)
                    ok += 1
                except GGUFError as exc:
                    errors += 1
                    reasons[re.sub(r"\d+", "N", exc.reason)[:70]] += 1
                except Exception as exc:  # noqa: BLE001 - the contract under test
                    escaped.append(f"seed {seed}: {type(exc).__name__}: {exc}")
                try:
                    scan_file(p)
                except Exception as exc:  # noqa: BLE001
                    escaped.append(f"seed {seed} scan_file: {type(exc).__name__}: {exc}")
        took = time.monotonic() - t_all
        print(f"fuzz: {cases:,} mutated headers on {args.seeds} seeds in {took:.0f} s "
              f"({cases / took:.0f}/s): {ok:,} parsed, {errors:,} GGUFError, {len(escaped)} other exceptions")
        for reason, n in reasons.most_common(12):
            print(f"  {n:7,}  {reason}")
        for line in escaped[:10]:
            print(f"  ESCAPED {line}")
        failed |= bool(escaped)

        import struct

        size = 2 << 30
        files = {}
        f = tmp / "value.gguf"
        with open(f, "wb") as fh:
            fh.write(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + struct.pack("<Q", size - 200))
            fh.truncate(size)
        files["2 GiB sparse, string value claims 2 GiB"] = f
        f = tmp / "array.gguf"
        with open(f, "wb") as fh:
            fh.write(_head(0, 1) + _kv_str_array("tokenizer.ggml.tokens", [(1, b"a"), (size - 400, b"")]))
            fh.truncate(size)
        files["2 GiB sparse, string-array element claims 2 GiB"] = f
        f = tmp / "64m.gguf"
        with open(f, "wb") as fh:
            fh.write(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + struct.pack("<Q", 64 << 20))
            fh.truncate(70 << 20)
        files["70 MiB file, string claims 64 MiB"] = f
        f = tmp / "count.gguf"
        with open(f, "wb") as fh:
            fh.write(_head(0, 1) + _s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<I", 8)
                     + struct.pack("<Q", 2**22 + 1))
            fh.truncate(size)
        files["2 GiB sparse, 4M-entry string array"] = f
        f = tmp / "legal.gguf"
        f.write_bytes(_head(0, 1) + _s("general.name") + struct.pack("<I", 8) + _s(b"z" * (12 << 20)))
        ref = _rss_probe(f)
        print(f"\nPeak RSS growth of one read + scan in a fresh interpreter (reference: a legal 12 MiB "
              f"string, read in full: {ref['grow_kib'] / 1024:.1f} MiB, {ref['seconds']:.2f} s; "
              f"stories260K: {_rss_probe(stories)['grow_kib'] / 1024:.1f} MiB)")
        for name, path in files.items():
            got = _rss_probe(path)
            ratio = got["grow_kib"] / max(ref["grow_kib"], 1)
            bad = got["grow_kib"] > RSS_BOUND_KIB
            failed |= bad
            print(f"  {name:50s} {got['grow_kib'] / 1024:6.1f} MiB ({ratio:4.1f}x reference) "
                  f"{got['seconds']:5.2f} s  {got['out'][:60]}{'  OVER BOUND' if bad else ''}")
    note_machine("after")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
