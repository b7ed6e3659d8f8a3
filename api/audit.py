"""Recording a change to a job in the audit log, after the change applied (handlers call `record`).

What is compared is the job as its owner sees it: its state and its definition (not counters or computed
times), so the diff says what a person changed. A failed audit write fails the request (503, retriable) and is
counted: the change itself stands, and its row is missing, which an operator must see rather than not know.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from tickwheel import metrics
from tickwheel.core.changes import json_diff
from tickwheel.core.retention import retention_s
from tickwheel.errors import TickwheelError
from tickwheel.store.audit import JobChangeRecord
from tickwheel.store.jobs import Job, JobState
from tickwheel.store.ports import KeptChange

from .context import api_of, key_id_of, tenant_of
from .wire import definition_document

log = logging.getLogger(__name__)


def audited_view(job: Job | None) -> dict[str, Any]:
    """The part of a job a change is described by: its state and definition (nothing, before it existed)."""
    if job is None:
        return {}
    return {"state": job.state.value, **definition_document(job.definition)}


def action_of(before: Job, after: Job) -> str:
    """`pause`, `resume`, `delete`, or `edit` for a change of definition only."""
    if after.state is JobState.DELETED:
        return "delete"
    if after.state is not before.state:
        return "pause" if after.state is JobState.PAUSED else "resume"
    return "edit"


def _change(
    request: web.Request, action: str, before: Job | None, after: Job, detail: dict[str, Any] | None
) -> tuple[JobChangeRecord, int]:
    """The change from `before` to `after` and how long the log keeps it."""
    api, tenant = api_of(request), tenant_of(request)
    change = JobChangeRecord(
        job_id=after.job_id,
        tenant_id=tenant.tenant_id,
        changed_at=api.clock(),
        version=after.version,
        action=action,
        key_id=key_id_of(request),
        diff=json_diff(audited_view(before), audited_view(after)),
        detail=detail or {},
    )
    return change, retention_s(api.settings.retention.audit_days, tenant.retention_days)


def creation_change(request: web.Request, job: Job) -> KeptChange:
    """The audit change of a create, written in the create's own batch (so it is there exactly when the job is,
    and costs no statement of its own); count it with `created` once the batch applied."""
    return _change(request, "create", None, job, None)


def created() -> None:
    """Count a create's audit row, written in the create's batch (`creation_change`)."""
    metrics.audit_records.labels("create").inc()


async def record(
    request: web.Request, action: str, before: Job | None, after: Job, detail: dict[str, Any] | None = None
) -> None:
    """Append the change from `before` to `after` (at `after.version`) to the job's audit log."""
    change, ttl_s = _change(request, action, before, after, detail)
    tenant = tenant_of(request)
    try:
        await api_of(request).store.record_change(change, ttl_s)
    except TickwheelError:
        metrics.audit_write_failures.inc()
        log.error("audit record of %s not written", action, extra={"tenant": tenant.tenant_id, "job_id": after.job_id})
        raise
    metrics.audit_records.labels(action).inc()
