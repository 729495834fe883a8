"""Tray and window icons: ``resources/icons/tray-<state>.svg`` when present, else a drawn icon."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPen, QPixmap

from tuner.ui.state import AppState

#: Fallback colours per state (also used as accents in the window).
STATE_COLORS = {
    AppState.IDLE: "#6b7280",
    AppState.TUNING: "#d97706",
    AppState.SERVING: "#16a34a",
    AppState.ERROR: "#dc2626",
}


def icon_file(state: AppState):
    """Path of the packaged SVG for ``state`` (may not exist), or None when resources are missing."""
    try:
        from tuner.resources import resource_path

        return resource_path("icons", f"tray-{state.value}.svg")
    except FileNotFoundError:
        return None


def drawn_icon(state: AppState, size_px: int = 64) -> QIcon:
    """A simple drawn icon: a coloured rounded square with a white "D" (used when the SVG is missing)."""
    pm = QPixmap(size_px, size_px)
    pm.fill(Qt.GlobalColor.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(QPen(Qt.PenStyle.NoPen))
    p.setBrush(QBrush(QColor(STATE_COLORS[state])))
    r = QRectF(size_px * 0.06, size_px * 0.06, size_px * 0.88, size_px * 0.88)
    p.drawRoundedRect(r, size_px * 0.2, size_px * 0.2)
    p.setPen(QPen(QColor("white")))
    f = QFont()
    f.setBold(True)
    f.setPixelSize(int(size_px * 0.6))
    p.setFont(f)
    p.drawText(r, Qt.AlignmentFlag.AlignCenter, "D")
    p.end()
    return QIcon(pm)


_cache: dict[AppState, QIcon] = {}


def state_icon(state: AppState) -> QIcon:
    """The icon for ``state``: the packaged SVG when it exists and renders, else :func:`drawn_icon`."""
    if state in _cache:
        return _cache[state]
    icon = QIcon()
    path = icon_file(state)
    if path is not None and path.is_file():
        icon = QIcon(str(path))
        if icon.isNull() or icon.pixmap(32, 32).isNull():
            icon = QIcon()
    if icon.isNull():
        icon = drawn_icon(state)
    _cache[state] = icon
    return icon
