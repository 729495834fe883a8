"""The Serve tab says, in one plain sentence, when the served llama-server runs with the --no-repack
workaround because this CPU crashed in llama.cpp's repacked kernels; otherwise the row stays hidden."""

from __future__ import annotations

from tests.hardware.conftest import record_workaround
from tuner.hardware.repack import no_repack_sentence
from tuner.settings import Settings
from tuner.ui import flow
from tuner.ui.controller import AppController
from tuner.ui.flow import ServingInfo
from tuner.ui.tab_serve import ServeTab


def test_the_serve_tab_names_the_workaround_in_force(qtbot, tmp_path, monkeypatch):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    model = tmp_path / "m.gguf"
    argv = (str(binary), "-m", str(model), "--no-repack")
    assert flow.cpu_kernels_text(argv) is None  # --no-repack given by hand: no crash to explain
    c = AppController(Settings())
    tab = ServeTab(c)
    qtbot.addWidget(tab)
    form = tab._status_form
    c.serving = ServingInfo(model_name=model.name, target_path=model, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=argv[:3], pid=None, spec_label="no speculation")
    c.server_changed.emit(c.serving)
    assert not form.isRowVisible(tab.cpu_kernels_label)
    record_workaround(binary, "sigsegv")
    assert flow.cpu_kernels_text(argv[:3]) is None  # not on this command line
    c.serving = ServingInfo(model_name=model.name, target_path=model, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=argv, pid=None, spec_label="no speculation")
    c.server_changed.emit(c.serving)
    assert form.isRowVisible(tab.cpu_kernels_label)
    assert tab.cpu_kernels_label.text() == no_repack_sentence("sigsegv") and "AMX" not in tab.cpu_kernels_label.text()
    c.serving = None
    c.server_changed.emit(None)
    assert not form.isRowVisible(tab.cpu_kernels_label)
