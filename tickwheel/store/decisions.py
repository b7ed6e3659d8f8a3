"""The decisions that read and write through several store ports, bound once as methods: Cassandra's tables and
the in-memory twin inherit them, so both run the very same code (`jobs.reschedule`,
`dead_letters.redrive_dead_letter`)."""

from __future__ import annotations

from datetime import datetime

from tickwheel.store import dead_letters, jobs
from tickwheel.store.ports import RedriveStore, ReschedulingStore
from tickwheel.store.records import DeadLetter, Job, JobChange, NewRun, Run


class SharedDecisions:
    """`reschedule` and `redrive_dead_letter` for any store that has the ports they use."""

    async def reschedule(
        self: ReschedulingStore,
        job: Job,
        change: JobChange,
        next_run: NewRun | None,
        now: datetime,
        *,
        retention_s: int,
    ) -> tuple[bool, int | None]:
        """`jobs.reschedule` over this store."""
        return await jobs.reschedule(self, job, change, next_run, now, retention_s=retention_s)

    async def redrive_dead_letter(
        self: RedriveStore, letter: DeadLetter, due_at: datetime, now: datetime, *, job_version: int, retention_s: int
    ) -> Run | None:
        """`dead_letters.redrive_dead_letter` over this store."""
        return await dead_letters.redrive_dead_letter(
            self, letter, due_at, now, job_version=job_version, retention_s=retention_s
        )
