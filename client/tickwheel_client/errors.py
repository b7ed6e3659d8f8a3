"""One error root for the client, with `retriable`; API answers become typed errors from their problem+json."""

from __future__ import annotations

from typing import Any, ClassVar


class TickwheelClientError(Exception):
    """Everything this package raises derives from this."""

    retriable: ClassVar[bool] = False


class ConfigError(TickwheelClientError):
    """No API URL or key, an unknown profile, or an unreadable config file."""


class ConnectionFailed(TickwheelClientError):
    """The API could not be reached (after the retries)."""

    retriable = True


class ApiError(TickwheelClientError):
    """An answer of 400 or above; its fields are the problem+json body's (RFC 9457)."""

    status: int
    title: str
    detail: str
    field: str | None
    type: str
    retry_after_s: float | None

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        field: str | None = None,
        type: str = "about:blank",
        retry_after_s: float | None = None,
    ) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"{status} {title}: {detail}{where}")
        self.status, self.title, self.detail, self.field = status, title, detail, field
        self.type, self.retry_after_s = type, retry_after_s

    def problem(self) -> dict[str, Any]:
        """The problem document, as the API sent it."""
        document: dict[str, Any] = {"type": self.type, "title": self.title, "status": self.status}
        document["detail"] = self.detail
        if self.field:
            document["field"] = self.field
        return document


class BadRequest(ApiError):
    """400: the body is not JSON."""


class Unauthorized(ApiError):
    """401: no API key, or one the API does not know."""


class NotFound(ApiError):
    """404: no such id for this tenant."""


class Conflict(ApiError):
    """409: the resource's state does not allow this (or the same Idempotency-Key is still in progress)."""


class PreconditionFailed(ApiError):
    """412: If-Match is not the job's current version."""


class PayloadTooLarge(ApiError):
    """413: the payload or body is over the limit."""


class InvalidInput(ApiError):
    """422: bad input; `field` names it."""


class PreconditionRequired(ApiError):
    """428: If-Match is missing."""


class RateLimited(ApiError):
    """429: the tenant's request quota is spent for now."""

    retriable = True


class ServerError(ApiError):
    """500 and any other 5xx the API does not document."""


class Unavailable(ServerError):
    """503: a server the API depends on did not answer, or the API was at capacity; nothing was accepted."""

    retriable = True


BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    422: InvalidInput,
    428: PreconditionRequired,
    429: RateLimited,
    503: Unavailable,
}


def error_for(status: int, document: Any, retry_after_s: float | None = None) -> ApiError:
    """The typed error for an answer's status and (problem+json, or anything else) body."""
    body = document if isinstance(document, dict) else {}
    kind = BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    field = body.get("field")
    return kind(
        status,
        str(body.get("title") or f"HTTP {status}"),
        str(body.get("detail") or body.get("title") or document or ""),
        field=str(field) if field else None,
        type=str(body.get("type") or "about:blank"),
        retry_after_s=retry_after_s,
    )


class UnexpectedAnswer(TickwheelClientError):
    """The API answered with a body this client cannot read (a different API version?)."""
