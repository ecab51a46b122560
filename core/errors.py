"""Errors a user can cause: each says what was wrong and what to do."""

from __future__ import annotations


class GeotrainError(Exception):
    """Base for every error shown to a user as one line (plus an optional hint)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message


class NotFound(GeotrainError):
    pass


class InvalidInput(GeotrainError):
    pass


class FieldError(InvalidInput):
    """A value at a field path that is not what was expected."""

    def __init__(self, path: str, expected: str, found: object, hint: str = "") -> None:
        self.path = path
        self.expected = expected
        self.found = found
        super().__init__(f"{path}: expected {expected}, found {found!r}", hint)


class BackendError(GeotrainError):
    pass
