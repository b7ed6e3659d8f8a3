"""Jobs: create (with the first run), read, list by tenant, conditional update by version, soft delete.

`jobs.version` is bumped by every change with a conditional write (`IF version = ?`), so two racing updates
never both apply. `jobs_by_tenant` mirrors state and labels for listing; a deleted job leaves the listing but
its `jobs` row stays (state DELETED) so its id keeps answering.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.messages import JobDefinition, encode
from tickwheel.core.ids import run_id_for
from tickwheel.core.instants import whole_ms
from tickwheel.errors import BatchTooLarge, Unavailable
from tickwheel.model import lane_of, recurs, tolerance_ms_of
from tickwheel.store import audit, runs, sweeping
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.ports import ReschedulingStore
from tickwheel.store.records import Job as Job
from tickwheel.store.records import JobChange as JobChange
from tickwheel.store.records import JobHead, NewRun, Pointer, Row, job_head_of
from tickwheel.store.records import JobState as JobState
from tickwheel.store.records import KeyedJob as KeyedJob
from tickwheel.store.records import job_of as job_of
from tickwheel.store.retries import intent_of
from tickwheel.store.times import bound, epoch_us

log = logging.getLogger(__name__)


CARRIED_DEFINITION_BYTES = 4096
"""The largest definition (encoded) a once job's due row and fired message carry: the dispatchers hold their
loaded minutes' rows in memory and send each on a lane, so a larger one (a payload of up to 256 KiB) is read by the
worker from the job instead (`runs.carries_definition`)."""


def carried(definition: JobDefinition) -> str | None:
    """The definition a once job's run carries (None: a recurring job's, or one above CARRIED_DEFINITION_BYTES)."""
    if recurs(definition):
        return None
    text = encode(definition).decode()
    return text if len(text) <= CARRIED_DEFINITION_BYTES else None


def occurrence_run(
    job_id: uuid.UUID,
    tenant_id: str,
    shard: int,
    version: int,
    definition: JobDefinition,
    scheduled_at: datetime,
    *,
    fire_at: datetime | None = None,
    run_id: uuid.UUID | None = None,
    retention_s: int,
) -> NewRun:
    """The run of a job's occurrence `scheduled_at` for the job at `version` (its deterministic id unless given),
    kept `retention_s` past its due time (its tenant's run retention): the one place a run is made, in UTC and
    whole milliseconds (what the store keeps and run ids are made of). A once job's run carries the definition
    (its first attempt's due row does: `runs.carries_definition`), up to CARRIED_DEFINITION_BYTES."""
    at = whole_ms(scheduled_at.astimezone(UTC))
    return NewRun(
        run_id=run_id or run_id_for(job_id, at),
        job_id=job_id,
        tenant_id=tenant_id,
        job_version=version,
        shard=shard,
        lane=lane_of(definition),
        scheduled_at=at,
        fire_at=at if fire_at is None else whole_ms(fire_at.astimezone(UTC)),
        tolerance_ms=tolerance_ms_of(definition),
        recurring=recurs(definition),
        definition=carried(definition),
        retention_s=retention_s,
    )


def run_of(
    job: Job,
    scheduled_at: datetime,
    *,
    fire_at: datetime | None = None,
    run_id: uuid.UUID | None = None,
    retention_s: int,
) -> NewRun:
    """The job's run for the occurrence `scheduled_at` (its deterministic id unless given), at the job's version,
    kept `retention_s` past its due time (its tenant's run retention)."""
    return occurrence_run(
        job.job_id, job.tenant_id, job.shard, job.version, job.definition, scheduled_at,
        fire_at=fire_at, run_id=run_id, retention_s=retention_s,
    )  # fmt: skip


def label_set(definition: JobDefinition) -> set[str]:
    """Labels as `key=value` strings: what listing filters on."""
    return {f"{k}={v}" for k, v in definition.labels.items()}


INSERT_JOB = (
    "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane, labels, next_run_at, next_run_id,"
    " fired_count, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
)
INSERT_KEYED_JOB = (
    "INSERT INTO jobs (job_id, tenant_id, shard, state, version, definition, lane, labels, next_run_at, next_run_id,"
    " fired_count, created_at, updated_at, request_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)"
    " IF NOT EXISTS"
)
READ_STATE = "SELECT state, version, definition FROM jobs WHERE job_id = ?"
# The same read of the jobs of the runs a worker handles together (store.rounds: one request, not one each).
READ_STATES = "SELECT job_id, state, version, definition FROM jobs WHERE job_id IN ?"
INSERT_LISTING = "INSERT INTO jobs_by_tenant (tenant_id, job_id, state, labels, created_at) VALUES (?, ?, ?, ?, ?)"
# The listing row as a keyed create wrote it, at that create's time: a later change of the listing wins over it.
INSERT_LISTING_AT = INSERT_LISTING + " USING TIMESTAMP ?"


def _job_values(job: Job, now: datetime) -> list[Any]:
    return [
        job.job_id,
        job.tenant_id,
        job.shard,
        job.state.value,
        job.version,
        encode(job.definition).decode(),
        job.lane,
        label_set(job.definition),
        job.next_run_at,
        job.next_run_id,
        now,
        now,
    ]


def listing_row(job: Job, now: datetime) -> tuple[str, list[Any]]:
    """The job's `jobs_by_tenant` row (what listing filters on)."""
    return INSERT_LISTING, [job.tenant_id, job.job_id, job.state.value, label_set(job.definition), now]


def timed(cql: str) -> str:
    """`cql`, an INSERT whose USING clause (if any) ends it, with its write time as its last parameter."""
    if cql.endswith(" USING TTL ?"):
        return cql + " AND TIMESTAMP ?"
    if " USING " in cql or not cql.lstrip().upper().startswith("INSERT"):
        raise ValueError(f"not an insert whose write time can be given: {cql}")
    return cql + " USING TIMESTAMP ?"


def at_write_time(row: tuple[str, Sequence[Any]], write_time_us: int) -> tuple[str, list[Any]]:
    """`row` written at `write_time_us`: sent again, it writes the same cells at the same time, so it cannot hide
    anything written since (a claim, a pause, a delete). A row that names its own write time keeps it."""
    cql, params = row
    if "TIMESTAMP ?" in cql:
        return cql, list(params)
    return timed(cql), [*params, write_time_us]


# A keyed create's rows after its insert, at that create's write time (`first_rows`); prepared at start-up.
KEYED_RUN = timed(runs.INSERT_RUN.replace(" IF NOT EXISTS", ""))
KEYED_RUN_WITH_ORIGIN = timed(runs.INSERT_RUN_WITH_ORIGIN.replace(" IF NOT EXISTS", ""))
KEYED_BUCKET = timed(runs.INSERT_BUCKET)
KEYED_BUCKET_DEFINED = timed(runs.INSERT_BUCKET_DEFINED)
KEYED_FAR = timed(runs.INSERT_FAR)
KEYED_CHANGE = timed(audit.INSERT_CHANGE)

Rows = list[tuple[str, list[Any]]]


def first_rows(
    job: Job, first_run: NewRun | None, now: datetime, also: Sequence[tuple[str, Sequence[Any]]] = ()
) -> tuple[tuple[str, list[Any]] | None, Rows]:
    """A keyed create's rows after its job's insert, each at the create's write time `now`: its first run's `runs`
    row (None without a run), and the rows that find and show it (its due row, its history row, the listing row,
    `also`)."""
    write_time_us = epoch_us(now)
    finders = [listing_row(job, now), *also]
    run = None
    if first_run is not None:
        run_insert, due, history = runs.new_run_rows(first_run, now)
        run = at_write_time(run_insert, write_time_us)
        finders = [due, history, *finders]
    return run, [at_write_time(row, write_time_us) for row in finders]


async def write_first_rows(store: CassandraStore, run: tuple[str, list[Any]] | None, finders: Rows) -> None:
    """`first_rows` in one logged batch (grouped with other creates' rows): once the batchlog has it, every row is
    written, replayed by the batchlog if the batch fails after it (an unlogged batch spans partitions and can
    apply in part: soak run 8 had a keyed create's run written and its due row not, which nothing but a pass
    over every job finds). Above the nodes' batch size limit, one statement each, the run's row last: every
    prefix then leaves nothing or rows that find the run, never a run that nothing fires."""
    rows = [*finders, *([run] if run is not None else [])]
    try:
        await store.grouped_batch(rows, logged=True)
    except BatchTooLarge:
        await asyncio.gather(*(store.execute(cql, params) for cql, params in finders))
        if run is not None:
            await store.execute(*run)


async def create_keyed_job(
    store: CassandraStore,
    job: Job,
    first_run: NewRun | None,
    now: datetime,
    request_hash: str,
    also: Sequence[tuple[str, Sequence[Any]]] = (),
) -> KeyedJob | None:
    """Create a job whose id was derived from an Idempotency-Key: one conditional insert of the job row (with the
    request's hash), then, only if it applied, its first run and listing row. Returns None when created, else the
    job that already holds the id (a replay, or the same key with another request: compare `request_hash`).

    The run is written after the job here, not before: only the request that created the job may write its run,
    since a replay's plan (an interval anchored at its own now) could name another occurrence. An insert answered
    "not applied" with this very row (its first send applied after the SERIAL read that settled it found nothing)
    is this request's own. The rows after it are one logged batch at the create's write time (`first_rows`,
    `write_first_rows`): all or none, and a batch that fails is sent again as it was, which cannot move back a run
    fired and claimed meanwhile (its cells are older than the claim's); a second failure is answered 503, and the
    client's retry with the same key finds the job and completes it (`complete_keyed_job`: the same rows). `also`
    rides in the same batch (the create's audit row: no statement of its own).

    A recurring job's row in the sweeper's index goes first, before the insert: whatever fails after it, the
    sweeper finds the job (a once job needs none: its run's due rows are what the sweeper reads)."""
    if recurs(job.definition):
        await sweeping.mark_recurring(store, job)
    values = [*_job_values(job, now), request_hash]
    applied, current = await store.applied(INSERT_KEYED_JOB, values)
    if not applied and not _written_by(current, values):
        return KeyedJob(job_of(current), current.get("request_hash"))
    run, finders = first_rows(job, first_run, now, also)
    try:
        await write_first_rows(store, run, finders)
    except Unavailable as exc:
        # Either nothing of the batch was written or the batchlog writes all of it: the same rows at the same write
        # time again are harmless either way.
        log.warning("the rows of a keyed create failed after its job was written; sent again: %s", exc)
        await write_first_rows(store, run, finders)
    return None


def _written_by(current: Row, values: Sequence[Any]) -> bool:
    """Whether the row a keyed insert found is the one it writes itself (every value the same)."""
    intent = intent_of(INSERT_KEYED_JOB, values, ["job_id"])
    return intent is not None and intent.shows(current)


async def complete_keyed_job(store: CassandraStore, job: Job, first_run: NewRun | None, now: datetime) -> None:
    """A replay found the job of a keyed create whose rows may not all be there (its batch failed before the
    batchlog had it, and so did the batch sent again): write them again as that create did at its time `now` (the
    job's `created_at`): the same logged batch at the same write time (`first_rows`), which moves nothing back (a
    claim, a pause or a delete since is newer than each of its cells); a recurring job's index row first."""
    if recurs(job.definition):
        await sweeping.mark_recurring(store, job)
    await write_first_rows(store, *first_rows(job, first_run, now))


async def create_job(
    store: CassandraStore,
    job: Job,
    first_run: NewRun | None,
    now: datetime,
    also: Sequence[tuple[str, Sequence[Any]]] = (),
) -> None:
    """Write a new job, its listing row and its first run in one logged batch at the store's (QUORUM)
    consistency: all of them or none, so there is neither an orphan run nor a job listed to a tenant who got no
    201. The job id is new (never written before), so its first run needs no condition: one write, no Paxos.
    `also` rides in the same batch (the create's audit row), and so does a recurring job's row in the sweeper's
    index."""
    rows = [*(runs.new_run_rows(first_run, now) if first_run is not None else []), (INSERT_JOB, _job_values(job, now))]
    if recurs(job.definition):
        rows.append(sweeping.recurring_row(job))
    await store.grouped_batch([*rows, listing_row(job, now), *also])  # with other creates' rows: still all or none


async def get_keyed_job(store: CassandraStore, job_id: uuid.UUID) -> KeyedJob | None:
    """The job a keyed create made, with that request's hash (a replay is checked against it); None if none."""
    rows = await store.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id])
    return KeyedJob(job_of(rows[0]), rows[0].get("request_hash")) if rows else None


