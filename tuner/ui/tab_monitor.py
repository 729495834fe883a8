"""Monitor tab: live graphs of generation tokens/s, draft acceptance rate (from ``/metrics`` counter
deltas), VRAM and RAM, and requests in flight (decoding + queued), over the last 5 / 15 / 60 minutes.

Truth rules: where nothing was measured the line has a break (idle seconds, a stalled poller, a
restart: :func:`tuner.telemetry.ring.with_breaks`); the header says "idle" when no request ran in
the last ``IDLE_AFTER_S`` seconds instead of repeating the last speed; a speculative server that
made no draft tokens while generating says so; a server asleep (idle sleep) says "sleeping — memory freed",
and once awake the first request's reload time (that request is left out of the speed and acceptance graphs:
:class:`tuner.telemetry.collector.Collector`)."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from tuner.telemetry import IDLE_AFTER_S, NO_DRAFT_MIN_TOKENS, NO_DRAFT_WINDOW_S, with_breaks
from tuner.ui.controller import AppController, activity_text, sleep_text
from tuner.ui.graphs import TimePlot
from tuner.ui.live_advice import LiveAdvice
from tuner.ui.plaintext import plain, plain_label, rich, rich_label
from tuner.units import GIB, MIB, format_bytes

RANGES_MIN = (5, 15, 60)
STAGGER_MS = 150


def serving_words(info, activity: str, tps: float | None) -> str:
    """The Monitor's first sentence, plain: what is served and how fast, e.g. "Serving t.gguf with the draft model
    d.gguf (n_max 15): 347 tokens/s" (``info``: a :class:`tuner.ui.flow.ServingInfo`; ``tps``: generation
    tokens/s now, None when no request runs: ``activity`` says what instead, e.g. "idle (no request yet)")."""
    if info.spec_label == "no speculation":
        what = f"Serving {info.model_name} on its own (no speculation)"
    else:
        what = f"Serving {info.model_name} with {info.spec_words or info.spec_label}"
    return f"{what}: {int(tps)} tokens/s" if tps is not None else f"{what} — {activity}"  # floor: 347.5 → 347


def acceptance_words(last: float | None, accepted: float, drafted: float, requests: int) -> str | None:
    """Draft acceptance, each figure with the window it is over: the last request (``last``, 0..1) and the last
    ``requests`` requests (``accepted`` / ``drafted`` tokens summed over them, :class:`tuner.telemetry.SpecWindow`),
    e.g. "draft acceptance 93% on the last request, 81% over the last 12 requests"; None with neither."""
    parts = [f"{last:.0%} on the last request"] if last is not None else []
    if drafted > 0 and requests > 1:
        parts.append(f"{accepted / drafted:.0%} over the last {requests} requests")
    return "draft acceptance " + ", ".join(parts) if parts else None


def fmt_bytes(n: float) -> str:
    """``"812 MiB"`` below 1 GiB, else ``"3.25 GiB"``."""
    return format_bytes(n, smallest="MiB", decimals={"MiB": 0, "GiB": 2})


class MonitorTab(QWidget):
    """Four plots fed from the controller's ring buffers; redrawn on each telemetry tick while visible."""

    def __init__(self, controller: AppController) -> None:
        super().__init__()
        self.controller = controller
        self.span_min = RANGES_MIN[0]
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.summary = rich_label(QLabel("Not serving: graphs fill in while llama-server runs."))
        self.summary.setWordWrap(True)  # a long model name must not widen the window
        top.addWidget(self.summary, 1)
        top.addWidget(QLabel("Show last:"))
        self.range_group = QButtonGroup(self)
        self.range_buttons: dict[int, QPushButton] = {}
        for m in RANGES_MIN:
            b = QPushButton(f"{m} min")
            b.setCheckable(True)
            b.setChecked(m == self.span_min)
            b.clicked.connect(lambda _c=False, m=m: self.set_range(m))
            self.range_group.addButton(b)
            self.range_buttons[m] = b
            top.addWidget(b)
        lay.addLayout(top)
        self.note = plain_label(QLabel())
        self.note.setWordWrap(True)
        self.note.setStyleSheet("background:#fef3c7; color:#78350f; padding:4px; border-radius:4px")
        self.note.setVisible(False)
        lay.addWidget(self.note)
        #: the live prediction from the served requests (labelled as one), beside the profile's measured speedup
        self.live = LiveAdvice(controller)
        self.advice = plain_label(QLabel())
        self.advice.setWordWrap(True)
        self.advice.setVisible(False)
        lay.addWidget(self.advice)

        grid = QGridLayout()
        self.tps_plot = TimePlot("Generation speed", "generation", "tokens/s", skip_gaps=True, min_top=10.0)
        self.acc_plot = TimePlot("Draft acceptance rate", "acceptance", "%", y_scale=100.0, skip_gaps=True,
                                 min_top=100.0)
        self.acc_plot.getPlotItem().enableAutoRange(axis="y", enable=False)
        self.has_vram = controller.collector.vram is not None
        self.mem_plot = TimePlot(
            "Memory" if self.has_vram else "Memory (no NVIDIA GPU found: host RAM only)",
            "memory", "MiB",
            series=("VRAM used", "llama-server RAM") if self.has_vram else ("llama-server RAM",),
            y_scale=1.0 / MIB,
        )
        self.req_plot = TimePlot("Requests in flight (decoding + queued)", "requests", "count", min_top=2.0,
                                 skip_gaps=True)
        self.req_plot.getAxis("left").setTickSpacing(1, 1)
        self.req_plot.getPlotItem().enableAutoRange(axis="y", enable=False)
        grid.addWidget(self.tps_plot, 0, 0)
        grid.addWidget(self.acc_plot, 0, 1)
        grid.addWidget(self.mem_plot, 1, 0)
        grid.addWidget(self.req_plot, 1, 1)
        lay.addLayout(grid, 1)
        controller.telemetry.connect(self.on_tick)
        controller.sleep_changed.connect(lambda _s: self._update_summary())

    def set_range(self, minutes: int) -> None:
        """Show the last 5, 15 or 60 minutes."""
        self.span_min = minutes
        self.range_buttons[minutes].setChecked(True)
        for p in (self.tps_plot, self.acc_plot, self.mem_plot, self.req_plot):
            p.set_span_min(minutes)
        self.redraw()

    def showEvent(self, ev) -> None:  # noqa: N802 - Qt override
        """Fill the plots when the tab appears (staggered like a tick)."""
        super().showEvent(ev)
        now = self.controller.collector.clock()
        self._update_summary()
        for i, fn in enumerate(self._plot_updaters):
            QTimer.singleShot(STAGGER_MS + i * STAGGER_MS, self, lambda fn=fn, now=now: fn(now))

    def on_tick(self, tick) -> None:
        """A new telemetry sample arrived; redraw when visible (hidden window costs nothing).

        The four plots are updated in four event-loop turns ``STAGGER_MS`` apart, so each repaint
        covers one plot: one repaint of all four at once took 60-300 ms on a busy 2-core machine,
        one plot at a time stays well under the 100 ms stall limit."""
        if not self.isVisible():
            return
        now = tick.t_s
        self._update_summary()
        for i, fn in enumerate(self._plot_updaters):
            # ``self`` as context: a pending update is dropped when the tab is destroyed
            QTimer.singleShot(i * STAGGER_MS, self, lambda fn=fn, now=now: fn(now))

    def _window(self, name: str, now: float) -> tuple[list[float], list[float | None]]:
        """The visible samples of one series, with a break wherever nothing was measured."""
        return with_breaks(*self.controller.collector.series[name].window(now, self.span_min * 60.0))

    def _update_tps(self, now: float) -> None:
        self.tps_plot.set_series("", *self._window("gen_tokens_per_s", now))

    def _update_acc(self, now: float) -> None:
        self.acc_plot.set_series("", *self._window("acceptance_rate", now))

    def _update_mem(self, now: float) -> None:
        vram = self._window("vram_used_bytes", now)
        ram = self._window("ram_rss_bytes", now)
        top = max([v for v in vram[1] + ram[1] if v is not None], default=0)
        if top >= 2 * GIB and self.mem_plot.y_unit != "GiB":
            self.mem_plot.set_unit("GiB", 1.0 / GIB)
        elif top < 2 * GIB and self.mem_plot.y_unit != "MiB":
            self.mem_plot.set_unit("MiB", 1.0 / MIB)
        if self.has_vram:
            self.mem_plot.set_series("VRAM used", *vram)
        self.mem_plot.set_series("llama-server RAM", *ram)

    def _update_req(self, now: float) -> None:
        self.req_plot.set_series("", *self._window("requests_in_flight", now))

    @property
    def _plot_updaters(self):
        return (self._update_tps, self._update_acc, self._update_mem, self._update_req)

    def redraw(self, now_s: float | None = None) -> None:
        """Pull the visible window out of the ring buffers and draw every plot now."""
        c = self.controller
        now = now_s if now_s is not None else c.collector.clock()
        for fn in self._plot_updaters:
            fn(now)
        self._update_summary()

    def _update_summary(self) -> None:
        c = self.controller
        s = c.collector.series
        if c.serving is not None:
            now = c.collector.clock()
            acc = s["acceptance_rate"].last_value()
            rss = s["ram_rss_bytes"].last_value()
            asleep = sleep_text(c.sleep) if c.sleep.sleeping else None
            busy = not asleep and not c.collector.is_idle(now)
            tps = s["gen_tokens_per_s"].latest_valued()
            live = tps.value if busy and tps is not None and now - tps.t_s <= IDLE_AFTER_S else None
            parts = [f"<b>{rich(serving_words(c.serving, asleep or activity_text(c.collector, now), live))}</b>"]
            if not asleep and c.sleep.last_reload_s is not None:
                left_out = " (that request is left out of the speed graph)" if c.collector.left_out_after_wake else ""
                parts.append(rich((sleep_text(c.sleep) or "") + left_out))
            win = c.collector.spec_window.totals()
            said = acceptance_words(acc, win.accepted_tokens, win.draft_tokens, win.requests) if busy else None
            if said:
                parts.append(said)
            if rss is not None:
                parts.append(rich(f"RAM {fmt_bytes(rss)}{self._cache_ram_text(c.serving)}"))
            if c.serving.spec_label != "no speculation":
                parts.append(f"configuration: {rich(c.serving.spec_label)}")  # the field terms, last
            self.summary.setText(" · ".join(parts))
            self._update_note(now)
            self._update_advice()
            title = "Draft acceptance rate" if c.serving.spec_label != "no speculation" else "Draft acceptance rate (not speculating)"
            if self.acc_plot.plotItem.titleLabel.text != title:
                self.acc_plot.setTitle(title, size="10pt")
        else:
            self.summary.setText("Not serving: graphs fill in while llama-server runs.")
            self.note.setVisible(False)
            self.advice.setVisible(False)

    @staticmethod
    def _cache_ram_text(info) -> str:
        """How much of llama-server's RAM its prompt cache may take (``--cache-ram``), for the header."""
        cram = getattr(info, "cache_ram_mib", None)
        if cram is None:
            return ""
        if cram == 0:
            return " (prompt cache off)"
        if cram < 0:
            return " (prompt cache: no limit)"
        return f" (prompt cache ≤ {fmt_bytes(cram * MIB)})"

    def no_drafts_text(self, now: float) -> str | None:
        """The "speculation configured, no drafts" note, or None when it does not apply."""
        info = self.controller.serving
        if info is None or info.spec_label == "no speculation":
            return None
        generated, drafted = self.controller.collector.drafting_summary(now, NO_DRAFT_WINDOW_S)
        if drafted > 0 or generated < NO_DRAFT_MIN_TOKENS:
            return None
        minutes = NO_DRAFT_WINDOW_S / 60.0
        text = (f"Speculation configured ({info.spec_label}), but no draft tokens were made while generating "
                f"the last {generated:.0f} tokens ({minutes:.0f} min)")
        if info.spec_label.startswith("ngram"):
            return text + " — sampled traffic rarely matches n-gram lookups."
        return text + " — check the Serve tab's log for the speculation lines."

    def _update_advice(self) -> None:
        """The line "Predicted from the last N requests: …" (hidden while not speculating or too few requests)."""
        text = self.live.monitor_text()
        self.advice.setText(plain(text or ""))
        self.advice.setVisible(bool(text))

    def _update_note(self, now: float) -> None:
        text = self.no_drafts_text(now)
        self.note.setText(plain(text or ""))
        self.note.setVisible(bool(text))
