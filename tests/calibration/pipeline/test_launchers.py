"""The sweep's launch function over two supervised llama-servers: a real start of stories260K (ready event,
a client that answers, the baseline's own supervisor), a configuration the binary cannot express refused
before any launch, and both servers stopped when the block ends, however it ends."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from tuner.calibration.candidates import Candidate
from tuner.calibration.measure import Launch, LaunchError
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.launchers import open_launchers
from tuner.calibration.request import TuneEvent


def test_a_given_launch_function_is_used_as_it_is(resolve: Any) -> None:
    def mine(c: Candidate, cancel: threading.Event) -> Launch:
        raise AssertionError("not called here")

    with open_launchers(resolve(), mine, Events(None)) as launch:
        assert launch is mine


class Boom(Exception):
    pass


@pytest.mark.server
def test_a_real_launch_then_both_servers_stop_when_the_block_fails(resolve: Any, llama_server_bin: Path) -> None:
    from tuner.server.discovery import find_named_server

    events: list[TuneEvent] = []
    inputs = resolve(binary=find_named_server(llama_server_bin))
    cancel = threading.Event()
    pids: list[int] = []
    with pytest.raises(Boom), open_launchers(inputs, None, Events(events.append)) as launch:
        with pytest.raises(LaunchError, match="ngram-cache has a fixed draft length of 8"):
            launch(Candidate(spec_type="ngram-cache", ngram_n_max=16), cancel)  # refused before any launch
        assert events == []
        base = launch(Candidate(), cancel)
        pids += [p.pid for p in psutil.Process().children(recursive=True) if "llama-server" in p.name()]
        assert len(pids) == 1 and base.load_s > 0 and base.speculative_active is None
        answer = base.client.completion("Once upon a time", n_predict=4)
        assert answer["timings"]["predicted_n"] >= 1
        (ready,) = events
        assert ready.kind == "ready" and ready.candidate == Candidate() and ready.detail["load_s"] == base.load_s
        assert ready.message.startswith("no speculation: ready in ") and str(inputs.target_path) in ready.detail["argv"]
        assert "-c" in ready.detail["argv"] and "512" in ready.detail["argv"]  # the request's context on every launch
        raise Boom  # the sweep failed: both supervisors must stop their servers
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
