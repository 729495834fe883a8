"""tuner.crosscheck: our memory plan checked against llama.cpp itself, and the build facts that need a run.

It sits above ``tuner.hardware`` and ``tuner.server`` (which never import each other): it builds the
server's argv for a plan and runs llama-server or ``llama-fit-params`` on this machine.

- server_check.py: :func:`~tuner.crosscheck.server_check.server_cross_check` (one real start up to "model
  loaded", cached) and :func:`~tuner.crosscheck.server_check.server_config_for` (the launch a plan describes).
- fit_params.py: :func:`~tuner.crosscheck.fit_params.cross_check` (``llama-fit-params``, no-alloc, about a second).
- lines.py: :func:`~tuner.crosscheck.lines.plan_check_lines` → typed ``CheckLine`` sentences under a plan.
- cpu_buffers.py: what the build does with quantized weights on this CPU (one probe launch, cached) and the
  recorded ``--no-repack`` workaround.
- build.py: :func:`~tuner.crosscheck.build.find_server_binary` and
  :func:`~tuner.crosscheck.build.build_probes` (the probes ``tuner.hardware.detect_devices`` is given).

The names the front ends use are importable from this package, each module loaded on first use (a tune
loads ``build`` alone; the cross-checks load the llama-server launch code): ``find_server_binary``,
``build_probes``, ``plan_check_lines``, ``CheckLine``, ``workaround_sentence``, ``recorded_no_repack``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.lazyface import lazy_getattr

if TYPE_CHECKING:  # the names as the type checker sees them; at run time __getattr__ loads them
    from tuner.crosscheck.build import build_probes, find_server_binary  # noqa: F401
    from tuner.crosscheck.cpu_buffers import recorded_no_repack, workaround_sentence  # noqa: F401
    from tuner.crosscheck.lines import CheckLine, plan_check_lines  # noqa: F401

_EXPORTS = {
    "find_server_binary": "tuner.crosscheck.build",
    "build_probes": "tuner.crosscheck.build",
    "workaround_sentence": "tuner.crosscheck.cpu_buffers",
    "recorded_no_repack": "tuner.crosscheck.cpu_buffers",
    "plan_check_lines": "tuner.crosscheck.lines",
    "CheckLine": "tuner.crosscheck.lines",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
