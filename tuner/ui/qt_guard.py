"""Guard against a reference-counting bug of PySide6 6.12.0 on CPython < 3.12.

Measured here (PySide6-Essentials 6.12.0, CPython 3.11.7): every call of a Qt method that returns
``void`` (``QLabel.setText``, ``QPainter.setPen``, ``QTimer.setInterval``, ...) *decrements*
``None``'s reference count by one, and every ``Signal.emit`` (which returns ``True``) decrements
``True``'s. ``None`` starts with ~24 000 references, and pyqtgraph makes
hundreds of such calls per repaint, so the app aborts with "Fatal Python error: none_dealloc"
within a minute of showing the Monitor tab (6.11.3 does not have the bug; CPython 3.12+ makes
``None`` immortal, so it is harmless there).

The real fix is to avoid that PySide6 build (pin ``PySide6-Essentials!=6.12.0``). Until then,
:func:`install` detects the bug with a short probe and, only when present, keeps ``None``'s
count far from zero (adding references to ``None`` is harmless: it is never freed).
"""

from __future__ import annotations

import ctypes
import sys

#: References added to None per top-up, and the level under which the guard tops up again.
TOP_UP = 1 << 30
LOW_WATER = 1 << 28


def binding_drops_none_refs(calls: int = 200) -> bool:
    """True when a ``void`` Qt call loses a reference to ``None`` (the 6.12.0 bug)."""
    from PySide6.QtCore import QObject

    o = QObject()
    before = sys.getrefcount(None)
    for _ in range(calls):
        o.setObjectName("probe")
    after = sys.getrefcount(None)
    return before - after >= calls // 2


_SINGLETONS = (None, True, False)


def _add_refs(obj: object, n: int) -> None:
    # CPython object header: ob_refcnt (Py_ssize_t) is the first field of every object
    cell = ctypes.c_ssize_t.from_address(id(obj))
    cell.value += n


def top_up() -> None:
    """Raise the reference count of ``None``, ``True`` and ``False`` by :data:`TOP_UP` where it is
    below :data:`LOW_WATER`."""
    for obj in _SINGLETONS:
        if sys.getrefcount(obj) < LOW_WATER:
            _add_refs(obj, TOP_UP)


_timer = None


def install(check_every_ms: int = 60_000) -> bool:
    """Detect the bug and, when present, keep ``None`` alive (top-up now and every minute).

    Returns:
        True when the guard is active (buggy binding on CPython < 3.12), else False.
    """
    global _timer
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if _timer is not None:
        return True
    if not binding_drops_none_refs():
        return False
    from PySide6.QtCore import QTimer

    top_up()
    _timer = QTimer()
    _timer.setInterval(check_every_ms)
    _timer.timeout.connect(top_up)
    _timer.start()
    return True
