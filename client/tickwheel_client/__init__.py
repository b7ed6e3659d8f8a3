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
    Backfill,
    BackfilledRun,
    BatchItem,
    BatchResult,
    BulkPurge,
    BulkRedrive,
    Calendar,
    CatchUp,
    Change,
    ChangeAction,
    DeadLetter,
    DiffOp,
    DstFlag,
    DstGap,
    DstRepeat,
    DueCounts,
    Exclude,
    ExcludedFire,
    Fire,
    HttpMethod,
    HttpTarget,
    Job,
    JobChange,
    JobPatch,
    JobSpec,
    JobState,
    KafkaTarget,
    Lease,
    Notify,
    NotifyEvent,
    Overlap,
    Priority,
    Redriven,
    RequestedRun,
    RetryPolicy,
    Run,
    RunOrigin,
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
    "ApiError", "AsyncClient", "Attempt", "Backfill", "BackfilledRun", "BadRequest", "BatchItem", "BatchResult",
    "BulkPurge", "BulkRedrive",
    "Calendar", "CatchUp", "Change", "ChangeAction", "Client", "Config", "ConfigError", "Conflict",
    "ConnectionFailed", "DeadLetter", "DiffOp", "DstFlag", "DstGap", "DstRepeat", "DueCounts", "Exclude",
    "ExcludedFire", "Fire", "HttpMethod", "HttpTarget", "InvalidInput", "Job", "JobChange", "JobPatch", "JobSpec",
    "JobState", "KafkaTarget", "Lease", "NotFound", "Notify", "NotifyEvent", "Overlap", "PayloadTooLarge",
    "PreconditionFailed", "PreconditionRequired", "Priority", "RateLimited", "Redriven", "RequestedRun", "Retries",
    "RetryPolicy", "Run", "RunOrigin", "RunStatus", "RunSummary", "Schedule", "ScheduleType", "ServerError",
    "TickwheelClientError", "Unauthorized", "Unavailable", "UnexpectedAnswer",
]  # fmt: skip
