"""The served workload against the real llama-server (CPU): chat-shaped requests for a GGUF with a chat
template, served sampling with the greedy lossless pass beside it, long-context requests sized to the
served context, multi-turn prompts, and the context size of ``tune`` + ``serve --models`` on the real
Gemma 3 270M.

Models are kept tiny (a 128-wide generated family, stories260K) and the served contexts small, so
each test runs in seconds; the Gemma test uses a one-prompt, short sweep.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import measure_candidate
from tuner.calibration.pipeline.launchers import supervisor_launch_fn
from tuner.calibration.prompts import Prompt, load_prompts
from tuner.calibration.sampling import GREEDY, Sampling
from tuner.calibration.workload import LongContextPlan, SweepMemory, Workload, long_context_prompts
from tuner.catalog.header import has_chat_template
from tuner.server.dialect import probe_dialect
from tuner.server.discovery import find_named_server
from tuner.server.supervisor import Supervisor

from .conftest import TUNE_THREADS

pytestmark = [pytest.mark.server]

REPO = Path(__file__).resolve().parents[2]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SHORT = [(0, Prompt("Once upon a time, there was a little girl named Lily.", "creative")),
         (1, Prompt("The cat sat on the mat and looked at the", "chat"))]


@pytest.fixture(scope="module")
def chat_family(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small acceptance-dial pair (target 4 blocks, draft = its first 2) whose GGUFs carry a
    ``tokenizer.chat_template``."""
    d = tmp_path_factory.mktemp("chat-family")
    kv = {"tokenizer.chat_template": CHAT_TEMPLATE}
    common = dict(n_embd=128, n_head=4, n_head_kv=2, dtype="f32", extra_kv=kv)
    target = write_llama_gguf(d / "target.gguf", n_layers=4, eps=0.05, keep_blocks=2, seed=3,
                              general_name="chat-target", **common)
    draft = write_llama_gguf(d / "draft.gguf", n_layers=2, seed=3, general_name="chat-draft", **common)
    return target, draft


def _launcher(server: Path, target: Path, workload: Workload):
    binary = find_named_server(server)
    sup = Supervisor(binary, probe_dialect(binary.path))
    fn = supervisor_launch_fn(sup, target, workload.n_ctx or 1024, TUNE_THREADS, lambda *a, **k: None, 60.0)
    return fn, sup


def _draft(draft: Path, n_max: int = 4) -> Candidate:
    return Candidate(spec_type="draft-simple", draft_path=str(draft), n_max=n_max, p_min=0.0)


