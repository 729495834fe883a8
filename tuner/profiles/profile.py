"""Saved tuning profiles: the winning configuration, its argv, the evidence and staleness keys.

One JSON file per target model. The core types here hold plain JSON-able values (dicts, lists,
strings) for the winner and the evidence, so this package does not depend on ``tuner.calibration``
(imports point calibration → profiles).

File layout (``schema_version`` 2; version 1 files, written before the context size and the request
workload were keys, are still read and are stale: their ``n_ctx`` comes from ``server_config``)::

    {"schema_version": 2, "target_path": "...", "created_unix_s": 1.7e9,
     "keys": {"hardware_fingerprint": "...", "server_binary": "...", "server_build": "...",
              "dialect_fingerprint": "...", "model_files": [{"path","size_bytes","mtime_ns"}...],
              "prompt_set_sha256": "...", "n_ctx": 8192, "workload": "chat;server-defaults",
              "long_share": null, "server_args": ["--no-repack"]},
     "winner": {"spec_type": "none"|..., "draft_path": null|"...", "n_max": ..., ...},
     "server_config": {ServerConfig fields}, "argv": [...],
     "decision": {"speedup": ..., "reason": "...", "kind": "speculate"|"alone_...", "named": [...],
                  "sentences": [{"slot": "HEADLINE", "kind": "headline.serving", "params": {...}}, ...], ...},
     "evidence": [ {...}, ... ]}

``decision.sentences`` are the decision's words as data (``tuner.calibration.sentences``); a profile shown
again is worded from them. ``reason`` (those sentences rendered) is written beside them for older readers;
a profile without ``sentences`` (saved before they were kept) shows its ``reason`` verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tuner.errors import DraftwiseError

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
"""Versions :meth:`Profile.from_json` reads (1: no ``n_ctx`` / ``workload`` keys, so always stale)."""


class ProfileError(DraftwiseError, ValueError):
    """A profile file exists but cannot be used (wrong schema, missing key). Names the file and key."""

    def __init__(self, path: Path | str, reason: str, moved_to: Path | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.moved_to = moved_to
        where = f"; kept aside as {moved_to}" if moved_to else ""
        super().__init__(f"{path}: {reason}{where}")


@dataclass(frozen=True)
class ModelFileKey:
    """Identity of one model file: absolute path, size and modification time (ns)."""

    path: str
    size_bytes: int | None
    mtime_ns: int | None

    @classmethod
    def of(cls, path: Path | str) -> ModelFileKey:
        """Identity of ``path`` as it is now (size/mtime ``None`` when the file is missing)."""
        p = Path(path).resolve()
        try:
            st = p.stat()
            return cls(str(p), int(st.st_size), int(st.st_mtime_ns))
        except OSError:
            return cls(str(p), None, None)


@dataclass(frozen=True)
class StalenessKeys:
    """Everything that, when changed, makes a saved profile stale (DESIGN.md step 7).

    Attributes:
        hardware_fingerprint: devices + memory + CPU summary string (``None`` when unknown).
        server_binary: identity of the llama-server file (path, size, mtime).
        server_build: build string reported by the binary, ``None`` when unknown.
        dialect_fingerprint: hash of the speculative flags the binary's ``--help`` offers.
        model_files: target first, then every draft measured in the sweep.
        prompt_set_sha256: :attr:`tuner.calibration.prompts.PromptSet.sha256`.
        n_ctx: the context size every launch of the sweep used and the profile serves (``-c``);
            ``None`` when unknown (an old profile).
        workload: request shape and sampling of the sweep
            (:meth:`tuner.calibration.workload.Workload.key`, e.g. ``"chat;server-defaults"``); ``None``
            for a profile written before it was recorded.
        long_share: the served share (0..1) of long-context requests the decision was weighted to (the
            ``long_share`` setting, ``tune --long-share``); ``None`` = the prompt set's own share (every
            request weighed the same, as every profile written before this key existed).
        server_args: the user's own llama-server flags every launch of the sweep carried, as argv words
            (``("--no-repack", "-tb", "2")``: ``tune --server-arg``, the ``server_args`` setting); empty for
            none, as every profile written before this key existed.
    """

    hardware_fingerprint: str | None
    server_binary: str | None
    server_build: str | None
    dialect_fingerprint: str | None
    model_files: tuple[ModelFileKey, ...]
    prompt_set_sha256: str | None
    n_ctx: int | None = None
    workload: str | None = None
    long_share: float | None = None
    server_args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (model files as a list of dicts)."""
        return {
            "hardware_fingerprint": self.hardware_fingerprint,
            "server_binary": self.server_binary,
            "server_build": self.server_build,
            "dialect_fingerprint": self.dialect_fingerprint,
            "model_files": [
                {"path": m.path, "size_bytes": m.size_bytes, "mtime_ns": m.mtime_ns} for m in self.model_files
            ],
            "prompt_set_sha256": self.prompt_set_sha256,
            "n_ctx": self.n_ctx,
            "workload": self.workload,
            "long_share": self.long_share,
            "server_args": list(self.server_args),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StalenessKeys:
        """Inverse of :meth:`to_json`. Raises ``KeyError``/``TypeError`` on a malformed object."""
        return cls(
            hardware_fingerprint=obj["hardware_fingerprint"],
            server_binary=obj["server_binary"],
            server_build=obj.get("server_build"),
            dialect_fingerprint=obj.get("dialect_fingerprint"),
            model_files=tuple(
                ModelFileKey(str(m["path"]), m.get("size_bytes"), m.get("mtime_ns")) for m in obj["model_files"]
            ),
            prompt_set_sha256=obj.get("prompt_set_sha256"),
            n_ctx=obj.get("n_ctx"),
            workload=obj.get("workload"),
            long_share=_share(obj.get("long_share")),
            server_args=_words(obj.get("server_args")),
        )


def stale_reasons(saved: StalenessKeys, current: StalenessKeys) -> list[str]:
    """Plain-words reasons why a profile saved with ``saved`` keys is stale now; empty = fresh.

    Model files are compared as sets of identities, so a reordered draft list is not a change; a
    draft that was measured and is now gone or changed is.
    """
    reasons: list[str] = []
    if saved.hardware_fingerprint != current.hardware_fingerprint:
        reasons.append("the hardware changed (devices or memory differ from when it was tuned)")
    tuned_with, running = _binary_path(saved.server_binary), _binary_path(current.server_binary)
    if tuned_with != running:  # another file (e.g. tuned through a wrapper script): name both
        reasons.append(f"the llama-server binary changed (tuned with {tuned_with}"
                       f"{_build_text(saved.server_build)}, now {running}{_build_text(current.server_build)})")
    elif saved.server_build != current.server_build:
        reasons.append(
            f"the llama-server binary changed (tuned with build {saved.server_build or 'unknown'}, "
            f"now {current.server_build or 'unknown'})"
        )
    elif saved.server_binary != current.server_binary:
        reasons.append(f"the llama-server binary changed ({running} was replaced since it was tuned)")
    elif saved.dialect_fingerprint != current.dialect_fingerprint:
        reasons.append("the llama-server speculative flags changed")
    saved_models = {m.path: m for m in saved.model_files}
    current_models = {m.path: m for m in current.model_files}
    for path, m in saved_models.items():
        now = current_models.get(path)
        if now is None or now.size_bytes is None:
            reasons.append(f"model file {path} is gone")
        elif now != m:
            reasons.append(f"model file {path} changed")
    for path in current_models.keys() - saved_models.keys():
        reasons.append(f"new model file {path} was not part of the sweep")
    if saved.prompt_set_sha256 != current.prompt_set_sha256:
        reasons.append("the prompt set changed")
    if saved.n_ctx != current.n_ctx:
        reasons.append(f"the context size changed (tuned at {saved.n_ctx or 'an unrecorded size'}, "
                       f"now {current.n_ctx or 'unknown'} tokens)")
    if saved.workload != current.workload:
        reasons.append(f"the measured requests changed (tuned with {saved.workload or 'an older protocol'}, "
                       f"now {current.workload or 'unknown'})")
    if _share(saved.long_share) != _share(current.long_share):
        reasons.append(f"the long-context share changed (tuned for {_share_text(saved.long_share)}, now "
                       f"{_share_text(current.long_share)})")
    if tuple(saved.server_args) != tuple(current.server_args):
        reasons.append(f"the extra llama-server flags changed (tuned with {_words_text(saved.server_args)}, now "
                       f"{_words_text(current.server_args)})")
    return reasons


def _binary_path(identity: str | None) -> str:
    """The file of a ``server_binary`` key (``path:size:mtime_ns``, as the tune records it; a bare path for a
    file it could not stat); ``"an unknown file"`` for none."""
    if not identity:
        return "an unknown file"
    path, *rest = identity.rsplit(":", 2)
    return path if len(rest) == 2 and all(x.isdigit() for x in rest) else identity


def _build_text(build: str | None) -> str:
    return f" (build {build})" if build else ""


def _words(v: Any) -> tuple[str, ...]:
    """A recorded ``server_args`` list as a tuple (missing = none).

    Raises:
        TypeError: not a list of strings.
    """
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(w, str) for w in v):
        raise TypeError(f"server_args: expected a list of strings, got {v!r}")
    return tuple(v)


