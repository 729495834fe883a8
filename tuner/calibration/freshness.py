"""Is a saved profile still fresh, without tuning? What the app asks before it serves a profile again at start
(``Serve at start``) and what ``draftwise serve --models`` asks of the binary it is about to run.

:func:`current_keys` computes the staleness keys a tune of ``request`` would record now
(:class:`tuner.profiles.StalenessKeys`: hardware, llama-server binary and flag dialect, model files, prompt
set, context size, request shape and sampling, long-context share, the user's llama-server flags), by the
rules ``tuner.calibration.engine.run_tune`` applies before it decides to reuse a profile; the profile's own
:func:`tuner.profiles.profile.stale_reasons` compares them. tests/calibration/test_freshness_real.py checks
that a profile a real tune just saved is fresh here, so the two cannot drift apart unseen.
:func:`binary_reasons` is the binary's part alone (``serve --models``: a profile tuned with another
llama-server, e.g. ``tune --server WRAPPER``, is stale for this one).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.profiles import ModelFileKey, Profile, ProfileError, ProfileStore, StalenessKeys, stale_reasons

from .prompts import MAX_PROMPTS_PER_SWEEP, PromptSet, default_prompts, load_prompts
from .request import TuneRequest, TuneResult
from .sampling import Sampling
from .workload import Workload, long_context_prompts

if TYPE_CHECKING:
    from tuner.catalog.folder import ScanResult
    from tuner.server.discovery import ServerBinary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SavedState:
    """A target's saved profile and whether it is fresh now.

    Attributes:
        target_path: the target GGUF (resolved).
        profile: its saved profile, ``None`` when there is none (or it is unreadable: ``problem`` says why).
        reasons: why the profile is stale now, in plain words (:func:`tuner.profiles.profile.stale_reasons`);
            empty = fresh.
        problem: why there is no usable profile (none saved, unreadable), ``None`` when there is one.
    """

    target_path: Path
    profile: Profile | None
    reasons: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def fresh(self) -> bool:
        """A profile exists and nothing it was tuned for changed."""
        return self.profile is not None and not self.reasons


def binary_keys(binary: ServerBinary) -> tuple[str, str | None, str | None]:
    """``(server_binary, server_build, dialect_fingerprint)`` of ``binary`` as a tune records them (the file's
    identity ``path:size:mtime_ns``, ``"BUILD (COMMIT)"``, the hash of its ``--help``).

    Raises:
        tuner.server.dialect.DialectError: ``binary`` is not a llama-server that answers ``--help``.
    """
    from tuner.server.dialect import probe_dialect

    from .engine import _file_identity  # the tune's own identity of a file

    build = (f"{binary.build} ({binary.commit})" if binary.commit else str(binary.build)) \
        if binary.build is not None else None
    return _file_identity(Path(binary.path)), build, probe_dialect(binary.path).help_sha256


def binary_reasons(saved: StalenessKeys, binary: ServerBinary) -> list[str]:
    """Why a profile with keys ``saved`` is stale for ``binary`` (another file, build or flag dialect than the
    one it was tuned with); empty when it is the same llama-server.

    Raises:
        tuner.server.dialect.DialectError: ``binary`` does not answer ``--help``.
    """
    path, build, dialect = binary_keys(binary)
    now = replace(saved, server_binary=path, server_build=build, dialect_fingerprint=dialect)
    return stale_reasons(saved, now)


def _prompt_set_key(request: TuneRequest, n_predict: int) -> str:
    """The prompt set's key as a tune of ``request`` records it (engine's rule: the set's hash, the chosen
    prompts' indexes, ``n_predict``, whether the long-context requests are in).

    Raises:
        tuner.calibration.prompts.PromptFileError: the prompt file is unusable.
    """
    from .engine import DEFAULT_SET_PROMPTS, select_prompts

    prompts, max_prompts = request.prompts, request.max_prompts
    if isinstance(prompts, PromptSet):
        ps = prompts
    elif prompts is None:
        ps = default_prompts()
        max_prompts = DEFAULT_SET_PROMPTS if max_prompts is None else max_prompts
    else:
        ps = load_prompts(prompts)
    if len(ps) > MAX_PROMPTS_PER_SWEEP and (max_prompts is None or max_prompts > MAX_PROMPTS_PER_SWEEP):
        max_prompts = MAX_PROMPTS_PER_SWEEP
    chosen = [i for i, _ in select_prompts(ps, max_prompts)]
    if request.long_context:
        chosen += [len(ps.prompts) + j for j, _ in enumerate(long_context_prompts())]
    key = (ps.sha256 + ":" + ",".join(str(i) for i in chosen) + f":{n_predict}"
           + (":long-context" if request.long_context else ""))
    return hashlib.sha256(key.encode()).hexdigest()


def current_keys(request: TuneRequest, target_path: Path, binary: ServerBinary, scanned: ScanResult) -> StalenessKeys:
    """The staleness keys a tune of ``request`` for ``target_path`` with ``binary`` would record now (the
    devices are read again: ``llama-server --list-devices`` and host RAM; the drafts are the scan's).

    Raises:
        tuner.server.dialect.DialectError: ``binary`` does not answer ``--help``.
        tuner.calibration.prompts.PromptFileError: the prompt file is unusable.
        ValueError: the context size is out of range for the model.
    """
    from tuner.crosscheck.build import build_probes
    from tuner.ctxsize import resolve_ctx_size
    from tuner.hardware import detect_devices
    from tuner.server.dialect import probe_dialect

    from .engine import hardware_fingerprint, has_chat_template

    target_path = Path(target_path).resolve()
    model = next((m for m in scanned.models if Path(m.path).resolve() == target_path), None)
    entry = next((e for f in scanned.families for e in f.targets if Path(e.target.path).resolve() == target_path),
                 None)
    drafts = [Path(dc.model.path).resolve() for dc in entry.drafts] if entry is not None else []
    n_ctx, _ = resolve_ctx_size(request.n_ctx, model.context_length if model is not None else None)
    try:
        devices = detect_devices(binary.path, build_probes(), rpc_hosts=tuple(request.rpc_hosts) or None)
        hardware: str | None = hardware_fingerprint(devices)
    except Exception:  # noqa: BLE001 - as the tune: unknown hardware is a key of its own
        log.warning("hardware detection failed", exc_info=True)
        hardware = None
    path, build, dialect_sha = binary_keys(binary)
    chat = has_chat_template(target_path) if request.chat is None else request.chat
    workload = Workload(chat=chat, sampling=request.sampling or Sampling(), n_ctx=n_ctx,
                        raw_endpoint=probe_dialect(binary.path).draft_counts_endpoint)
    return StalenessKeys(
        hardware_fingerprint=hardware, server_binary=path, server_build=build, dialect_fingerprint=dialect_sha,
        model_files=(ModelFileKey.of(target_path), *(ModelFileKey.of(d) for d in drafts)),
        prompt_set_sha256=_prompt_set_key(request, request.n_predict), n_ctx=n_ctx, workload=workload.key(),
        long_share=request.long_share, server_args=tuple(request.server_args))


def saved_state(request: TuneRequest, target_path: Path, binary: ServerBinary, scanned: ScanResult,
                store: ProfileStore | None = None) -> SavedState:
    """The saved profile of ``target_path`` and why it is stale for ``request`` now (nothing is tuned or
    started; ``llama-server --list-devices`` and ``--help`` are asked, as a tune asks them). Never raises for a
    missing or unreadable profile (``problem`` says it) nor for keys it cannot compute (a reason says it)."""
    store = store or ProfileStore()
    target_path = Path(target_path).resolve()
    try:
        profile = store.load(target_path, keep_aside=False)
    except ProfileError as exc:
        return SavedState(target_path, None, problem=f"its saved profile is unreadable ({exc.reason})")
    if profile is None:
        return SavedState(target_path, None, problem="it has no saved profile")
    try:
        keys = current_keys(request, target_path, binary, scanned)
    except Exception as exc:  # noqa: BLE001 - a key that cannot be computed makes the profile stale, said why
        log.warning("staleness keys of %s unavailable", target_path, exc_info=True)
        return SavedState(target_path, profile, (f"what it was tuned for cannot be checked now ({exc})",))
    return SavedState(target_path, profile, tuple(stale_reasons(profile.keys, keys)))


def reused_result(state: SavedState, request: TuneRequest | None = None) -> TuneResult:
    """A fresh saved profile as the :class:`TuneResult` a tune returns when it reuses it (``reused``; its
    decision rebuilt with its words, the sentence about other programs dated).

    Raises:
        ValueError: ``state`` holds no profile.
    """
    from .engine import _decision_from_profile  # the tune's own reading of a saved decision

    if state.profile is None:
        raise ValueError(f"{state.target_path.name}: no saved profile to reuse")
    store = ProfileStore()
    return TuneResult(target_path=state.target_path, decision=_decision_from_profile(state.profile),
                      profile=state.profile, profile_path=store.path_for(state.target_path), reused=True,
                      request=request)


__all__ = ["SavedState", "binary_keys", "binary_reasons", "current_keys", "reused_result", "saved_state"]
