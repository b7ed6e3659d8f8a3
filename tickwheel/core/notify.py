"""Which run events a finished attempt produces, and where a job's events go: pure decisions for worker/notify.py.

Events: `failed` (an attempt failed, retried or not), `dead` (the run gave up), `succeeded`, `recovered` (a
success after failures: this run failed before, or the job's previous run had failed), `missed` (the reconciler
found an occurrence that never ran). A job's own route (`notify`) replaces the tenant's default; a job route
without a URL sends its events to the tenant's URL.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class RunEvent(enum.StrEnum):
    FAILED = "failed"
    DEAD = "dead"
    RECOVERED = "recovered"
    SUCCEEDED = "succeeded"
    MISSED = "missed"


MISSED = "MISSED"
"""The status a `missed` event reports: an occurrence the reconciler found without a run (never a run's status)."""

FAILED_BEFORE = frozenset({"DEAD", "RETRY"})
"""Statuses of a job's previous run that make this run's success a recovery."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where a job's run events go and which of them are wanted."""

    url: str
    events: frozenset[RunEvent]


def route_of(
    job_url: str | None,
    job_events: Iterable[str] | None,
    tenant_url: str | None,
    tenant_events: Iterable[str],
) -> Route | None:
    """The job's route (its events, its URL or else the tenant's), else the tenant's default; None if neither
    names a URL and at least one event."""
    if job_events is not None:
        url, events = job_url or tenant_url, frozenset(RunEvent(e) for e in job_events)
    else:
        url, events = tenant_url, frozenset(RunEvent(e) for e in tenant_events)
    return Route(url, events) if url and events else None


def events_of(status: str, attempt: int) -> list[RunEvent]:
    """The events an attempt's recorded status produces (a success's `recovered` is decided by `recovered`)."""
    if status == "RETRY":
        return [RunEvent.FAILED]
    if status == "DEAD":
        return [RunEvent.FAILED, RunEvent.DEAD]
    if status == "SUCCEEDED":
        return [RunEvent.SUCCEEDED, RunEvent.RECOVERED] if attempt > 1 else [RunEvent.SUCCEEDED]
    if status == MISSED:
        return [RunEvent.MISSED]
    return []


def recovered(previous_status: str | None) -> bool:
    """Whether a first-attempt success follows a job's failed previous run."""
    return previous_status in FAILED_BEFORE


def event_id(run_id: str, attempt: int, event: RunEvent) -> str:
    """The webhook-id of an event: the same on every delivery try, so receivers can dedupe."""
    return f"evt_{run_id}_{attempt}_{event.value}"
