"""The Monitor's live prediction (tuner.ui.live_advice, tab_monitor): a line labelled as a prediction, with the
number of requests behind it, beside the profile's measured speedup; hidden while not speculating or with too
few requests; an old profile says it predates live predictions. The tray offers the re-tune once the verdict
calls for one, and notifies once. Counters replay /metrics recorded from a real llama-server
(tests/calibration/record_live_metrics.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tests.calibration.test_advice import _facts_of_good
from tuner.calibration.advice import MIN_REQUESTS
from tuner.profiles import ModelFileKey, Profile, ProfileStore, StalenessKeys
from tuner.settings import Settings
from tuner.telemetry.samplers import MetricsSampler
from tuner.ui.controller import AppController
from tuner.ui.flow import ServingInfo
from tuner.ui.live_advice import PREDATES, LiveAdvice, retune_action_text, speed_words
from tuner.ui.serve_targets import switched
from tuner.ui.tab_monitor import MonitorTab

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "live_advice.json"


def _save_profile(tmp_path: Path, with_facts: bool) -> Path:
    target = tmp_path / "target.gguf"
    target.write_bytes(b"GGUF" + b"\0" * 60)
    facts = _facts_of_good()
    decision = {"speedup": 1.45, "speedup_ci_low": 1.4, "label": "draft-simple draft-good.gguf n_max 8"}
    if with_facts:
        decision["live_prediction"] = {"n_max": 8, "per_draft_token": facts.cost.per_draft_token, "per_step": 0.0,
                                       "baseline_gen_tokens_per_s": 100.0}
    keys = StalenessKeys(hardware_fingerprint="cpu", server_binary="llama-server:1:2", server_build="11434",
                         dialect_fingerprint="abc", model_files=(ModelFileKey.of(target),), prompt_set_sha256="p" * 64)
    ProfileStore().save(Profile(target_path=str(target.resolve()), keys=keys, winner={"spec_type": "draft-simple"},
                                server_config={"model_path": str(target)}, argv=("llama-server",), decision=decision,
                                evidence=()))
    return target


def _serve(c: AppController, target: Path, spec_label: str = "draft-simple draft-good.gguf n_max 8") -> None:
    c.serving = ServingInfo(model_name=target.name, target_path=target, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=("llama-server", "-m", str(target)), pid=None,
                            spec_label=spec_label)


def _replay(c: AppController, run: str, requests: int) -> None:
    """Feed the collector ``requests`` request intervals, each the recorded run's counter difference."""
    r = json.loads(DATA.read_text())["runs"][run]
    it = iter([r["before"], r["after"]] * requests)
    sampler = c.collector.metrics = MetricsSampler(lambda: next(it))
    for _ in range(requests):
        sampler.reset()  # each interval from the recorded "before" again
        c.collector.poll()  # before: the baseline of the interval
        c.collector.poll()  # after: one interval that ended requests


def test_the_monitor_shows_the_prediction_beside_the_measured_speedup(qtbot, tmp_path):
    c = AppController(Settings())
    tab = MonitorTab(c)
    qtbot.addWidget(tab)
    _serve(c, _save_profile(tmp_path, with_facts=True))
    _replay(c, "good", MIN_REQUESTS - 1)
    tab._update_summary()
    assert tab.advice.isHidden()  # too few requests behind a prediction
    _replay(c, "unrelated", 3)
    tab._update_summary()
    text = tab.advice.text()
    assert not tab.advice.isHidden()
    assert text.startswith(f"Predicted from the last {MIN_REQUESTS + 2} requests: ")
    assert "(measured when tuned: 1.45×)" in text
    # 3 of the 12 intervals drafted with the unrelated draft: their 5 × as many draft steps (accepted none) drag
    # the prediction below the model alone
    assert text.endswith("The model alone would be faster on these requests (no speculation = 1.00×).")


def test_hidden_without_speculation_and_an_old_profile_says_so(qtbot, tmp_path):
    c = AppController(Settings())
    tab = MonitorTab(c)
    qtbot.addWidget(tab)
    target = _save_profile(tmp_path, with_facts=False)
    _serve(c, target, spec_label="no speculation")
    _replay(c, "good", MIN_REQUESTS)
    tab._update_summary()
    assert tab.advice.isHidden()
    _serve(c, target)
    tab._update_summary()
    assert not tab.advice.isHidden() and tab.advice.text() == PREDATES


