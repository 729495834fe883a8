"""Is a saved profile still fresh, without tuning? What the app asks before it serves a profile again at start
(``Serve at start``) and what ``draftwise serve --models`` asks of the binary it is about to run.

:func:`current_keys` computes the staleness keys a tune of ``request`` would record now
(:class:`tuner.profiles.StalenessKeys`: hardware, llama-server binary and flag dialect, model files, prompt
set, context size, request shape and sampling, long-context share, the user's llama-server flags), by the
rules ``tuner.calibration.pipeline.run_tune`` applies before it decides to reuse a profile; the profile's own
:func:`tuner.profiles.profile.stale_reasons` compares them. tests/calibration/test_freshness_real.py checks
that a profile a real tune just saved is fresh here, so the two cannot drift apart unseen.
:func:`binary_reasons` is the binary's part alone (``serve --models``: a profile tuned with another
llama-server, e.g. ``tune --server WRAPPER``, is stale for this one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.profiles import Profile, ProfileError, ProfileStore, StalenessKeys, stale_reasons

from .request import TuneRequest, TuneResult

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

    from .pipeline.keys import file_identity  # the tune's own identity of a file

    build = (f"{binary.build} ({binary.commit})" if binary.commit else str(binary.build)) \
        if binary.build is not None else None
    return file_identity(Path(binary.path)), build, probe_dialect(binary.path).help_sha256


def binary_reasons(saved: StalenessKeys, binary: ServerBinary) -> list[str]:
    """Why a profile with keys ``saved`` is stale for ``binary`` (another file, build or flag dialect than the
    one it was tuned with); empty when it is the same llama-server.

    Raises:
        tuner.server.dialect.DialectError: ``binary`` does not answer ``--help``.
    """
    path, build, dialect = binary_keys(binary)
    now = replace(saved, server_binary=path, server_build=build, dialect_fingerprint=dialect)
    return stale_reasons(saved, now)


def current_keys(request: TuneRequest, target_path: Path, binary: ServerBinary, scanned: ScanResult) -> StalenessKeys:
    """The staleness keys a tune of ``request`` for ``target_path`` with ``binary`` would record now: the tune's
    own first steps (``pipeline.inputs.resolve_inputs`` then ``pipeline.keys.staleness_keys``), so the two
    cannot differ; the devices are read again (``llama-server --list-devices`` and host RAM), the drafts are
    the scan's.

    Raises:
        tuner.calibration.request.TuneError: a bad input of ``request`` (as the tune reports it).
        tuner.calibration.prompts.PromptFileError: the prompt file is unusable.
    """
    from .pipeline.events import Events
    from .pipeline.inputs import resolve_inputs
    from .pipeline.keys import staleness_keys

    aimed = replace(request, target=str(Path(target_path).resolve()))
    return staleness_keys(resolve_inputs(aimed, scanned=scanned, binary=binary, events=Events(None, logged=False)))


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
    from .pipeline.keys import keys_for_saved_source

    try:  # a profile tuned on served requests is checked against that source, whatever is captured now
        keys = keys_for_saved_source(profile, request, current_keys(request, target_path, binary, scanned))
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
    from .pipeline.reuse import decision_from_profile  # the tune's own reading of a saved decision

    if state.profile is None:
        raise ValueError(f"{state.target_path.name}: no saved profile to reuse")
    store = ProfileStore()
    return TuneResult(target_path=state.target_path, decision=decision_from_profile(state.profile),
                      profile=state.profile, profile_path=store.path_for(state.target_path), reused=True,
                      request=request)


__all__ = ["SavedState", "binary_keys", "binary_reasons", "current_keys", "reused_result", "saved_state"]
