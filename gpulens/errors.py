"""The gpulens exception tree.

Every error a user can cause derives from :class:`GpulensError`. Third-party
exceptions (DuckDB, NVML, YAML, TOML, ...) are translated at the boundary of the
module that calls the library, so callers only ever catch ``GpulensError``.

Each error carries a one-sentence ``message`` that names the input, and a
``hint`` that says what to do. The CLI prints ``message`` and ``hint`` on one
line and exits with ``exit_code`` (2 for usage and input errors).

Tree::

    GpulensError
    ├── ConfigError            malformed gpulens.toml or GPULENS_* value
    ├── MissingExtraError      an optional dependency group is not installed
    ├── InputError             a malformed trace, log, spec or CLI argument
    ├── StoreError             the data directory or a store file
    │   ├── StoreLockedError   another process held the store past the timeout
    │   └── StoreCorruptError  a store file cannot be opened
    ├── BackendError           a hardware backend (NVML) failed
    │   └── BackendUnavailableError  the backend is absent (no driver/library)
    └── ValidatorError         the validator itself could not run a job
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "ConfigError",
    "GpulensError",
    "InputError",
    "MissingExtraError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "ValidatorError",
]


class GpulensError(Exception):
    """Base of every error gpulens raises on purpose."""

    exit_code: int = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} {self.hint}"
        return self.message


class ConfigError(GpulensError):
    """The configuration file or an environment override is invalid."""


class MissingExtraError(GpulensError):
    """An optional dependency group (extra) is needed but not installed."""


class InputError(GpulensError):
    """An input file or argument is malformed."""


class StoreError(GpulensError):
    """The data directory or a store file cannot be used."""


class StoreLockedError(StoreError):
    """Another process kept the store locked for longer than the timeout."""


class StoreCorruptError(StoreError):
    """A store file exists but cannot be opened."""


class BackendError(GpulensError):
    """A hardware backend call failed in a way that is not 'unsupported'."""


class BackendUnavailableError(BackendError):
    """The hardware backend is not present on this machine."""


class ValidatorError(GpulensError):
    """The pre-submission validator could not run the job at all."""
