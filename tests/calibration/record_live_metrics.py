"""Record the ``/metrics`` texts that test_advice.py replays (run by hand; not a test).

    python -m tests.calibration.record_live_metrics

Starts the real llama-server on a small acceptance-dial family (tests/synth.py: 256 wide, 6 blocks) twice,
with the good draft and with the unrelated draft, each at ``--spec-draft-n-max 8`` and ``p_min`` 0, and once
without a draft (the baseline tokens/s); sends the same greedy requests to each and keeps the ``llamacpp:``
lines of ``/metrics`` before and after, with each request's ``timings``. Writes
tests/data/telemetry/live_advice.json.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.synth import make_family
from tuner.server.config import ServerConfig
from tuner.server.discovery import find_server
from tuner.server.supervisor import Supervisor

OUT = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "live_advice.json"
PROMPTS = ("Once upon a time", "The little dog", "Tom and Lily went", "One day a girl", "The sun was",
           "A big bird", "Sam had a", "In the park", "The cat sat", "Mom said", "They played", "Ben saw a")


def _keep(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("llamacpp:"))


def _run(cfg: ServerConfig) -> dict:
    sup = Supervisor(find_server(), liveness_timeout_s=None)
    sup.start(cfg)
    try:
        sup.wait_ready(timeout_s=300)
        with sup.client(timeout_s=600) as c:
            before = _keep(c.metrics_text())
            timings = [c.completion(p, 64, temperature=0.0, cache_prompt=False, seed=0)["timings"] for p in PROMPTS]
            after = _keep(c.metrics_text())
    finally:
        sup.stop()
    return {"before": before, "after": after,
            "timings": [{k: t.get(k) for k in ("predicted_n", "predicted_ms", "draft_n", "draft_n_accepted")}
                        for t in timings]}


def main() -> None:
    fam = make_family(Path(tempfile.mkdtemp(prefix="dw-live-")), n_embd=256, n_layers=6, draft_layers=2)
    common = dict(model_path=fam.target, n_ctx=512, n_parallel=1, threads=1)
    runs = {"baseline": _run(ServerConfig(**common))}
    for name, draft in (("good", fam.good_draft), ("unrelated", fam.unrelated_draft)):
        runs[name] = _run(ServerConfig(**common, draft_path=draft, spec_type="draft-simple", n_max=8, p_min=0.0))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"family": "make_family(n_embd=256, n_layers=6, draft_layers=2)", "n_max": 8,
                               "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