async def get_job(store: CassandraStore, job_id: uuid.UUID) -> Job | None:
    """The job (any state), or None when it was never written."""
    rows = await store.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id])
    return job_of(rows[0]) if rows else None


async def list_job_ids(
    store: CassandraStore,
    tenant_id: str,
    *,
    limit: int,
    cursor: str | None = None,
    state: str | None = None,
    label: str | None = None,
) -> tuple[list[uuid.UUID], str | None]:
    """One page of a tenant's job ids (filtered by state and a `key=value` label), and the next cursor."""
    cql = "SELECT job_id FROM jobs_by_tenant WHERE tenant_id = ?"
    params: list[object] = [tenant_id]
    if state is not None:
        cql += " AND state = ?"
        params.append(state)
    if label is not None:
        cql += " AND labels CONTAINS ?"
        params.append(label)
    if len(params) > 1:
        # Filtering inside one partition (the tenant's) reads only that partition.
        cql += " ALLOW FILTERING"
    rows, next_cursor = await store.page(cql, params, page_size=limit, cursor=cursor)
    return [row["job_id"] for row in rows], next_cursor


async def update_job(store: CassandraStore, job: Job, change: JobChange, now: datetime) -> tuple[bool, int | None]:
    """Apply `change` if the job is still at `job.version`: (applied, the version found when it was not). A change
    to a recurring schedule writes the job's row in the sweeper's index first (as a recurring create does)."""
    if change.state is not JobState.DELETED and recurs(change.definition):
        await sweeping.mark_recurring(store, job)
    applied, current = await store.applied(
        "UPDATE jobs SET state = ?, version = ?, definition = ?, lane = ?, labels = ?, next_run_at = ?,"
        " next_run_id = ?, updated_at = ? WHERE job_id = ? IF version = ?",
        [
            change.state.value,
            job.version + 1,
            encode(change.definition).decode(),
            change.definition.priority,
            label_set(change.definition),
            change.next_run_at,
            change.next_run_id,
            now,
            job.job_id,
            job.version,
        ],
    )
    if not applied:
        return False, current.get("version")
    await _update_listing(store, job, change)
    return True, None


