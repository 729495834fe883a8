"""The one root of every error Draftwise raises on purpose.

Every project exception derives from :class:`DraftwiseError` (often together with the builtin it
specialises, e.g. ``ProfileError(DraftwiseError, ValueError)``, so existing ``except ValueError``
callers keep working). The command line prints one line for any ``DraftwiseError`` (its message names
the file, key or flag at fault) and a traceback plus the log file's path only for anything else, i.e. a
real bug. ``evidence`` holds supporting lines (server log tail, failed rule) when there are any.

The whole tree (class, the module that defines it, and the builtin it also derives from, so that an
``except ValueError`` caller still catches it); ``tests/test_architecture.py`` walks the package and fails
when a class is missing here, listed under the wrong parent or module, or gone::

    DraftwiseError                  tuner.errors
        LaunchError                 tuner.calibration.measure (also RuntimeError)
        RequestError                tuner.calibration.measure (also RuntimeError)
        PromptFileError             tuner.calibration.prompts (also ValueError)
        TuneError                   tuner.calibration.request (also RuntimeError)
        CurveError                  tuner.calibration.verifycost (also ValueError)
        BaselineFailed              tuner.calibration.search.settings (also RuntimeError)
        NoProfileError              tuner.calibration.serving (also LookupError)
        DemoError                   tuner.catalog.demo (also OSError)
        AmbiguousModelError         tuner.catalog.folder (also ValueError)
        GGUFPackageError            tuner.catalog.gguf_adapter (also RuntimeError)
        GGUFError                   tuner.catalog.header
        DesktopInstallError         tuner.desktop
        Cancelled                   tuner.errors
        RpcHostStartError           tuner.hardware.rpchost (also RuntimeError)
        OptionError                 tuner.options (also ValueError)
        OutputCapExceeded           tuner.process (also OSError)
        ProfileError                tuner.profiles.profile (also ValueError)
        RpcHostError                tuner.rpcaddr (also ValueError)
        UnsupportedConfigError      tuner.server.argv (also ValueError)
        CaptureError                tuner.server.capture (also OSError)
        ServerClientError           tuner.server.client (also RuntimeError)
            ServerHTTPError         tuner.server.client
            ServerUnreachableError  tuner.server.client
        DialectError                tuner.server.dialect (also RuntimeError)
        ServerNotFoundError         tuner.server.discovery (also FileNotFoundError)
        PresetError                 tuner.server.preset (also ValueError)
        RouterError                 tuner.server.router (also RuntimeError)
        IllegalTransition           tuner.server.states (also RuntimeError)
        ServerStartError            tuner.server.supervisor (also RuntimeError)
        ServerArgError              tuner.serverargs (also ValueError)
        SettingsError               tuner.settings (also ValueError)
        CorruptFileError            tuner.storage (also ValueError)
        FileTooLargeError           tuner.storage (also OSError)
        NotRegularFileError         tuner.storage (also OSError)
        MetricsParseError           tuner.telemetry.prom (also ValueError)
        FlowError                   tuner.ui.flow (also RuntimeError)
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
