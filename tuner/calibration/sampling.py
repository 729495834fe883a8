"""The sampling settings the served requests carry (the user's client settings; none set = the server's own).

By default the requests carry no sampling fields, so llama-server's own defaults apply (b11434
common/common.h ``common_params_sampling``, declared once in :mod:`tuner.options` with the bounds; the values
of the binary actually used are read from ``GET /props`` ``default_generation_settings.params``). The
user's client settings (temperature, top_p, top_k, min_p) replace them. Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.options import SERVER_DEFAULT_SAMPLING

# SERVER_DEFAULT_SAMPLING: llama-server b11434's sampling defaults, a view of tuner.options. Used for wording
# only when /props cannot be read; the measurement itself sends nothing, so the server applies whatever its
# build defaults to.

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Sampling:
    """The sampling settings the served requests carry; ``None`` = not sent (the server's default applies).

    Attributes:
        temperature: ``temperature`` (0 = greedy).
        top_p: ``top_p`` (1.0 = off).
        top_k: ``top_k`` (0 = off).
        min_p: ``min_p`` (0.0 = off).
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None

    def body(self) -> dict[str, Any]:
        """The request-body fields that are set (unset ones are left to the server)."""
        return {k: getattr(self, k) for k in SAMPLING_KEYS if getattr(self, k) is not None}

    def effective(self, server_defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every sampling value as the server will use it: the set ones, else ``server_defaults`` (from
        ``/props``), else :data:`SERVER_DEFAULT_SAMPLING`."""
        base = dict(SERVER_DEFAULT_SAMPLING)
        for k in SAMPLING_KEYS:
            if server_defaults and server_defaults.get(k) is not None:
                base[k] = server_defaults[k]
        base.update(self.body())
        return base

    @property
    def is_greedy(self) -> bool:
        """True when the temperature is set to 0 or below (llama.cpp then samples greedily: common/common.h
        ``common_params_sampling::temp``, "<= 0.0 to sample greedily")."""
        return self.temperature is not None and self.temperature <= 0.0

    @property
    def uses_server_defaults(self) -> bool:
        """True when nothing is set (the client sends no sampling fields)."""
        return not self.body()

    def describe(self, server_defaults: Mapping[str, Any] | None = None) -> str:
        """Every value in words, e.g. ``"temperature T, top_k K, top_p P, min_p M (llama-server's defaults)"``
        with the numbers of :meth:`effective`."""
        if self.is_greedy:
            return "greedy (temperature 0)"
        eff = self.effective(server_defaults)
        text = ", ".join(f"{k} {eff[k]:g}" for k in SAMPLING_KEYS)
        if self.uses_server_defaults:
            return text + " (llama-server's defaults)"
        return text

    def key(self) -> str:
        """A stable string for profile staleness keys: the set fields, or ``"server-defaults"``."""
        b = self.body()
        return "server-defaults" if not b else ",".join(f"{k}={b[k]:g}" for k in SAMPLING_KEYS if k in b)

    @classmethod
    def from_settings(cls, settings: Any) -> Sampling:
        """From any object with ``temperature``, ``top_p``, ``top_k``, ``min_p`` attributes (Settings, argparse)."""
        return cls(**{k: getattr(settings, k, None) for k in SAMPLING_KEYS})


GREEDY = Sampling(temperature=0.0, top_k=1)
"""Greedy decoding (the lossless pass; also the workload of tests that need exact outputs)."""


__all__ = ["GREEDY", "SAMPLING_KEYS", "SERVER_DEFAULT_SAMPLING", "Sampling"]
