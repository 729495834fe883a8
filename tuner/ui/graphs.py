"""pyqtgraph plots with labelled axes and units (the only module that imports pyqtgraph)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics

from tuner.safetext import safe_text

# antialiasing makes software-rendered plots ~15x slower to paint (470 ms vs 33 ms for the four Monitor
# plots at 600 points each, measured offscreen): lines stay crisp enough without it.
pg.setConfigOptions(antialias=False, background="w", foreground="#333333")

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed")


def _finite(xs, ys):
    """Replace None by NaN (a gap in the line) and return float lists."""
    return [float(x) for x in xs], [math.nan if y is None else float(y) for y in ys]


class TimePlot(pg.PlotWidget):
    """A live line plot against "minutes before now".

    Args:
        title: plot title.
        y_label: left axis label; y_unit: its unit (shown in parentheses).
        series: names of the lines (legend entries).
        y_scale: multiply values by this before plotting (e.g. 100 for a 0..1 rate shown in %).
        min_top: the y axis reaches at least this (plotted units), also while the plot is empty
            (e.g. 100 for a percentage, 2 for a request count).
        skip_gaps: draw a dot at every sample as well as the line, so a value measured in one
            isolated interval (a short request between idle seconds) is visible. A ``None`` value
            is always a break in the line: nothing is drawn across time where nothing was measured.
    """

    def __init__(self, title: str, y_label: str, y_unit: str, series: tuple[str, ...] = ("",), y_scale: float = 1.0,
                 skip_gaps: bool = False, min_top: float = 1.0, parent=None) -> None:
        super().__init__(parent=parent)
        self.y_scale = y_scale
        self.min_top = min_top
        self.y_label = y_label
        self.skip_gaps = skip_gaps
        self.setTitle(title, size="10pt")
        self.getAxis("left").enableAutoSIPrefix(False)
        self.getAxis("bottom").enableAutoSIPrefix(False)
        self.set_unit(y_unit, y_scale)
        self.getAxis("bottom").setLabel("time (minutes before now)")
        self.showGrid(x=True, y=True, alpha=0.25)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setMenuEnabled(False)
        self.setMinimumHeight(150)
        if len(series) > 1:
            self.addLegend(offset=(-10, 10))
        self.curves = {}
        for i, name in enumerate(series):
            color = QColor(PALETTE[i % len(PALETTE)])
            pen = pg.mkPen(color, width=2)
            extra = dict(symbol="o", symbolSize=4, symbolBrush=color, symbolPen=None) if skip_gaps else {}
            self.curves[name] = self.plot([], [], pen=pen, name=name or None, connect="finite", **extra)
        self.set_span_min(5)
        self._rescale_y()

    def set_unit(self, y_unit: str, y_scale: float) -> None:
        """Change the y unit (label) and the factor applied to values."""
        self.y_unit = y_unit
        self.y_scale = y_scale
        self.getAxis("left").setLabel(f"{self.y_label} ({y_unit})" if y_unit else self.y_label)

    def set_span_min(self, minutes: float) -> None:
        """Show the last ``minutes`` minutes."""
        self.span_min = minutes
        self.setXRange(-minutes, 0, padding=0.01)

    def set_series(self, name: str, ages_s, values) -> None:
        """Replace one line's data: ``ages_s`` (<= 0, seconds before now) and values (None = a break
        in the line, never bridged)."""
        xs, ys = _finite(ages_s, values)
        if all(math.isnan(y) for y in ys):
            xs, ys = [], []  # nothing measured in the window (and no all-NaN bounds for pyqtgraph)
        self.curves[name].setData([x / 60.0 for x in xs], [y * self.y_scale for y in ys])
        self._rescale_y()

    def _rescale_y(self) -> None:
        """Y axis from 0 to a little above the largest value of every line. All our series are
        non-negative (rates, percentages, bytes, counts); anchoring at 0 keeps a single point or a
        flat line from being zoomed into a meaningless sliver (e.g. 1738.8-1739.6 tokens/s)."""
        top = 0.0
        for curve in self.curves.values():
            _x, y = curve.getData()
            if y is not None and len(y):
                finite = [v for v in y if not math.isnan(v)]
                if finite:
                    top = max(top, max(finite))
        self.setYRange(0, max(self.min_top, top * 1.15), padding=0)

    def segments(self, name: str = "") -> list[tuple[float, float]]:
        """The drawn line's unbroken stretches as ``(first x, last x)`` in minutes (for tests)."""
        x, y = self.curves[name].getData()
        out: list[tuple[float, float]] = []
        start: float | None = None  # first x of the stretch being walked
        prev = 0.0  # its last x so far (meaningful while start is set)
        for xi, yi in zip(x if x is not None else (), y if y is not None else ()):
            if math.isnan(yi):
                if start is not None:
                    out.append((start, prev))
                start = None
                continue
            if start is None:
                start = float(xi)
            prev = float(xi)
        if start is not None:
            out.append((start, prev))
        return out

    def point_count(self, name: str = "") -> int:
        """Number of finite points in a line (for tests)."""
        _x, y = self.curves[name].getData()
        if y is None:
            return 0
        return int(sum(1 for v in y if not math.isnan(v)))


