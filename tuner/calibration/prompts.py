"""Prompt sets for calibration: the user's file or the built-in default set.

Two file formats are accepted:

* JSONL (``.jsonl`` / ``.json`` suffix, or a file whose first non-blank line starts with ``{``):
  one object per line with ``prompt`` (non-empty string) and optional ``category`` (string), or a
  conversation: ``{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...],
  "category": ...}`` ending with a ``user`` turn. A chat model gets the conversation as it is (through
  its chat template); a base model gets it flattened by
  :func:`flatten_messages` (``"User: …"`` / ``"Assistant: …"`` turns separated
  by blank lines, ending with ``"Assistant:"``).
* Plain text: prompts separated by lines holding only ``---`` (surrounding blanks ignored).
  Plain-text prompts have category ``None``.

Errors raise :class:`PromptFileError`, which names the file and the 1-based line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import DraftwiseError
from tuner.resources import resource_path

if TYPE_CHECKING:
    from tuner.server.capture import CapturedRequest

DEFAULT_PROMPTS = ("prompts", "default.jsonl")
#: Largest prompt file read (bytes).
MAX_PROMPT_FILE_BYTES = 64 << 20
#: At most this many prompts are measured per sweep, whatever the file holds (a 100,000-prompt
#: file would otherwise make the baseline alone take most of an hour, whatever ``--budget`` says);
#: the sweep picks them round-robin over categories (:func:`select_prompts`).
MAX_PROMPTS_PER_SWEEP = 200

DEFAULT_SET_PROMPTS = 5
"""Prompts used from the built-in set (one per category) unless ``max_prompts`` says otherwise."""

DEFAULT_SERVED_PROMPTS = 8
"""Captured requests a re-tune on served traffic measures unless ``max_prompts`` says otherwise (sampled
evenly over the time they were received: :func:`tuner.server.capture.captured_requests`)."""

SERVED_SOURCE_PREFIX = "served:"
"""``PromptSet.source`` of captured requests: ``"served:<model id>"``."""

SERVED_CATEGORY = "served"
"""The category of a captured request."""


class PromptFileError(DraftwiseError, ValueError):
    """A prompt file cannot be used. ``path`` and ``line`` (1-based, or ``None``) say where."""

    def __init__(self, path: Path | str, line: int | None, reason: str) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Prompt:
    """One calibration prompt.

    Attributes:
        text: the prompt text sent to ``/completion``.
        category: task category (``code``, ``math``, ``translation``, ``creative``, ``chat``, or the
            user's own label); ``None`` when the file gives none.
        line: 1-based line in the source file where the prompt starts (``None`` for built-in sets).
        messages: a multi-turn conversation as ``(role, content)`` pairs (``None`` for a single prompt);
            ``text`` then holds its flattened form for base models.
        fill: for a long-context request: the fraction of the served context its prompt fills (``text``
            is the source document, sized at launch time); ``None`` for an ordinary prompt.
        question: for a long-context request: the question appended after the document.
        captured_unix_s: for a request captured while serving (:func:`captured_prompt_set`): when the server
            received it (unix seconds); it is sent as it was logged (already templated), as a raw completion.
        token_ids: for a captured request whose prompt was a JSON token array: the token ids to send (``text``
            then holds the JSON as logged).
    """

    text: str
    category: str | None = None
    line: int | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    fill: float | None = None
    question: str | None = None
    captured_unix_s: float | None = None
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PromptSet:
    """An ordered, non-empty set of prompts plus where it came from.

    Attributes:
        prompts: the prompts, in file order.
        source: file path, or ``"default"`` for the built-in set.
        sha256: hash over the prompt texts and categories (a profile staleness key; it does not
            change with the file's path, comments or whitespace between plain-text prompts).
    """

    prompts: tuple[Prompt, ...]
    source: str
    sha256: str

    @property
    def captured(self) -> bool:
        """True when the prompts are requests captured while serving (``source`` ``"served:<model id>"``)."""
        return self.source.startswith(SERVED_SOURCE_PREFIX)

    @property
    def categories(self) -> tuple[str, ...]:
        """Distinct categories in first-seen order (``None`` left out)."""
        seen: list[str] = []
        for p in self.prompts:
            if p.category is not None and p.category not in seen:
                seen.append(p.category)
        return tuple(seen)

    def __len__(self) -> int:
        return len(self.prompts)


def prompt_set_hash(prompts: tuple[Prompt, ...] | list[Prompt]) -> str:
    """SHA-256 hex digest over (category, text) of each prompt, in order."""
    h = hashlib.sha256()
    for p in prompts:
        item: list = [p.category, p.text]
        if p.messages is not None:
            item.append([list(m) for m in p.messages])
        if p.fill is not None:
            item += [p.fill, p.question]
        h.update(json.dumps(item, ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def make_prompt_set(prompts: list[Prompt] | tuple[Prompt, ...], source: str = "inline") -> PromptSet:
    """Build a :class:`PromptSet` from prompts given in code (tests, GUI editor).

    Raises:
        ValueError: no prompts, or an empty prompt text.
    """
    prompts = tuple(prompts)
    if not prompts:
        raise ValueError(f"{source}: the prompt set is empty")
    for i, p in enumerate(prompts):
        if not p.text.strip():
            raise ValueError(f"{source}: prompt {i + 1} is empty")
    return PromptSet(prompts=prompts, source=source, sha256=prompt_set_hash(prompts))


def _looks_jsonl(path: Path, text: str) -> bool:
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return True
    if path.suffix.lower() in (".txt", ".md", ".text"):
        return False
    for line in text.splitlines():
        if line.strip():
            return line.lstrip().startswith("{")
    return False


def _parse_jsonl(path: Path, text: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(path, n, f"not valid JSON ({exc.msg})") from exc
        except RecursionError:
            raise PromptFileError(path, n, "not valid JSON (nested too deeply)") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise PromptFileError(path, n, f"not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise PromptFileError(path, n, "each line must be a JSON object with a 'prompt' key")
        cat = obj.get("category")
        if cat is not None and not isinstance(cat, str):
            raise PromptFileError(path, n, "'category' must be a string")
        if "messages" in obj:
            if "prompt" in obj:
                raise PromptFileError(path, n, "give either 'prompt' or 'messages', not both")
            messages = _parse_messages(path, n, obj["messages"])
            prompts.append(Prompt(text=flatten_messages(messages), category=(cat.strip() or None) if cat else None,
                                  line=n, messages=messages))
            continue
        text_v = obj.get("prompt")
        if not isinstance(text_v, str):
            raise PromptFileError(path, n, "missing key 'prompt' (a string) or 'messages' (a list)")
        if not text_v.strip():
            raise PromptFileError(path, n, "'prompt' is empty")
        prompts.append(Prompt(text=text_v, category=(cat.strip() or None) if cat else None, line=n))
    return prompts


CHAT_ROLES = ("system", "user", "assistant")


def flatten_messages(messages: tuple[tuple[str, str], ...]) -> str:
    """The text a base model (no chat template) gets for a conversation. Rule: each turn becomes
    ``"<Role>: <content>"`` (``System``, ``User``, ``Assistant``), turns separated by a blank line, and the
    text ends with ``"Assistant:"`` so the model writes the next answer."""
    parts = [f"{role.capitalize()}: {content}" for role, content in messages]
    return "\n\n".join(parts + ["Assistant:"])


def _parse_messages(path: Path, n: int, raw: object) -> tuple[tuple[str, str], ...]:
    """Check a ``messages`` list (roles system/user/assistant, non-empty string contents, a system turn
    only first, the last turn from the user). Raises PromptFileError naming the line and the turn."""
    if not isinstance(raw, list) or not raw:
        raise PromptFileError(path, n, "'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    out: list[tuple[str, str]] = []
    for k, m in enumerate(raw, start=1):
        if not isinstance(m, dict):
            raise PromptFileError(path, n, f"messages[{k}]: expected an object with 'role' and 'content'")
        role, content = m.get("role"), m.get("content")
        if role not in CHAT_ROLES:
            raise PromptFileError(path, n, f"messages[{k}]: 'role' must be one of {', '.join(CHAT_ROLES)}, got {role!r}")
        if role == "system" and k != 1:
            raise PromptFileError(path, n, f"messages[{k}]: a 'system' turn may only come first")
        if not isinstance(content, str) or not content.strip():
            raise PromptFileError(path, n, f"messages[{k}]: 'content' must be a non-empty string")
        out.append((role, content))
    if out[-1][0] != "user":
        raise PromptFileError(path, n, "the last turn of 'messages' must be from the 'user' (the model answers it)")
    return tuple(out)


def _parse_text(path: Path, text: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    block: list[str] = []
    start: int | None = None

    def flush(sep_line: int) -> None:
        nonlocal block, start
        body = "\n".join(block).strip()
        if body:
            prompts.append(Prompt(text=body, category=None, line=start))
        elif start is not None or prompts:
            raise PromptFileError(path, sep_line, "empty prompt between '---' separators")
        block, start = [], None

    lines = text.splitlines()
    for n, raw in enumerate(lines, start=1):
        if raw.strip() == "---":
            flush(n)
            continue
        if start is None and raw.strip():
            start = n
        block.append(raw)
    body = "\n".join(block).strip()
    if body:
        prompts.append(Prompt(text=body, category=None, line=start))
    return prompts


def load_prompts(path: Path | str) -> PromptSet:
    """Load a prompt file (JSONL or ``---``-separated text; see module docstring).

    Raises:
        PromptFileError: unreadable file, not UTF-8, a bad JSONL line, an empty prompt, or no
            prompts at all; the message names the file and line.
    """
    path = Path(path)
    from tuner.storage import NotRegularFileError, read_regular_bytes

    try:
        raw = read_regular_bytes(path, limit_bytes=MAX_PROMPT_FILE_BYTES)  # never blocks on a FIFO
    except NotRegularFileError as exc:
        raise PromptFileError(path, None, f"not a regular file (it is {exc.kind})") from exc
    except OSError as exc:
        raise PromptFileError(path, None, f"cannot read prompt file ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PromptFileError(path, line, "not UTF-8 text") from exc
    prompts = _parse_jsonl(path, text) if _looks_jsonl(path, text) else _parse_text(path, text)
    if not prompts:
        raise PromptFileError(path, None, "no prompts found")
    return PromptSet(prompts=tuple(prompts), source=str(path), sha256=prompt_set_hash(prompts))


def default_prompts() -> PromptSet:
    """The built-in set ``resources/prompts/default.jsonl`` (code, math, translation, creative, chat).

    Raises:
        PromptFileError: the resource is missing or damaged (an installation problem).
    """
    try:
        path = resource_path(*DEFAULT_PROMPTS)
    except FileNotFoundError as exc:
        raise PromptFileError("/".join(DEFAULT_PROMPTS), None, str(exc)) from exc
    ps = load_prompts(path)
    return PromptSet(prompts=ps.prompts, source="default", sha256=ps.sha256)


def _captured_prompt(req: CapturedRequest) -> Prompt | None:
    """One captured request as a prompt: the text as logged, or the token ids of a JSON token array;
    ``None`` for other JSON (several prompts, mixed arrays: not one completion's prompt)."""
    token_ids: tuple[int, ...] | None = None
    if req.looks_like_json:
        try:
            value = json.loads(req.text)
        except (ValueError, RecursionError):
            value = req.text  # a string that merely looks like JSON: sent as the client sent it
        if isinstance(value, list):
            if not value or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
                return None
            token_ids = tuple(value)
        elif not isinstance(value, str):
            return None
    if token_ids is None and not req.text.strip():
        return None
    return Prompt(text=req.text, category=SERVED_CATEGORY, captured_unix_s=req.mtime, token_ids=token_ids)


def spread_order(n: int) -> list[int]:
    """``0 … n−1`` reordered so that every prefix spreads over the whole range: the first, the last, then the
    middles of the gaps left, widest first (``5`` → ``[0, 4, 2, 1, 3]``). The sweep's protocol may keep only
    the first prompts of a set to fit its budget; in this order they still span the period served."""
    if n <= 0:
        return []
    order, gaps = [0], [(0, n - 1)] if n > 1 else []
    if n > 1:
        order.append(n - 1)
    while gaps:
        gaps.sort(key=lambda g: g[1] - g[0], reverse=True)
        lo, hi = gaps.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        gaps += [(lo, mid), (mid, hi)]
    return order


def captured_prompt_set(model_id: str, max_prompts: int | None = None) -> PromptSet:
    """The requests captured while serving ``model_id`` as a prompt set (``source`` ``"served:<model id>"``):
    each text once, at most ``max_prompts`` (default :data:`DEFAULT_SERVED_PROMPTS`, never more than
    :data:`MAX_PROMPTS_PER_SWEEP`) sampled evenly over the time they were received
    (:func:`tuner.server.capture.captured_requests`), in :func:`spread_order` of that time (the first,
    the last, the middle, …), so the first few a short sweep keeps still span the period. A prompt llama-server logged as a JSON token array is
    sent as that token array; other JSON (several prompts in one request) is left out.

    ``sha256`` hashes the source only, never the captured text: new captures do not make a profile tuned on
    them stale (they only make a re-tune available).

    Raises:
        PromptFileError: no captured request of ``model_id`` can be used (names the folder and the switch).
    """
    from tuner.server.capture import capture_dir, captured_requests

    limit = min(max_prompts or DEFAULT_SERVED_PROMPTS, MAX_PROMPTS_PER_SWEEP)
    sample = captured_requests(model_id, limit=limit)
    oldest_first = [p for p in (_captured_prompt(r) for r in sample) if p is not None]
    prompts = tuple(oldest_first[i] for i in spread_order(len(oldest_first)))
    if not prompts:
        raise PromptFileError(capture_dir(model_id), None,
                              f"no captured requests of model {model_id!r} to re-tune on (serve it with "
                              "capture on: the setting 'Keep served requests' or serve --capture-requests)")
    source = SERVED_SOURCE_PREFIX + model_id
    return PromptSet(prompts=prompts, source=source, sha256=hashlib.sha256(source.encode("utf-8")).hexdigest())


def select_prompts(ps: PromptSet, max_prompts: int | None) -> list[tuple[int, Prompt]]:
    """At most ``max_prompts`` prompts of ``ps`` as ``(index in the set, prompt)``, picked round-robin over
    the categories (file order within one) and returned in set order; ``None`` = all of them."""
    indexed = list(enumerate(ps.prompts))
    if max_prompts is None or max_prompts >= len(indexed):
        return indexed
    by_cat: dict[str | None, list[tuple[int, Prompt]]] = {}
    for ip in indexed:
        by_cat.setdefault(ip[1].category, []).append(ip)
    out: list[tuple[int, Prompt]] = []
    while len(out) < max_prompts:
        for cat in list(by_cat):
            if by_cat[cat] and len(out) < max_prompts:
                out.append(by_cat[cat].pop(0))
    return sorted(out)


@dataclass(frozen=True)
class PromptChoice:
    """The requests a sweep sends, chosen once.

    Attributes:
        set: the prompt set (the user's file, a given set, or the built-in one).
        chosen: ``(index, prompt)`` of every request: the set's picks (:func:`select_prompts`), then the
            extra ones (the long-context requests), numbered after the set's last prompt.
        skipped_note: the sentence saying a large set was cut to :data:`MAX_PROMPTS_PER_SWEEP`, else ``None``.
    """

    set: PromptSet
    chosen: tuple[tuple[int, Prompt], ...]
    skipped_note: str | None = None


def choose_prompts(prompts: Path | PromptSet | None, max_prompts: int | None,
                   extra: Sequence[Prompt] = ()) -> PromptChoice:
    """The prompts a sweep measures: a file is loaded, ``None`` is the built-in set (then at most
    :data:`DEFAULT_SET_PROMPTS` unless ``max_prompts`` says otherwise); never more than
    :data:`MAX_PROMPTS_PER_SWEEP` of a set (``skipped_note`` says so), spread over its categories;
    ``extra`` (the long-context requests) come after them.

    Raises:
        PromptFileError: the file is unusable (names the file and line).
    """
    if isinstance(prompts, PromptSet):
        ps = prompts
    elif prompts is None:
        ps = default_prompts()
        max_prompts = DEFAULT_SET_PROMPTS if max_prompts is None else max_prompts
    else:
        ps = load_prompts(prompts)
    note = None
    if len(ps) > MAX_PROMPTS_PER_SWEEP and (max_prompts is None or max_prompts > MAX_PROMPTS_PER_SWEEP):
        note = (f"the prompt set has {len(ps):,} prompts; a sweep measures at most {MAX_PROMPTS_PER_SWEEP} of "
                "them (spread over its categories)")
        max_prompts = MAX_PROMPTS_PER_SWEEP
    chosen = select_prompts(ps, max_prompts) + [(len(ps.prompts) + j, p) for j, p in enumerate(extra)]
    return PromptChoice(set=ps, chosen=tuple(chosen), skipped_note=note)
