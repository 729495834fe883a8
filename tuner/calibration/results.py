"""Measurement records of a sweep: one :class:`Sample` per request, one :class:`Measurement` per launch.

These are plain frozen dataclasses so the decision can be unit-tested on recorded measurements
(see :func:`Measurement.from_json`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .candidates import Candidate
from .predict import PerPositionCounts


@dataclass(frozen=True)
class Sample:
    """One measured ``/completion`` request.

    Attributes:
        prompt_index: index into the prompt set.
        category: the prompt's category, ``None`` when the set has none.
        repetition: 0-based repetition number (the prompt carries a fresh prefix per repetition).
        gen_tokens_per_s: ``timings.predicted_per_second``.
        prompt_tokens_per_s: ``timings.prompt_per_second`` (``None`` when absent).
        predicted_n: ``timings.predicted_n`` (generated tokens).
        predicted_ms: ``timings.predicted_ms``.
        draft_n: ``timings.draft_n``; ``None`` when absent (absent = nothing was drafted, S7).
        draft_n_accepted: ``timings.draft_n_accepted``; ``None`` when absent.
        content: generated text (for the lossless check), ``None`` when not kept.
        prompt_n: ``timings.prompt_n`` (prompt tokens processed; ``None`` when absent).
        endpoint: the endpoint measured (``/completion`` or ``/v1/chat/completions``; ``None`` = not recorded).
    """

    prompt_index: int
    category: str | None
    repetition: int
    gen_tokens_per_s: float
    prompt_tokens_per_s: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    content: str | None = None
    prompt_n: int | None = None
    endpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (content included)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Divergence:
    """Where a candidate's output first differs from the baseline's for the same request.

    Attributes:
        prompt_index: the prompt.
        repetition: the repetition.
        char_offset: first differing character in the generated text.
    """

    prompt_index: int
    repetition: int
    char_offset: int


@dataclass(frozen=True)
class NoDrafts:
    """Why an n-gram candidate that ran proposed no token, as facts (the words are
    ``tuner.calibration.wording.no_drafts_error``'s).

    Attributes:
        sampling: the served sampling in words (``Sampling.describe``'s, e.g. llama-server's defaults
            spelled out with "(llama-server's defaults)" after them).
        sampled: the served sampling is not greedy (so the lossless check ran at greedy settings).
        greedy_draft_n: tokens the same type drafted in that greedy check; ``None`` when it did not run.
        requests: the measured requests in which it drafted nothing (``None`` when not recorded).
    """

    sampling: str
    sampled: bool
    greedy_draft_n: int | None = None
    requests: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (``requests`` only when recorded)."""
        out: dict[str, Any] = {"sampling": self.sampling, "sampled": self.sampled,
                               "greedy_draft_n": self.greedy_draft_n}
        if self.requests is not None:
            out["requests"] = self.requests
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> NoDrafts:
        """Inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError: ``obj`` is not such a dict.
        """
        n, r = obj.get("greedy_draft_n"), obj.get("requests")
        return cls(str(obj["sampling"]), bool(obj["sampled"]), None if n is None else int(n),
                   None if r is None else int(r))


@dataclass(frozen=True)
class Measurement:
    """All samples of one candidate launch (or several launches pooled), with its checks.

    Attributes:
        candidate: what was launched.
        samples: measured requests (warm-up excluded).
        speculative_active: ``/slots[0].speculative`` after start (``None`` when not checked).
        counts: speculative counters from ``/metrics`` accumulated over the measured requests.
        error: why the candidate failed (launch error, ``speculative: false``, ``draft_n`` absent),
            ``None`` when it ran.
        load_s: seconds from launch to ready.
        lossless: True when every output equals the baseline's, False when one differs, ``None``
            when not compared (the baseline itself, or no baseline output).
        divergences: where outputs first differed (reported, not failed: batched verification can
            flip a near-tie on GPUs).
        predicted_gen_tokens_per_s: the search's prediction for this candidate before it ran.
        stage: search stage that produced it (``"baseline"``, ``"probe"``, ``"refine"``, ``"confirm"``, ``"contrast"``:
            head to head, ``tuner.calibration.pairing.HEAD_TO_HEAD``).
        stopped_early: True when the run was cut short as a clear loser (fewer prompts measured).
        evidence: the server's last log lines when the launch failed.
        greedy_draft_n: drafted tokens in the separate greedy lossless pass (``None`` when none ran).
        no_drafts_at: the served sampling, in words, when a speculative candidate never drafted at it (an
            n-gram type at temperature > 0 may never find a match); ``error`` then says the same in a
            sentence, and the candidate is a finding, not a broken run.
        no_drafts: the same finding as facts (:class:`NoDrafts`; ``tuner.calibration.measure`` records it
            with ``no_drafts_at``), ``None`` when not recorded (a measurement built without it: the decision
            then reads ``error``'s words).
        cut_short: True when the sweep's hard time limit ended the launch before all its requests ran
            (``tuner.calibration.search``: the budget holds even when the estimates were wrong); the
            samples it has are complete requests, and a repetition with missing prompts pairs with nothing.
        superseded: for a baseline launch, why its figures are no longer the model's speed (a disturbed
            run: another measurement of the same model alone disagreed, and a re-measurement confirmed
            that one); ``None`` = in use. A superseded launch stays in the record, is never quoted as the
            model's speed and never screens a candidate.
    """

    candidate: Candidate
    samples: tuple[Sample, ...] = ()
    speculative_active: bool | None = None
    counts: PerPositionCounts | None = None
    error: str | None = None
    load_s: float | None = None
    lossless: bool | None = None
    divergences: tuple[Divergence, ...] = ()
    predicted_gen_tokens_per_s: float | None = None
    stage: str = "probe"
    stopped_early: bool = False
    evidence: tuple[str, ...] = ()
    greedy_draft_n: int | None = None
    no_drafts_at: str | None = None
    cut_short: bool = False
    superseded: str | None = None
    no_drafts: NoDrafts | None = None

    @property
    def ok(self) -> bool:
        """True when the candidate ran and passed the speculative checks."""
        return self.error is None and bool(self.samples)

    def drafted_nothing(self) -> NoDrafts | None:
        """What was measured of a speculative run that drafted nothing (``no_drafts_at`` set), as facts: the
        recorded :attr:`no_drafts`, else built from this measurement's own fields (the sampling words, the greedy
        check's drafted tokens, the requests measured); ``None`` for any other run."""
        if self.no_drafts_at is None:
            return None
        nd = self.no_drafts or NoDrafts(self.no_drafts_at, sampled=self.greedy_draft_n is not None,
                                        greedy_draft_n=self.greedy_draft_n)
        return nd if nd.requests is not None else replace(nd, requests=len(self.samples))

    @property
    def repetitions(self) -> int:
        """Number of distinct repetitions measured."""
        return len({s.repetition for s in self.samples})

    def rep_gen_tokens_per_s_by_id(self) -> dict[int, float]:
        """Aggregate tokens/s per repetition id: Σ generated tokens ÷ Σ generation time over its prompts.

        Falls back to the mean of ``gen_tokens_per_s`` when token counts/times are missing.
        """
        out: dict[int, float] = {}
        reps: dict[int, list[Sample]] = {}
        for s in self.samples:
            reps.setdefault(s.repetition, []).append(s)
        for r in sorted(reps):
            ss = reps[r]
            if all(s.predicted_n and s.predicted_ms for s in ss):
                toks = sum(max(1, (s.predicted_n or 1) - 1) for s in ss)
                ms = sum(s.predicted_ms or 0.0 for s in ss)
                out[r] = toks / (ms / 1000.0) if ms > 0 else statistics.fmean(s.gen_tokens_per_s for s in ss)
            else:
                out[r] = statistics.fmean(s.gen_tokens_per_s for s in ss)
        return out

    def rep_gen_tokens_per_s(self) -> list[float]:
        """Aggregate tokens/s per repetition, in repetition order (see :meth:`rep_gen_tokens_per_s_by_id`)."""
        return list(self.rep_gen_tokens_per_s_by_id().values())

    @property
    def gen_tokens_per_s(self) -> float | None:
        """Median over repetitions of the aggregate tokens/s; ``None`` without samples."""
        reps = self.rep_gen_tokens_per_s()
        return statistics.median(reps) if reps else None

    @property
    def prompt_tokens_per_s(self) -> float | None:
        """Median prompt-processing tokens/s over samples; ``None`` when absent."""
        vals = [s.prompt_tokens_per_s for s in self.samples if s.prompt_tokens_per_s]
        return statistics.median(vals) if vals else None

    @property
    def draft_n(self) -> int:
        """Σ drafted tokens over samples (0 when none drafted)."""
        return sum(s.draft_n or 0 for s in self.samples)

    @property
    def draft_n_accepted(self) -> int:
        """Σ accepted drafted tokens over samples."""
        return sum(s.draft_n_accepted or 0 for s in self.samples)

    @property
    def acceptance(self) -> float | None:
        """Acceptance rate Σ draft_n_accepted ÷ Σ draft_n; ``None`` for no drafts (e.g. the baseline)."""
        return self.draft_n_accepted / self.draft_n if self.draft_n else None

    def category_gen_tokens_per_s(self) -> dict[str, float]:
        """Per category: Σ tokens ÷ Σ time over its samples (median-free; used for per-category speedups)."""
        acc: dict[str, list[Sample]] = {}
        for s in self.samples:
            if s.category is not None:
                acc.setdefault(s.category, []).append(s)
        out: dict[str, float] = {}
        for cat, ss in acc.items():
            if all(s.predicted_n and s.predicted_ms for s in ss):
                out[cat] = sum(max(1, (s.predicted_n or 1) - 1) for s in ss) / (sum(s.predicted_ms or 0 for s in ss) / 1000.0)
            else:
                out[cat] = statistics.fmean(s.gen_tokens_per_s for s in ss)
        return out

    def category_acceptance(self) -> dict[str, float]:
        """Per category acceptance rate (categories without drafts left out)."""
        dn: dict[str, int] = {}
        da: dict[str, int] = {}
        for s in self.samples:
            if s.category is None or not s.draft_n:
                continue
            dn[s.category] = dn.get(s.category, 0) + s.draft_n
            da[s.category] = da.get(s.category, 0) + (s.draft_n_accepted or 0)
        return {c: da[c] / dn[c] for c in dn}

    def merged(self, other: Measurement) -> Measurement:
        """Pool another launch of the same candidate (overlapping repetition ids are offset to stay distinct)."""
        mine = {s.repetition for s in self.samples}
        extra = other.samples
        if mine & {s.repetition for s in other.samples}:
            offset = 1 + max(mine)
            extra = tuple(replace(s, repetition=s.repetition + offset) for s in other.samples)
        counts = self.counts
        if other.counts is not None:
            if counts is None:
                counts = other.counts
            else:
                n = max(len(counts.accepted_per_pos), len(other.counts.accepted_per_pos))
                a = list(counts.accepted_per_pos) + [0] * (n - len(counts.accepted_per_pos))
                b = list(other.counts.accepted_per_pos) + [0] * (n - len(other.counts.accepted_per_pos))
                counts = PerPositionCounts(
                    counts.drafts_total + other.counts.drafts_total,
                    counts.draft_tokens_total + other.counts.draft_tokens_total,
                    counts.accepted_tokens_total + other.counts.accepted_tokens_total,
                    tuple(x + y for x, y in zip(a, b)),
                )
        lossless = self.lossless
        if other.lossless is not None:
            lossless = other.lossless if lossless is None else (lossless and other.lossless)
        return replace(
            self,
            samples=self.samples + extra,
            counts=counts,
            error=self.error or other.error,
            no_drafts_at=self.no_drafts_at or other.no_drafts_at,
            no_drafts=self.no_drafts or other.no_drafts,
            greedy_draft_n=self.greedy_draft_n if self.greedy_draft_n is not None else other.greedy_draft_n,
            lossless=lossless,
            divergences=self.divergences + other.divergences,
            speculative_active=other.speculative_active if other.speculative_active is not None else self.speculative_active,
        )

    def to_json(self, with_content: bool = False) -> dict[str, Any]:
        """Plain-JSON form for profiles and ``--json``; outputs left out unless ``with_content``;
        ``no_drafts`` only when recorded."""
        samples = []
        for s in self.samples:
            d = s.to_json()
            if not with_content:
                d.pop("content", None)
            samples.append(d)
        extra = {"no_drafts": self.no_drafts.to_json()} if self.no_drafts is not None else {}
        return {
            "candidate": self.candidate.to_json(),
            "label": self.candidate.label,
            "stage": self.stage,
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "prompt_tokens_per_s": self.prompt_tokens_per_s,
            "acceptance": self.acceptance,
            "speculative_active": self.speculative_active,
            "lossless": self.lossless,
            "divergences": [d.__dict__ for d in self.divergences],
            "error": self.error,
            "load_s": self.load_s,
            "predicted_gen_tokens_per_s": self.predicted_gen_tokens_per_s,
            "counts": self.counts.to_json() if self.counts else None,
            "stopped_early": self.stopped_early,
            "evidence": list(self.evidence),
            "greedy_draft_n": self.greedy_draft_n,
            "no_drafts_at": self.no_drafts_at,
            "cut_short": self.cut_short,
            "superseded": self.superseded,
            **extra,
            "samples": samples,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Measurement:
        """Inverse of :meth:`to_json` (recorded measurements in tests and profiles)."""
        counts = obj.get("counts")
        return cls(
            candidate=Candidate.from_json(obj["candidate"]),
            samples=tuple(Sample(**{k: v for k, v in s.items() if k in Sample.__dataclass_fields__}) for s in obj.get("samples", ())),
            speculative_active=obj.get("speculative_active"),
            counts=PerPositionCounts(
                counts["drafts_total"], counts["draft_tokens_total"], counts["accepted_tokens_total"],
                tuple(counts.get("accepted_per_pos", ())),
            ) if counts else None,
            error=obj.get("error"),
            load_s=obj.get("load_s"),
            lossless=obj.get("lossless"),
            divergences=tuple(Divergence(**d) for d in obj.get("divergences", ())),
            predicted_gen_tokens_per_s=obj.get("predicted_gen_tokens_per_s"),
            stage=obj.get("stage", "probe"),
            stopped_early=bool(obj.get("stopped_early", False)),
            evidence=tuple(obj.get("evidence") or ()),
            greedy_draft_n=obj.get("greedy_draft_n"),
            no_drafts_at=obj.get("no_drafts_at"),
            cut_short=bool(obj.get("cut_short", False)),
            superseded=obj.get("superseded"),
            no_drafts=NoDrafts.from_json(obj["no_drafts"]) if isinstance(obj.get("no_drafts"), dict) else None,
        )


def synthetic_samples(
    gen_tokens_per_s: Sequence[float | list[float]],
    acceptance: float | None = None,
    predicted_n: int = 128,
    drafted_per_token: float = 0.8,
    categories: list[str | None] | None = None,
) -> tuple[Sample, ...]:
    """Build samples from recorded figures (tests, benchmarks).

    Args:
        gen_tokens_per_s: per repetition a value (one prompt) or a list of values (one per prompt).
        acceptance: acceptance rate to record (``None`` = no drafts, as for the baseline).
        predicted_n: generated tokens per request.
        drafted_per_token: drafted tokens per generated token when ``acceptance`` is given.
        categories: category per prompt index.
    """
    out: list[Sample] = []
    for r, row in enumerate(gen_tokens_per_s):
        vals = row if isinstance(row, list) else [row]
        for p, tps in enumerate(vals):
            dn = da = None
            if acceptance is not None:
                dn = max(1, int(round(predicted_n * drafted_per_token)))
                da = int(round(dn * acceptance))
            out.append(
                Sample(
                    prompt_index=p,
                    category=categories[p] if categories else None,
                    repetition=r,
                    gen_tokens_per_s=float(tps),
                    predicted_n=predicted_n,
                    predicted_ms=(predicted_n - 1) / float(tps) * 1000.0,
                    draft_n=dn,
                    draft_n_accepted=da,
                )
            )
    return tuple(out)


def synthetic_rounds(
    candidate: Candidate,
    pairs: list[tuple[float | list[float], float | list[float]]],
    acceptance: float | None = None,
    categories: list[str | None] | None = None,
    first_repetition: int = 0,
    baseline: Candidate | None = None,
    predicted_n: int = 128,
) -> list[Measurement]:
    """Recorded paired rounds (tests, benchmarks): the ``confirm`` launches of the search's
    ``A B B A A B B A …`` schedule for one candidate.

    Args:
        candidate: the speculative candidate (``B``).
        pairs: per pair ``(baseline tokens/s, candidate tokens/s)``, each a value (one prompt) or a
            list of values (one per prompt); pair ``j`` is repetition ``first_repetition + j``.
        acceptance: the candidate's acceptance rate.
        categories: category per prompt index.
        first_repetition: repetition id of the first pair.
        baseline: the baseline candidate (default ``Candidate()``).
        predicted_n: generated tokens per request.

    Returns:
        Launches in time order: ``A[r0]``, ``B[r0, r1]``, ``A[r1, r2]``, ``B[r2, r3]``, … (each
        candidate repetition is adjacent to the baseline launch holding the same repetition).
    """
    base_c = baseline or Candidate()
    n = len(pairs)

    def launch(c: Candidate, idx: list[int], side: int) -> Measurement:
        rows = [pairs[j][side] for j in idx]
        ss = synthetic_samples(rows, acceptance=acceptance if side == 1 else None, predicted_n=predicted_n,
                               categories=categories)
        ss = tuple(replace(s, repetition=first_repetition + idx[s.repetition]) for s in ss)
        return Measurement(c, samples=ss, speculative_active=True, stage="confirm", load_s=1.0)

    out: list[Measurement] = [launch(base_c, [0], 0)] if n else []
    k = 0
    while 2 * k < n:
        out.append(launch(candidate, [j for j in (2 * k, 2 * k + 1) if j < n], 1))
        nxt = [j for j in (2 * k + 1, 2 * k + 2) if j < n]
        if nxt:
            out.append(launch(base_c, nxt, 0))
        k += 1
    return out


__all__ = ["Sample", "Divergence", "Measurement", "NoDrafts", "synthetic_rounds", "synthetic_samples"]
