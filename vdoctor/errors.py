"""One exception root for the domain, with narrow subclasses.

Foreign exceptions (drivers, HTTP clients, JSON) are wrapped once, at the
boundary that called them, so domain code only ever sees these types.
"""

from __future__ import annotations


class VDoctorError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(VDoctorError):
    """A setting is missing or invalid. Fix the flag or VDOCTOR_* variable it names."""


class EventError(VDoctorError):
    """An input event cannot be used; it belongs in the dead letters.

    ``stage`` is where it failed: ``parse`` (not JSON), ``validate`` (JSON that
    breaks the event contract) or ``process`` (valid, but refused by the job,
    e.g. a recheck naming a session that long-term memory does not know).
    """

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


class StoreError(VDoctorError):
    """Long-term memory could not be read or written. Check the store URL and that the server is up."""


class StaleSchema(StoreError):
    """A store file an older release wrote, opened read-only: only a read-write open migrates it."""


class UnknownStoreScheme(ConfigError):
    """The memory URL names a backend that does not exist; the message lists the valid schemes."""


class ModelError(VDoctorError):
    """The chat or embedding model failed or answered something unusable."""


class KnowledgeError(VDoctorError):
    """The DTC knowledge pack or an extra code table could not be loaded."""


class NothingToCheck(VDoctorError):
    """No long-term record holds the session, or it keeps no source to check a summary against."""