def chart_label(label: str) -> str:
    """Short bar label: ``"draft-simple draft-good.gguf n_max 3"`` → ``"draft-good n_max 3"``, ``"ngram-mod ngram
    n_max 16"`` → ``"ngram-mod n_max 16"``; a draft's file
    name shown escaped (:func:`tuner.safetext.safe_text`)."""
    label = label.replace("draft-simple ", "").replace(".gguf", "").replace(" ngram n_max ", " n_max ")
    return safe_text(label)


def tick_text(label: str, room: int) -> str:
    """``label`` in two lines (three for a draft whose ``n_max`` has more after it) of about ``room`` characters (broken at a space: the draft's
    name over its ``n_max``, and what follows the ``n_max`` on a third line when both do not fit), elided with
    "…" only when a single word is longer than a line."""
    if len(label) <= room:
        return label
    if " n_max " in label:  # the draft over its draft length (over anything after it: "probabilistic")
        head, _sep, tail = label.rpartition(" n_max ")
        n_max, _sp, rest = tail.partition(" ")
        if rest and len(rest) > room:
            rest = rest.split(" ")[0]  # "probabilistic drafts" → "probabilistic"
        parts = (head, f"n_max {n_max}", rest) if rest and len(f"n_max {tail}") > room else (head, f"n_max {tail}")
        return "\n".join(ln if len(ln) <= room else ln[: room - 1] + "…" for ln in parts)
    lines: list[str] = []
    for word in label.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= room:
            lines[-1] += " " + word
        else:
            lines.append(word)
    lines = [ln if len(ln) <= room else ln[: room - 1] + "…" for ln in lines]
    if len(lines) > 2:
        lines = [lines[0], (" ".join(lines[1:]))[: room - 1] + "…"]
    return "\n".join(lines)


def _center_lines(item: pg.TextItem) -> None:
    """Centre each line of a multi-line label over its anchor (Qt left-aligns them by default)."""
    doc = item.textItem.document()
    opt = doc.defaultTextOption()
    opt.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    doc.setDefaultTextOption(opt)
    doc.setTextWidth(doc.idealWidth())  # alignment needs a fixed width: the widest line
    item.updateTextPos()


#: Bar colour of the candidate the decision chose.
WINNER_COLOR = "#16a34a"


#: Below this many drafted tokens a bar's acceptance names the count ("100% of 12 drafted": a rate over a handful
#: of tokens explains a bar that is no faster); from it on the rate alone ("82% acc."), which keeps ten bars'
#: labels from running into each other.
FEW_DRAFTED = 100

#: Colour of a launch's point on its bar.
POINT_COLOR = "#111827"


def point_offsets(n: int, half_width: float = 0.2) -> list[float]:
    """Horizontal offsets of ``n`` launch points on one bar (evenly spread over ``±half_width``, in launch order;
    one point sits in the middle)."""
    if n <= 1:
        return [0.0] * n
    return [-half_width + 2 * half_width * i / (n - 1) for i in range(n)]


