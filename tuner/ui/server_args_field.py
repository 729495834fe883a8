"""The Serve tab's *Extra llama-server flags* field: its line edit, and the check of what is typed there with the
rule ``--server-arg`` uses (:func:`tuner.serverargs.parse_server_args`, values included), so a flag llama-server
would refuse at start (``-tb=abc``: "bad value for -tb: stoi") is refused when it is written, and nothing is
saved."""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit

from tuner.serverargs import ServerArgError, parse_server_args, user_allowed

#: The field's name (its row label, and the start of a refusal).
SERVER_ARGS_LABEL = "Extra llama-server flags"
#: Said after the flags are saved: a profile measured with other flags is stale, so the next start tunes first.
SERVER_ARGS_SAVED = ("Saved. The next Start server tunes again before serving: the saved profiles were measured "
                     "with the previous llama-server flags.")


def server_args_edit(server_args: tuple[str, ...]) -> QLineEdit:
    """The field's line edit holding ``server_args`` (the setting: FLAG or FLAG=VALUE, separated by spaces), with
    its placeholder and the allowed flags in its tooltip."""
    edit = QLineEdit(" ".join(server_args))
    edit.setPlaceholderText("none (e.g. --no-repack, or -tb=2)")
    edit.setToolTip(
        "Flags added to every llama-server that tuning and serving start, written FLAG or FLAG=VALUE and "
        "separated by spaces, e.g. --no-repack when this CPU crashes in llama.cpp's repacked kernels. "
        "Allowed: " + " ".join(user_allowed()) + ". Never one that changes where the server listens, its "
        "key, CORS or tools, or one Draftwise sets itself. Changing them re-tunes.")
    return edit


def server_args_refusal(specs: tuple[str, ...]) -> str | None:
    """Why ``specs`` cannot be saved, in one line naming the field and the flag ("Extra llama-server flags: -tb
    needs a whole number, not 'abc'"), or None when :func:`tuner.serverargs.parse_server_args` accepts them."""
    try:
        parse_server_args(specs, where=SERVER_ARGS_LABEL)
    except ServerArgError as exc:
        return str(exc)
    return None
