"""The Serve tab's "Extra llama-server flags" setting (issue 23, item 4): saved when allowed, refused with the key
and the flag named, and — with the real llama-server — on the served command line the tab shows after Tune &
serve, and on the running server's own argv."""

from __future__ import annotations

import psutil
import pytest

from tuner import settings as S
from tuner.ui.state import AppState


def test_the_setting_is_saved_and_a_refused_flag_is_named(make_app) -> None:
    a = make_app()
    tab = a.window.serve_tab
    assert "--no-repack" in tab.server_args_edit.placeholderText()
    assert "-tb" in tab.server_args_edit.toolTip() and "listens" in tab.server_args_edit.toolTip()
    tab.server_args_edit.setText("  --no-repack   -tb=2 ")
    tab.server_args_edit.editingFinished.emit()
    assert S.load_settings().server_args == ("--no-repack", "-tb=2")
    assert a.controller.settings.server_args == ("--no-repack", "-tb=2")
    assert "Saved" in tab.settings_msg.text()
    for bad, named in (("--no-repack --host=0.0.0.0", "--host: refused"), ("-tb", "-tb: takes a value"),
                       ("--spec-type=ngram-mod", "--spec-type: refused"), ("-tb 2", "-tb: takes a value")):
        tab.server_args_edit.setText(bad)
        tab.server_args_edit.editingFinished.emit()
        msg = tab.settings_msg.text()
        assert msg.startswith("Extra llama-server flags: ") and named in msg, msg  # the field's own name
        assert S.load_settings().server_args == ("--no-repack", "-tb=2")  # nothing lost
    tab.server_args_edit.setText("")
    tab.server_args_edit.editingFinished.emit()
    assert S.load_settings().server_args == ()


@pytest.mark.server
@pytest.mark.gui
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_tune_and_serve_passes_the_setting_to_every_launch_and_shows_it(make_app, qtbot, models_dir, free_port,
                                                                        llama_server_bin, monkeypatch) -> None:
    monkeypatch.setenv("DRAFTWISE_LLAMA_SERVER", str(llama_server_bin))
    app = make_app(tray_available=True)
    c = app.controller
    c.settings = S.Settings(models_dir=models_dir, port=free_port, tune_budget_s=40)
    c.tune_options = dict(n_predict=16, repetitions=1, n_ctx=256, max_prompts=1, long_context=False)
    tab = app.window.serve_tab
    tab.server_args_edit.setText("--no-repack -tb=1")
    tab.server_args_edit.editingFinished.emit()
    assert c.settings.server_args == ("--no-repack", "-tb=1")
    ready_argvs: list[list[str]] = []
    c.tune_event.connect(lambda ev: ready_argvs.append(list(ev.detail["argv"])) if ev.kind == "ready" else None)
    c.tune_and_serve(force_retune=False)
    qtbot.waitUntil(lambda: c.state in (AppState.SERVING, AppState.ERROR), timeout=200_000)
    assert c.state is AppState.SERVING, c.last_error
    assert ready_argvs and all(a[-3:] == ["--no-repack", "-tb", "1"] for a in ready_argvs), ready_argvs
    qtbot.waitUntil(lambda: bool(tab.cmd_edit.toPlainText()), timeout=5000)
    assert tab.cmd_edit.toPlainText().endswith("--no-repack -tb 1"), tab.cmd_edit.toPlainText()
    info = c.serving
    assert info is not None and info.pid is not None
    assert psutil.Process(info.pid).cmdline()[-3:] == ["--no-repack", "-tb", "1"]
