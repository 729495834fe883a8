"""The llama-server the sweep runs, and its flag dialect: resolved once.

The binary is the caller's (the app: one binary for the sweep and for serving), the one the user named with
``--server`` (that file or an error, never a silent fallback to another build), or the discovered one
(``tuner.server.discovery.find_server``). Its dialect (``tuner.server.dialect.probe_dialect``, cached) says
which flags and speculation types it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..request import TuneError

if TYPE_CHECKING:
    from tuner.server.dialect import Dialect
    from tuner.server.discovery import ServerBinary


@dataclass(frozen=True)
class ServerChoice:
    """The sweep's llama-server.

    Attributes:
        binary: the binary (path, build and commit when its ``--version`` said them).
        dialect: what it accepts.
    """

    binary: ServerBinary
    dialect: Dialect


def resolve_server(named: Path | None, given: ServerBinary | None) -> ServerChoice:
    """The binary and its dialect.

    Args:
        named: the ``--server`` path the user gave (``TuneRequest.server``), ``None`` = not named.
        given: the binary the caller found already (wins over ``named``), ``None`` = named or discovered.

    Raises:
        TuneError: the named binary is missing, not executable or not a llama-server (``bad_input``; names
            ``--server`` and the path); no llama-server found anywhere; the given or discovered binary's
            ``--help`` cannot be read (``bad_input`` when the user named one).
    """
    from tuner.server.dialect import DialectError, probe_dialect
    from tuner.server.discovery import ServerNotFoundError, find_server

    if given is None and named is not None:
        return _named_server(named)
    if given is not None:
        binary = given
    else:
        try:
            binary = find_server(None)
        except ServerNotFoundError as exc:
            raise TuneError(str(exc)) from exc
    try:
        dialect = probe_dialect(binary.path)
    except DialectError as exc:  # a broken binary, or one that is not llama-server: a TuneError, not a traceback
        raise TuneError(str(exc), bad_input=named is not None) from exc
    return ServerChoice(binary, dialect)


def _named_server(named: Path) -> ServerChoice:
    """The binary at ``named``: checked to be a llama-server whose ``--help`` can be read before its
    ``--version`` is asked (a binary that hangs must not cost the version's timeout first)."""
    from tuner.server.dialect import DialectError, probe_dialect
    from tuner.server.discovery import ServerNotFoundError, find_named_server

    try:
        found = find_named_server(named, read_build=False, flag="--server")
    except ServerNotFoundError as exc:
        raise TuneError(f"--server {named}: no such file, or not executable", bad_input=True) from exc
    try:
        dialect = probe_dialect(found.path)
    except DialectError as exc:
        message = str(exc).removeprefix(f"{found.path}: ")
        raise TuneError(f"--server {named}: {message}", bad_input=True) from exc
    return ServerChoice(find_named_server(found.path, flag="--server"), dialect)


def check_server_args(words: tuple[str, ...], server: ServerChoice) -> None:
    """The user's llama-server flags must be ones this binary lists (:func:`tuner.serverargs.check_known`).

    Raises:
        TuneError: (``bad_input``) naming the flag and the binary.
    """
    from tuner.serverargs import ServerArgError, check_known

    try:
        check_known(words, server.dialect.has, server.binary.path, where="extra llama-server flag")
    except ServerArgError as exc:
        raise TuneError(str(exc), bad_input=True) from None