def test_a_chat_model_goes_through_chat_completions_and_its_draft_n_is_read_there(chat_family, llama_server_bin,
                                                                                    stories260k_session):
    target, draft = chat_family
    assert has_chat_template(target) and not has_chat_template(stories260k_session)
    cancel = threading.Event()
    chat = Workload(chat=True, sampling=GREEDY, n_ctx=512)
    fn, _ = _launcher(llama_server_bin, target, chat)
    calls: list[str] = []

    class Spy:
        """The real client, recording which endpoint method each request used."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            attr = getattr(self.inner, name)
            if name in ("chat", "completion"):
                def call(*a, **k):
                    calls.append(name)
                    return attr(*a, **k)
                return call
            return attr

    def keep_log(c, ev):
        la = fn(c, ev)
        la.client = Spy(la.client)
        return la

    m = measure_candidate(keep_log, _draft(draft), SHORT, [0], 24, cancel, workload=chat)
    assert m.ok, m.error
    assert all(s.endpoint == "/v1/chat/completions" for s in m.samples)
    assert m.draft_n > 0 and all(s.draft_n for s in m.samples), "draft_n not read from the chat response"
    assert m.acceptance is not None and 0 < m.acceptance <= 1
    # The server really answered chat requests, and applied the template: the same text costs more
    # prompt tokens as a chat turn (role markers) than as a raw completion.
    assert calls and set(calls) == {"chat"}, calls  # warm-up and measured requests: POST /v1/chat/completions
    raw = Workload(chat=False, sampling=GREEDY, n_ctx=512)
    fn2, _ = _launcher(llama_server_bin, target, raw)
    m2 = measure_candidate(fn2, _draft(draft), SHORT, [0], 24, cancel, workload=raw)
    assert m2.ok and all(s.endpoint == "/completion" for s in m2.samples)
    for a, b in zip(m.samples, m2.samples):
        assert a.prompt_n > b.prompt_n, (a.prompt_n, b.prompt_n)


def test_sampled_acceptance_is_the_sampled_one_and_the_greedy_lossless_pass_still_runs(chat_family, llama_server_bin):
    target, draft = chat_family
    cancel = threading.Event()
    hot = Workload(chat=False, sampling=Sampling(temperature=0.8), n_ctx=512, greedy_check_prompts=2,
                   greedy_check_n_predict=24)
    fn, _ = _launcher(llama_server_bin, target, hot)
    memory = SweepMemory()  # one sweep's: the baseline's greedy outputs, the server's sampling defaults
    base = measure_candidate(fn, Candidate(), SHORT, [0, 1], 32, cancel, workload=hot, memory=memory)
    assert base.ok, base.error
    assert set(memory.reference.outputs) == {0, 1}, "the baseline's greedy pass did not record its outputs"
    assert memory.server_sampling.get("temperature") == pytest.approx(0.8)
    again = measure_candidate(fn, Candidate(), SHORT, [0], 32, cancel, workload=hot, memory=memory)
    # a fixed seed per (prompt, repetition): the sampled request is the same request in every launch
    assert [s.content for s in again.samples] == [s.content for s in base.samples if s.repetition == 0]

    m = measure_candidate(fn, _draft(draft), SHORT, [0, 1], 32, cancel, workload=hot, memory=memory)
    assert m.ok, m.error
    sampled = sum(s.draft_n_accepted or 0 for s in m.samples) / sum(s.draft_n or 0 for s in m.samples)
    assert m.acceptance == pytest.approx(sampled)  # what the sweep reports = the sampled requests' ratio
    # the lossless check ran as its own greedy pass (compared with the baseline's greedy outputs)
    assert m.greedy_draft_n and m.greedy_draft_n > 0 and m.lossless is not None
    cold = Workload(chat=False, sampling=GREEDY, n_ctx=512)
    fn_g, _ = _launcher(llama_server_bin, target, cold)
    g = measure_candidate(fn_g, _draft(draft), SHORT, [0, 1], 32, cancel, workload=cold)
    assert g.ok and g.acceptance is not None
    assert m.acceptance != pytest.approx(g.acceptance, abs=1e-3), (m.acceptance, g.acceptance)


def test_long_context_requests_fill_at_least_half_the_served_context(stories260k_session, llama_server_bin):
    n_ctx = 512  # small (stories260K was trained at 2048) so the test is fast
    wl = Workload(chat=False, sampling=GREEDY, n_ctx=n_ctx)
    fn, _ = _launcher(llama_server_bin, stories260k_session, wl)
    longs = [(10 + i, p) for i, p in enumerate(long_context_prompts())]
    m = measure_candidate(fn, Candidate(), SHORT[:1] + longs, [0], 32, threading.Event(), workload=wl)
    assert m.ok, m.error
    by_cat = {s.category: s for s in m.samples}
    for cat in ("long document", "long code"):
        s = by_cat[cat]
        assert n_ctx / 2 <= s.prompt_n <= n_ctx - 32, (cat, s.prompt_n)
    assert by_cat["creative"].prompt_n < 64


def test_a_multi_turn_file_on_a_chat_model_and_flattened_on_a_base_model(tmp_path: Path, chat_family,
                                                                         stories260k_session, llama_server_bin):
    f = tmp_path / "conv.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "Tell me a story about a cat."},
                                          {"role": "assistant", "content": "Once upon a time a cat sat."},
                                          {"role": "user", "content": "What did the cat do next?"}],
                             "category": "chat"}) + "\n")
    ps = load_prompts(f)
    prompts = list(enumerate(ps.prompts))
    target, _ = chat_family
    chat = Workload(chat=True, sampling=GREEDY, n_ctx=512)
    fn, _ = _launcher(llama_server_bin, target, chat)
    m = measure_candidate(fn, Candidate(), prompts, [0], 16, threading.Event(), workload=chat)
    assert m.ok and m.samples[0].endpoint == "/v1/chat/completions", m.error
    raw = Workload(chat=False, sampling=GREEDY, n_ctx=512)
    fn2, _ = _launcher(llama_server_bin, stories260k_session, raw)
    m2 = measure_candidate(fn2, Candidate(), prompts, [0], 16, threading.Event(), workload=raw)
    assert m2.ok and m2.samples[0].endpoint == "/completion", m2.error
    assert ps.prompts[0].text.endswith("User: What did the cat do next?\n\nAssistant:")


@pytest.mark.slow
def test_gemma_tune_and_serve_models_serve_at_the_context_setting(tmp_path: Path, gemma3_270m, llama_server_bin):
    """Done when: tune --models + serve --models on the real Gemma 3 270M serve with /props n_ctx equal to
    the setting (default 8192, the model's 32768 capped) and the profile's argv carries the same -c;
    another --ctx-size is refused as stale with the re-tune command. The sweeps are kept short (greedy, one
    prompt, the smallest budget, 10 s): this test is about the context size, not the decision."""
    models = tmp_path / "models"
    models.mkdir()
    (models / gemma3_270m.name).symlink_to(gemma3_270m)
    env = {**os.environ, "DRAFTWISE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    env = {k: v for k, v in env.items() if not k.startswith("LLAMA_ARG_")}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "The capital of France is", "category": "chat"}) + "\n")
    tune = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "tune", "--models", str(models), "--server", str(llama_server_bin),
         "--prompts", str(prompts), "--budget", "10", "--n-predict", "16", "--repetitions", "1",
         "--no-long-context", "--temperature", "0", "--threads", "2", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert tune.returncode == 0, tune.stderr[-3000:]
    out = json.loads(tune.stdout)
    argv = out["decision"]["argv"]
    assert out["decision"]["n_ctx"] == 8192 and argv[argv.index("-c") + 1] == "8192", argv
    assert "raw completions (/completion)" in out["decision"]["reason"]  # Gemma 3 270M here has no template

    # --target: the folder holds a symlink to the cached model, and profiles key on the resolved path
    refused = subprocess.run([sys.executable, "-m", "tuner.cli", "serve", "--models", str(models),
                              "--target", gemma3_270m.name, "--server", str(llama_server_bin), "--ctx-size", "4096"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert refused.returncode == 2 and "stale" in refused.stderr and "--ctx-size 4096" in refused.stderr

    p = subprocess.Popen([sys.executable, "-m", "tuner.cli", "serve", "--models", str(models),
                          "--target", gemma3_270m.name, "--server", str(llama_server_bin)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.endswith("/v1"), p.stderr.read()[-2000:] if p.poll() is not None else endpoint
        from tuner.server.client import ServerClient

        with ServerClient(endpoint[: -len("/v1")]) as c:
            assert c.props()["default_generation_settings"]["n_ctx"] == 8192
    finally:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    # changing the setting marks the profile stale: a tune at another size re-measures
    again = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "tune", "--models", str(models), "--server", str(llama_server_bin),
         "--prompts", str(prompts), "--budget", "10", "--n-predict", "8", "--repetitions", "1",
         "--no-long-context", "--temperature", "0", "--threads", "2", "--ctx-size", "4096", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "the context size changed (tuned at 8192, now 4096 tokens)" in again.stderr
    assert json.loads(again.stdout)["reused"] is False


def test_a_default_sweep_has_long_context_requests_and_reports_their_speedup(tmp_path: Path, chat_family,
                                                                             llama_server_bin):
    import io

    from tuner.calibration.prompts import make_prompt_set
    from tuner.calibration.tune import tune
    from tuner.cli.tune import print_table
    from tuner.profiles import ProfileStore

    from .conftest import link_models

    target, draft = chat_family
    models = link_models(tmp_path / "models", target, draft)
    ps = make_prompt_set([p for _, p in SHORT], source="test")
    n_ctx = 512
    res = tune(models, target="target.gguf", prompts=ps, budget_s=60, server=llama_server_bin,
               store=ProfileStore(tmp_path / "profiles"), n_predict=32, repetitions=2, n_ctx=n_ctx,
               threads=TUNE_THREADS, sampling=GREEDY)
    d = res.decision
    assert d is not None
    for m in res.measurements:
        longs = [s for s in m.samples if s.category in ("long document", "long code")]
        if m.stopped_early:
            continue
        assert {s.category for s in longs} == {"long document", "long code"}, m.candidate.label
        assert all(s.prompt_n >= n_ctx / 2 for s in longs), [(s.category, s.prompt_n) for s in longs]
    if d.kind == "alone_unsteady":
        # the model alone's own speed varied between its launches (a busy CI machine): the decision then shows
        # no per-category lines by design (screening figures minutes apart are no evidence), but its mix
        # sentence still counts the long-context requests compared
        assert d.per_category == () and "long-context" in d.reason, d.reason
        return
    rows = {c.category: c for c in d.per_category}
    assert {"long document", "long code"} <= rows.keys(), d.per_category
    # the compared candidate's long requests have a speedup unless it was stopped early before reaching them
    compared = [m for m in res.measurements if m.candidate.label == rows["long code"].candidate_label]
    if any(not m.stopped_early and m.ok for m in compared):
        assert rows["long document"].speedup and rows["long code"].speedup, d.per_category
    out = io.StringIO()
    print_table(res, out, details=True)  # the per-category lines are details (tune --details)
    assert "  long document: " in out.getvalue() and "  long code: " in out.getvalue()
    assert res.profile.keys.n_ctx == n_ctx and res.profile.keys.workload == "chat;temperature=0,top_k=1"
    assert "chat requests (/v1/chat/completions) at greedy (temperature 0), context 512" in d.reason


def test_probabilistic_drafts_are_a_candidate_at_sampled_settings(chat_family, llama_server_bin):
    from tuner.calibration.candidates import CandidatePlan, add_draft_sampling_variants

    target, draft = chat_family
    binary = find_named_server(llama_server_bin)
    dialect = probe_dialect(binary.path)
    plan = CandidatePlan(baseline=Candidate(), drafts=(_draft(draft, 4),))
    hot = Workload(chat=False, sampling=Sampling(temperature=0.8), n_ctx=512)
    twin = add_draft_sampling_variants(plan, hot, dialect)
    assert [c.draft_sampling for c in twin.drafts] == [None, "probabilistic"]
    assert twin.drafts[1].label.endswith("probabilistic drafts")
    assert add_draft_sampling_variants(plan, Workload(sampling=GREEDY), dialect).drafts == plan.drafts

    sup = Supervisor(binary, dialect)
    fn = supervisor_launch_fn(sup, target, 512, TUNE_THREADS, lambda *a, **k: None, 60.0)
    argvs: list[list[str]] = []

    def launch(c, ev):
        la = fn(c, ev)
        argvs.append(list(sup.argv))
        return la

    greedy_drafts = measure_candidate(launch, twin.drafts[0], SHORT, [0, 1], 48, threading.Event(), workload=hot)
    rejection = measure_candidate(launch, twin.drafts[1], SHORT, [0, 1], 48, threading.Event(), workload=hot)
    assert greedy_drafts.ok and rejection.ok, (greedy_drafts.error, rejection.error)
    assert "--spec-draft-sampling" not in argvs[0]
    i = argvs[1].index("--spec-draft-sampling")
    assert argvs[1][i + 1] == "probabilistic"
    # at temperature 0.8 a greedy draft is matched against a sampled token; a sampled draft verified by
    # rejection keeps far more of its tokens (measured here: ~0.2 vs ~0.85)
    assert rejection.acceptance > greedy_drafts.acceptance + 0.2, (rejection.acceptance, greedy_drafts.acceptance)


def test_long_context_requests_dropped_for_the_whole_sweep_when_the_budget_is_too_small(stories260k_session,
                                                                                       llama_server_bin):
    wl = Workload(chat=False, sampling=GREEDY, n_ctx=512)
    memory = SweepMemory(long_plan=LongContextPlan(budget_s=0.01))
    fn, _ = _launcher(llama_server_bin, stories260k_session, wl)
    longs = [(10 + i, p) for i, p in enumerate(long_context_prompts())]
    m = measure_candidate(fn, Candidate(), SHORT + longs, [0], 16, threading.Event(), workload=wl, memory=memory)
    assert m.ok and {s.category for s in m.samples} == {"creative", "chat"}, m.error
    plan = memory.long_plan
    assert plan.decided and not plan.keep and plan.left_out is not None
    assert plan.left_out.kind == "sweep.long_context_left_out"
    m2 = measure_candidate(fn, Candidate(spec_type="ngram-mod"), SHORT + longs, [0], 16, threading.Event(),
                           workload=wl, memory=memory)
    assert all(s.category in ("creative", "chat") for s in m2.samples)  # the same requests for every candidate
