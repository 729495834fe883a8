"""Every tuned model of one folder from one endpoint, on the real llama-server's router: an OpenAI client's
``model`` field picks between two tuned targets, each with its own speculative configuration (``draft_n`` in the
reply's timings, its own draft and draft length in the process's argv), an untuned target answers plainly, an
unknown ``model`` gets the router's error, a model's own port requires the key; a crash the router reports only
as status 1 is classified and the model loaded again; a hung model is killed and loaded again; the served
model's idle sleep is followed without a telemetry poll waking it."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import httpx
import pytest

from tests.router_folder import TUNED, UNTUNED, router_folder
from tuner import process
from tuner.calibration import serving_plan
from tuner.catalog.folder import scan_models
from tuner.server import RouterSupervisor, ServerState, probe_dialect
from tuner.server.client import NON_WAKING_PATHS, ServerClient
from tuner.server.router_launch import PRESET_NAME, router_dir
from tuner.settings import Settings

pytestmark = pytest.mark.server
KEY = "router-test-key-0123456789"


def start(folder: Path, binary: Path, **sup_kw) -> RouterSupervisor:
    settings = Settings(models_dir=folder, port=process.free_port(), idle_sleep_s=sup_kw.pop("idle_sleep_s", 0))
    plan, why = serving_plan(scan_models(folder), settings, binary, probe_dialect(binary), folder / "target.gguf",
                             api_key=KEY)
    assert plan is not None, why
    sup = RouterSupervisor(binary, **sup_kw)
    sup.start_and_wait(plan, "target", timeout_s=120)
    return sup


def wait_for(pred, within_s: float = 60.0) -> bool:
    t_end = time.monotonic() + within_s
    while time.monotonic() < t_end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_the_model_field_picks_between_two_tuned_targets(tmp_path: Path, stories260k: Path,
                                                         llama_server_bin: Path) -> None:
    from openai import BadRequestError, OpenAI

    folder = router_folder(tmp_path, stories260k)
    sup = start(folder, llama_server_bin)
    try:
        client = OpenAI(base_url=f"{sup.base_url}/v1", api_key=KEY, max_retries=0)
        for model in TUNED:
            r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=32, temperature=0)
            timings = (r.model_extra or {})["timings"]
            assert r.model == model and timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0, (model, timings)
        with sup.client() as c:
            rows = {row["id"]: row for row in c.router_models()}
        for model, n_max in TUNED.items():  # each process runs its own tuned draft and draft length
            args = rows[model]["status"]["args"]
            assert args[args.index("--spec-draft-n-max") + 1] == str(n_max)
            draft = next(args[i + 1] for i, a in enumerate(args) if a in ("--spec-draft-model", "--model-draft", "-md"))
            assert Path(draft).name == ("draft-good.gguf" if model == "target" else "stories260K.gguf")
            assert rows[model]["tags"] == ["tuned"] and "--api-key" not in " ".join(args)
        # the app follows "the last model a request loaded" from the router's /models, one look per health
        # interval: two loads inside one look cannot be ordered (a full-suite run followed the earlier of two), so
        # the next request waits until the last one is followed
        last = list(TUNED)[-1]
        assert wait_for(lambda: sup.current == last and sup.state is ServerState.READY)
        r = client.completions.create(model=UNTUNED, prompt="Once upon a time", max_tokens=8, temperature=0)
        assert r.model == UNTUNED and "draft_n" not in (r.model_extra or {})["timings"]
        with sup.client() as c:
            assert {row["id"]: row["tags"] for row in c.router_models()}[UNTUNED] == ["untuned"]
        with pytest.raises(BadRequestError, match="model 'gpt-4o' not found"):
            client.completions.create(model="gpt-4o", prompt="x", max_tokens=4)
        assert wait_for(lambda: sup.current == UNTUNED and sup.state is ServerState.READY)
        # a model's own loopback port requires the router's key too (it inherits LLAMA_API_KEY)
        port = rows["target"]["status"]["args"][rows["target"]["status"]["args"].index("--port") + 1]
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", trust_env=False).status_code == 401
        assert httpx.get(f"{sup.base_url}/v1/models", trust_env=False).status_code == 401
        preset = router_dir() / PRESET_NAME
        assert stat.S_IMODE(preset.stat().st_mode) == 0o600 and KEY not in preset.read_text()
        assert KEY not in " ".join(sup.argv or ())
        pids = [sup.pid] + [sup.model_pid(m) for m in (*TUNED, UNTUNED)]
    finally:
        sup.stop()
    assert None not in pids[:1] and [p for p in pids if p is not None and process.process_exists(p)] == []


def test_a_crash_and_a_hang_are_classified_and_the_model_loaded_again(tmp_path: Path, stories260k: Path,
                                                                     llama_server_bin: Path) -> None:
    folder = router_folder(tmp_path, stories260k)
    changes = []
    sup = start(folder, llama_server_bin, liveness_timeout_s=3.0, health_interval_s=0.5, backoff_s=(0.5,),
                on_state=changes.append)
    try:
        first = sup.model_pid("target")
        assert first is not None
        os.kill(first, signal.SIGKILL)  # the router reports it as "exited with status 1", like any crash
        assert wait_for(lambda: sup.state is ServerState.READY and sup.model_pid("target") not in (None, first))
        crash = [c for c in changes if c.state is ServerState.STARTING and c.diagnosis is not None][-1]
        # no line said why: one start of the same configuration alone came up, so something outside ended it
        assert crash.diagnosis.code == "crash_not_reproduced"
        assert crash.message.startswith("target: llama-server crashed")
        second = sup.model_pid("target")
        assert second is not None
        os.kill(second, signal.SIGSTOP)
        assert wait_for(lambda: sup.state is ServerState.READY and sup.model_pid("target") not in (None, second))
        hung = [c for c in changes if c.state is ServerState.STARTING and c.diagnosis is not None][-1]
        assert hung.diagnosis.code == "hung" and sup.restart_count == 2
    finally:
        sup.stop()


def test_the_served_models_idle_sleep_is_followed_without_waking_it(tmp_path: Path, stories260k: Path,
                                                                   llama_server_bin: Path) -> None:
    folder = router_folder(tmp_path, stories260k)
    sup = start(folder, llama_server_bin, idle_sleep_s=2, health_interval_s=0.5)
    try:
        assert wait_for(lambda: sup.state is ServerState.SLEEPING, 30.0)
        with ServerClient(sup.base_url or "", api_key=KEY, paths=NON_WAKING_PATHS) as poll:
            for _ in range(6):  # the telemetry's reads: never loading or waking a model
                assert "llamacpp:" in poll.metrics_text(model="target")
                assert poll.props(model="target")["is_sleeping"] is True
                time.sleep(0.3)
        assert sup.state is ServerState.SLEEPING and sup.sleep_status.sleeps == 1
        with sup.client(timeout_s=60) as c:
            c.completion("Once upon a time", 8, model="target", temperature=0)
        assert wait_for(lambda: sup.state is ServerState.READY, 30.0)
        assert sup.sleep_status.last_reload_s is not None
    finally:
        sup.stop()


def test_each_model_keeps_its_served_requests_in_its_own_folder(tmp_path: Path, stories260k: Path,
                                                               llama_server_bin: Path) -> None:
    from dataclasses import replace

    from tuner.calibration import captured
    from tuner.server import capture
    from tuner.server.states import StateChange

    folder = router_folder(tmp_path, stories260k)
    settings = Settings(models_dir=folder, port=process.free_port(), idle_sleep_s=0, capture_requests=True)
    plan, why = serving_plan(scan_models(folder), settings, llama_server_bin, probe_dialect(llama_server_bin),
                             folder / "target.gguf", api_key=KEY)
    assert plan is not None, why
    changes: list[StateChange] = []
    sup = RouterSupervisor(llama_server_bin, on_state=changes.append)
    try:
        sup.start_and_wait(plan, "target", timeout_s=120)
        with sup.client(timeout_s=60) as c:
            for model in TUNED:
                c.completion(f"a request for {model}", 4, model=model, temperature=0)
        for model in TUNED:  # each its own private folder; the readiness completion is not kept
            kept = [p.read_text() for p in capture.capture_dir(model).iterdir() if p.suffix == ".txt"]
            assert kept == [f"a request for {model}"], (model, kept)
            assert stat.S_IMODE(capture.capture_dir(model).stat().st_mode) == 0o700
        sup.switch("target")
        off = replace(plan, models=tuple(captured(m, False) for m in plan.models))
        sup.apply(off, "not keeping served requests")
        assert [c.state for c in changes[-3:]] == [ServerState.APPLYING, ServerState.STARTING, ServerState.READY]
        with sup.client(timeout_s=60) as c:
            c.completion("not kept", 4, model="target", temperature=0)
            args = next(r for r in c.router_models() if r["id"] == "target")["status"]["args"]
        assert "--log-prompts-dir" not in args
        assert [p.read_text() for p in capture.capture_dir("target").iterdir()] == ["a request for target"]
    finally:
        sup.stop()


def test_a_model_a_request_names_that_cannot_load_is_taken_off_the_endpoint(tmp_path: Path, stories260k: Path,
                                                                         llama_server_bin: Path) -> None:
    from openai import APIStatusError, BadRequestError, OpenAI

    folder = router_folder(tmp_path, stories260k)
    changes = []
    sup = start(folder, llama_server_bin, on_state=changes.append)
    try:
        (folder / "stories260K.gguf").rename(tmp_path / "moved.gguf")  # the file is gone when a request names it
        client = OpenAI(base_url=f"{sup.base_url}/v1", api_key=KEY, max_retries=0)
        with pytest.raises(APIStatusError):
            client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8)
        assert wait_for(lambda: any(v.model_id == "stories260K" and v.given_up for v in sup.models()), 60.0)
        view = next(v for v in sup.models() if v.model_id == "stories260K")
        assert view.problem.startswith("model file missing or unreadable") and "stories260K.gguf" in view.problem
        # the endpoint goes on serving the current model; the broken one is gone from the router's list
        assert wait_for(lambda: sup.state is ServerState.READY and sup.current == "target", 30.0)
        assert [c.state for c in changes].count(ServerState.FAILED) == 0

        def listed() -> set[str]:
            with sup.client() as c:
                return {row["id"] for row in c.router_models()}

        assert wait_for(lambda: "stories260K" not in listed(), 30.0)  # the preset was written again and re-read
        with pytest.raises(BadRequestError, match="model 'stories260K' not found"):
            client.completions.create(model="stories260K", prompt="x", max_tokens=4)
        r = client.completions.create(model="target", prompt="Once upon a time", max_tokens=8, temperature=0)
        assert r.model == "target"
    finally:
        sup.stop()
