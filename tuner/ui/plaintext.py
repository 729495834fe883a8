"""Text from files, file names and llama-server in Qt widgets: shown as text, never as markup or controls.

A ``QLabel`` renders rich text whenever its text *looks* like HTML (``Qt.AutoText``), and so do tooltips and
the tray's notification balloon: a model file named ``<img src=…>.gguf`` or a ``general.name`` holding a
tag would be drawn as an image or a link. And a control or bidi character (``ESC``, ``U+202E``) in a header
string or a log line turns the text around it. So:

- a label that shows such text is a plain-text label (:func:`plain_label`, ``Qt.PlainText``) and gets the
  text through :func:`plain` (:func:`tuner.safetext.safe_text`);
- a label whose own words are rich text (a bold name) escapes the value it holds with :func:`rich`;
- a tooltip is :func:`tooltip`: the escaped text in Qt's own rich form, so it renders as written;
- a notification's body is :func:`notification_body` (notification servers read a subset of HTML).
Table and tree items are plain already: their texts go through :func:`plain`.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import Qt as QtGui
from PySide6.QtWidgets import QLabel

from tuner.safetext import safe_text


def plain(value: object, keep: str = "") -> str:
    """``value`` as text for a plain widget (a plain-text label, a table or tree item, the status bar, a
    read-only text box): control, bidi and separator characters as visible escapes (``keep``: e.g. ``"\\n"``
    for a text of several lines laid out by Draftwise)."""
    return safe_text(value, keep=keep)


def rich(value: object, lines: bool = False) -> str:
    """``value`` for use inside a rich-text label's own markup (``f"<b>{rich(name)}</b>"``): escaped, then
    HTML-escaped, so a tag in a file name is shown as written. ``lines``: a text of several lines laid out by
    Draftwise keeps its line breaks (``<br>``)."""
    text = html.escape(safe_text(value, keep="\n" if lines else ""), quote=False)
    return text.replace("\n", "<br>") if lines else text


def plain_label(label: QLabel) -> QLabel:
    """Make ``label`` a plain-text label (``Qt.PlainText``: never rendered as HTML whatever its text holds);
    returns it."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def rich_label(label: QLabel) -> QLabel:
    """Make ``label`` a rich-text label (``Qt.RichText``), for one whose words carry their own markup and
    whose values are escaped with :func:`rich`; returns it."""
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


def tooltip(text: object) -> str:
    """A tooltip showing ``text`` exactly (its lines kept): escaped, in Qt's own rich form
    (``Qt.convertFromPlainText``), since a tooltip is rendered as HTML whenever it looks like HTML."""
    return QtGui.convertFromPlainText(safe_text(text, keep="\n"), Qt.WhiteSpaceMode.WhiteSpaceNormal)


def notification_body(text: object) -> str:
    """A desktop notification's message: escaped and HTML-escaped (freedesktop notification servers and Qt's
    own balloon read markup in the body; an entity is shown as its character)."""
    return html.escape(safe_text(text, keep="\n"), quote=False)


__all__ = ["notification_body", "plain", "plain_label", "rich", "rich_label", "tooltip"]
