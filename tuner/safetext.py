"""Text from files, file names and child processes, made safe to show to a person.

A GGUF header string (``general.architecture``, ``tokenizer.ggml.model``), a file name or a line of
llama-server's log is data the user did not write: printed raw it can set the terminal's title (``ESC ]0;…
BEL``), clear the screen (``ESC [2J``), print a fake table row after a newline, or turn the letters around
it backwards (the Unicode bidi overrides, "Trojan Source"). Every human-readable output of the project
(CLI tables, notes, errors, relayed server lines, the log file, the GUI's labels, tooltips and
notifications) shows such text through :func:`safe_text`, which writes each such character as a visible
escape (``\\x1b``, ``\\x07``, ``\\n``, ``\\u202e``). ``--json`` output is not escaped here: JSON has its own
exact escapes.

Escaped: the C0 controls (U+0000–U+001F, among them ESC, BEL, CR, LF, TAB), DEL (U+007F), the C1 controls
(U+0080–U+009F, among them CSI U+009B, which some terminals take for ``ESC [``), the line and paragraph
separators (U+2028, U+2029), the bidi marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
U+202A–U+202E, U+2066–U+2069), and lone surrogates: a file name that is not valid UTF-8 reaches Python with
its bytes kept as U+DC80–U+DCFF (PEP 383), shown here as the byte it stands for (``\\xff``), so the line
can be printed and logged at all.
"""

from __future__ import annotations

import errno
import re
from typing import TextIO

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SEPARATORS = (0x2028, 0x2029)


def _escape(code: int) -> str:
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a non-UTF-8 file name (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


_CODES = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_SEPARATORS, *_BIDI, *range(0xD800, 0xE000))
_TABLE: dict[int, str] = {code: _escape(code) for code in _CODES}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TABLE.update({ord(c): e for c, e in _NAMED.items()})
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def safe_text(value: object, keep: str = "") -> str:
    """``value`` as text (``str(value)``; a ``Path`` or an exception too) with every control, bidi and
    separator character written as a visible escape (see the module docstring).

    Args:
        value: the text, or anything whose ``str()`` is shown.
        keep: characters left as they are, for a caller that adds its own lines (``"\\n"``: a multi-line
            message such as a traceback in the log file). Values inside a line never keep anything.

    Returns:
        The text, unchanged when it holds nothing to escape (the usual case, tested first).
        ``safe_text("evil\\x1b]0;PWNED\\x07\\nFAKE")`` → ``'evil\\\\x1b]0;PWNED\\\\x07\\\\nFAKE'``.
    """
    text = value if isinstance(value, str) else str(value)
    if _UNSAFE.search(text) is None:
        return text
    if not keep:
        return text.translate(_TABLE)
    table = {code: esc for code, esc in _TABLE.items() if chr(code) not in keep}
    return text.translate(table)


def is_safe(text: str, keep: str = "") -> bool:
    """True when :func:`safe_text` would return ``text`` unchanged."""
    return safe_text(text, keep) == text


_ERRNO_WORDS = {
    errno.ENAMETOOLONG: "name too long (a file name longer than the file system allows, or too long a path)",
    errno.ELOOP: "too many levels of symbolic links (a link loop?)",
}


def error_text(exc: BaseException, with_path: bool = True) -> str:
    """The one line to show for ``exc``, made safe (:func:`safe_text`). An ``OSError`` that names a file is
    ``"PATH: name too long (…)"`` / ``"PATH: Permission denied"`` (the errno's words, not ``[Errno 36] …:
    'PATH'``; with ``with_path`` False only the words, for a caller that names the path or flag itself);
    anything else is its ``str()``."""
    if not isinstance(exc, OSError) or exc.filename is None:
        return safe_text(exc)
    words = safe_text(_ERRNO_WORDS.get(exc.errno or 0) or exc.strerror or str(exc))
    if not with_path:
        return words
    second = f" -> {safe_text(exc.filename2)}" if exc.filename2 is not None else ""
    return f"{safe_text(exc.filename)}{second}: {words}"


class SafeStream:
    """A text stream for people (a terminal's stdout or stderr) that escapes what its writers did not.

    The command line installs it over ``sys.stdout`` (unless ``--json``) and ``sys.stderr``, so a control
    character that reaches the terminal inside any message (an error naming a file, a library's warning)
    is shown escaped. Newlines and tabs pass, since the writers lay out their lines with them, and so does a
    carriage return at the start of a write (a progress bar redrawing its line); a newline *inside* a value
    (a fake table row) is escaped by the writer with :func:`safe_text` before it lays out the line.
    Everything else (``fileno``, ``isatty``, ``encoding``, ``flush``) is the wrapped stream's.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` with its unsafe characters escaped; returns ``len(text)`` (what was asked)."""
        lead = "\r" if text.startswith("\r") else ""
        self.stream.write(lead + safe_text(text[len(lead):], keep="\n\t"))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        """:meth:`write` for each of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the wrapped stream."""
        self.stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


__all__ = ["SafeStream", "is_safe", "error_text", "safe_text"]
