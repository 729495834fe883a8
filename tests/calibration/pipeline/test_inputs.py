"""The tune's inputs resolved once: what ``TuneInputs`` holds and which events say so, and the order in which
bad inputs are reported (the quickest fix first), pinned with one bad input of each kind and every
possible two at once."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.synth import write_llama_gguf
from tuner.calibration.pipeline.events import Events
from tuner.calibration.pipeline.inputs import resolve_inputs
from tuner.calibration.prompts import DEFAULT_SET_PROMPTS, PromptFileError
from tuner.calibration.request import TuneError, TuneEvent, TuneRequest


@dataclass
class Case:
    """One tune's inputs, each good unless a bad kind below changed it."""

    models_dir: Path
    target: str | None = None
    prompts: Path | None = None
    server: Path | None = None
    n_ctx: int | None = None
    server_args: tuple[str, ...] = ()
    discovered: Any = None
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bad:
    """One kind of bad input: how it spoils a :class:`Case`, and the start of the error it must raise."""

    name: str
    spoil: Callable[[Case, dict[str, Any]], None]
    words: Callable[[dict[str, Any]], str]


def _spoil_folder_target(c: Case, w: dict[str, Any]) -> None:
    c.target = "nope"


ORDER = (
    Bad("named --server", lambda c, w: setattr(c, "server", w["tmp"] / "no-such-server"),
        lambda w: f"--server {w['tmp'] / 'no-such-server'}: no such file, or not executable"),
    Bad("ambiguous --target", lambda c, w: (setattr(c, "models_dir", w["twins"]), setattr(c, "target", "model")),
        lambda w: "--target 'model' is ambiguous: 2 files have that name"),
    Bad("prompt file", lambda c, w: setattr(c, "prompts", w["tmp"] / "none.jsonl"),
        lambda w: f"{w['tmp'] / 'none.jsonl'}: cannot read prompt file"),
    Bad("folder or target", _spoil_folder_target, lambda w: "--target 'nope': no such LLM in "),
    Bad("context size", lambda c, w: setattr(c, "n_ctx", 10), lambda w: "--ctx-size 10: must be"),
    Bad("server dialect", lambda c, w: setattr(c, "discovered", w["broken"]), lambda w: f"{w['broken'].path}: "),
    Bad("extra llama-server flag", lambda c, w: setattr(c, "server_args", ("--no-such-flag",)),
        lambda w: "extra llama-server flag"),
)
"""The order the user hears about bad inputs in (tuner/calibration/pipeline/inputs.py's docstring)."""

IMPOSSIBLE = {("ambiguous --target", "folder or target")}
"""An ambiguous name needs a folder with two LLMs of that name: the folder and the name are then good."""


@pytest.fixture
def world(tmp_path: Path, family: Path, fake_binary: Any, broken_server: Path, quiet_machine: Any,
          monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The good inputs (a stories260K folder, the fake llama-server as the discovered one) and the
    material of the bad ones (a folder with two model.gguf, a broken binary)."""
    from dataclasses import replace

    import tuner.server.discovery as discovery

    twins = tmp_path / "twins"
    write_llama_gguf(twins / "a" / "model.gguf", n_embd=64, n_layers=2)
    write_llama_gguf(twins / "b" / "model.gguf", n_embd=64, n_layers=2, seed=1)
    w: dict[str, Any] = {"tmp": tmp_path, "family": family, "twins": twins, "fake": fake_binary,
                         "broken": replace(fake_binary, path=broken_server), "found": fake_binary}
    monkeypatch.setattr(discovery, "find_server", lambda setting=None: w["found"])
    return w


def _resolve(case: Case, w: dict[str, Any], events: list[TuneEvent] | None = None) -> Any:
    w["found"] = case.discovered or w["fake"]
    request = TuneRequest(models_dir=case.models_dir, target=case.target, prompts=case.prompts, server=case.server,
                          n_ctx=case.n_ctx, server_args=case.server_args, **case.fields)  # unchecked on purpose
    return resolve_inputs(request, scanned=None, binary=None, events=Events(events.append if events is not None else None))


def _reported(case: Case, w: dict[str, Any]) -> str:
    with pytest.raises((TuneError, PromptFileError)) as info:
        _resolve(case, w)
    return str(info.value)


@pytest.mark.parametrize("bad", ORDER, ids=[b.name for b in ORDER])
def test_each_bad_input_alone_is_named(bad: Bad, world: dict[str, Any]) -> None:
    case = Case(models_dir=world["family"])
    bad.spoil(case, world)
    assert _reported(case, world).startswith(bad.words(world))


PAIRS = [(a, b) for a, b in itertools.combinations(ORDER, 2) if (a.name, b.name) not in IMPOSSIBLE]


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a.name} + {b.name}" for a, b in PAIRS])
def test_of_two_bad_inputs_the_earlier_kind_is_reported(first: Bad, second: Bad, world: dict[str, Any]) -> None:
    case = Case(models_dir=world["family"])
    second.spoil(case, world)
    first.spoil(case, world)
    assert _reported(case, world).startswith(first.words(world))


def test_the_inputs_of_a_good_request_and_what_they_say(world: dict[str, Any], quiet_machine: Any) -> None:
    events: list[TuneEvent] = []
    inputs = _resolve(Case(models_dir=world["family"], fields={"long_share": 0.25}), world, events)
    family: Path = world["family"]
    assert inputs.models_dir == family.resolve() and inputs.target_path == (family / "stories260K.gguf").resolve()
    assert inputs.binary is world["fake"] and "draft-simple" in inputs.dialect.spec_types
    assert [Path(d.path).name for d in inputs.drafts] == ["stories-draft.gguf"] and inputs.heads == ()
    assert inputs.devices is quiet_machine and not inputs.gpu and not inputs.rpc_used
    # the built-in set gives one prompt per category, then the two long-context requests, numbered after it
    chosen = [i for i, _ in inputs.prompts.chosen]
    n_set = len(inputs.prompts.set.prompts)
    assert chosen[:DEFAULT_SET_PROMPTS] == sorted(chosen[:DEFAULT_SET_PROMPTS]) and chosen[-2:] == [n_set, n_set + 1]
    assert inputs.long_share == 0.25 and inputs.n_ctx >= 256 and inputs.workload.n_ctx == inputs.n_ctx
    assert not inputs.workload.chat  # stories260K has no chat template
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and set(kinds[1:]) <= {"error"}, kinds
    assert events[0].message.startswith(f"tuning stories260K.gguf in {family.resolve()}: ")
    assert events[0].detail["n_ctx"] == inputs.n_ctx


def test_a_share_without_long_context_requests_is_refused_even_from_the_search_settings(
        world: dict[str, Any]) -> None:
    """The share may come from a test's SearchSettings (``default_long_share``): checked all the same."""
    request = TuneRequest(models_dir=world["family"], long_context=False)
    with pytest.raises(TuneError, match="--long-share 0.5: the sweep has no long-context requests") as info:
        resolve_inputs(request, scanned=None, binary=world["fake"], events=Events(None), default_long_share=0.5)
    assert info.value.bad_input
    assert resolve_inputs(request, scanned=None, binary=world["fake"], events=Events(None),
                          default_long_share=0.0).long_share == 0.0
