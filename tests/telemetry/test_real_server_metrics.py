"""Telemetry against a real llama-server: acceptance from /metrics counter deltas must equal the
acceptance in the responses' ``timings`` (draft_n_accepted ÷ draft_n)."""

from __future__ import annotations

import time

import pytest

from tuner.process import tree_usage
from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor
from tuner.telemetry.samplers import MetricsSampler, ProcessSampler, ProcessUsage

pytestmark = [pytest.mark.server, pytest.mark.timeout(180)]


def test_metrics_deltas_match_timings(stories260k_session, llama_server_bin):
    cfg = ServerConfig(
        model_path=stories260k_session,
        draft_path=stories260k_session,  # the model drafts for itself: high, but measured, acceptance
        spec_type="draft-simple",
        n_max=4,
        n_ctx=256,
        threads=1,
    )
    sup = Supervisor(llama_server_bin)
    try:
        sup.start(cfg)
        sup.wait_ready(timeout_s=120)
        client = sup.client()
        sampler = MetricsSampler(client.metrics_text)
        proc = ProcessSampler(lambda: (lambda u: ProcessUsage(*u) if u else None)(tree_usage(sup.pid)))
        t0 = time.monotonic()
        sampler.sample(t0)
        proc.sample(t0)
        drafted = accepted = predicted = 0
        for i, prompt in enumerate(("Once upon a time", "The little dog", "Tom and Lily went")):
            out = client.completion(prompt, n_predict=48, temperature=0, cache_prompt=False, seed=i)
            tm = out["timings"]
            drafted += tm.get("draft_n", 0)
            accepted += tm.get("draft_n_accepted", 0)
            predicted += tm["predicted_n"]
        t1 = time.monotonic()
        rates = sampler.sample(t1)
        usage = proc.sample(t1)
    finally:
        sup.stop()
    assert drafted > 0, "the server never drafted"
    assert rates.draft_tokens == drafted
    assert rates.accepted_tokens == accepted
    assert rates.acceptance_rate == pytest.approx(accepted / drafted)
    # per position i: steps that accepted ≥ i+1 drafted tokens, so they sum to the accepted tokens
    assert len(rates.accepted_per_pos) == 4 and sum(rates.accepted_per_pos) == accepted
    assert rates.drafts is not None and 0 < rates.drafts <= drafted
    assert rates.gen_tokens_per_s is not None and rates.gen_tokens_per_s > 0
    # throughput over wall time can never exceed the speed while generating
    assert rates.throughput_tokens_per_s <= rates.gen_tokens_per_s
    assert rates.requests_processing == 0
    assert usage.rss_bytes and usage.rss_bytes > 1_000_000
    assert usage.cpu_percent is not None and usage.cpu_percent > 0
