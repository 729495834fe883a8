"""Record the collapse that test_collapse_recorded.py replays (run by hand; not a test).

    python -m tests.telemetry.record_collapse [--seconds 60] [--burn-at 20]

Starts the real llama-server at its default thread count on the 12-block F16 target of the acceptance-dial
family (tests/synth.py), keeps it generating (64-token greedy requests, one after another), and once a second
keeps the ``llamacpp:`` lines of its ``/metrics`` and the load watcher's reading of other programs' CPU
(``tuner.hardware.LoadWatcher.latest_other_cores``). After ``--burn-at`` seconds the bounded burner of
tests/burner.py (detached: another program) keeps one core busy until the end. The profile's speed is the
mean generation speed of the requests finished before the burner started. Writes
tests/data/telemetry/collapse_default_threads.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from tests.burner import Burner
from tests.synth import make_family
from tuner.hardware import LoadWatcher
from tuner.server.config import ServerConfig
from tuner.server.discovery import find_server
from tuner.server.supervisor import Supervisor

OUT = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "collapse_default_threads.json"


def _keep(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("llamacpp:"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--burn-at", type=float, default=20.0)
    args = ap.parse_args()
    fam = make_family(Path(tempfile.mkdtemp(prefix="dw-collapse-")), n_embd=768, n_layers=12, draft_layers=2)
    sup = Supervisor(find_server(), liveness_timeout_s=None)
    sup.start(ServerConfig(model_path=fam.target, n_ctx=2048, n_parallel=1))
    sup.wait_ready(timeout_s=300)
    stop = threading.Event()
    idle: list[float] = []
    burning = threading.Event()

    def generate() -> None:
        with sup.client(timeout_s=600) as c:
            while not stop.is_set():
                t = c.completion("Once upon a time", 64, temperature=0.0, cache_prompt=False)["timings"]
                if not burning.is_set():
                    idle.append(float(t["predicted_per_second"]))

    worker = threading.Thread(target=generate, daemon=True)
    watcher = LoadWatcher(interval_s=1.0).start()
    samples, burner, t0 = [], None, time.monotonic()
    worker.start()
    try:
        with sup.client(timeout_s=30) as c:
            while (t := time.monotonic() - t0) < args.seconds:
                if burner is None and t >= args.burn_at:
                    burning.set()
                    burner = Burner(total_s=args.seconds, min_burst_s=args.seconds, max_burst_s=args.seconds).start()
                samples.append({"t_s": round(t, 3), "metrics": _keep(c.metrics_text()),
                                "other_cores": watcher.latest_other_cores(), "burner": burner is not None})
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - t)))
    finally:
        stop.set()
        if burner is not None:
            burner.stop()
        watcher.stop()
        sup.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"argv_threads": "default", "burn_at_s": args.burn_at,
                               "profile_tps": round(sum(idle) / len(idle), 2) if idle else None,
                               "samples": samples}, indent=1) + "\n")
    print(f"wrote {OUT}: {len(samples)} samples, profile {sum(idle) / max(len(idle), 1):.1f} tokens/s")


if __name__ == "__main__":
    main()
