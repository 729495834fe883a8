"""What a llama-server router says about its models (``GET /models``), as typed records (pure).

tools/server/server-models.cpp ``server_models_routes::init_routes`` (``get_router_models``) answers one
object per model: ``id``, ``aliases``, ``tags``, and ``status`` = ``{"value": …, "args": [argv of its
process], "failed": true, "exit_code": N}`` (the last two only after the process ended with a non-zero
status; ``server_model_meta::is_failed``). The values (``server_model_status_to_string``): ``unloaded``,
``loading``, ``loaded``, ``sleeping`` (idle sleep: the process runs, its model is unloaded), and
``downloading`` / ``downloaded`` for Hugging Face downloads, which Draftwise never starts.

The router loses a dead child's signal: vendor/sheredom/subprocess.h ``subprocess_join`` reports any
abnormal end as ``EXIT_FAILURE``, so a SIGKILL, a SIGABRT and a SIGSEGV all read ``exit_code 1``, like an
ordinary "exiting due to model loading error". :mod:`tuner.server.router_crash` classifies from the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: ``status.value`` of a model whose process runs (``server_model_meta::is_running``): it holds one of the
#: ``--models-max`` places.
RUNNING = frozenset({"loading", "loaded", "sleeping"})


@dataclass(frozen=True)
class ModelStatus:
    """One model of a router.

    Fields:
        model_id: the section name (what requests send as ``model``).
        value: ``unloaded``, ``loading``, ``loaded``, ``sleeping`` (or another word a later build adds).
        failed: its last process ended with a non-zero status (``exit_code``, always 1 for a crash).
        exit_code: that status, None when not failed.
        args: the argv of its current (or last) process, binary first; () before its first load.
        tags: the section's tags (``tuned`` / ``untuned``).
        port: the loopback port of its current process (``--port`` in ``args``), None before a load.
    """

    model_id: str
    value: str
    failed: bool = False
    exit_code: int | None = None
    args: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    port: int | None = None

    @property
    def running(self) -> bool:
        """Its process runs (loading, loaded or sleeping)."""
        return self.value in RUNNING


def _port_of(args: tuple[str, ...]) -> int | None:
    """The value of the last ``--port`` in ``args`` as an int, else None."""
    for i in range(len(args) - 2, -1, -1):
        if args[i] == "--port":
            try:
                return int(args[i + 1])
            except ValueError:
                return None
    return None


def parse_model(row: Mapping[str, object]) -> ModelStatus | None:
    """One ``/models`` row as a :class:`ModelStatus`; None for a row without an ``id``."""
    mid = row.get("id")
    if not isinstance(mid, str) or not mid:
        return None
    status = row.get("status")
    st: Mapping[str, object] = status if isinstance(status, Mapping) else {}
    raw_args = st.get("args")
    args = tuple(str(a) for a in raw_args) if isinstance(raw_args, list) else ()
    raw_tags = row.get("tags")
    tags = tuple(str(t) for t in raw_tags) if isinstance(raw_tags, list) else ()
    code = st.get("exit_code")
    return ModelStatus(model_id=mid, value=str(st.get("value") or "unknown"), failed=st.get("failed") is True,
                       exit_code=code if isinstance(code, int) else None, args=args, tags=tags,
                       port=_port_of(args))


def parse_models(rows: Iterable[Mapping[str, object]]) -> dict[str, ModelStatus]:
    """``GET /models``'s ``data`` rows by model id (rows without an id are skipped)."""
    out: dict[str, ModelStatus] = {}
    for row in rows:
        m = parse_model(row)
        if m is not None:
            out[m.model_id] = m
    return out


__all__ = ["RUNNING", "ModelStatus", "parse_model", "parse_models"]
