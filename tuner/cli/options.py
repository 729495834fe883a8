"""argparse's side of the option declarations (:mod:`tuner.options`): flags built from them, values checked.

:func:`add_option` gives a flag its type, default, metavar and ``--help`` text from the declaration and
records it on the parser; :func:`check_options` checks every recorded flag's value after parsing (bounds, NaN
and the infinities, the keywords a flag accepts) and returns the one line a command prints before it exits 2:
``--n-max 0: must be between 1 and 64``. A bound that needs the model (GPU layers, MoE blocks) or a device
(the memory margin) is checked once that is known, by :func:`check_limits`.

Why after parsing, not in argparse's ``type=``: a ``type`` error prints the usage and an ``error:`` line; a
bad number is one line naming the flag, as every other bad input of ``draftwise``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

from tuner.options import Limits, OptionError, check, help_text, machine_limits, option
from tuner.safetext import error_text, safe_text

_RECORD = "_declared_options"
"""The namespace attribute (a parser default) listing ``(dest, name, flag, keywords)`` of each declared flag."""


def add_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, *flags: str,
               dest: str | None = None, help: str | None = None, default: object = ...,
               keywords: bool = False, owner: argparse.ArgumentParser | None = None,
               default_help: str | None = None) -> argparse.Action:
    """Add the flag(s) ``flags`` for option ``name`` (:data:`tuner.options.OPTIONS`).

    Args:
        parser: the parser or argument group to add to.
        name: the option.
        flags: its flags, the first one named by errors (``"--ctx-size", "--ctx"``).
        dest: the namespace attribute (default: argparse's from the first flag).
        help: replaces the declaration's help words (the range and default are still added).
        default: replaces the declared default (``None``: the flag is unset unless given).
        keywords: the flag also takes the option's keywords (``--ngl auto``); the value stays text until
            :func:`check_options` turns digits into a number.
        owner: the parser whose namespace records the flag, when ``parser`` is an argument group.
        default_help: words for the default when this command's differs from the declaration's
            (``"default: the cache_ram_mib setting"``).

    Returns:
        The argparse action.
    """
    opt = option(name)
    text = help_text(name, keywords=keywords, words=help, default=default_help, limits=machine_limits())
    action = parser.add_argument(
        *flags, dest=dest, type=str if keywords else opt.kind, metavar=opt.metavar,
        default=opt.default if default is ... else default, help=text.replace("%", "%%"))
    record = owner or parser
    assert isinstance(record, argparse.ArgumentParser)
    seen = list(record.get_default(_RECORD) or [])
    record.set_defaults(**{_RECORD: [*seen, (action.dest, name, flags[0], keywords)]})
    return action


def _number(text: str) -> int | str:
    """``"12"`` → 12, ``"AUTO"`` → ``"auto"``, anything else unchanged (then refused by the check)."""
    stripped = text.strip()
    if stripped.lstrip("+-").isdigit():
        return int(stripped)
    return stripped.lower()


def check_options(args: argparse.Namespace, names: Iterable[str] | None = None) -> str | None:
    """Check the values of the flags :func:`add_option` recorded (all, or those of ``names``), with this
    machine's limits (threads: 4 × the logical CPUs); a keyword flag's value becomes a number or its
    keyword in ``args``.

    Returns:
        The first bad value's line, ``"<flag> <value>: must be …"``; None when all are usable.
    """
    wanted = set(names) if names is not None else None
    for dest, name, flag, keywords in getattr(args, _RECORD, None) or ():
        value = getattr(args, dest, None)
        if value is None or (wanted is not None and name not in wanted):
            continue
        if keywords and isinstance(value, str):
            value = _number(value)
        try:
            value = check(name, value, where=flag, limits=machine_limits(), keywords=keywords)
        except OptionError as exc:
            return str(exc)
        setattr(args, dest, value)
    return None


def check_limits(args: argparse.Namespace, limits: Limits, names: Iterable[str]) -> str | None:
    """Check the flags of option ``names`` against ``limits`` (the model's blocks, a device's memory), after
    :func:`check_options`; the first bad value's line, else None."""
    wanted = set(names)
    for dest, name, flag, keywords in getattr(args, _RECORD, None) or ():
        value = getattr(args, dest, None)
        if name not in wanted or value is None:
            continue
        try:
            check(name, value, where=flag, limits=limits, keywords=keywords)
        except OptionError as exc:
            return str(exc)
    return None


def folder_problem(value: str | None, flag: str = "--models") -> str | None:
    """One line when a folder flag was given empty (``--models ''`` would otherwise mean the current folder)
    or names a path the system refuses to look at (:func:`path_problem`), else None."""
    if value is not None and not value.strip():
        return f"{flag} {value!r}: must name a folder (an empty value is not the current folder)"
    return path_problem(value, flag)


def path_problem(value: str | None, flag: str) -> str | None:
    """One line naming ``flag`` when the path ``value`` cannot even be looked at: a name longer than the
    system allows (``ENAMETOOLONG``), a link loop, a folder on the way that may not be entered. None when it
    exists, is missing (the command says that in its own words) or was not given."""
    if value is None:
        return None
    try:
        os.stat(value)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"{flag} {safe_text(value)}: {error_text(exc, with_path=False)}"
    except ValueError as exc:  # an embedded NUL byte
        return f"{flag} {safe_text(value)}: {exc}"
    return None


def bind_host(value: str, flag: str = "--host") -> str:
    """The address a server is to bind, as typed with surrounding white space removed, so the loopback check
    and the bind see the same text (``'127.0.0.1 '`` is ``127.0.0.1``).

    Raises:
        ValueError: empty or white space inside (the message names ``flag``).
    """
    host = value.strip()
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"{flag} {value!r}: must be one address or host name (e.g. 127.0.0.1)")
    return host


def check_resolvable(host: str, flag: str = "--host") -> None:
    """Raise ValueError naming ``flag`` when the resolver knows no address for ``host`` (the bind would fail
    with ``socket.gaierror`` after the launch began)."""
    import socket

    try:
        socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"{flag} {host}: no such address or host name ({exc})") from None


__all__ = ["add_option", "bind_host", "check_limits", "check_resolvable", "check_options", "folder_problem",
           "path_problem"]
