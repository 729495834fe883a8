"""The Chat tab's opt-in history file (core: no Qt).

Chats are not stored unless the user ticks "Keep chat history" (``Settings.keep_chat_history``).
Then every conversation is kept in ``tuner.paths.data_dir() / "chat_history.json"``, written
atomically (:mod:`tuner.storage`) with owner-only permissions (``0o600``): conversations can hold
anything the user typed. Turning the option off deletes the file.

File shape: ``{"schema_version": 1, "conversations": [{"started_unix": float, "model": str,
"messages": [{"role": "user"|"assistant", "content": str}, …]}, …]}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner import paths, storage

HISTORY_FILE = "chat_history.json"
SCHEMA_VERSION = 1
#: Oldest conversations are dropped beyond this many.
MAX_CONVERSATIONS = 200


def history_path() -> Path:
    """``data_dir()/chat_history.json``."""
    return paths.data_dir() / HISTORY_FILE


def load_history() -> list[dict[str, Any]]:
    """The stored conversations, oldest first; ``[]`` when there is no file.

    Raises:
        tuner.storage.CorruptFileError: the file is not JSON (it is kept aside as ``*.corrupt-<time>``).
        ValueError: the JSON is not the shape above (names the file).
    """
    p = history_path()
    obj = storage.load_json(p)
    if obj is None:
        return []
    convs = obj.get("conversations") if isinstance(obj, dict) else None
    if not isinstance(convs, list):
        raise ValueError(f"{p}: expected an object with a 'conversations' list")
    return [c for c in convs if isinstance(c, dict)]


def save_conversation(conversation: dict[str, Any]) -> Path:
    """Add or replace ``conversation`` (matched by ``started_unix``) and write the file (0600).

    Args:
        conversation: ``{"started_unix": float, "model": str, "messages": [...]}``.

    Returns:
        The file written.

    Raises:
        OSError: the data folder is not writable. A corrupt old file is kept aside and replaced.
    """
    try:
        convs = load_history()
    except (ValueError, storage.CorruptFileError):
        convs = []
    key = conversation.get("started_unix")
    convs = [c for c in convs if c.get("started_unix") != key] + [conversation]
    convs = convs[-MAX_CONVERSATIONS:]
    p = history_path()
    storage.atomic_write_json(p, {"schema_version": SCHEMA_VERSION, "conversations": convs}, mode=0o600)
    return p


def delete_history() -> bool:
    """Remove the history file; True when one existed."""
    try:
        history_path().unlink()
        return True
    except FileNotFoundError:
        return False
