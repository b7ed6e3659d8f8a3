"""tickwheel for tenants: `Client` / `AsyncClient` (one API, sync and async), typed models, typed errors,
and `webhooks.verify` for the receiving side. No server dependency."""

from .aio import AsyncClient
from .config import Config
from .errors import (
    ApiError,
    BadRequest,
    ConfigError,
    Conflict,
    ConnectionFailed,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    PreconditionRequired,
    RateLimited,
    ServerError,
    TickwheelClientError,
    Unauthorized,
    Unavailable,
    UnexpectedAnswer,
)
from .models import (
    Attempt,
    BulkRedrive,
    CatchUp,
    DeadLetter,
    DstFlag,
    DstGap,
    DstRepeat,
    DueCounts,
    Fire,
    HttpMethod,
    HttpTarget,
    Job,
    JobPatch,
    JobSpec,
    JobState,
    KafkaTarget,
    Lease,
    Overlap,
    Priority,
    Redriven,
    RetryPolicy,
    Run,
    RunStatus,
    RunSummary,
    Schedule,
    ScheduleType,
)
from .retry import Retries
from .sync import Client
from .version import VERSION

__version__ = VERSION

__all__ = [
    "ApiError", "AsyncClient", "Attempt", "BadRequest", "BulkRedrive", "CatchUp", "Client", "Config", "ConfigError",
    "Conflict", "ConnectionFailed", "DeadLetter", "DstFlag", "DstGap", "DstRepeat", "DueCounts", "Fire", "HttpMethod",
    "HttpTarget", "InvalidInput", "Job", "JobPatch", "JobSpec", "JobState", "KafkaTarget", "Lease", "NotFound",
    "Overlap", "PayloadTooLarge", "PreconditionFailed", "PreconditionRequired", "Priority", "RateLimited",
    "Redriven", "Retries", "RetryPolicy", "Run", "RunStatus", "RunSummary", "Schedule", "ScheduleType",
    "ServerError", "TickwheelClientError", "Unauthorized", "Unavailable", "UnexpectedAnswer",
]  # fmt: skip
