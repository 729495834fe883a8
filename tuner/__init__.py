"""Draftwise: auto-tunes speculative decoding for llama.cpp's ``llama-server``.

The package is a pure core (``catalog``, ``hardware``, ``server``, ``calibration``,
``profiles``, ``telemetry``) plus one Qt layer (``ui``). Only ``tuner.ui`` imports
PySide6 or pyqtgraph.
"""

__version__ = "0.1.0"
