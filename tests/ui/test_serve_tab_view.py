"""The Serve tab fits the window's usual width whatever it shows: a router's model ids with its memory note and a
long speculation label wrap instead of widening the window past the screen (the README's screenshots cut off the
tab's buttons and boxes on the right before). Its log tail leaves out the router's line for every proxied request
(the app's telemetry polls make one a second), so the model's own lines stay in view."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui]


@pytest.mark.server  # the app asks llama-server --help what it supports
def test_long_serving_lines_wrap(make_app, qtbot):
    app = make_app(tray_available=False)
    w, tab = app.window, app.window.serve_tab
    w.resize(1100, 720)
    w.show()
    w.tabs.setCurrentWidget(tab)
    tab.model_label.setText("target.gguf — draft-simple draft-good.gguf n_max 5 probabilistic drafts " * 3)
    tab.model_id_label.setText("target — this endpoint also serves draft-good, draft-unrelated: a request's \"model\" "
                               "picks one (up to 3 models loaded at once: they need 3.4 GiB of the 22.7 GiB of RAM "
                               "free (keeping 4.7 GiB free for the rest of the machine))")
    qtbot.wait(100)  # the layout settles
    assert w.width() == 1100 and tab.width() <= 1100, (w.width(), tab.width())


@pytest.mark.server  # the app asks llama-server --help what it supports
def test_log_tail_leaves_out_the_routers_proxy_lines(make_app, monkeypatch):
    app = make_app(tray_available=False)
    w, tab = app.window, app.window.serve_tab
    own = ["[37551] 2.37.299.294 I srv  handle_sleep: server is entering sleeping state",
           "[37551] 1.36.976.039 I slot      release: id  0 | task 1295 | stop processing: n_tokens = 267"]
    proxied = [f"2.{38 + i}.516.274 I srv  proxy_reques: proxying request to model target on port 37551"
               for i in range(500)]
    monkeypatch.setattr(app.controller.runner, "log_tail", lambda n=200: (own + proxied)[-n:])
    w.show()
    w.tabs.setCurrentWidget(tab)
    tab.refresh_log()
    assert tab.log.toPlainText().split("\n") == own


def test_the_serving_line_says_it_in_plain_words_first() -> None:
    from pathlib import Path

    from tuner.ui.flow import ServingInfo
    from tuner.ui.tab_serve import serving_words

    info = ServingInfo(model_name="target.gguf", target_path=Path("/m/target.gguf"), endpoint_url="http://h/v1",
                       base_url="http://h", argv=(), pid=None, spec_label="draft-simple draft-good.gguf n_max 5",
                       spec_words="the draft model draft-good.gguf (n_max 5)")
    assert serving_words(info) == ("target.gguf with the draft model draft-good.gguf (n_max 5) — "
                                   "draft-simple draft-good.gguf n_max 5")
    from dataclasses import replace

    assert serving_words(replace(info, spec_label="no speculation", spec_words="")) == "target.gguf on its own"
