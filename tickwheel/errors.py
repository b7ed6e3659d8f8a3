"""One error root for the whole platform.

`retriable` says whether the same call may succeed later; retry loops test it. `status` is the HTTP status
the API's single error middleware answers with; `title` is the problem+json title.
"""

from __future__ import annotations

from typing import ClassVar


class TickwheelError(Exception):
    retriable: ClassVar[bool] = False
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, message: str, *, field: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s


class SettingsError(TickwheelError):
    title = "Invalid settings"


class InvalidInput(TickwheelError):
    status = 422
    title = "Invalid request"


class MalformedRequest(TickwheelError):
    status = 400
    title = "Malformed request"


class Unauthorized(TickwheelError):
    status = 401
    title = "Unauthorized"


class NotFound(TickwheelError):
    status = 404
    title = "Not found"


class Conflict(TickwheelError):
    status = 409
    title = "Conflict"


class PreconditionFailed(TickwheelError):
    status = 412
    title = "Precondition failed"


class PreconditionRequired(TickwheelError):
    status = 428
    title = "Precondition required"


class PayloadTooLarge(TickwheelError):
    status = 413
    title = "Payload too large"


class BatchTooLarge(PayloadTooLarge):
    """Cassandra refused a batch above its `batch_size_fail_threshold`: nothing of it was written."""


class QuotaExceeded(TickwheelError):
    retriable = True
    status = 429
    title = "Too many requests"


class Unavailable(TickwheelError):
    """A server we depend on (Cassandra, Kafka, ZooKeeper, Redis) did not answer; try again later."""

    retriable = True
    status = 503
    title = "Service unavailable"


class EgressRefused(TickwheelError):
    status = 422
    title = "Target refused by egress policy"
