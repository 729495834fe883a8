"""Families: the LLMs that can draft for each other, with ranked draft candidates per target."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.compat import CompatVerdict
from tuner.catalog.model import ModelFile


@dataclass(frozen=True)
class DraftCandidate:
    """A compatible draft for one target. ``score`` in [0, 1], higher is more useful;
    ``warnings`` are plain sentences (e.g. the draft is too big to speed the target up)."""

    model: ModelFile
    score: float
    size_ratio: float | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetEntry:
    """One target model of a family with its ranked drafts (best first) and the models
    rejected as drafts, each with llama.cpp's verdict."""

    target: ModelFile
    drafts: tuple[DraftCandidate, ...]
    incompatible: tuple[tuple[ModelFile, CompatVerdict], ...] = ()


@dataclass(frozen=True)
class Family:
    """Models that pass the draft-compatibility check with each other.

    Attributes:
        fingerprint: tokenizer fingerprint of the first member (the family's key).
        members: every LLM of the family, largest first.
        targets: per member, its draft candidates (smaller compatible members).
    """

    fingerprint: str
    members: tuple[ModelFile, ...]
    targets: tuple[TargetEntry, ...]


def group_families(models: list[ModelFile]) -> list[Family]:
    """Group the ``llm`` models into families and rank the drafts of each target.

    Non-LLM kinds are ignored. A model with no compatible partner forms a one-member family
    (it can still use n-gram speculation or its own MTP layers).
    """
    raise NotImplementedError
