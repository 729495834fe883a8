"""The decision's sentences as data: what each says (a kind and its parameters) and where it stands (a slot).

A sentence is rendered to words in one place (``tuner.calibration.wording``: one renderer per kind); code
that needs a fact reads the sentence's parameters or the field behind them, never the words. The slots fix
the order in which a decision's sentences are read, whatever step of the tune added them (issue 24, item 3):

1. :attr:`Slot.HEADLINE`: the plain first sentence (what is served, how much faster; or "no speculation").
2. :attr:`Slot.SPEED_VARIED`: when the machine's own speed varied too much to decide, that.
3. :attr:`Slot.EVIDENCE`: the figures behind the headline (pairs, interval, acceptance, chain rule,
   where the outputs differed).
4. one sentence each: :attr:`Slot.THREADS` (the thread trade), :attr:`Slot.CPU_WORKAROUND` (a CPU
   kernel workaround in force), :attr:`Slot.CAPTURED` (how many captured requests were replayed),
   :attr:`Slot.MIX` (the served mix of short and long-context requests).
5. :attr:`Slot.MACHINE_LOAD`: other programs on the machine during the sweep.
6. :attr:`Slot.SWEEP`: about the sweep itself, in this order: the search's own (a re-measured, unsteady or
   unmeasurable baseline, what could not beat the leader and was not launched, then the time limit), "Measured with …", long-context requests left out, the
   speedup at depth, types that never drafted, where it ran.

Sentences of one slot keep the order they were added in. The THREADS and CAPTURED slots are reserved for
issues 25 and 28 (no kind yet). A sentence of kind :data:`TEXT` carries words built
before it (``params = {"text": ...}``): the tune makes none (tests/test_structure.py counts them); tests use
it for a slot that has no kind yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeAlias, Union

JsonValue: TypeAlias = Union[str, int, float, bool, None, "list[JsonValue]", "dict[str, JsonValue]"]
"""A value a sentence's parameters may hold: what survives a round trip through JSON (a saved profile)."""

TEXT = "text"
"""The kind of a sentence whose words were built before it (``params["text"]``), during the move only."""


class Slot(IntEnum):
    """Where a sentence stands in the decision (lower first); the gaps leave room for new slots."""

    HEADLINE = 10
    SPEED_VARIED = 20
    EVIDENCE = 30
    THREADS = 40
    CPU_WORKAROUND = 41
    CAPTURED = 42
    MIX = 43
    MACHINE_LOAD = 50
    SWEEP = 60


@dataclass(frozen=True)
class Sentence:
    """One sentence of a decision, as data.

    Attributes:
        slot: where it stands (:class:`Slot`).
        kind: what it says, e.g. ``"sweep.time_limit"``; each kind has one renderer.
        params: the facts it states (plain JSON values: labels, figures, counts).
    """

    slot: Slot
    kind: str
    params: Mapping[str, JsonValue] = field(default_factory=dict)

    @classmethod
    def text(cls, slot: Slot, words: str) -> Sentence:
        """A sentence of kind :data:`TEXT` carrying ``words`` built elsewhere."""
        return cls(slot, TEXT, {"text": words})

    def words(self) -> str:
        """The words of a :data:`TEXT` sentence.

        Raises:
            ValueError: the sentence is of another kind (its words come from its renderer).
        """
        value = self.params.get("text")
        if self.kind != TEXT or not isinstance(value, str):
            raise ValueError(f"sentence of kind {self.kind!r} has no words of its own: render it")
        return value

    def to_json(self) -> dict[str, JsonValue]:
        """Plain-JSON form (a saved profile's decision)."""
        return {"slot": self.slot.name, "kind": self.kind, "params": dict(self.params)}

    @classmethod
    def from_json(cls, obj: Mapping[str, JsonValue]) -> Sentence:
        """Inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError, ValueError: ``obj`` is not such a dict (an unknown slot name included).
        """
        params = obj.get("params") or {}
        if not isinstance(params, dict):
            raise TypeError(f"sentence params must be an object, got {type(params).__name__}")
        return cls(Slot[str(obj["slot"])], str(obj["kind"]), params)


def in_reading_order(sentences: Iterable[Sentence]) -> tuple[Sentence, ...]:
    """``sentences`` sorted by slot; within a slot, in the order given."""
    return tuple(sorted(sentences, key=lambda s: s.slot))


__all__ = ["TEXT", "JsonValue", "Sentence", "Slot", "in_reading_order"]
