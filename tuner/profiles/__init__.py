"""tuner.profiles: saved tuning profiles (schema version, atomic writes, staleness keys)."""

from .profile import (
    SCHEMA_VERSION,
    ModelFileKey,
    Profile,
    ProfileError,
    StalenessKeys,
    stale_reasons,
)
from .store import ProfileStore

__all__ = [
    "SCHEMA_VERSION",
    "ModelFileKey",
    "Profile",
    "ProfileError",
    "ProfileStore",
    "StalenessKeys",
    "stale_reasons",
]
