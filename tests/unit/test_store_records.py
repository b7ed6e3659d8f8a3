"""The store's row converters: what a row that lacks optional cells becomes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from schemas.messages import encode
from tests.factories import definition
from tickwheel.core.instants import EPOCH
from tickwheel.store.records import JobState, RunStatus, found_of, job_of

MADE = datetime(2026, 11, 30, 12, 0)  # the driver's naive UTC


def job_row(**cells: object) -> dict[str, object]:
    row: dict[str, object] = {
        "job_id": uuid.uuid4(), "tenant_id": "t", "shard": 3, "state": "ACTIVE", "version": 1,
        "definition": encode(definition()).decode(), "lane": "default", "next_run_at": None, "next_run_id": None,
        "fired_count": None, "last_run_id": None, "last_run_status": None, "created_at": MADE, "updated_at": None,
    }  # fmt: skip
    return {**row, **cells}


def test_a_job_row_never_updated_counts_as_updated_when_it_was_made() -> None:
    job = job_of(job_row())
    assert job.state is JobState.ACTIVE and job.fired_count == 0
    assert job.created_at == job.updated_at == MADE.replace(tzinfo=UTC)
    assert job_of(job_row(created_at=None)).created_at == EPOCH


def test_a_refused_conditional_write_on_a_missing_run_found_nothing() -> None:
    assert found_of({"[applied]": False}).status is None
    assert found_of({"[applied]": False, "status": "RUNNING", "attempt": 1}).status is RunStatus.RUNNING
