"""The launch function the search starts its servers with: two supervised llama-servers, one for the
baseline and one for the candidates (both can run at once: the paired rounds side by side), each launch
configured by ``tuner.calibration.serving.candidate_config``. A :class:`~tuner.calibration.measure.Launch`
is only the running server: what the requests look like is the search's parameter, never the launch's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..candidates import Candidate
from ..measure import Cancelled, Launch, LaunchError, LaunchFn
from ..serving import candidate_config
from .events import Events
from .inputs import TuneInputs

if TYPE_CHECKING:
    from tuner.server.supervisor import Supervisor


def supervisor_launch_fn(
    sup: Supervisor, target_path: Path, n_ctx: int, threads: int | None, emit: Callable[..., None],
    startup_timeout_s: float | None, server_args: tuple[str, ...] = (),
) -> LaunchFn:
    """A :data:`~tuner.calibration.measure.LaunchFn` over one supervisor: each call starts ``sup`` with the
    candidate's configuration (``n_ctx`` tokens, ``threads`` CPU threads, the user's ``server_args`` on every
    launch), waits until it is ready, emits ``"ready"`` (``detail``: ``load_s``, ``argv``) and returns the
    :class:`Launch` (a client with a 30 s request timeout; ``stop`` closes it and stops the server).

    Args:
        startup_timeout_s: seconds to wait for readiness; ``None`` = the supervisor's own rule
            (``tuner.server.supervisor.startup_timeout_for``).

    The returned function raises :class:`LaunchError` (the configuration cannot be expressed for this
    binary, or the server did not become ready: the supervisor's diagnosis and its evidence) or
    :class:`Cancelled` (``cancel`` set while it started).
    """
    from tuner.server.argv import UnsupportedConfigError
    from tuner.server.diagnosis import speculation_reason
    from tuner.server.supervisor import ServerStartError

    def launch(c: Candidate, cancel: threading.Event) -> Launch:
        cfg = candidate_config(c, target_path, n_ctx=n_ctx, threads=threads, server_args=server_args)
        t = time.monotonic()
        try:
            sup.start(cfg, startup_timeout_s=startup_timeout_s)
            sup.wait_ready(cancel=cancel)
        except UnsupportedConfigError as exc:
            raise LaunchError(str(exc)) from exc
        except ServerStartError as exc:
            sup.stop(grace_s=2.0)
            if cancel.is_set():
                raise Cancelled() from exc
            raise LaunchError(exc.diagnosis.message, exc.diagnosis.evidence) from exc
        load_s = time.monotonic() - t
        emit("ready", f"{c.label}: ready in {load_s:.1f} s", candidate=c, detail={"load_s": load_s, "argv": sup.argv})
        client = sup.client(timeout_s=30.0)

        def stop() -> None:
            try:
                client.close()
            finally:
                sup.stop(grace_s=5.0)

        # where /slots cannot say (ik_llama.cpp), the supervisor's ready check confirmed speculation from the log
        confirmed = None if sup.dialect.spec_on_slots else not c.is_baseline
        return Launch(client=client, stop=stop, log_tail=sup.log_tail, load_s=load_s,
                      speculation_reason=speculation_reason, speculative_active=confirmed)

    return launch


@contextmanager
def open_launchers(inputs: TuneInputs, override: LaunchFn | None, events: Events) -> Iterator[LaunchFn]:
    """The sweep's launch function: ``override`` when given (tests), else one over two supervisors of the
    tune's binary (the baseline's and the candidates'), both stopped (their whole process trees) when the
    block ends, however it ends."""
    if override is not None:
        yield override
        return
    from tuner.server.supervisor import Supervisor

    sups = (Supervisor(inputs.binary, inputs.dialect), Supervisor(inputs.binary, inputs.dialect))
    base_fn, cand_fn = (supervisor_launch_fn(sup, inputs.target_path, inputs.n_ctx, inputs.request.threads, events,
                                             None, inputs.request.server_args) for sup in sups)

    def launch(c: Candidate, cancel: threading.Event) -> Launch:
        return (base_fn if c.is_baseline else cand_fn)(c, cancel)

    try:
        yield launch
    finally:
        for sup in sups:
            sup.stop(grace_s=5.0)
