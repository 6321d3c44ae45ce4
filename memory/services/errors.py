"""Errors every interface knows how to turn into a clear message (HTTP 4xx, MCP tool error,
CommandError). Anything else escaping a service is a bug."""


class TidelineError(Exception):
    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidInput(TidelineError):
    """The caller sent something Tideline will not store; nothing was written."""


class NotFound(TidelineError):
    """The thing asked for does not exist (or is outside the caller's scopes)."""


class Forbidden(TidelineError):
    """The caller may not touch this scope."""


class Conflict(TidelineError):
    """The target changed under the caller (a concurrent edit won, or it is no longer current);
    nothing was written. Interfaces answer 409 with the current state in the message."""
