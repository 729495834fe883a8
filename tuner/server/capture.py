"""Opt-in capture of the requests a served llama-server answers: where they are kept, the bound they are pruned
to, listing, deleting, and the reader a re-tune on served traffic uses.

llama-server b11434 writes each completion's prompt, as the model sees it (after the chat template; a prompt
that is not a string — token ids, several prompts — as its JSON), to ``<folder>/<milliseconds>.txt`` when it
runs with ``--log-prompts-dir <folder>`` (tools/server/server-context.cpp, the ``path_prompts_log_dir`` block of
``server_routes::handle_completions_impl``). Facts of that block this module is built on:

- the name is ``ggml_time_ms()``, twelve digits: a monotonic clock, so names start again after a reboot (and
  on Windows at each start), and two requests in one millisecond share a file (the second overwrites);
  the order of the requests is therefore read from the files' modification times, never from the names;
- only the prompt is written, not the sampling, length or stop words the client asked for;
- the file is opened with the process's umask and written while the request is received, before it is
  processed: a file younger than :attr:`CaptureBounds.min_age_s` may still be open, and is left alone;
- llama-server never removes a file; the folder is created if missing (common/arg.cpp ``--log-prompts-dir``).

So Draftwise creates the folder first, private (0700; on Windows it lies in the user's own profile folder,
``tuner.paths.data_dir()``, which only that user may read), starts llama-server with umask 077
(:func:`tuner.process.spawn`) so each file is 0600, and prunes the folder while serving, oldest first by
modification time, to :data:`MAX_FILES` files and :data:`MAX_BYTES` bytes (:class:`Pruner`, run by the
launch's watch: :mod:`tuner.server.launch`). One folder per served model id (``--alias``, or a router preset
section's name): :func:`log_prompts_dir` makes it and returns the path to pass.

Nothing here logs or returns the captured text except :func:`captured_requests` (the re-tune's reader) and
the first words of :func:`list_captured` (for the person who owns them); log lines name folders and counts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tuner import paths, storage
from tuner.errors import DraftwiseError
from tuner.units import MIB

log = logging.getLogger(__name__)

#: The most captured requests kept per model (the newest).
MAX_FILES = 200
#: The most bytes of captured requests kept per model (the newest files that fit).
MAX_BYTES = 64 * MIB
#: A file younger than this (seconds, by its modification time) may still be written: never pruned or read.
MIN_AGE_S = 1.0
#: Seconds between two prunes while serving.
PRUNE_INTERVAL_S = 2.0
#: The folder under ``tuner.paths.data_dir()`` that holds one folder per model id.
ROOT_NAME = "captured-requests"
#: What the setting does, in the words shown where it is switched on (the Serve tab, ``serve --help``).
KEEP_WORDS = f"keeps your last {MAX_FILES} requests on this machine to re-tune on them"
#: How much of a file a listing reads for its first words.
PREVIEW_BYTES = 2048

#: llama-server's file names: ``%012 PRId64 ".txt"`` of ``ggml_time_ms()``.
_NAME = re.compile(r"\d{12,20}\.txt")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_WINDOWS_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                               *(f"LPT{i}" for i in range(1, 10))})


class CaptureError(DraftwiseError, OSError):
    """A capture folder cannot be made private (it is a link, another user's, or cannot be created); the
    message names the folder."""


@dataclass(frozen=True)
class CaptureBounds:
    """What a captured folder is pruned to: at most ``max_files`` files and ``max_bytes`` bytes (the newest by
    modification time); files younger than ``min_age_s`` seconds are kept (and counted) whatever the bound."""

    max_files: int = MAX_FILES
    max_bytes: int = MAX_BYTES
    min_age_s: float = MIN_AGE_S


#: The bounds serving prunes to (read at each prune).
BOUNDS = CaptureBounds()


@dataclass(frozen=True)
class PruneResult:
    """What one :func:`prune` did: ``removed`` files, and the ``kept`` files with their ``kept_bytes``."""

    removed: int
    kept: int
    kept_bytes: int


@dataclass(frozen=True)
class CapturedFile:
    """One captured request as a listing shows it.

    Fields: ``path`` (its file), ``model_id`` (the folder's model), ``mtime`` (unix seconds it was received),
    ``size_bytes``, ``preview`` (the start of the prompt, at most :data:`PREVIEW_BYTES` bytes decoded).
    """

    path: Path
    model_id: str
    mtime: float
    size_bytes: int
    preview: str

    def first_words(self, n: int = 12, max_chars: int = 100) -> str:
        """The prompt's first ``n`` words on one line (white space collapsed), at most ``max_chars`` characters,
        with ``…`` when there is more; not escaped (a widget shows it through ``tuner.ui.plaintext.plain``)."""
        words = self.preview.split()
        text = " ".join(words[:n])
        more = len(words) > n or self.size_bytes > len(self.preview.encode("utf-8", "surrogatepass"))
        if len(text) > max_chars:
            text, more = text[:max_chars].rstrip(), True
        return text + (" …" if more and text else "")


@dataclass(frozen=True)
class CapturedRequest:
    """One captured prompt for a re-tune: ``path``, ``mtime`` (unix seconds), ``size_bytes``, ``text`` (the
    whole prompt as llama-server wrote it, UTF-8 with bad bytes replaced: after the chat template, or the JSON
    of a prompt that was not a string)."""

    path: Path
    mtime: float
    size_bytes: int
    text: str

    @property
    def looks_like_json(self) -> bool:
        """True when the text is probably the JSON form llama-server writes for a prompt that was not a string
        (token ids, several prompts: ``prompt.dump(2)``): it starts with ``[`` or ``{`` and a newline. A client
        may send such text as a string too; the file does not say which."""
        return self.text[:1] in ("[", "{") and self.text[1:2] == "\n"


@dataclass(frozen=True)
class CapturedSample:
    """What :func:`captured_requests` read for one model.

    Fields:
        requests: the prompts, oldest first, each text once, sampled evenly over time when there were more.
        files: captured files read (younger or unreadable ones are not).
        duplicates: files left out because the same text came again later (the newest copy is kept).
        first_unix_s / last_unix_s: when the first and the last of ``requests`` were received (None when empty).
    """

    requests: tuple[CapturedRequest, ...]
    files: int
    duplicates: int
    first_unix_s: float | None
    last_unix_s: float | None

    @property
    def span_s(self) -> float:
        """Seconds between the first and the last request (0 for none or one)."""
        if self.first_unix_s is None or self.last_unix_s is None:
            return 0.0
        return self.last_unix_s - self.first_unix_s

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[CapturedRequest]:
        return iter(self.requests)


# ------------------------------------------------------------------------------------------ folders
def captures_root() -> Path:
    """``tuner.paths.data_dir()/captured-requests`` (not created)."""
    return paths.data_dir() / ROOT_NAME


def folder_name(model_id: str) -> str:
    """The folder name of ``model_id``: the id itself when it is a plain file name (letters, digits, ``. _ -``,
    at most 64 characters, not a Windows device name, no trailing dot), else its plain characters and a hash of
    the whole id (``org/model:Q4`` → ``org_model_Q4-<10 hex>``), so no id can name a path outside the root."""
    if _SAFE_ID.fullmatch(model_id) and not model_id.endswith(".") \
            and model_id.split(".")[0].upper() not in _WINDOWS_RESERVED:
        return model_id
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("._-")[:48] or "model"
    digest = hashlib.sha256(model_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{cleaned}-{digest}"


def capture_dir(model_id: str) -> Path:
    """The folder of ``model_id``'s captured requests (not created): ``captures_root()/folder_name(model_id)``."""
    return captures_root() / folder_name(model_id)


def _check_private(folder: Path) -> None:
    """Raise CaptureError unless ``folder`` is a real folder (not a link) of this user with no group or other
    permission (POSIX; on Windows the profile folder's own access rules apply)."""
    try:
        st = folder.lstat()
    except OSError as exc:
        raise CaptureError(f"{folder}: cannot use it for captured requests ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CaptureError(f"{folder}: not a folder (a link or a file): captured requests are not kept there")
    if os.name == "posix" and (st.st_uid != os.getuid() or st.st_mode & 0o077):
        raise CaptureError(f"{folder}: owned by another user or readable by others (mode {st.st_mode & 0o777:o}): "
                           "captured requests are not kept there")


def log_prompts_dir(model_id: str) -> Path:
    """The folder to pass as ``--log-prompts-dir`` for ``model_id`` (a single served model's ``--alias``, or a
    router preset section's name: one folder per model), created private first: the root and the folder mode
    0700, owned by this user, not links.

    Raises:
        CaptureError: it cannot be created or is not private (names the folder).
    """
    root = captures_root()
    folder = root / folder_name(model_id)
    try:
        paths.ensure_private_dir(root)
        paths.ensure_private_dir(folder)
    except OSError as exc:
        raise CaptureError(f"{folder}: cannot create the folder for captured requests ({exc.strerror or exc})") \
            from None
    _check_private(root)
    _check_private(folder)
    return folder


def _model_folders(model_id: str | None) -> list[Path]:
    """The folders of ``model_id`` (None = every model's) that exist, as real folders."""
    if model_id is not None:
        folders = [capture_dir(model_id)]
    else:
        try:
            folders = sorted(p for p in captures_root().iterdir())
        except OSError:
            return []
    return [f for f in folders if f.is_dir() and not f.is_symlink()]


def _files(folder: Path) -> list[tuple[Path, os.stat_result]]:
    """llama-server's files in ``folder`` (regular files named like its names) with their ``lstat``."""
    out = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for e in entries:
        if not _NAME.fullmatch(e.name):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((Path(e.path), st))
    return out


def _newest_first(files: list[tuple[Path, os.stat_result]]) -> list[tuple[Path, os.stat_result]]:
    return sorted(files, key=lambda f: (f[1].st_mtime_ns, f[0].name), reverse=True)


# ------------------------------------------------------------------------------------------ pruning
def prune(folder: Path, bounds: CaptureBounds | None = None, now_s: float | None = None) -> PruneResult:
    """Keep the newest files of ``folder`` (by modification time) while they fit ``bounds`` (default
    :data:`BOUNDS`: 200 files, 64 MiB), and delete the rest; a file younger than ``bounds.min_age_s`` is never
    deleted (llama-server may be writing it) but counts toward the bound. ``now_s``: ``time.time()``.

    Returns what it did. Raises nothing: a file that cannot be deleted is left (and logged at debug level).
    """
    b = bounds or BOUNDS
    now = time.time() if now_s is None else now_s
    kept = kept_bytes = removed = 0
    full = False
    for path, st in _newest_first(_files(folder)):
        young = now - st.st_mtime < b.min_age_s
        fits = not full and kept + 1 <= b.max_files and kept_bytes + st.st_size <= b.max_bytes
        if young or fits:
            kept, kept_bytes = kept + 1, kept_bytes + st.st_size
            continue
        full = True  # the newest that fit are kept; everything older goes
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        except OSError:
            log.debug("cannot delete the captured request %s", path, exc_info=True)
    if removed:
        log.info("captured requests in %s: %d oldest deleted, %d kept", folder, removed, kept)
    return PruneResult(removed, kept, kept_bytes)


class Pruner:
    """Prunes one folder (:func:`prune` to :data:`BOUNDS`) at most every ``interval_s`` seconds: the watch of a
    served launch calls :meth:`tick` on each turn of its loop."""

    def __init__(self, folder: Path, interval_s: float = PRUNE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = Path(folder)
        self.interval_s = interval_s
        self._clock = clock
        self._next = clock()

    def tick(self) -> PruneResult | None:
        """Prune when the interval has passed since the last prune; the result, or None when not due."""
        if self._clock() < self._next:
            return None
        return self.prune()

    def prune(self) -> PruneResult | None:
        """Prune now (None when it failed: serving never stops for it; the failure is logged)."""
        self._next = self._clock() + self.interval_s
        try:
            return prune(self.folder)
        except Exception:  # noqa: BLE001 - a pruning bug must not end serving
            log.exception("pruning the captured requests in %s failed", self.folder)
            return None


def drop_probe(folder: Path, text: str, since_unix_s: float) -> int:
    """Delete the files of ``folder`` received since ``since_unix_s`` (less a second) that hold exactly
    ``text``: Draftwise's own readiness completion (:data:`tuner.server.readiness.READY_PROMPT`), which is not
    a user's request. Returns how many."""
    want = text.encode("utf-8")
    dropped = 0
    for path, st in _files(folder):
        if st.st_mtime < since_unix_s - 1.0 or st.st_size != len(want):
            continue
        try:
            if storage.read_regular_bytes(path, limit_bytes=len(want)) == want:
                path.unlink()
                dropped += 1
        except OSError:
            log.debug("cannot check the captured file %s", path, exc_info=True)
    return dropped


# ------------------------------------------------------------------------------------------ listing, deleting
def list_captured(model_id: str | None = None) -> list[CapturedFile]:
    """The captured requests of ``model_id`` (None = every model's), newest first, with the start of each
    prompt (:data:`PREVIEW_BYTES`). A file that vanishes meanwhile is left out. Raises nothing."""
    out: list[CapturedFile] = []
    for folder in _model_folders(model_id):
        for path, st in _files(folder):
            try:
                with storage.open_regular(path) as fh:
                    head = fh.read(PREVIEW_BYTES)
            except OSError:
                continue
            preview = head.decode("utf-8", "replace")
            if len(head) == PREVIEW_BYTES:
                preview = preview.rstrip("\ufffd")  # a character cut at the edge
            out.append(CapturedFile(path, folder.name, st.st_mtime, st.st_size, preview))
    out.sort(key=lambda f: (f.mtime, f.path.name), reverse=True)
    return out


def _inside_root(path: Path) -> bool:
    """True when ``path`` is a file name of llama-server's in a model folder directly under the root."""
    root = captures_root()
    return (_NAME.fullmatch(path.name) is not None and path.parent.parent == root
            and path.parent.name not in ("", ".", "..") and not path.parent.is_symlink())


def delete_captured(path: Path | str) -> bool:
    """Delete one captured request (a file :func:`list_captured` listed); True when it existed.

    Raises:
        ValueError: ``path`` is not a captured request's file (nothing else is ever deleted).
        OSError: it cannot be deleted.
    """
    path = Path(path)
    if not _inside_root(path):
        raise ValueError(f"{path}: not a captured request of Draftwise's ({captures_root()})")
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def forget_captured(model_id: str | None = None, keep_folders: bool = False) -> int:
    """Delete every captured request of ``model_id`` (None = every model's): *Forget captured requests*
    (``keep_folders`` True: a serving llama-server goes on writing into them) and switching capture off (the
    folders go too, and the root when it is left empty). Returns how many files were deleted.

    Raises:
        OSError: a file or folder cannot be deleted (what could be deleted is gone).
    """
    deleted = 0
    for folder in _model_folders(model_id):
        for path, _st in _files(folder):
            try:
                path.unlink()
                deleted += 1
            except FileNotFoundError:
                pass
        if not keep_folders:
            shutil.rmtree(folder)
    if not keep_folders and model_id is None:
        try:
            captures_root().rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            log.debug("the captured-requests folder is not empty", exc_info=True)
    log.info("captured requests forgotten: %d files%s", deleted, "" if keep_folders else " and their folders")
    return deleted


def captured_count(model_id: str | None = None) -> tuple[int, int]:
    """``(files, bytes)`` of the captured requests of ``model_id`` (None = every model's). Raises nothing."""
    files = [st for folder in _model_folders(model_id) for _p, st in _files(folder)]
    return len(files), sum(st.st_size for st in files)


# ------------------------------------------------------------------------------------------ the re-tune's reader
def _sample_evenly(items: list[CapturedRequest], limit: int | None) -> list[CapturedRequest]:
    """``limit`` of ``items`` (oldest first) spread evenly over their order, the first and the last included."""
    if limit is None or len(items) <= limit:
        return items
    if limit <= 1:
        return items[-1:] if limit == 1 else []
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def captured_requests(model_id: str, limit: int | None = None, now_s: float | None = None) -> CapturedSample:
    """The captured prompts of ``model_id`` for a re-tune on served traffic: each text once (the newest copy
    of a repeated one), oldest first, at most ``limit`` of them sampled evenly over time (None = all), with the
    period they span. Files younger than :data:`MIN_AGE_S` are not read (they may be half written).

    Raises nothing: an unreadable file is left out.
    """
    now = time.time() if now_s is None else now_s
    seen: set[bytes] = set()
    kept: list[CapturedRequest] = []
    files = 0
    for path, st in _newest_first(_files(capture_dir(model_id))):
        if now - st.st_mtime < MIN_AGE_S:
            continue
        try:
            raw = storage.read_regular_bytes(path, limit_bytes=MAX_BYTES)
        except OSError:
            continue
        files += 1
        digest = hashlib.sha256(raw).digest()
        if digest in seen:
            continue
        seen.add(digest)
        kept.append(CapturedRequest(path, st.st_mtime, st.st_size, raw.decode("utf-8", "replace")))
    kept.reverse()
    chosen = _sample_evenly(kept, limit)
    return CapturedSample(tuple(chosen), files, files - len(kept),
                          chosen[0].mtime if chosen else None, chosen[-1].mtime if chosen else None)


__all__ = ["BOUNDS", "KEEP_WORDS", "MAX_BYTES", "MAX_FILES", "CaptureBounds", "CaptureError", "CapturedFile",
           "CapturedRequest", "CapturedSample", "Pruner", "PruneResult", "capture_dir", "captured_count",
           "captured_requests", "captures_root", "delete_captured", "drop_probe", "folder_name", "forget_captured",
           "list_captured", "log_prompts_dir", "prune"]