async def _update_listing(store: CassandraStore, job: Job, change: JobChange) -> None:
    if change.state is JobState.DELETED:
        await store.execute(
            "DELETE FROM jobs_by_tenant WHERE tenant_id = ? AND job_id = ?", [job.tenant_id, job.job_id]
        )
        return
    await store.execute(
        "UPDATE jobs_by_tenant SET state = ?, labels = ? WHERE tenant_id = ? AND job_id = ?",
        [change.state.value, label_set(change.definition), job.tenant_id, job.job_id],
    )


async def count_jobs(store: CassandraStore, tenant_id: str) -> int:
    """How many listed (not deleted) jobs the tenant has: a partition count, used to seed the quota counter."""
    rows = await store.execute("SELECT COUNT(*) AS n FROM jobs_by_tenant WHERE tenant_id = ?", [tenant_id])
    return int(rows[0]["n"]) if rows else 0


async def reschedule(
    store: ReschedulingStore,
    job: Job,
    change: JobChange,
    next_run: NewRun | None,
    now: datetime,
    *,
    retention_s: int,
) -> tuple[bool, int | None]:
    """Apply `change` (conditional on the job's version), then replace its scheduled run by `next_run` (the runs
    written kept for the tenant's run retention `retention_s`).

    The version check makes the change atomic: of two racing updates only one passes it, and only that one
    touches the runs. The old run is cancelled unless it is the same occurrence, which then moves to the new
    version. If the process dies in between, the job names a run that is missing and the sweeper repairs it.
    Written once against the port, so the in-memory twin runs this same decision.

    A once job's scheduled run is marked first (`runs.mark_changed`; written CANCELLED if it has no row yet), before
    the job's conditional write: its worker claims it without reading the job, and the mark is what makes that
    claim read the job instead. Whatever fails after the mark, the run is only read for (the job's row decides, as
    for any run); a change refused by the version check leaves a mark that costs the run that read.
    """
    if job.next_run_id is not None and job.next_run_at is not None and not recurs(job.definition):
        marked = run_of(job, job.next_run_at, run_id=job.next_run_id, retention_s=retention_s)
        await store.mark_changed(marked, now)
    applied, found = await store.update_job(job, change, now)
    if not applied:
        return False, found
    same = next_run is not None and next_run.run_id == job.next_run_id
    if job.next_run_id is not None and not same:
        old = await store.get_run(job.next_run_id)
        if old is not None:
            await store.cancel(old.identity(retention_s), now)
    if next_run is not None:
        if same:
            await store.retarget_run(next_run, now)
        elif not await store.create_run(next_run, now):
            # The same occurrence was cancelled earlier (paused, then resumed before it): schedule it again.
            await store.revive_run(next_run, now)
    return True, None


