"""Which model the router supervisor follows as "the current model" when requests load several within one look
at ``/models`` (tuner/server/router_follow.py ``_follow_loads``), from a recorded ``/models`` reply.

``router-models-two-loaded.json`` is a real b11434 router's answer (paths shortened) after ``stories260K`` and
then ``draft-good`` were loaded: the rows come in table order (``draft-good`` first) and every row's ``created``
is the same second (the router's clock at the answer), so nothing in it orders the two loads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.server.conftest import DATA, help_text
from tuner.server import RouterSupervisor, ServerState
from tuner.server.config import ServerConfig
from tuner.server.dialect import parse_help
from tuner.server.preset import RouterModel
from tuner.server.router_models import ModelTrack
from tuner.server.router_status import parse_models
from tuner.server.states import StateChange

REPLY = json.loads((DATA / "router-models-two-loaded.json").read_text(encoding="utf-8"))["data"]
#: The recorded reply's loads, in the order the requests loaded them.
LOADED = ("stories260K", "draft-good")


def _port(row: dict) -> int:
    args = row["status"]["args"]
    return int(args[args.index("--port") + 1])


def _reply(target_value: str = "loaded") -> list[dict]:
    rows = json.loads(json.dumps(REPLY))
    for row in rows:
        if row["id"] == "target":
            row["status"]["value"] = target_value
    return rows


def _serving_target(changes: list[StateChange]) -> RouterSupervisor:
    """A supervisor whose current model ``target`` passed its checks on the port of the recorded reply."""
    sup = RouterSupervisor(Path("llama-server"), parse_help(help_text("b11434")), on_state=changes.append)
    for row in REPLY:
        model = RouterModel(row["id"], ServerConfig(model_path=Path(f"models/{row['id']}.gguf")), tuned=True)
        sup._tracks[row["id"]] = ModelTrack(model)
    target = sup._tracks["target"]
    target.port = _port(next(r for r in REPLY if r["id"] == "target"))
    with sup._lock:
        sup._gen, sup._wanted = 1, "target"
        sup._machine.change(ServerState.STARTING, message="starting")
        _ready(sup, "target")
    assert sup.current == "target" and sup.state is ServerState.READY
    return sup


def _ready(sup: RouterSupervisor, model: str) -> None:
    """``model`` passed its readiness checks (what ``_check_model`` does on success)."""
    with sup._lock:
        sup._tracks[model].ready_at_s = time.monotonic()
        sup._model_ready(model)


def test_the_recorded_reply_has_nothing_that_orders_the_loads() -> None:
    assert [row["id"] for row in REPLY] == ["draft-good", "stories260K", "target"]  # table order, not load order
    assert len({row["created"] for row in REPLY}) == 1
    assert {m: s.value for m, s in parse_models(REPLY).items()} == dict.fromkeys(("draft-good", "stories260K",
                                                                                  "target"), "loaded")


@pytest.mark.parametrize("ready_order", [LOADED, LOADED[::-1]])
def test_two_loads_within_one_look_leave_the_running_current_model_followed(ready_order: tuple[str, str]) -> None:
    changes: list[StateChange] = []
    sup = _serving_target(changes)
    sup._observe(1, parse_models(_reply()))
    assert sup.state is ServerState.READY  # no switch announced for loads that cannot be ordered
    assert "requests loaded draft-good, stories260K at once; still following target" in changes[-1].message
    for model in ready_order:
        _ready(sup, model)
        assert sup.current == "target" and sup.state is ServerState.READY


@pytest.mark.parametrize("ready_order", [LOADED, LOADED[::-1]])
def test_when_the_current_model_unloaded_the_first_tied_model_ready_is_followed(ready_order: tuple[str, str]) -> None:
    changes: list[StateChange] = []
    sup = _serving_target(changes)
    sup._observe(1, parse_models(_reply("unloaded")))
    assert sup.state is ServerState.SWITCHING
    for model in ready_order:
        _ready(sup, model)
        assert sup.current == ready_order[0] and sup.state is ServerState.READY  # the second does not take over


def test_a_single_load_a_request_made_is_followed() -> None:
    changes: list[StateChange] = []
    sup = _serving_target(changes)
    rows = [row for row in _reply() if row["id"] != "draft-good"]
    sup._observe(1, parse_models(rows))
    assert sup.state is ServerState.SWITCHING and "loading stories260K (a request named it)" in changes[-1].message
    _ready(sup, "stories260K")
    assert sup.current == "stories260K" and sup.state is ServerState.READY