def test_the_offer_and_its_notice_come_once_per_verdict(tmp_path):
    c = AppController(Settings(tune_budget_s=240))
    _serve(c, _save_profile(tmp_path, with_facts=True))
    live = LiveAdvice(c)
    _replay(c, "unrelated", MIN_REQUESTS)
    adv = live.offer()
    assert adv is not None and adv.verdict == "alone"
    notice = live.notice()
    assert notice is not None and notice.startswith("The model alone would be faster")
    assert live.notice() is None  # not repeated every tick
    assert retune_action_text(live.budget_s()) == "Re-tune on recent requests (about 240 s)"


def test_speed_words_are_plain():
    assert speed_words(1.31) == "1.31× faster than the model alone"
    assert speed_words(0.78) == "22% slower than the model alone"
    assert speed_words(1.001) == "as fast as the model alone"


def test_the_tray_offers_the_retune_with_its_time_and_notifies_once(qtbot, tmp_path):
    import os
    import time

    from tuner.server import capture
    from tuner.ui import flow
    from tuner.ui.tray import Tray

    c = AppController(Settings(tune_budget_s=240))
    tray = Tray(c, show_window=lambda: None, quit_app=lambda: None)
    started: list[bool] = []
    c.recent.retune = lambda: started.append(True)  # type: ignore[method-assign]  # record the click only
    target = _save_profile(tmp_path, with_facts=True)
    _serve(c, target)
    folder = capture.log_prompts_dir(flow.served_model_id(c.serving, None) or "")
    for i in range(3):
        (folder / f"{5000 + i:012d}.txt").write_text(f"request {i}\n", encoding="utf-8")
        os.utime(folder / f"{5000 + i:012d}.txt", (time.time() - 60 + i,) * 2)
    tray.rebuild_menu()
    assert "Re-tune on recent requests" in [a.text() for a in tray.menu.actions()]  # no advice yet
    _replay(c, "unrelated", MIN_REQUESTS)
    for _ in range(3):
        c.telemetry.emit(None)
    assert tray.last_notification is not None
    title, body = tray.last_notification
    assert title == "The served requests could run faster" and body.startswith("The model alone would be faster")
    assert "Re-tune on recent requests (about 240 s)" in body
    tray.last_notification = None
    c.telemetry.emit(None)
    assert tray.last_notification is None  # one notice, not one per tick
    tray.rebuild_menu()
    offered = [a for a in tray.menu.actions() if a.text() == "Re-tune on recent requests (about 240 s)"]
    assert len(offered) == 1 and not started  # offered, nothing started without the click
    offered[0].trigger()
    assert started == [True]
    tray.hide()


def test_on_a_router_the_prediction_is_the_current_models_and_a_switch_starts_it_again(qtbot, tmp_path):
    """The demo folder is served through llama-server's router (3 models): the Monitor reads the current model's
    own /metrics (``?model=ID``), so its prediction shows; when the router follows another model the window of
    requests starts again (a new user saw no prediction after 14 requests: the router case was hidden)."""
    c = AppController(Settings())
    tab = MonitorTab(c)
    qtbot.addWidget(tab)
    target = _save_profile(tmp_path, with_facts=True)
    _serve(c, target)
    c.serving = replace(c.serving, models=("target", "stories260K"), model_id="target")
    _replay(c, "good", MIN_REQUESTS)
    tab._update_summary()
    assert not tab.advice.isHidden()
    assert tab.advice.text().startswith(f"Predicted from the last {MIN_REQUESTS} requests: ")
    switched(c, replace(c.serving, model_id="stories260K", model_name="stories260K.gguf",
                        target_path=tmp_path / "stories260K.gguf", spec_label="no speculation"))
    assert c.collector.spec_window.totals().requests == 0
    tab._update_summary()
    assert tab.advice.isHidden()  # the other model speculates with nothing