def _words_text(words: tuple[str, ...]) -> str:
    return " ".join(words) if words else "none"


def _share(v: Any) -> float | None:
    """A recorded long-context share, rounded to 4 places (``None`` stays ``None``).

    Raises:
        TypeError: not a number.
    """
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"long_share: expected a number or null, got {v!r}")
    return round(float(v), 4)


def _share_text(v: float | None) -> str:
    return "the prompt set's own share" if v is None else f"{100 * v:.0f} % long-context requests"


@dataclass(frozen=True)
class Profile:
    """A saved tuning result for one target model.

    Attributes:
        target_path: absolute path of the target GGUF.
        keys: staleness keys at tuning time.
        winner: the chosen candidate as a JSON dict (``spec_type`` is ``"none"`` for the baseline).
        server_config: the winning :class:`tuner.server.config.ServerConfig` fields as a JSON dict.
        argv: the exact llama-server argv of the winner (port as used during tuning).
        decision: summary: ``speedup``, ``speedup_ci_low``/``_high``, ``gen_tokens_per_s``,
            ``baseline_gen_tokens_per_s``, ``reason``, ``kind``, ``named``, ``sentences``, break-even per
            draft, per-category results.
        evidence: every measurement of the sweep as JSON dicts.
        created_unix_s: when it was saved (seconds since the epoch).
        schema_version: :data:`SCHEMA_VERSION` of the writer.
    """

    target_path: str
    keys: StalenessKeys
    winner: dict[str, Any]
    server_config: dict[str, Any]
    argv: tuple[str, ...]
    decision: dict[str, Any]
    evidence: tuple[dict[str, Any], ...] = field(default=())
    created_unix_s: float | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form written to disk."""
        return {
            "schema_version": self.schema_version,
            "target_path": self.target_path,
            "created_unix_s": self.created_unix_s,
            "keys": self.keys.to_json(),
            "winner": self.winner,
            "server_config": self.server_config,
            "argv": list(self.argv),
            "decision": self.decision,
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_json(cls, obj: Any, path: Path | str = "<profile>") -> Profile:
        """Parse a profile dict.

        Raises:
            ProfileError: not an object, unknown ``schema_version``, or a missing/malformed key
                (the message names the key).
        """
        if not isinstance(obj, dict):
            raise ProfileError(path, "not a JSON object")
        version = obj.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ProfileError(path, f"schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
        try:
            keys = StalenessKeys.from_json(obj["keys"])
            if version == 1 and keys.n_ctx is None:
                from dataclasses import replace

                n_ctx = (obj.get("server_config") or {}).get("n_ctx")
                keys = replace(keys, n_ctx=n_ctx if isinstance(n_ctx, int) else None)
            return cls(
                target_path=str(obj["target_path"]),
                keys=keys,
                winner=dict(obj["winner"]),
                server_config=dict(obj["server_config"]),
                argv=tuple(str(a) for a in obj["argv"]),
                decision=dict(obj["decision"]),
                evidence=tuple(obj.get("evidence") or ()),
                created_unix_s=obj.get("created_unix_s"),
                schema_version=version,
            )
        except KeyError as exc:
            raise ProfileError(path, f"missing key {exc.args[0]!r}") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise ProfileError(path, f"malformed profile ({exc})") from exc


PROFILE_FIELDS = tuple(f.name for f in fields(Profile))
