"""Typed errors of the medgym client. Each carries the server's reason.

The server answers an error with ``{"error": {"code": ..., "message": ...}}`` (services/env/openapi.json); the
client raises the subclass of :class:`MedGymError` that matches the HTTP status, with ``code`` and ``message``
taken from that body (or the raw body text when it is not JSON).
"""

from __future__ import annotations

from typing import Any


class MedGymError(Exception):
    """An error answered by the environment server, or a request that could not reach it."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        method: str | None = None,
        url: str | None = None,
        body: Any = None,
    ) -> None:
        self.message = message
        self.status = status
        self.code = code
        self.method = method
        self.url = url
        self.body = body
        where = f"{method} {url}: " if method and url else ""
        what = f"{status} {code}: " if status is not None and code else (f"{status}: " if status is not None else "")
        super().__init__(f"{where}{what}{message}")


class BadRequestError(MedGymError):
    """400, 413 or 422: the request is malformed or too large; the reason says what to fix."""


class AuthenticationError(MedGymError):
    """401 or 403: a bearer token is required, or the one given is wrong."""


class NotFoundError(MedGymError):
    """404: unknown task or session."""


class ConflictError(MedGymError):
    """409: e.g. a step after the episode is done, or a turn out of order."""


class RateLimitError(MedGymError):
    """429: the server's cap on live sessions is reached; ``retry_after`` is its Retry-After in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)


class ServerError(MedGymError):
    """5xx: the server failed; a step is retried with the same turn (the server answers it once)."""


class MedGymConnectionError(MedGymError):
    """The request did not get an answer (connection refused, reset, timed out)."""


def __getattr__(name: str) -> Any:
    # The old name of MedGymConnectionError, which shadowed the builtin ConnectionError wherever it was imported.
    if name == "ConnectionError":
        import warnings

        warnings.warn(
            "medgym.ConnectionError is deprecated (it shadows the builtin ConnectionError): use medgym.MedGymConnectionError",
            DeprecationWarning,
            stacklevel=2,
        )
        return MedGymConnectionError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_BY_STATUS: dict[int, type[MedGymError]] = {
    400: BadRequestError,
    413: BadRequestError,
    422: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    405: BadRequestError,
    409: ConflictError,
    410: ConflictError,
    429: RateLimitError,
}


def error_class(status: int) -> type[MedGymError]:
    """The error class for an HTTP status."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return MedGymError
