"""The in-memory twin of the API's store port (`tickwheel.store.ports.ApiStore`): `MemoryStore` plus jobs as
their owners change them, names, idempotency keys, the audit log, tenants and their keys, dead letters as the API
reads them, the operator's counters.

Same semantics as Cassandra where they matter (conditional creates, version-fenced updates, names moved only from
the job they name, a reservation held once), checked by `tests/integration/store/test_contract.py`. Listings
page by an offset cursor (Cassandra's is the driver's paging state: both are opaque to the caller). No TTLs: an
idempotency key or an audit row is kept until the twin is dropped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

from tickwheel.model import recurs
from tickwheel.store import jobs
from tickwheel.store.audit import JobChangeRecord
from tickwheel.store.decisions import SharedDecisions
from tickwheel.store.idempotency import Reservation
from tickwheel.store.memory import MemoryStore, stored
from tickwheel.store.names import NameClaim
from tickwheel.store.ports import KeptChange
from tickwheel.store.records import (
    DeadLetter,
    HistoryEntry,
    Job,
    JobChange,
    JobState,
    KeyedJob,
    NewRun,
    RunKind,
    RunStatus,
    Tenant,
)
from tickwheel.store.tenants import hash_key
from tickwheel.store.times import epoch_us

T = TypeVar("T")


def _page(items: list[T], limit: int, cursor: str | None) -> tuple[list[T], str | None]:
    """One page of `items` from the offset `cursor`, and the offset of the next (None: this is the last)."""
    start = int(cursor or 0)
    following = start + limit
    return items[start:following], str(following) if following < len(items) else None


@dataclass
class MemoryApiStore(SharedDecisions, MemoryStore):
    """Every store port the API uses, in memory (tables as plain attributes, for tests to look at)."""

    request_hashes: dict[uuid.UUID, str] = field(default_factory=dict)
    listed: set[uuid.UUID] = field(default_factory=set)
    names: dict[tuple[str, str], NameClaim] = field(default_factory=dict)
    keys: dict[tuple[str, str], Reservation] = field(default_factory=dict)
    changes: dict[uuid.UUID, list[JobChangeRecord]] = field(default_factory=dict)
    api_keys: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """key hash -> (tenant id, revoked)"""

    # -- JobCatalog ---------------------------------------------------------------------------------------------
    async def create_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """The job, its listing and its first run."""
        await super().create_job(job, first_run, now)
        self.listed.add(job.job_id)

    async def create_audited_job(self, job: Job, first_run: NewRun | None, now: datetime, change: KeptChange) -> None:
        """The job, its listing, its first run and its audit row."""
        await self.create_job(job, first_run, now)
        await self.record_change(*change)

    async def create_keyed_job(
        self, job: Job, first_run: NewRun | None, now: datetime, request_hash: str, change: KeptChange
    ) -> KeyedJob | None:
        """The job if its id is free (None), then its first run, listing and audit row; else the job holding it (a
        recurring job's index row first, whatever the insert finds)."""
        if recurs(job.definition):
            await self.mark_recurring(job)
        held = self.jobs.get(job.job_id)
        if held is not None:
            return KeyedJob(held, self.request_hashes.get(job.job_id))
        self.request_hashes[job.job_id] = request_hash
        await self.create_audited_job(job, first_run, now, change)
        return None

    async def get_keyed_job(self, job_id: uuid.UUID) -> KeyedJob | None:
        """The job and its request hash, or None."""
        held = self.jobs.get(job_id)
        return None if held is None else KeyedJob(held, self.request_hashes.get(job_id))

    async def complete_keyed_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """The first run if absent (its due and history rows while SCHEDULED), a recurring job's index row, and the
        listing unless the job was deleted since (written at the create's time, the delete's is later)."""
        if recurs(job.definition):
            await self.mark_recurring(job)
        if first_run is not None:
            await self.create_run(first_run, now)
        held = self.jobs.get(job.job_id)
        if held is None or held.state is not JobState.DELETED:
            self.listed.add(job.job_id)

    async def update_job(self, job: Job, change: JobChange, now: datetime) -> tuple[bool, int | None]:
        """`change` at version + 1 if the job is still at `job.version`; a deleted job leaves the listing; a change
        to a recurring schedule writes the job's index row first."""
        if change.state is not JobState.DELETED and recurs(change.definition):
            await self.mark_recurring(job)
        held = self.jobs.get(job.job_id)
        if held is None or held.version != job.version:
            return False, None if held is None else held.version
        self.jobs[job.job_id] = replace(
            held, state=change.state, version=job.version + 1, definition=change.definition,
            lane=change.definition.priority, next_run_at=stored(change.next_run_at) if change.next_run_at else None,
            next_run_id=change.next_run_id, updated_at=stored(now),
        )  # fmt: skip
        if change.state is JobState.DELETED:
            self.listed.discard(job.job_id)
        return True, None

    async def retarget_run(self, run: NewRun, now: datetime) -> bool:
        """The run moved to `run.job_version` and its lane if SCHEDULED at attempt 0 (its due row again)."""
        current = self.runs.get(run.run_id)
        if current is None or current.status is not RunStatus.SCHEDULED or current.attempt != 0:
            return False
        self.runs[run.run_id] = replace(current, job_version=run.job_version, lane=run.lane)
        self._first_row(run, now)
        return True

    async def revive_run(self, run: NewRun, now: datetime) -> bool:
        """SCHEDULED again at `run.fire_at` if CANCELLED at attempt 0."""
        current = self.runs.get(run.run_id)
        if current is None or current.status is not RunStatus.CANCELLED or current.attempt != 0:
            return False
        self.runs[run.run_id] = replace(
            current, status=RunStatus.SCHEDULED, job_version=run.job_version, lane=run.lane,
            due_at=stored(run.fire_at), finished_at=None,
        )  # fmt: skip
        self._first_row(run, now)
        self._scheduled_history(run, now)
        return True

    async def list_job_ids(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        state: str | None = None,
        label: str | None = None,
    ) -> tuple[list[uuid.UUID], str | None]:
        """A page of the tenant's listed jobs by id, filtered."""
        found = [
            job.job_id
            for job in sorted(self.jobs.values(), key=lambda j: j.job_id.bytes)
            if job.job_id in self.listed
            and job.tenant_id == tenant_id
            and (state is None or job.state.value == state)
            and (label is None or label in jobs.label_set(job.definition))
        ]
        return _page(found, limit, cursor)

    async def count_jobs(self, tenant_id: str) -> int:
        """The tenant's listed jobs."""
        return sum(1 for job_id in self.listed if job_id in self.jobs and self.jobs[job_id].tenant_id == tenant_id)

    # -- RunHistoryStore ----------------------------------------------------------------------------------------
    def _entries(self, job_id: uuid.UUID) -> list[HistoryEntry]:
        rows = self.history.get(job_id, {})
        return [rows[key].entry for key in sorted(rows, reverse=True)]

    async def latest_runs(self, job_id: uuid.UUID, limit: int) -> list[HistoryEntry]:
        """The job's newest history entries."""
        return self._entries(job_id)[:limit]

    async def runs_page(
        self, job_id: uuid.UUID, status: str | None, *, page_size: int, cursor: str | None
    ) -> tuple[list[HistoryEntry], str | None]:
        """A page of the job's history, newest first, of one status or all."""
        entries = [e for e in self._entries(job_id) if status is None or e.status.value == status]
        return _page(entries, page_size, cursor)

    # -- NameStore ----------------------------------------------------------------------------------------------
    async def name_claim(self, tenant_id: str, name: str) -> NameClaim | None:
        """Where the name points."""
        return self.names.get((tenant_id, name))

    async def claim_name(self, tenant_id: str, name: str, job_id: uuid.UUID, now: datetime) -> bool:
        """The name if unused."""
        if (tenant_id, name) in self.names:
            return False
        self.names[(tenant_id, name)] = NameClaim(job_id, stored(now))
        return True

    async def move_name(self, tenant_id: str, name: str, old: uuid.UUID, new: uuid.UUID, now: datetime) -> bool:
        """The name from `old` to `new` if it points at `old`."""
        held = self.names.get((tenant_id, name))
        if held is None or held.job_id != old:
            return False
        self.names[(tenant_id, name)] = NameClaim(new, stored(now))
        return True

    async def release_name(self, tenant_id: str, name: str, job_id: uuid.UUID) -> None:
        """The name freed if it points at `job_id`."""
        held = self.names.get((tenant_id, name))
        if held is not None and held.job_id == job_id:
            del self.names[(tenant_id, name)]

    # -- IdempotencyStore ---------------------------------------------------------------------------------------
    async def reserve_key(self, tenant_id: str, key: str, request_hash: str, now: datetime, ttl_s: int) -> Reservation:
        """The key for this request if free, else what holds it."""
        held = self.keys.get((tenant_id, key))
        if held is not None:
            return replace(held, reserved=False)
        self.keys[(tenant_id, key)] = Reservation(False, request_hash)
        return Reservation(True, request_hash)

    async def complete_key(
        self, tenant_id: str, key: str, request_hash: str, status: int, response: str, ttl_s: int
    ) -> None:
        """The answer kept with the key."""
        self.keys[(tenant_id, key)] = Reservation(False, request_hash, status, response)

    async def release_key(self, tenant_id: str, key: str) -> None:
        """The key forgotten."""
        self.keys.pop((tenant_id, key), None)

    # -- AuditStore ---------------------------------------------------------------------------------------------
    async def record_change(self, change: JobChangeRecord, ttl_s: int) -> uuid.UUID:
        """The change appended to its job's log."""
        change_id = change.change_id or uuid.uuid1()
        kept = replace(change, change_id=change_id, changed_at=stored(change.changed_at))
        self.changes.setdefault(change.job_id, []).append(kept)
        return change_id

    async def job_changes(
        self, job_id: uuid.UUID, *, limit: int, cursor: str | None = None
    ) -> tuple[list[JobChangeRecord], str | None]:
        """A page of the job's changes, newest first (by time, then the order written)."""
        held = self.changes.get(job_id, [])
        newest_first = [c for _, c in sorted(enumerate(held), key=lambda ic: (ic[1].changed_at, ic[0]), reverse=True)]
        return _page(newest_first, limit, cursor)

    async def version_started_at(self, job_id: uuid.UUID, version: int) -> datetime | None:
        """When the job reached `version`, from the audit log (or as a test set it in `versions_started`)."""
        made = [c.changed_at for c in self.changes.get(job_id, []) if c.version == version]
        return min(made, default=None) or await super().version_started_at(job_id, version)

    # -- TenantDirectory ----------------------------------------------------------------------------------------
    def add_key(self, tenant_id: str, key: str, *, revoked: bool = False) -> None:
        """An API key of the tenant (the twin has no tenant commands: tests add keys here)."""
        self.api_keys[hash_key(key)] = (tenant_id, revoked)

    async def authenticate(self, key: str) -> str | None:
        """The tenant of a live key."""
        held = self.api_keys.get(hash_key(key))
        return held[0] if held is not None and not held[1] else None

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        """The tenant, if added."""
        return self.tenants.get(tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name."""
        return sorted(self.tenants.values(), key=lambda t: t.name)

    # -- DeadLetterDesk -----------------------------------------------------------------------------------------
    async def list_dead_letters(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None = None,
        job_id: uuid.UUID | None = None,
        target_host: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> tuple[list[DeadLetter], str | None]:
        """A page of the tenant's letters, newest first, filtered."""
        found = [
            letter
            for letter in sorted(self.dead_letters.values(), key=lambda d: (d.dead_at, d.run_id.bytes), reverse=True)
            if letter.tenant_id == tenant_id
            and (job_id is None or letter.job_id == job_id)
            and (target_host is None or letter.target_host == target_host)
            and (since is None or letter.dead_at >= since)
            and (until is None or letter.dead_at < until)
        ]
        return _page(found, limit, cursor)

    async def get_dead_letter(self, tenant_id: str, run_id: uuid.UUID) -> DeadLetter | None:
        """The live letter of the tenant's run (found through the run's `dead_at`, as on Cassandra)."""
        run = self.runs.get(run_id)
        if run is None or run.tenant_id != tenant_id or run.dead_at is None:
            return None
        letter = self.dead_letters.get((tenant_id, run_id))
        return letter if letter is not None and letter.dead_at == run.dead_at else None

    async def redrive_run(self, run: NewRun, attempt: int, due_at: datetime, now: datetime) -> bool:
        """RETRY at `due_at` if still DEAD at `attempt` (its due row first, as on Cassandra)."""
        self._due_row(run, due_at, attempt, RunKind.RUN)
        current = self.runs.get(run.run_id)
        if current is None or current.status is not RunStatus.DEAD or current.attempt != attempt:
            return False
        self.runs[run.run_id] = replace(
            current, status=RunStatus.RETRY, due_at=stored(due_at), dead_at=None,
            redrive_count=current.redrive_count + 1, job_version=run.job_version,
        )  # fmt: skip
        self._history(run, RunStatus.RETRY, attempt, now, epoch_us(now))
        self._attempt(run.run_id, attempt, "redrive", finished_at=stored(now), outcome="RETRY")
        return True

    async def mark_redriven(self, letter: DeadLetter, now: datetime) -> None:
        """The letter stamped with its redrive."""
        held = self.dead_letters.get((letter.tenant_id, letter.run_id))
        if held is not None:
            self.dead_letters[(letter.tenant_id, letter.run_id)] = replace(held, redriven_at=stored(now))

    async def purge_dead_letter(self, letter: DeadLetter) -> None:
        """The letter deleted."""
        self.dead_letters.pop((letter.tenant_id, letter.run_id), None)

    # -- OperatorStore, readiness -------------------------------------------------------------------------------
    async def sweeper_counts(self) -> tuple[int, dict[str, int]]:
        """(sweeps, repairs by reason)."""
        return self.sweeps, dict(self.repairs)

    async def dead_letters_since(self, tenant_id: str, since: datetime) -> int:
        """The tenant's letters dead at or after `since`."""
        return sum(1 for d in self.dead_letters.values() if d.tenant_id == tenant_id and d.dead_at >= since)

    async def ping(self) -> None:
        """Always answers."""
