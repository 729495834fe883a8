"""Benchmark: fast header scan vs ``gguf.GGUFReader`` on one 300,000-token GGUF.

Writes a small Llama GGUF (n_embd 8) with a synthetic 300,000-token BPE vocabulary, then in
one run times, side by side:

1. in-process: ``tuner.catalog.scan.scan_file`` (header, classification, tokenizer fingerprint)
   against ``gguf.GGUFReader(path)`` (which decodes every token string);
2. whole command: ``draftwise scan FILE --json --no-cache`` as a new process (interpreter start,
   CLI imports and all) against the in-process ``GGUFReader`` time;
3. for reference, ``python -m tuner scan FILE --json --no-cache`` (the same handler, started
   without the console-script wrapper) and a bare ``python -c pass`` start on this machine;
4. ``check_compatible`` between the file and a copy whose token 7 differs (token-text rule on
   raw bytes; no goal, printed for information).

Goals (issue 2): in-process ratio >= 100x, whole command >= 50x. Prints the figures and exits 1
when a goal is missed.

Usage: ``python -m bench.scan_speed [--tokens N] [--repeat R] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, note_machine


def _time(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=300_000, help="vocabulary size (default 300000)")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions per measurement (median reported)")
    ap.add_argument("--keep", type=Path, default=None, help="write the GGUF here and keep it")
    args = ap.parse_args(argv)
    note_machine("before")

    from tests.synth import big_tokenizer, write_llama_gguf

    folder = args.keep or Path(tempfile.mkdtemp(prefix="dw-scan-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vocab{args.tokens}.gguf"
    if not path.exists():
        t0 = time.perf_counter()
        write_llama_gguf(path, n_embd=8, n_head=2, n_head_kv=1, n_layers=1, tokenizer=big_tokenizer(args.tokens))
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    import gguf

    from tuner.catalog.scan import scan_file

    m = scan_file(path)
    assert m.kind == "llm" and m.tokenizer and m.tokenizer.n_tokens == args.tokens, m
    reader_times = _time(lambda: gguf.GGUFReader(path), max(2, args.repeat // 2))
    scan_times = _time(lambda: scan_file(path), args.repeat)

    env = dict(os.environ)
    env["DRAFTWISE_HOME"] = str(folder / "home")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "tuner.cli", "scan", str(path), "--json", "--no-cache"]

    def run_cmd() -> None:
        r = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        if r.returncode != 0 or '"kind": "llm"' not in r.stdout:
            raise SystemExit(f"draftwise scan failed (rc {r.returncode}): {r.stderr[-2000:]}")

    cmd_times = _time(run_cmd, args.repeat)
    cat_cmd = [sys.executable, "-m", "tuner", "scan", str(path), "--json", "--no-cache"]
    cat_times = _time(lambda: subprocess.run(cat_cmd, env=env, cwd=REPO, capture_output=True, check=True), args.repeat)
    bare_times = _time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeat)

    from dataclasses import replace as _replace

    from tuner.catalog.compat import check_compatible

    other = folder / f"vocab{args.tokens}-t7.gguf"
    if not other.exists():
        tok = big_tokenizer(args.tokens)
        write_llama_gguf(other, n_embd=8, n_head=2, n_head_kv=1, n_layers=1, tokenizer=tok.with_token(7, "changed"))
    ma, mb = scan_file(path), scan_file(other)
    verdict = check_compatible(ma, mb)
    assert verdict.rule == "token-text" and "id 7" in verdict.message, verdict
    compat_times = _time(lambda: check_compatible(ma, mb), args.repeat)
    # identical texts but different fingerprints: forces the full byte comparison
    ma_other_fp = _replace(ma, tokenizer=_replace(ma.tokenizer, fingerprint="forced"))
    same_times = _time(lambda: check_compatible(ma, ma_other_fp), args.repeat)

    reader = statistics.median(reader_times)
    scan = statistics.median(scan_times)
    command = statistics.median(cmd_times)
    inproc_ratio = reader / scan
    cmd_ratio = reader / command
    print(f"GGUF: {args.tokens} tokens, {path.stat().st_size / 1e6:.1f} MB")
    print(f"gguf.GGUFReader (in-process)        median {reader * 1000:9.1f} ms  ({len(reader_times)} runs)")
    print(f"scan_file (in-process)              median {scan * 1000:9.1f} ms  ({len(scan_times)} runs)")
    print(f"'draftwise scan --json --no-cache'  median {command * 1000:9.1f} ms  (new process, {len(cmd_times)} runs)")
    cat = statistics.median(cat_times)
    bare = statistics.median(bare_times)
    print(f"'python -m tuner scan ...'           median {cat * 1000:9.1f} ms  (new process, reference)")
    print(f"'python -c pass'                    median {bare * 1000:9.1f} ms  (interpreter start, reference)")
    print(f"module-run command ratio   {reader / cat:8.1f}x   (reference)")
    print(f"check_compatible, token 7 differs   median {statistics.median(compat_times) * 1000:9.1f} ms")
    print(f"check_compatible, identical texts   median {statistics.median(same_times) * 1000:9.1f} ms  (byte comparison forced)")
    print(f"in-process ratio     {inproc_ratio:8.1f}x   (goal >= 100x)")
    print(f"whole-command ratio  {cmd_ratio:8.1f}x   (goal >= 50x)")
    ok = inproc_ratio >= 100 and cmd_ratio >= 50
    print("PASS" if ok else "FAIL")
    note_machine("after")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
