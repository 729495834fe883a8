"""Candidate configurations for a sweep, and the plan that picks which ones may be launched.

A *candidate* is one launchable llama-server configuration of a target: the baseline (no
speculation), an n-gram speculation type at one n-gram draft length, a draft model with
``draft-simple`` at one draft length ``n_max`` (and ``p_min``), ``draft-mtp`` when the target has MTP
layers, a draft head (EAGLE-3 / DFlash / DSpark / MTP head) matched to the target by the catalog, a
chain (``ngram-mod`` in front of a draft, the MTP layers or a head, one draft length per component),
or — on ik_llama.cpp — the server's own run-time draft-length tuner (``--spec-autotune``). Speculative settings are
server-wide in current builds (per-request overrides are compiled out: tools/server/server-schema.cpp),
so each candidate costs one server launch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.server.dialect import Dialect

    from .workload import Workload

SWEEP_NGRAM_TYPES = ("ngram-mod", "ngram-simple")
"""n-gram speculation types the sweep tries by default, in order (a subset of every n-gram type
llama-server knows, :data:`tuner.server.config.NGRAM_TYPES`). ``ngram-map-k``, ``ngram-map-k4v`` and
``ngram-cache`` are left out; pass ``ngram_types`` to :func:`plan_candidates` to try them.
``bench/ngram_types.py`` measured all five on Gemma 3 270M (code-edit and repeated-list prompts,
2026-12-01, twice, on a heavily shared 2-core CPU). Acceptance, the same in both runs: ngram-mod 1.00
(89/89), ngram-simple 0.54 (129/241), ngram-map-k and -k4v 0.22 (21/95), ngram-cache 0.07 (21/315).
Tokens/s vs the better of ngram-mod/ngram-simple: run 2 (baseline 4.3 tok/s) map-k 0.42x, map-k4v
0.18x, cache 0.38x; run 1 was dominated by load swings (baseline 0.95 tok/s, map-k4v "5.2x" at the
same 0.22 acceptance) and shows nothing. So they stay out; rerun the bench on an idle machine to be sure."""

NGRAM_LENGTHS: tuple[int | None, ...] = (None, 16)
"""n-gram draft lengths tried per n-gram type (``ngram_n_max``): ``None`` = the server's default
(64 for ``ngram-mod``, 48 for ``ngram-simple``/``-map-k*``: common/common.h) and a short 16.
``ngram-cache`` has a fixed length (8) and is tried once."""

CHAIN_NGRAM_TYPE = "ngram-mod"
"""The n-gram type put in front of a draft model / MTP / head in a chained candidate."""

CHAIN_DRAFT_N_MAX = 4
"""Draft length of the draft component of a chained candidate (the chain is one fixed probe)."""

DRAFT_LENGTHS = tuple(range(1, 17))
"""Draft lengths ``n_max`` the search may predict/measure for a draft model."""

LONG_DRAFT_N_MAX = 16
"""``n_max`` of the one long-draft probe run (``p_min`` 0) that yields per-position acceptance."""


@dataclass(frozen=True)
class Candidate:
    """One launchable configuration.

    Attributes:
        spec_type: ``--spec-type`` value: ``"none"`` (baseline), ``"draft-simple"``, ``"draft-mtp"``,
            a head type (``draft-eagle3``, ``draft-dflash``, ``draft-dspark``), an ``ngram-*`` type, or
            a chain such as ``"ngram-mod,draft-simple"`` (llama.cpp tries the n-gram type first for
            every step and falls back to the draft: common/speculative.cpp ``common_speculative_draft``).
        draft_path: absolute path of the draft GGUF / head file (``-md``), else ``None``.
        n_max: draft length ``--spec-draft-n-max`` of the draft-* component, ``None`` = server default/not used.
        n_min: ``--spec-draft-n-min``; ``None`` = server default (0).
        p_min: ``--spec-draft-p-min``; ``None`` = server default (0.0).
        ngl: target GPU layers; ``None`` = let the server decide (``--fit``), ``0`` on CPU-only hosts.
        draft_ngl: draft GPU layers; ``None`` = server default.
        placement: ``"default"``, ``"draft-on-gpu"`` (draft fully on the GPU, target gets the rest)
            or ``"target-whole"`` (target kept fully on the GPU); informative for the UI.
        draft_sampling: ``--spec-draft-sampling`` value; ``"probabilistic"`` samples the draft and verifies
            by rejection when the request's temperature is > 0 (tools/server/server-context.cpp
            ``use_spec_rejection``; only draft-simple / draft-mtp fill the draft distribution), ``None`` =
            the server's default (greedy drafts, verified by sample-and-match).
        ngram_n_max: draft length of the n-gram component (``--spec-ngram-*-size-m`` /
            ``--spec-ngram-mod-n-max``); ``None`` = the server's default for the type.
        ngram_n_min: ``--spec-ngram-mod-n-min``; ``None`` = server default (48).
        autotune: let the server adapt the draft length at run time (ik_llama.cpp
            ``--spec-autotune``); ``n_max`` is then only where it starts.
        rpc: llama.cpp RPC hosts (``host:port``) the launch passes as ``--rpc``; empty = this machine
            only. With RPC hosts the placements are ``"rpc-split"`` (target layers over the remote and
            local devices, the draft on this machine) and ``"local-only"`` (no ``--rpc``: the target on
            this machine's devices as far as it fits, the rest on its CPU, the draft local too).
        threads, omp_passive, poll: the CPU thread setting of the launch (``-t``/``-td``,
            ``OMP_WAIT_POLICY=PASSIVE``, ``--poll``: ``tuner.calibration.threads.ThreadSetting``); set only by the
            thread stage (``tuner.calibration.search.threads``); unset = the tune's ``threads`` (or the server's
            default). Left out of :meth:`to_json` while unset.
        synth_rates: synthetic acceptance per draft position (``--spec-synth-rates``, "benchmarking only": the
            output is not the target's); set only by the verify-cost launches
            (``tuner.calibration.search.verify``), never served, left out of :meth:`to_json` while empty and never
            read back by :meth:`from_json`.
    """

    spec_type: str = "none"
    draft_path: str | None = None
    n_max: int | None = None
    n_min: int | None = None
    p_min: float | None = None
    ngl: int | None = None
    draft_ngl: int | None = None
    placement: str = "default"
    draft_sampling: str | None = None
    ngram_n_max: int | None = None
    ngram_n_min: int | None = None
    autotune: bool = False
    rpc: tuple[str, ...] = ()
    threads: int | None = None
    omp_passive: bool = False
    poll: int | None = None
    synth_rates: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "rpc", tuple(str(h) for h in self.rpc))
        object.__setattr__(self, "synth_rates", tuple(float(r) for r in self.synth_rates))

    @property
    def spec_types(self) -> tuple[str, ...]:
        """The comma-separated components of ``spec_type`` (``("none",)`` for the baseline)."""
        return tuple(t.strip() for t in self.spec_type.split(",") if t.strip())

    @property
    def is_chained(self) -> bool:
        """True for a chain of several speculation types in one ``--spec-type``."""
        return len(self.spec_types) > 1

    @property
    def is_baseline(self) -> bool:
        """True for the no-speculation candidate."""
        return self.spec_type == "none"

    @property
    def uses_draft_model(self) -> bool:
        """True when a separate draft GGUF is loaded (``draft-simple``)."""
        return self.draft_path is not None

    @property
    def key(self) -> tuple:
        """Hashable identity (all fields)."""
        return astuple_key(self)

    @property
    def label(self) -> str:
        """Short human label, e.g. ``"no speculation"``, ``"ngram-mod"``, ``"draft-simple d.gguf n_max 8"``."""
        if self.is_baseline:
            return "no speculation" + self._thread_words()
        parts = [self.spec_type]
        if self.ngram_n_max is not None:
            parts.append(f"ngram n_max {self.ngram_n_max}")
        if self.draft_path:
            parts.append(Path(self.draft_path).name)
        if self.n_max is not None and any(t.startswith("draft") for t in self.spec_types):
            parts.append(f"n_max {self.n_max}")
        if self.p_min:
            parts.append(f"p_min {self.p_min:g}")
        if self.placement != "default":
            parts.append(self.placement)
        if self.draft_sampling:
            parts.append(f"{self.draft_sampling} drafts")
        if self.autotune:
            parts.append("adaptive n_max")  # ik_llama.cpp --spec-autotune: n_max adapted at run time
        synth = f" synthetic acceptance {self.synth_rates[0]:g}" if self.synth_rates else ""
        return " ".join(parts) + synth + self._thread_words()

    def _thread_words(self) -> str:
        """`` -t 2 waiting politely`` for a launch of the thread stage, else empty."""
        words = (f" -t {self.threads}" if self.threads is not None else "") + (" waiting politely" if self.omp_passive
                                                                               else "")
        return words + (f" --poll {self.poll}" if self.poll is not None else "")

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict of all fields (used by the CLI ``--json`` output and the profile); the thread
        setting only when set."""
        out = asdict(self)
        for name, unset in (("threads", None), ("omp_passive", False), ("poll", None), ("synth_rates", ())):
            if out[name] == unset:
                del out[name]
        if "synth_rates" in out:
            out["synth_rates"] = list(out["synth_rates"])
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Candidate:
        """Inverse of :meth:`to_json`; unknown keys are ignored, and so is ``synth_rates`` (a configuration read
        back is one to serve or compare, never a synthetic benchmark)."""
        names = {f for f in cls.__dataclass_fields__} - {"synth_rates"}
        return cls(**{k: v for k, v in obj.items() if k in names})

    def with_n_max(self, n_max: int) -> Candidate:
        """Copy with another draft length."""
        return replace(self, n_max=n_max)


def astuple_key(c: Candidate) -> tuple:
    """Identity tuple of a candidate (field values in declaration order)."""
    return (c.spec_type, c.draft_path, c.n_max, c.n_min, c.p_min, c.ngl, c.draft_ngl, c.placement,
            c.ngram_n_max, c.ngram_n_min, c.autotune, c.draft_sampling, c.rpc, c.threads, c.omp_passive, c.poll,
            c.synth_rates)


@dataclass(frozen=True)
class DroppedCandidate:
    """A candidate removed before launch, with the reason in plain words."""

    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class DraftOption:
    """A draft model the plan may use.

    Attributes:
        path: absolute path of the draft GGUF.
        size_bytes: file size (bytes), used as the draft's cost estimate (roofline).
        score: ranking from the catalog (higher = more promising), ``None`` when unranked.
        warnings: catalog warnings for this pair.
    """

    path: str
    size_bytes: int | None = None
    score: float | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class HeadOption:
    """A draft head matched to the target by the catalog (:class:`tuner.catalog.families.HeadCandidate`).

    Attributes:
        path: absolute path of the head GGUF (passed with ``-md``).
        spec_type: its speculation type: ``draft-eagle3``, ``draft-dflash``, ``draft-dspark`` or
            ``draft-mtp`` (an MTP head / ``gemma4-assistant``).
        size_bytes: file size (bytes), the cost estimate.
    """

    path: str
    spec_type: str
    size_bytes: int | None = None


@dataclass(frozen=True)
class CandidatePlan:
    """The result of :func:`plan_candidates`.

    Attributes:
        baseline: the no-speculation candidate (always present).
        ngram: n-gram-led candidates, each measured as a fixed configuration: every n-gram type at
            each of its draft lengths (``ngram_n_max``; no extra memory), then the chains
            ``ngram-mod,<draft type>`` in front of the best draft / the MTP layers / each head (a draft
            length per component: ``ngram_n_max`` server default, ``n_max`` = CHAIN_DRAFT_N_MAX).
        drafts: per draft model and per matched head, its long-draft probe candidate (``n_max`` =
            LONG_DRAFT_N_MAX, ``p_min`` 0); shorter drafts are derived by the search with
            :meth:`Candidate.with_n_max`. At sampled settings also the probabilistic-drafts twins
            (:func:`add_draft_sampling_variants`), the ``draft-mtp`` one last.
        mtp: the ``draft-mtp`` probe candidate, when the target has MTP layers.
        dropped: candidates removed before launch, with reasons.
        draft_sizes_bytes: file size per draft path (cost model input).
    """

    baseline: Candidate
    ngram: tuple[Candidate, ...] = ()
    drafts: tuple[Candidate, ...] = ()
    mtp: Candidate | None = None
    dropped: tuple[DroppedCandidate, ...] = ()
    draft_sizes_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def all_probes(self) -> tuple[Candidate, ...]:
        """Baseline first, then draft probes, MTP, n-gram candidates."""
        out = [self.baseline, *self.drafts]
        if self.mtp is not None:
            out.append(self.mtp)
        out.extend(self.ngram)
        return tuple(out)


MemoryCheck = Callable[[Candidate], "str | None"]
"""``memory_check(candidate) -> reason | None``: why ``candidate`` does not fit in memory, ``None`` when it
fits (built from ``tuner.hardware.memory.plan_memory`` by the tune's placement step)."""


class _Gate:
    """Admits a planned candidate or records why it was dropped: a speculation type the binary lacks, or
    a configuration that does not fit in memory (in that order; the memory is not asked about a type the
    binary cannot run)."""

    def __init__(self, spec_types: Iterable[str] | None, supports: Callable[[str], bool] | None,
                 memory_check: MemoryCheck | None) -> None:
        self.available = set(spec_types) if spec_types is not None else None
        self.supports, self.memory_check = supports, memory_check
        self.dropped: list[DroppedCandidate] = []

    def admit(self, c: Candidate) -> bool:
        if (self.available is not None and not all(t in self.available for t in c.spec_types)) or (
                self.supports is not None and not self.supports(c.spec_type)):
            self.dropped.append(DroppedCandidate(c, f"speculation type {c.spec_type} is not supported by this "
                                                    "llama-server"))
            return False
        reason = self.memory_check(c) if self.memory_check is not None else None
        if reason:
            self.dropped.append(DroppedCandidate(c, reason))
            return False
        return True

    def note_baseline(self, baseline: Candidate) -> None:
        """The baseline is never dropped; when even it does not fit, the reason is still recorded."""
        reason = self.memory_check(baseline) if self.memory_check is not None else None
        if reason:
            self.dropped.append(DroppedCandidate(baseline, reason + " (kept: the baseline is always measured)"))


def _ngram_candidates(ngram_types: Sequence[str], ngram_lengths: Sequence[int | None]) -> list[Candidate]:
    out = []
    for t in ngram_types:
        lengths = (None,) if t == "ngram-cache" else tuple(dict.fromkeys(ngram_lengths)) or (None,)
        for k in lengths:
            # ngram-mod discards drafts shorter than its n_min (default 48): keep the default ratio 3/4
            k_min = max(1, (3 * k) // 4) if (k is not None and t == "ngram-mod") else None
            out.append(Candidate(spec_type=t, ngram_n_max=k, ngram_n_min=k_min))
    return out


def _draft_probes(drafts: Sequence[DraftOption], heads: Sequence[HeadOption], gpu: bool,
                  long_n_max: int) -> list[Candidate]:
    """The long-draft probe of each draft model (one per placement) and of each head."""
    placements = ("draft-on-gpu", "target-whole") if gpu else ("default",)
    out = [Candidate(spec_type="draft-simple", draft_path=str(Path(d.path).resolve()), n_max=long_n_max, p_min=0.0,
                     placement=placement) for d in drafts for placement in placements]
    out += [Candidate(spec_type=h.spec_type, draft_path=str(Path(h.path).resolve()), n_max=long_n_max, p_min=0.0)
            for h in heads]
    return out


def _sizes(drafts: Sequence[DraftOption], heads: Sequence[HeadOption]) -> dict[str, int]:
    files: list[tuple[str, int | None]] = [(o.path, o.size_bytes) for o in drafts] + [(h.path, h.size_bytes) for h in heads]
    return {str(Path(path).resolve()): int(size) for path, size in files if size is not None}


def _chains(drafts: Sequence[DraftOption], mtp_layers: int | None, heads: Sequence[HeadOption]) -> list[Candidate]:
    """``ngram-mod`` in front of the best draft, the MTP layers and each head."""
    fronts: list[Candidate] = []
    if drafts:
        fronts.append(Candidate(spec_type="draft-simple", draft_path=str(Path(drafts[0].path).resolve())))
    if mtp_layers:
        fronts.append(Candidate(spec_type="draft-mtp"))
    fronts += [Candidate(spec_type=h.spec_type, draft_path=str(Path(h.path).resolve())) for h in heads]
    return [replace(f, spec_type=f"{CHAIN_NGRAM_TYPE},{f.spec_type}", n_max=CHAIN_DRAFT_N_MAX, p_min=0.0)
            for f in fronts]


def _autotuned(ngram_types: Sequence[str], drafts: Sequence[DraftOption], mtp_layers: int | None) -> list[Candidate]:
    """The run-time draft-length tuner on ``ngram-mod``, the best draft and the MTP layers."""
    tuned: list[Candidate] = []
    if "ngram-mod" in ngram_types:
        tuned.append(Candidate(spec_type="ngram-mod", autotune=True))
    if drafts:
        tuned.append(Candidate(spec_type="draft-simple", draft_path=str(Path(drafts[0].path).resolve()),
                               p_min=0.0, autotune=True))
    if mtp_layers:
        tuned.append(Candidate(spec_type="draft-mtp", p_min=0.0, autotune=True))
    return tuned


def plan_candidates(
    target_path: str | Path,
    drafts: Sequence[DraftOption],
    spec_types: Iterable[str] | None = None,
    mtp_layers: int | None = None,
    memory_check: MemoryCheck | None = None,
    ngram_types: Sequence[str] = SWEEP_NGRAM_TYPES,
    long_n_max: int = LONG_DRAFT_N_MAX,
    gpu: bool = False,
    heads: Sequence[HeadOption] = (),
    ngram_lengths: Sequence[int | None] = NGRAM_LENGTHS,
    chains: bool = True,
    autotune: bool = False,
    supports: Callable[[str], bool] | None = None,
) -> CandidatePlan:
    """Plan the candidates for one target.

    Args:
        target_path: the target GGUF.
        drafts: compatible draft models (already checked with ``tuner.catalog.check_compatible``).
        spec_types: ``Dialect.spec_types`` of the binary (``None`` = assume the b11434 list).
            Types the binary lacks are dropped with the reason "not supported by this llama-server".
        mtp_layers: target's MTP layer count (``ModelFile.mtp_layers``); > 0 adds a ``draft-mtp`` probe.
        memory_check: optional ``(Candidate) -> str | None`` returning a reason when the
            candidate does not fit the memory budget (built from ``tuner.hardware.memory.plan_memory``);
            such candidates are dropped before launch.
        ngram_types: n-gram types to try.
        long_n_max: ``n_max`` of the long-draft probe.
        gpu: True when a GPU is available: adds the ``target-whole`` placement for each draft next
            to ``draft-on-gpu``.
        heads: draft heads the catalog matched to this target; each gets a long-draft probe with its
            own speculation type and ``-md`` = the head.
        ngram_lengths: ``ngram_n_max`` values tried per n-gram type (``None`` = server default);
            ``ngram-cache`` is tried once (fixed length 8).
        chains: add the chained candidates ``ngram-mod,<type>`` (see ``CandidatePlan.ngram``) where
            the binary has both types.
        autotune: the binary has a run-time draft-length tuner (``Dialect.has_spec_autotune``, ik_llama.cpp):
            add "adaptive n_max at run time" candidates (``autotune=True``) for ``ngram-mod``, the best
            draft and the MTP layers, measured as fixed configurations in ``CandidatePlan.ngram``.
        supports: optional ``(spec_type) -> bool`` for combinations (``Dialect.supports_spec_type``):
            a chain the binary cannot express is dropped with the same reason as a missing type.

    Returns:
        A :class:`CandidatePlan`; the baseline is never dropped (when even the baseline does not
        fit, its reason is still recorded in ``dropped`` and the baseline kept, so the sweep can show
        the server's own error).
    """
    gate = _Gate(spec_types, supports, memory_check)
    baseline = Candidate()
    gate.note_baseline(baseline)
    ngram = [c for c in _ngram_candidates(ngram_types, ngram_lengths) if gate.admit(c)]
    draft_cands = [c for c in _draft_probes(drafts, heads, gpu, long_n_max) if gate.admit(c)]
    mtp_probe = Candidate(spec_type="draft-mtp", n_max=long_n_max, p_min=0.0)
    mtp = mtp_probe if mtp_layers and gate.admit(mtp_probe) else None
    if chains:
        ngram += [c for c in _chains(drafts, mtp_layers, heads) if gate.admit(c)]
    if autotune:
        ngram += [c for c in _autotuned(ngram_types, drafts, mtp_layers) if gate.admit(c)]
    return CandidatePlan(baseline=baseline, ngram=tuple(ngram), drafts=tuple(draft_cands), mtp=mtp,
                         dropped=tuple(gate.dropped), draft_sizes_bytes=_sizes(drafts, heads))


def apply_memory_check(plan: CandidatePlan, memory_check: MemoryCheck, drafts_only: bool = False) -> CandidatePlan:
    """Drop the candidates of ``plan`` that ``memory_check(candidate) -> reason | None`` rejects.

    Used after GPU placement has set ``ngl``/``draft_ngl`` (the check depends on them). The baseline is
    never dropped. With ``drafts_only`` only draft-model candidates are checked (the others keep
    ``ngl`` unset, so the server's ``--fit`` places them: common/fit.cpp ``common_fit_params``).
    """
    dropped = list(plan.dropped)

    def keep(c: Candidate) -> bool:
        reason = memory_check(c)
        if reason:
            dropped.append(DroppedCandidate(c, reason))
            return False
        return True

    drafts = tuple(c for c in plan.drafts if keep(c))
    # chained candidates carry a draft model: they are checked even with drafts_only
    ngram = tuple(c for c in plan.ngram if (drafts_only and c.draft_path is None) or keep(c))
    mtp = plan.mtp
    if mtp is not None and not drafts_only and not keep(mtp):
        mtp = None
    return replace(plan, drafts=drafts, ngram=ngram, mtp=mtp, dropped=tuple(dropped))


DRAFT_SAMPLING_FLAG = "--spec-draft-sampling"
DRAFT_SAMPLING_TYPES = ("draft-simple", "draft-mtp")
"""Types that fill the draft distribution ``--spec-draft-sampling probabilistic`` needs. b11434:
common/arg.cpp sets ``params.speculative.draft.probabilistic`` from the flag; both
``common_speculative_impl_draft_simple`` and ``common_speculative_impl_draft_mtp`` (common/speculative.cpp;
the MTP one is built from ``params.draft``, "reuses the draft-model params slot") keep the sampled draft
candidates (``result_q``) in ``draft()`` only when that is set, and tools/server/server-context.cpp
``use_spec_rejection`` verifies them by rejection at temperature > 0. The other drafters fall back to
sample-and-match."""


def add_draft_sampling_variants(plan: CandidatePlan, workload: Workload, dialect: Dialect) -> CandidatePlan:
    """At sampled settings (``workload.sampling`` not greedy: temperature > 0) and where the binary offers
    ``--spec-draft-sampling``, each draft-model probe gets a twin with ``probabilistic`` drafts, right after
    it, and the ``draft-mtp`` probe (the target's own MTP layers) gets one at the end of ``plan.drafts``: a
    candidate like any other (the search probes, refines and confirms it as its own group, with the draft
    probes). Greedy workloads and builds without the flag get the plan unchanged."""
    if workload.sampling.is_greedy or not dialect.has(DRAFT_SAMPLING_FLAG):
        return plan
    drafts: list[Candidate] = []
    for c in plan.drafts:
        drafts.append(c)
        if c.spec_type in DRAFT_SAMPLING_TYPES and c.draft_sampling is None:
            drafts.append(replace(c, draft_sampling="probabilistic"))
    mtp = plan.mtp
    if mtp is not None and mtp.spec_type in DRAFT_SAMPLING_TYPES and mtp.draft_sampling is None:
        drafts.append(replace(mtp, draft_sampling="probabilistic"))
    return replace(plan, drafts=tuple(drafts))
