"""One error tree. Each error carries a message, an optional hint and an exit code.

The CLI maps them to `error: <message>` (plus `hint: <hint>`) on stderr and the exit code;
the MCP server maps them to tool errors.
"""

from __future__ import annotations


class PuremindError(Exception):
    """Base of every error pureMind reports to a user. Exit code 2 unless a subclass says otherwise."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(PuremindError):
    """A missing, unreadable or malformed setting or config file."""


class VaultError(PuremindError):
    """The vault directory is missing, not a directory, or unusable."""


class StoreError(PuremindError):
    """The index file cannot be opened, written or upgraded."""


class IndexDamaged(StoreError):
    """The index file is an SQLite database whose pages are damaged (`puremind index --rebuild` repairs it)."""


class IndexBusyError(StoreError):
    """Another `puremind index` or `watch` holds the index lock."""


class FingerprintMismatch(StoreError):
    """The index was built with other embedding settings; `puremind index --rebuild` is needed."""


class QueryError(PuremindError):
    """A search query that cannot be searched (empty, no words)."""


class ModelError(PuremindError):
    """A model that cannot be found, downloaded, exported or loaded."""