class CandidateChart(pg.PlotWidget):
    """Bar chart of each candidate's generation tokens/s with a dashed baseline line; each bar shows its
    launches as points (the speed each launch measured) and their count; the bar label shows the candidate
    and its acceptance rate."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent=parent)
        self.setTitle(self.TITLE, size="10pt")
        self.getAxis("left").setLabel("generation (tokens/s)")
        self.getAxis("bottom").setLabel("candidate")
        for side in ("left", "bottom"):  # bar positions are indices, not a quantity: no "(x0.001)"
            self.getAxis(side).enableAutoSIPrefix(False)
        self.showGrid(y=True, alpha=0.25)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setMenuEnabled(False)
        self.setMinimumHeight(220)
        self._bars = None
        self._points = pg.ScatterPlotItem(size=7, pen=pg.mkPen("w", width=1), brush=pg.mkBrush(POINT_COLOR))
        self._points.setZValue(2)  # over the bars
        self.addItem(self._points)
        self.points: dict[str, list[float]] = {}
        """Each bar's launch figures (tokens/s) as last drawn, by label."""
        self._baseline = pg.InfiniteLine(angle=0, pen=pg.mkPen("#6b7280", width=1.5, style=pg.QtCore.Qt.PenStyle.DashLine))
        self._baseline.setVisible(False)
        self.addItem(self._baseline)
        self._labels: list[pg.TextItem] = []
        self.rows: list[tuple[str, float, float | None, bool]] = []
        self.never: list[str] = []
        self.winner: str | None = None
        # before the first result: a sentence instead of empty 0..1 axes
        self.placeholder = pg.TextItem(self.PLACEHOLDER, color="#6b7280", anchor=(0.5, 0.5))
        self.addItem(self.placeholder)
        self._show_empty(True)

    #: The chart's title: what a bar is, and why a bar can stand taller than the one chosen (a new user saw a
    #: screening launch at 247 tokens/s beside the chosen configuration's 201 from its paired rounds).
    TITLE = ("Each launch's generation speed (points; dashed: the model alone), each on its own requests<br>"
             "<span style='font-size:8pt'>The choice compares configurations side by side on the same requests: "
             "its figures are in the decision below</span>")

    #: What a bar says when its saved profile kept no launches (not one launch: unknown).
    LAUNCHES_UNKNOWN = "launches not saved"

    #: What the empty chart says.
    PLACEHOLDER = "Each candidate's generation speed appears here as soon as it is measured."

    def _show_empty(self, empty: bool) -> None:
        self.placeholder.setVisible(empty)
        for side in ("left", "bottom"):
            self.getPlotItem().showAxis(side, not empty)
        self.showGrid(y=not empty, alpha=0.25)
        if empty:
            self.setXRange(0, 1, padding=0)
            self.setYRange(0, 1, padding=0)
            self.placeholder.setPos(0.5, 0.5)

    def _tick_texts(self, labels: list[str]) -> list[str]:
        """The bar labels broken (:func:`tick_text`) so that no line is wider than its bar's room at the chart's
        width now (a label wider than its bar would run into its neighbours'), each label on its own; at least 6
        characters a line."""
        fm = QFontMetrics(self.getAxis("bottom").style.get("tickFont") or QFont())
        bar_px = max(200, self.width() - 90) / max(1, len(labels))  # less the left axis and margins
        room = max(6, int(bar_px / max(1.0, 0.8 * fm.horizontalAdvance("draft-good n_max") / 16)))  # then fewer

        def fitted(label: str) -> str:  # each label as wide as its own lines allow (one wide line breaks only it)
            r = room
            while True:
                text = tick_text(label, r)
                if r <= 6 or all(fm.horizontalAdvance(ln) < bar_px for ln in text.split("\n")):
                    return text
                r -= 1

        return [fitted(label) for label in labels]

    def _set_ticks(self, labels: list[str]) -> None:
        axis = self.getAxis("bottom")
        texts = self._tick_texts(labels)
        axis.setTicks([list(enumerate(texts))])
        n_lines = max(t.count("\n") + 1 for t in texts)
        line_px = QFontMetrics(axis.style.get("tickFont") or QFont()).height()
        axis.setHeight(int(line_px * (n_lines + 1) + 8))  # tick lines and the axis label, unclipped

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Wider or narrower: the bar labels are broken and elided again for the new room."""
        super().resizeEvent(event)
        if getattr(self, "rows", None) or getattr(self, "never", None):  # (also called while pyqtgraph builds)
            self._set_ticks([chart_label(r[0]) for r in self.rows] + [chart_label(n) for n in self.never])
            self._fit_y()  # taller or shorter: the labels' room above the bars again

    #: The text of a bar-less row: a speculation type that ran but proposed no token (the decision's
    #: wording, tuner.calibration.wording.never_text).
    NEVER_TEXT = "drafted nothing"

    def set_rows(self, rows: list[tuple[str, float, float | None, bool]], winner: str | None = None,
                 never: Sequence[str] = (), points: Mapping[str, Sequence[float]] | None = None,
                 launches_unknown: bool = False, drafted: Mapping[str, int] | None = None) -> None:
        """``rows``: (label, gen tokens/s, acceptance 0..1 or None, is_baseline); ``winner``: the
        label of the chosen speculative candidate (drawn green, marked "chosen"), None for none;
        ``never``: labels of speculation types that ran but drafted nothing, shown after the bars as
        bar-less rows reading :attr:`NEVER_TEXT` (they have no speed of their own to draw); ``points``:
        each row's launches (label → tokens/s per launch), drawn as points on its bar with their count
        under its figure (a pooled bar over launches that ran at 694, 390 and 127 tokens/s shows all three);
        ``launches_unknown``: a saved profile that kept no launches: each bar says so instead of a count;
        ``drafted``: each row's drafted tokens over its launches (label → tokens), said beside its acceptance
        when fewer than :data:`FEW_DRAFTED` ("100% of 12 drafted": a rate over a handful of tokens explains a bar
        that is no faster)."""
        never = [n for n in dict.fromkeys(never) if n not in {r[0] for r in rows}]
        self.rows = list(rows)
        self.never = list(never)
        self.winner = winner
        self.points = {r[0]: [float(v) for v in (points or {}).get(r[0], ()) if v and math.isfinite(v)] for r in rows}
        self._draw_points()
        if self._bars is not None:
            self.removeItem(self._bars)
        for t in self._labels:
            self.removeItem(t)
        self._labels = []
        self._show_empty(not rows and not never)
        if not rows and not never:
            self._baseline.setVisible(False)
            self._bars = None
            return
        xs = list(range(len(rows)))
        hs = [r[1] for r in rows]
        brushes = ["#9ca3af" if r[3] else WINNER_COLOR if r[0] == winner else PALETTE[0] for r in rows]
        self._bars = pg.BarGraphItem(x=xs, height=hs, width=0.6, brushes=brushes) if rows else None
        if self._bars is not None:
            self.addItem(self._bars)
        base = next((r[1] for r in rows if r[3]), None)
        self._baseline.setVisible(base is not None)
        if base is not None:
            self._baseline.setValue(base)
        ticks: list[str] = []
        n_all = len(rows) + len(never)
        font = QFont()
        font.setPointSizeF(8)
        for x, (label, tps, acc, is_base) in zip(xs, rows):
            n_launches = len(self.points.get(label, ()))
            top = max([tps, *self.points.get(label, ())])
            n_drafted = (drafted or {}).get(label, 0)
            label = chart_label(label)
            ticks.append(label)
            if acc is not None:
                # the count only where it explains the rate (a handful of drafted tokens): wider labels overlapped
                few = 0 < n_drafted < FEW_DRAFTED
                acc_txt = f"{acc:.0%} of {n_drafted:,} drafted" if few else f"{acc:.0%} acc."
            txt = f"{tps:.0f} tok/s" + (f"\n{acc_txt}" if acc is not None else "")
            if n_launches:
                txt += f"\n{n_launches} launch{'es' if n_launches != 1 else ''}"
            elif launches_unknown:
                txt += f"\n{self.LAUNCHES_UNKNOWN}"
            if winner is not None and label == chart_label(winner) and not is_base:
                txt = "chosen\n" + txt
            t = pg.TextItem(txt, color="#111827", anchor=(0.5, 1.0))
            t.setFont(font)
            _center_lines(t)
            t.setPos(x, top * 1.04 if n_launches and top > tps else top)  # clear of the highest point
            self.addItem(t)
            self._labels.append(t)
        for x, label in enumerate(never, start=len(rows)):
            ticks.append(chart_label(label))
            words = self.NEVER_TEXT if n_all <= 10 else self.NEVER_TEXT.replace(" ", "\n")  # narrow bars: 2 lines
            t = pg.TextItem(words, color="#6b7280", anchor=(0.5, 1.0))
            t.setFont(font)
            t.setPos(x, 0.0)
            self.addItem(t)
            self._labels.append(t)
        self._set_ticks(ticks)
        pad = max(0.0, (3 - n_all) / 2)  # one or two bars keep the width of three, centred
        self.setXRange(-0.6 - pad, n_all - 0.4 + pad, padding=0)
        self._fit_y()

    def _fit_y(self) -> None:
        """The y range: room above the highest bar or point for the tallest bar label at the plot's height now (a
        4-line "chosen" label is cut off under a fixed 30 % headroom when the chart is short)."""
        top = max([*(r[1] for r in self.rows), *(v for vs in self.points.values() for v in vs)], default=0.0)
        if top <= 0:
            self.setYRange(0, 1, padding=0)
            return
        label_px = max((t.boundingRect().height() for t in self._labels), default=0.0) + 6  # labels ignore zoom: px
        below = self.getAxis("bottom").minimumHeight() + 40  # the bar labels' axis, the title and the margins
        plot_px = max(60.0, min(self.getPlotItem().getViewBox().height() or 1e9, self.height() - below))
        room = min(0.75, max(0.2, label_px / plot_px))  # the label's share of the plot's height
        self.setYRange(0, top * 1.04 / (1.0 - room), padding=0)  # a label sits up to 4 % above its bar's top

    def _draw_points(self) -> None:
        """The launch points of :attr:`points`, spread over each bar's width in launch order."""
        xs: list[float] = []
        ys: list[float] = []
        for x, (label, *_rest) in enumerate(self.rows):
            vals = self.points.get(label, [])
            xs += [x + d for d in point_offsets(len(vals))]
            ys += vals
        self._points.setData(x=xs, y=ys)

    def point_count(self) -> int:
        """Launch points drawn (for tests)."""
        return len(self._points.data)
