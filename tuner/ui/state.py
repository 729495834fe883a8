"""The app's overall state as the tray shows it (plain Python; used by the Qt layer only)."""

from __future__ import annotations

import enum


class AppState(str, enum.Enum):
    """What the tray icon shows.

    ``IDLE``: nothing running; ``TUNING``: a scan/sweep is in progress; ``SERVING``: llama-server is
    ready; ``ERROR``: the last action failed (the tooltip and the Serve tab say why).
    """

    IDLE = "idle"
    TUNING = "tuning"
    SERVING = "serving"
    ERROR = "error"
