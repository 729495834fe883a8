"""The lines shown under a memory plan (the Models tab, the tune log): the context-vs-layers trade and what
llama-server's own report says about the plan, each a :class:`CheckLine` whose kind says what it is, so no
reader looks for words in it."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tuner.crosscheck.server_check import cached_server_report, server_config_for, server_cross_check
from tuner.hardware.memory import MemoryRequest, context_trade

if TYPE_CHECKING:
    from tuner.hardware.devices import Device, Devices

log = logging.getLogger(__name__)

CheckKind = Literal["trade", "not_checked", "agrees", "disagrees", "no_answer"]
"""What a :class:`CheckLine` says: ``trade`` (the context-vs-layers trade, with a GPU), then the server
cross-check from its cache: ``not_checked`` (no cached report), ``agrees``, ``disagrees``, ``no_answer``."""


@dataclass(frozen=True)
class CheckLine:
    """One sentence under a plan.

    ``text``: the sentence as shown; ``disagrees``: llama-server's cached report disagrees with the plan (the
    tune log lists only these); ``kind``: :data:`CheckKind`.
    """

    text: str
    disagrees: bool
    kind: CheckKind


def _trade_lines(request: MemoryRequest, devices: Devices | Sequence[Device]) -> list[CheckLine]:
    try:
        trade = context_trade(request, devices)
    except (ValueError, TypeError):
        return []
    if trade.max_ngl_at_ctx is None:
        return []
    texts = [f"At n_ctx {trade.n_ctx}: {trade.max_ngl_at_ctx} of {trade.n_layers_all} target layers fit "
             "on the GPU (output layer first)."]
    top = trade.max_ctx_all_on_gpu
    if top == 0:
        texts.append("The whole model does not fit on the GPU at any context.")
    elif top is not None and top >= trade.ctx_ceiling:
        texts.append(f"The whole model stays on the GPU up to its training context ({trade.ctx_ceiling}).")
    elif top is not None:
        texts.append(f"The whole model stays on the GPU up to n_ctx {top}.")
    return [CheckLine(t, False, "trade") for t in texts]


def _server_line(request: MemoryRequest, devices: Devices | Sequence[Device],
                 server_binary: str | os.PathLike[str]) -> CheckLine | None:
    try:
        from tuner.server.argv import build_argv
        from tuner.server.dialect import probe_dialect

        cfg = server_config_for(request, binary=server_binary)
        argv = build_argv(Path(server_binary), cfg.with_port(0), probe_dialect(Path(server_binary)))
    except Exception:  # noqa: BLE001 - no argv, no cross-check line
        log.debug("no server argv for the plan check lines", exc_info=True)
        return None
    if cached_server_report(argv, [cfg.model_path, cfg.draft_path]) is None:
        return CheckLine("Not cross-checked with llama-server yet (draftwise plan --server-check runs it once).",
                         False, "not_checked")
    r = server_cross_check(request, devices, server_binary)
    if r.ok and r.agrees:
        return CheckLine("llama-server's own projection and buffers agree with this plan (within 10 %).",
                         False, "agrees")
    if r.ok:
        return CheckLine("llama-server DISAGREES with this plan: " + "; ".join(r.disagreements), True, "disagrees")
    return CheckLine(f"Cross-check with llama-server gave no answer: {r.note}", False, "no_answer")


def plan_check_lines(request: MemoryRequest, devices: Devices | Sequence[Device],
                     server_binary: str | os.PathLike[str] | None) -> tuple[CheckLine, ...]:
    """Sentences under a plan: the context-vs-layers trade (with a GPU; ``tuner.hardware.memory.context_trade``)
    and the server cross-check *from the cache only* (:func:`tuner.crosscheck.server_check.cached_server_report`:
    it never starts llama-server, a click must stay cheap; ``server_binary`` None = no cross-check line). A
    cached disagreement is always listed, with ``disagrees`` True. Raises nothing."""
    out = _trade_lines(request, devices)
    if server_binary is not None:
        line = _server_line(request, devices, server_binary)
        if line is not None:
            out.append(line)
    return tuple(out)


__all__ = ["CheckKind", "CheckLine", "plan_check_lines"]