async def scan_page(store: CassandraStore, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
    """One page of the whole jobs table (the sweeper's and the reconciler's passes) and the cursor of the next.
    A row without state or definition (only cells a conditional update left on a job never written) is no job."""
    rows, next_cursor = await store.page("SELECT * FROM jobs", page_size=page_size, cursor=cursor)
    return [job_of(row) for row in rows if row["state"] and row["definition"]], next_cursor


GET_JOBS = "SELECT * FROM jobs WHERE job_id IN ?"
GET_JOBS_GROUP = 64
"""Partitions one `job_id IN ?` read asks for at most: the coordinator of the read waits for every partition."""


async def get_jobs(store: CassandraStore, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
    """Many jobs, one `job_id IN ?` read per GET_JOBS_GROUP ids; ids without a job (or with only the cells a
    conditional update left) are left out."""
    found: dict[uuid.UUID, Job] = {}
    for start in range(0, len(job_ids), GET_JOBS_GROUP):
        group = sorted(set(job_ids[start : start + GET_JOBS_GROUP]))
        for row in await store.execute(GET_JOBS, [group]):
            if row["state"] and row["definition"]:
                found[row["job_id"]] = job_of(row)
    return found


async def read_state(store: CassandraStore, job_id: uuid.UUID) -> JobHead | None:
    """The job's state, version and definition: what a worker checks before calling (None: no such job). Read
    with the other jobs asked for in the same event-loop round (`READ_STATES`), alone by `READ_STATE`."""
    row = await store.read_in_round(READ_STATE, READ_STATES, "job_id", job_id)
    return job_head_of(job_id, row) if row and row["state"] and row["definition"] else None


ADVANCE_JOB = (
    "UPDATE jobs SET next_run_id = ?, next_run_at = ?, fired_count = ?, updated_at = ? WHERE job_id = ?"
    " IF version = ? AND state = 'ACTIVE' AND next_run_id = ?"
)


async def move_pointer(
    store: CassandraStore,
    job: Job,
    current_run_id: uuid.UUID,
    following: NewRun | None,
    fired_count: int,
    now: datetime,
) -> Pointer:
    """Point the job from `current_run_id` to `following` (None: no further run) with `fired_count`, only while
    it is ACTIVE, still at `job.version` and still pointing at `current_run_id` (one LWT on the job row)."""
    next_id = following.run_id if following else None
    next_at = bound(following.scheduled_at) if following else None
    applied, current = await store.applied(
        ADVANCE_JOB, [next_id, next_at, fired_count, bound(now), job.job_id, job.version, current_run_id]
    )
    if applied:
        return Pointer(True)
    return Pointer(False, current.get("next_run_id"), current.get("version"))
