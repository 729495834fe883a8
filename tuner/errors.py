"""The one root of every error Draftwise raises on purpose.

Every project exception derives from :class:`DraftwiseError` (often together with the builtin it
specialises, e.g. ``ProfileError(DraftwiseError, ValueError)``, so existing ``except ValueError``
callers keep working). The command line prints one line for any ``DraftwiseError`` (its message names
the file, key or flag at fault) and a traceback plus the log file's path only for anything else, i.e. a
real bug. ``evidence`` holds supporting lines (server log tail, failed rule) when there are any.
"""

from __future__ import annotations


class DraftwiseError(Exception):
    """Base class of every error the project raises on purpose.

    Attributes:
        evidence: tuple of supporting text lines (log lines, details); empty when none. Subclasses
            that take evidence in their constructor set it on the instance.
        bad_input: True when the user's input (a path, flag, file content) is at fault; the CLI exits 2
            for those, 1 otherwise.
    """

    evidence: tuple[str, ...] = ()
    bad_input: bool = False


class Cancelled(DraftwiseError):
    """The user cancelled the running step (a cancel event was set); whatever it started was stopped.

    The one cancellation type of the project: the sweep (``tuner.calibration``) and the app's flow
    (``tuner.ui.flow``) raise this same class.
    """


__all__ = ["Cancelled", "DraftwiseError"]
