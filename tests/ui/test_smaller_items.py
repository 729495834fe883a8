"""The issue's smaller truths: the Prompts tab says which prompts a sweep measures, the empty
generation graph has a real tokens/s axis, the Serve tab shows the model id and the prompt-cache
setting, Re-tune waits for something to re-tune, and the decision text has no jargon."""

from __future__ import annotations

from tuner.calibration.prompts import DEFAULT_SET_PROMPTS
from tuner.settings import Settings
from tuner.ui.controller import AppController
from tuner.ui.flow import ServingInfo
from tuner.ui.tab_monitor import MonitorTab
from tuner.ui.tab_prompts import PromptsTab
from tuner.ui.tab_serve import ServeTab
from tuner.ui.tab_tune import TuneTab


def test_prompts_tab_marks_the_sweeps_prompts(qtbot):
    c = AppController(Settings())
    tab = PromptsTab(c)
    qtbot.addWidget(tab)
    n = len(tab.prompt_set.prompts)
    marks = [tab.table.item(i, 0).text() for i in range(n)]
    assert n > DEFAULT_SET_PROMPTS and marks.count("✓") == DEFAULT_SET_PROMPTS
    assert f"{n} prompts" in tab.source_label.text()
    assert f"a sweep measures {DEFAULT_SET_PROMPTS} of them" in tab.source_label.text()
    # the marked ones are one per category, as calibration picks them
    cats = [tab.table.item(i, 1).text() for i in range(n) if marks[i] == "✓"]
    assert len(set(cats)) == len(cats)
    c.tune_options = {"max_prompts": 2}
    tab.select(None, announce=False)
    assert [tab.table.item(i, 0).text() for i in range(n)].count("✓") == 2


def test_empty_generation_graph_axis(qtbot):
    tab = MonitorTab(AppController(Settings()))
    qtbot.addWidget(tab)
    tab.redraw(now_s=0.0)
    _x, (y0, y1) = tab.tps_plot.viewRange()
    assert y0 == 0 and y1 >= 10  # not a 0-0.8 axis for a quantity in tokens/s


def test_serve_tab_model_id_and_cache_ram(qtbot, tmp_path):
    c = AppController(Settings())
    tab = ServeTab(c)
    qtbot.addWidget(tab)
    assert tab.cache_ram_spin.value() == 1024 and tab.model_id_label.text() == "—"
    tab.cache_ram_spin.setValue(512)
    tab._save_cache_ram()
    assert c.settings.cache_ram_mib == 512
    tab.cache_ram_spin.setValue(-1)
    assert tab.cache_ram_spin.text() == "no limit"
    model = tmp_path / "Qwen3-8B-Q4_K_M-00001-of-00002.gguf"
    c.serving = ServingInfo(model_name=model.name, target_path=model, endpoint_url="http://127.0.0.1:1/v1",
                            base_url="http://127.0.0.1:1", argv=("llama-server", "-a", "Qwen3-8B-Q4_K_M"),
                            pid=None, spec_label="no speculation", model_id="Qwen3-8B-Q4_K_M")
    c.server_changed.emit(c.serving)
    assert tab.model_id_label.text() == "Qwen3-8B-Q4_K_M"


def test_retune_waits_for_a_profile(qtbot, tmp_path):
    c = AppController(Settings())
    tab = TuneTab(c)
    qtbot.addWidget(tab)
    assert not tab.retune_btn.isEnabled() and tab.start_btn.isEnabled()
    c.last_tune = object()
    tab.on_state(c.state)
    assert tab.retune_btn.isEnabled()


def test_decision_text_has_no_jargon():
    """The decision's figures say what was compared in words ("screening runs, not adjacent in time", "N
    requests run by both sides"), never "no interval"."""
    from tuner.calibration.candidates import Candidate
    from tuner.calibration.decide import figures
    from tuner.calibration.pairing import Comparison
    from tuner.calibration.wording import figures_text

    c = Comparison(candidate=Candidate(spec_type="ngram-simple"), paired=False, pairs=(), candidate_samples=(),
                   baseline_samples=(), gen_tokens_per_s=110.0, baseline_gen_tokens_per_s=100.0, speedup=1.1,
                   look=None, acceptance=0.5)
    text = figures_text(figures(c))
    assert "no interval" not in text and "interval" not in text
    assert text.startswith("1.10× on the same requests in screening runs, not adjacent in time")
