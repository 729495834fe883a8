"""The tray's *Serve* submenu on the real llama-server's router: it lists the folder's targets (tuned ones with
their decision in a few words; the family's draft is not offered as a target to tune), picking one loads it through the router and
the app follows it (the Monitor's and the Chat tab's model), a client's request for another model moves the app
along too, and *Tune & serve* on an untuned target while serving tunes it and adds it to the endpoint."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.router_folder import UNTUNED, router_folder
from tuner import process
from tuner.calibration import serving_plan
from tuner.server import probe_dialect
from tuner.server.client import ServerClient
from tuner.settings import Settings, server_api_key
from tuner.ui import controller as controller_mod
from tuner.ui import flow
from tuner.ui.state import AppState

pytestmark = [pytest.mark.server, pytest.mark.gui, pytest.mark.timeout(300)]


def serving(app, qtbot, folder: Path, binary: Path, models_max: int | None = None) -> None:
    """Serve the folder's router with ``target`` first, as the flow does after a tune that reused its profile
    (``models_max``: instead of the memory plan's, e.g. 1 as on a GPU that holds one model)."""
    c = app.controller
    c.settings = Settings(models_dir=folder, port=process.free_port(), server_binary=binary, idle_sleep_s=0,
                          tune_budget_s=40)
    c.poll_interval_s = 0.5
    qtbot.waitUntil(lambda: not c.busy, timeout=30_000)  # the app's own first scan
    c.scan_models(folder)
    qtbot.waitUntil(lambda: c.scan is not None and c.scan.folder == folder, timeout=30_000)
    plan, why = serving_plan(flow.scan(folder), c.settings, binary, probe_dialect(binary), folder / "target.gguf",
                             api_key=server_api_key(c.settings))
    assert plan is not None, why
    if models_max is not None:
        plan = replace(plan, models_max=models_max)
    c.runner.start_router(plan, "target", binary=binary)
    info = flow.router_serving_info(c.runner)
    assert info is not None
    # the Monitor's first line words the current model's speculation plainly (the saved winner), on a router too
    assert info.spec_words.startswith("the draft model draft-good.gguf")
    c._serving_started(info)


@pytest.fixture(autouse=True)
def _profiles_count_as_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/router_folder.py writes its profiles with placeholder staleness keys (no sweep ran): the menu would
    rightly call them stale; here they stand for fresh ones (tests/ui/test_serve_menu_words.py checks stale)."""
    monkeypatch.setattr(controller_mod, "stale_check", lambda *a: lambda scanned, target: ())


def menu(tray) -> dict[str, object]:
    tray.menu.aboutToShow.emit()  # what Qt does when the menu opens
    return tray.serve_actions()


def test_the_serve_menu_switches_targets_and_the_app_follows(make_app, qtbot, tmp_path, stories260k,
                                                             llama_server_bin) -> None:
    folder = router_folder(tmp_path, stories260k)
    app = make_app(tray_available=True)
    c, tray = app.controller, app.tray
    serving(app, qtbot, folder, llama_server_bin, models_max=1)  # one loaded at a time: a switch unloads the other
    qtbot.waitUntil(lambda: len(c.targets) == 2, timeout=30_000)
    entries = menu(tray)
    assert list(entries) == ["stories260K.gguf — draft model stories260K.gguf speeds up 1.2×",
                             "target.gguf — draft model draft-good.gguf speeds up 1.6× (loaded)"]
    assert [a.isChecked() for a in entries.values()] == [False, True]
    assert c.serving is not None and c.serving.models == ("stories260K", "target", UNTUNED)
    app.window.serve_tab.refresh()
    assert app.window.serve_tab.model_id_label.text().startswith("target — this endpoint also serves stories260K")

    next(iter(entries.values())).trigger()  # Serve ▸ stories260K
    qtbot.waitUntil(lambda: c.serving is not None and c.serving.model_id == "stories260K", timeout=60_000)
    assert c.state is AppState.SERVING and app.window.chat_tab.model_id() == "stories260K"
    assert c.serving.spec_label == "draft-simple stories260K.gguf n_max 2"
    entries = menu(tray)
    assert [a.isChecked() for a in entries.values()] == [True, False]
    assert list(entries)[1] == "target.gguf — draft model draft-good.gguf speeds up 1.6×"  # unloaded for stories
    # the Monitor reads the served model's own /metrics through the router (without ?model= it would get 400)
    ticks: list[object] = []
    c.telemetry.connect(ticks.append)
    qtbot.waitUntil(lambda: len(ticks) >= 3, timeout=30_000)
    assert c.collector.metrics is not None and c.collector.metrics.last_error is None

    # a client names the other tuned target: the router loads it, and the app follows (Monitor, Chat)
    with ServerClient(c.serving.base_url, api_key=c.serving.api_key, timeout_s=60) as client:
        out = client.completion("Once upon a time", 16, model="target", temperature=0)
    assert out["timings"]["draft_n"] > 0
    qtbot.waitUntil(lambda: c.serving is not None and c.serving.model_id == "target", timeout=30_000)
    assert app.window.chat_tab.model_id() == "target" and c.state is AppState.SERVING


@pytest.mark.slow
def test_tune_and_serve_on_another_target_while_serving_adds_it(make_app, qtbot, tmp_path, stories260k,
                                                               llama_server_bin) -> None:
    folder = router_folder(tmp_path, stories260k)
    app = make_app(tray_available=True)
    c, tray = app.controller, app.tray
    serving(app, qtbot, folder, llama_server_bin)
    c.tune_options = dict(n_predict=32, repetitions=1, n_ctx=256, max_prompts=2, threads=1)
    qtbot.waitUntil(lambda: len(c.targets) == 2, timeout=30_000)
    assert not any(t.startswith("draft-good.gguf") for t in menu(tray))  # only a draft here: not offered to tune
    c.selected_target = folder / "draft-good.gguf"
    c.tune_and_serve()  # the Tune tab's Tune & serve on it, as a target of its own
    qtbot.waitUntil(lambda: c.state is AppState.TUNING, timeout=10_000)
    during = menu(tray)
    assert any(t.startswith("Tuning draft-good.gguf") for t in during) and "Cancel tuning" in during
    qtbot.waitUntil(lambda: c.state is not AppState.TUNING, timeout=240_000)
    assert c.state is AppState.SERVING, c.last_error
    assert c.serving is not None and c.serving.model_id == UNTUNED and len(c.serving.models) == 3
    qtbot.waitUntil(lambda: any(t.name == "draft-good.gguf" and t.tuned for t in c.targets), timeout=30_000)
    assert any(t.startswith("draft-good.gguf — ") for t in menu(tray))  # its own profile: servable from the menu
    # the endpoint still serves the other tuned target with its speculation
    with ServerClient(c.serving.base_url, api_key=c.serving.api_key, timeout_s=60) as client:
        out = client.completion("Once upon a time", 16, model="target", temperature=0)
    assert out["timings"]["draft_n"] > 0
