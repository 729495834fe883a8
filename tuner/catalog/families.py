"""Families: the LLMs that can draft for each other, with ranked draft candidates per target.

Two LLMs are in the same family when llama.cpp would accept one as the other's draft
(:func:`tuner.catalog.compat.check_compatible`; families are the connected groups of that
relation). Within a family each model is a possible target; its draft candidates are the
*smaller* compatible members, ranked by usefulness:

- size ratio (draft bytes ÷ target bytes): a draft costs a forward pass per drafted token, so
  it must be much cheaper than the target. Ratios up to ~10 % score best; from 50 % on a draft
  cannot speed the target up (warning), from 25 % only with very high acceptance (warning);
- quantization: a full-precision (F32/F16/BF16) draft next to a quantized target wastes memory
  bandwidth (warning, small penalty);
- context: a draft trained on a shorter context than the target's (warning).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.compat import CompatVerdict, check_compatible, check_tokenizers
from tuner.catalog.header import GGUFError
from tuner.catalog.heads import HeadFacts, HeadVerdict, check_head, head_facts
from tuner.catalog.model import KIND_DRAFT_HEAD, ModelFile

FULL_PRECISION = frozenset({"F32", "F16", "BF16"})


@dataclass(frozen=True)
class DraftCandidate:
    """A compatible draft for one target.

    Attributes:
        model: the draft.
        score: usefulness in [0, 1], higher is better (ranking key).
        size_ratio: draft size ÷ target size (``None`` when a size is unknown).
        warnings: plain sentences, e.g. "draft is 60 % of the target's size: it cannot speed it up".
    """

    model: ModelFile
    score: float
    size_ratio: float | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class HeadCandidate:
    """A draft head (EAGLE-3 / DFlash / DSpark / MTP head / Gemma 4 assistant) made for one target.

    Attributes:
        model: the head file (kind ``draft-head``).
        spec_type: the ``--spec-type`` it runs with (``draft-eagle3``, ``draft-dflash``,
            ``draft-dspark``, ``draft-mtp``); passed with ``-md`` = the head file.
        verdict: the matching verdict of :func:`tuner.catalog.heads.check_head`.
    """

    model: ModelFile
    spec_type: str
    verdict: HeadVerdict


@dataclass(frozen=True)
class TargetEntry:
    """One target model of a family with its ranked drafts (best first), the smaller LLMs
    rejected as drafts (each with llama.cpp's verdict), the draft heads made for it and the
    heads that do not fit it (each with the failed rule)."""

    target: ModelFile
    drafts: tuple[DraftCandidate, ...]
    incompatible: tuple[tuple[ModelFile, CompatVerdict], ...] = ()
    heads: tuple[HeadCandidate, ...] = ()
    mismatched_heads: tuple[tuple[ModelFile, HeadVerdict], ...] = ()

    @property
    def routes(self) -> tuple[tuple[str, str], ...]:
        """Every speculation route this target can take, as ``(spec_type, what)`` pairs in plan order:
        its own MTP layers (``draft-mtp``), each compatible draft (``draft-simple``), each matching head,
        and n-gram lookup (always possible, no extra model). ``what`` is a file name or a short phrase."""
        out: list[tuple[str, str]] = []
        if self.target.mtp_layers:
            out.append(("draft-mtp", f"{self.target.mtp_layers} MTP layer(s) inside the target"))
        out += [("draft-simple", c.model.path.name) for c in self.drafts]
        out += [(h.spec_type, h.model.path.name) for h in self.heads]
        out.append(("ngram", "n-gram lookup (no extra model)"))
        return tuple(out)


@dataclass(frozen=True)
class Family:
    """Models that pass the draft-compatibility check with each other.

    Attributes:
        fingerprint: tokenizer fingerprint of the largest member (the family's key).
        members: every LLM of the family, largest first.
        targets: one entry per member (largest first) with its draft candidates.
    """

    fingerprint: str
    members: tuple[ModelFile, ...]
    targets: tuple[TargetEntry, ...]


def rank_draft(target: ModelFile, draft: ModelFile) -> DraftCandidate:
    """Score one compatible draft for ``target`` (see the module docstring for the rules).

    Does not check compatibility (call :func:`check_compatible` first) and never raises.
    Returns a :class:`DraftCandidate` whose ``score`` is higher for a more useful draft,
    ``size_ratio`` = draft bytes ÷ target bytes (None when a size is unknown) and
    ``warnings`` in plain words."""
    warnings: list[str] = []
    ratio = None
    score = 0.5
    if target.size_bytes and draft.size_bytes:
        ratio = draft.size_bytes / target.size_bytes
        pct = round(ratio * 100)
        if ratio >= 0.5:
            score = 0.0
            warnings.append(f"draft is {pct} % of the target's size: it cannot speed it up")
        elif ratio >= 0.25:
            score = 0.25 * (0.5 - ratio) / 0.25
            warnings.append(f"draft is {pct} % of the target's size: a speedup needs very high acceptance")
        elif ratio > 0.1:
            score = 0.25 + 0.65 * (0.25 - ratio) / 0.15
        else:
            score = 0.9 + ratio  # 0.9 .. 1.0: small drafts are all good; among them prefer the larger
    tq, dq = (target.quantization or "").upper(), (draft.quantization or "").upper()
    if dq in FULL_PRECISION and tq and tq not in FULL_PRECISION:
        score *= 0.8
        warnings.append(f"draft is {dq} while the target is {tq}: a quantized draft would be cheaper")
    if target.context_length and draft.context_length and draft.context_length < target.context_length:
        warnings.append(
            f"draft was trained on {draft.context_length} tokens of context, the target on {target.context_length}"
        )
    tt, dt = target.tokenizer, draft.tokenizer
    if tt and dt and tt.n_tokens != dt.n_tokens:
        warnings.append(
            f"vocab sizes differ ({tt.n_tokens} vs {dt.n_tokens}): llama.cpp accepts the pair, but llama-server "
            "(b11434) aborts if either model ever produces one of the ids the other lacks"
        )
    return DraftCandidate(model=draft, score=round(max(0.0, min(1.0, score)), 4), size_ratio=ratio, warnings=tuple(warnings))


def _verdict(cache: dict, a: ModelFile, b: ModelFile) -> CompatVerdict:
    key = (str(a.path), str(b.path))
    v = cache.get(key)
    if v is None:
        try:
            v = check_compatible(a, b, regions=cache.setdefault("regions", {}))
        except GGUFError as exc:
            v = CompatVerdict(False, None, f"cannot compare token texts: {exc}")
        cache[key] = v
    return v


def group_families(models: list[ModelFile]) -> list[Family]:
    """Group the ``llm`` models into families and rank the drafts of each target.

    Draft heads (kind ``draft-head``) are matched against every target with
    :func:`tuner.catalog.heads.check_head` (``TargetEntry.heads`` / ``mismatched_heads``); other
    non-LLM kinds are ignored. A model with no compatible partner forms a one-member family
    (it can still use n-gram speculation or its own MTP layers). Models with equal tokenizer
    fingerprints are grouped without reading their files; other pairs go through
    :func:`check_compatible` (which may read the token arrays).

    Returns:
        Families sorted by their largest member's size (largest first).
    """
    llms = [m for m in models if m.is_llm and m.tokenizer is not None]
    llms.sort(key=lambda m: (-m.size_bytes, str(m.path)))
    toks = [m.tokenizer for m in llms if m.tokenizer is not None]  # toks[i] is llms[i]'s (every one has one)
    cache: dict = {}
    # union-find over fingerprint groups first (cheap), then across groups with the full check
    parent = list(range(len(llms)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)

    by_fp: dict[str, int] = {}
    reps: list[int] = []
    for i, tok in enumerate(toks):
        fp = tok.fingerprint
        if fp in by_fp:
            union(by_fp[fp], i)
        else:
            by_fp[fp] = i
            reps.append(i)
    for x in range(len(reps)):
        for y in range(x + 1, len(reps)):
            i, j = reps[x], reps[y]
            if check_tokenizers(toks[i], toks[j]) is not None:
                continue
            if _verdict(cache, llms[i], llms[j]).compatible:
                union(i, j)

    groups: dict[int, list[int]] = {}
    for i in range(len(llms)):
        groups.setdefault(find(i), []).append(i)

    heads = [m for m in models if m.kind == KIND_DRAFT_HEAD]
    facts: dict[str, HeadFacts | Exception] = {}
    for h in heads:
        try:
            facts[str(h.path)] = head_facts(h)
        except (GGUFError, OSError, ValueError) as exc:
            facts[str(h.path)] = exc

    def match_heads(target: ModelFile) -> tuple[tuple[HeadCandidate, ...], tuple[tuple[ModelFile, HeadVerdict], ...]]:
        ok: list[HeadCandidate] = []
        bad: list[tuple[ModelFile, HeadVerdict]] = []
        for h in heads:
            f = facts[str(h.path)]
            if isinstance(f, Exception):
                bad.append((h, HeadVerdict(False, "unreadable", f"cannot read the head {h.path.name}: {f}")))
                continue
            v = check_head(target, h, f)
            if v.matches:
                ok.append(HeadCandidate(model=h, spec_type=f.spec_type, verdict=v))
            else:
                bad.append((h, v))
        return tuple(ok), tuple(bad)

    families = []
    for root in sorted(groups):
        idx = groups[root]
        members = tuple(llms[i] for i in idx)
        targets = []
        for ti in idx:
            target = llms[ti]
            drafts = []
            rejected = []
            for m in llms:
                if m is target or m.size_bytes >= target.size_bytes:
                    continue
                v = _verdict(cache, target, m)
                if v.compatible:
                    drafts.append(rank_draft(target, m))
                else:
                    rejected.append((m, v))
            drafts.sort(key=lambda c: (-c.score, str(c.model.path)))
            ok_heads, bad_heads = match_heads(target)
            targets.append(TargetEntry(target=target, drafts=tuple(drafts), incompatible=tuple(rejected),
                                       heads=ok_heads, mismatched_heads=bad_heads))
        families.append(
            Family(fingerprint=toks[idx[0]].fingerprint, members=members, targets=tuple(targets))
        )
    return families


def family_to_json(family: Family) -> dict:
    """JSON form used by ``draftwise scan --json``."""
    return {
        "fingerprint": family.fingerprint,
        "members": [str(m.path) for m in family.members],
        "targets": [
            {
                "target": str(e.target.path),
                "mtp_layers": e.target.mtp_layers,
                "drafts": [
                    {
                        "path": str(c.model.path),
                        "score": c.score,
                        "size_ratio": None if c.size_ratio is None else round(c.size_ratio, 4),
                        "warnings": list(c.warnings),
                    }
                    for c in e.drafts
                ],
                "incompatible": [
                    {"path": str(m.path), "rule": v.rule, "message": v.message} for m, v in e.incompatible
                ],
                "heads": [
                    {"path": str(h.model.path), "spec_type": h.spec_type, "message": h.verdict.message} for h in e.heads
                ],
                "mismatched_heads": [
                    {"path": str(m.path), "rule": v.rule, "message": v.message} for m, v in e.mismatched_heads
                ],
                "routes": [{"spec_type": t, "what": w} for t, w in e.routes],
            }
            for e in family.targets
        ],
    }
