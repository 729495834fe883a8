"""llama-server runtime: discovery, flag dialect, argv building, supervision, HTTP client,
failure diagnosis. See docs/architecture.md ("server") for the contract."""

from tuner.process import clean_env
from tuner.server.argv import UnsupportedConfigError, build_argv, command_line, server_env
from tuner.server.capture import (
    KEEP_WORDS,
    CapturedFile,
    CapturedRequest,
    CapturedSample,
    CaptureError,
    capture_dir,
    captured_count,
    captured_requests,
    captures_root,
    delete_captured,
    forget_captured,
    list_captured,
    log_prompts_dir,
)
from tuner.server.capture import (
    MAX_BYTES as MAX_CAPTURED_BYTES,
)
from tuner.server.capture import (
    MAX_FILES as MAX_CAPTURED_FILES,
)
from tuner.server.client import (
    NON_WAKING_PATHS,
    Health,
    ServerClient,
    ServerClientError,
    ServerHTTPError,
    ServerUnreachableError,
)
from tuner.server.config import ServerConfig, default_alias
from tuner.server.diagnosis import Diagnosis, diagnose
from tuner.server.dialect import Dialect, DialectError, cached_dialect, parse_help, probe_dialect
from tuner.server.discovery import ServerBinary, ServerNotFoundError, find_server
from tuner.server.preset import PresetError, RouterModel, RouterPlan
from tuner.server.router import RouterError, RouterSupervisor
from tuner.server.router_models import ModelView
from tuner.server.sleep import WAKING_MESSAGE, SleepStatus, reload_words
from tuner.server.states import IllegalTransition, ServerState, StateChange
from tuner.server.supervisor import ServerStartError, Supervisor, startup_timeout_for

__all__ = [
    "KEEP_WORDS", "MAX_CAPTURED_BYTES", "MAX_CAPTURED_FILES", "CaptureError", "CapturedFile", "CapturedRequest", "CapturedSample", "capture_dir", "captured_count",
    "captured_requests", "captures_root", "delete_captured", "forget_captured", "list_captured", "log_prompts_dir",
    "NON_WAKING_PATHS", "WAKING_MESSAGE", "Diagnosis", "Dialect", "DialectError", "Health", "IllegalTransition",
    "ModelView", "PresetError", "RouterError", "RouterModel", "RouterPlan", "RouterSupervisor", "ServerBinary",
    "ServerClient",
    "ServerClientError", "ServerConfig", "ServerHTTPError", "ServerNotFoundError", "ServerStartError", "ServerState",
    "ServerUnreachableError", "SleepStatus", "StateChange", "Supervisor", "UnsupportedConfigError", "build_argv",
    "cached_dialect", "clean_env", "command_line", "default_alias", "diagnose", "find_server", "parse_help", "probe_dialect",
    "reload_words", "server_env",
    "startup_timeout_for",
]
