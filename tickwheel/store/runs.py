"""The run state machine on Cassandra: create, claim, finish, retry, lease expiry, heartbeat, cancel.

`runs.attempt` is the fencing token. Every transition is a conditional (LWT) write on the `runs` row. The rows a
later step needs to find the run again (its `runs_by_bucket` rows: a lease check, a retry) are written before
the LWT, so a failure between the two leaves a harmless extra row (its claim is fenced), never a run nothing will
look at again; the rows that describe what happened (`runs_by_job`, `run_attempts`) are written after it, so
they never report an outcome the LWT refused. Every row is safe to write twice.

Every write of `runs`, `runs_by_job` and `run_attempts` carries the TTL of the run's tenant's retention past its due
time (`kept_s`, `NewRun.retention_s`): a write taking the tables' default instead would outlive the run's identity
(a shorter tenant retention) or be outlived by it (a longer one).

    SCHEDULED --claim--> RUNNING --finish--> SUCCEEDED | DEAD | RETRY --claim--> RUNNING ...
    SCHEDULED | RETRY --cancel--> CANCELLED          RUNNING --lease expired--> RETRY | DEAD (no attempt left)

A run row in `runs_by_bucket` carries the attempt a claim must find (0 for a first attempt); a `lease_check`
row carries the attempt that holds the lease.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwheel.core import fencing
from tickwheel.core.horizon import day_of, is_far, retention_ttl_s
from tickwheel.core.ids import minute_bucket
from tickwheel.core.instants import whole_ms
from tickwheel.errors import TickwheelError
from tickwheel.store.cassandra import CassandraStore, Row
from tickwheel.store.records import FINAL as FINAL
from tickwheel.store.records import RUNNABLE as RUNNABLE
from tickwheel.store.records import Attempt, Found, Run, attempt_of, carries_definition, found_of, run_of
from tickwheel.store.records import AttemptResult as AttemptResult
from tickwheel.store.records import DueState as DueState
from tickwheel.store.records import NewRun as NewRun
from tickwheel.store.records import RunKind as RunKind
from tickwheel.store.records import RunStatus as RunStatus
from tickwheel.store.records import Transition as Transition
from tickwheel.store.times import aware, bound, epoch_us

INSERT_RUN = (
    "INSERT INTO runs (run_id, job_id, tenant_id, job_version, shard, lane, scheduled_at, due_at, status, attempt,"
    " redrive_count, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'SCHEDULED', 0, 0, ?) IF NOT EXISTS USING TTL ?"
)
# Runs made on request (origin set) also store origin and forced; a run of the schedule writes no null cells.
INSERT_RUN_WITH_ORIGIN = (
    "INSERT INTO runs (run_id, job_id, tenant_id, job_version, shard, lane, scheduled_at, due_at, status, attempt,"
    " redrive_count, created_at, origin, forced) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'SCHEDULED', 0, 0, ?, ?, ?)"
    " IF NOT EXISTS USING TTL ?"
)
INSERT_BUCKET = (
    "INSERT INTO runs_by_bucket (bucket, shard, fire_at, run_id, attempt, kind, job_id, tenant_id, lane,"
    " job_version, scheduled_at, tolerance_ms, recurring) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A once job's first attempt: its due row carries the job's definition at `job_version` (`carries_definition`).
INSERT_BUCKET_DEFINED = (
    "INSERT INTO runs_by_bucket (bucket, shard, fire_at, run_id, attempt, kind, job_id, tenant_id, lane,"
    " job_version, scheduled_at, tolerance_ms, recurring, definition) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPSERT_HISTORY = (
    "INSERT INTO runs_by_job (job_id, scheduled_at, run_id, status, attempt, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
)
# A run made on request names its origin in the history; other upserts leave the column as it is.
UPSERT_HISTORY_WITH_ORIGIN = (
    "INSERT INTO runs_by_job (job_id, scheduled_at, run_id, status, attempt, updated_at, origin)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
DELETE_BUCKET = (
    "DELETE FROM runs_by_bucket WHERE bucket = ? AND shard = ? AND fire_at = ? AND run_id = ? AND attempt = ?"
    " AND kind = ?"
)
INSERT_FAR = (
    "INSERT INTO runs_far (day, shard, fire_at, run_id, job_id, tenant_id, lane, job_version, scheduled_at,"
    " tolerance_ms, recurring) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def bucket_row(run: NewRun, *, fire_at: datetime, attempt: int, kind: RunKind) -> tuple[str, list[Any]]:
    """The `runs_by_bucket` insert that makes the dispatcher fire `run` at `fire_at` (with the job's definition
    when `carries_definition`)."""
    fire_at = whole_ms(fire_at)
    params = [
        minute_bucket(fire_at),
        run.shard,
        fire_at,
        run.run_id,
        attempt,
        kind.value,
        run.job_id,
        run.tenant_id,
        run.lane,
        run.job_version,
        whole_ms(run.scheduled_at),
        run.tolerance_ms,
        run.recurring,
    ]
    if carries_definition(run, attempt, kind):
        return INSERT_BUCKET_DEFINED, [*params, run.definition]
    return INSERT_BUCKET, params


def first_row(run: NewRun, now: datetime) -> tuple[str, list[Any]]:
    """The row that makes a first attempt fire: its minute bucket, or `runs_far` when it is due beyond
    `core.horizon.FAR_AFTER` (the coordinator's mover writes the bucket row when its day comes near)."""
    if not is_far(run.fire_at, now):
        return bucket_row(run, fire_at=run.fire_at, attempt=0, kind=RunKind.RUN)
    fire_at = whole_ms(run.fire_at)
    return INSERT_FAR, [
        bound(day_of(fire_at)),
        run.shard,
        bound(fire_at),
        run.run_id,
        run.job_id,
        run.tenant_id,
        run.lane,
        run.job_version,
        bound(run.scheduled_at),
        run.tolerance_ms,
        run.recurring,
    ]


def kept_s(run: NewRun, now: datetime, until: datetime | None = None) -> int:
    """The TTL of a write of the run's rows at `now`: its retention past its due time, or past `until` (a lease,
    a retry) when that is later (`core.horizon.retention_ttl_s`)."""
    due = run.fire_at if until is None else max(run.fire_at, until)
    return retention_ttl_s(due, now, run.retention_s)


def _history_values(run: NewRun, status: RunStatus, attempt: int, now: datetime) -> tuple[str, list[Any]]:
    params = [run.job_id, whole_ms(run.scheduled_at), run.run_id, status.value, attempt, now]
    if run.origin is None:
        return UPSERT_HISTORY, params
    return UPSERT_HISTORY_WITH_ORIGIN, [*params, run.origin]


def history_row(run: NewRun, status: RunStatus, attempt: int, now: datetime) -> tuple[str, list[Any]]:
    """The run's `runs_by_job` row at `status` (written at the statement's own time), kept for its retention."""
    statement, params = _history_values(run, status, attempt, now)
    return statement + " USING TTL ?", [*params, kept_s(run, now)]


def run_row(run: NewRun, now: datetime) -> tuple[str, list[Any]]:
    """The `runs` insert (IF NOT EXISTS) of a run just made, kept until its due time plus the retention; a run
    made on request also stores its origin and whether it is forced."""
    params = [run.run_id, run.job_id, run.tenant_id, run.job_version, run.shard, run.lane]
    params += [whole_ms(run.scheduled_at), whole_ms(run.fire_at), now]
    if run.origin is None:
        return INSERT_RUN, [*params, kept_s(run, now)]
    return INSERT_RUN_WITH_ORIGIN, [*params, run.origin, run.forced, kept_s(run, now)]


def scheduled_history_row(run: NewRun, now: datetime) -> tuple[str, list[Any]]:
    """The history's row of a run just made, kept until its due time plus the retention: written at its
    occurrence or now, whichever is earlier, so that its claim's row (`running_history_row`) always replaces it."""
    write_time_us = min(epoch_us(run.scheduled_at), epoch_us(now))
    statement, params = _history_values(run, RunStatus.SCHEDULED, 0, now)
    return statement + " USING TTL ? AND TIMESTAMP ?", [*params, kept_s(run, now), write_time_us]


def running_history_row(run: NewRun, attempt: int, now: datetime, lease_until: datetime) -> tuple[str, list[Any]]:
    """The history's RUNNING row, written with the claim before its LWT (so it costs no statement of its own).

    Its write time is the occurrence (or now, if earlier) plus 2 x attempt microseconds, and an outcome's is at
    least one more (`outcome_history_row`): a claim that is then refused (a duplicate arriving after the run
    finished) never hides the outcome, whatever the clocks, while it still replaces the SCHEDULED row written
    when the run was made."""
    write_time_us = min(epoch_us(run.scheduled_at), epoch_us(now)) + 2 * attempt
    params = [run.job_id, whole_ms(run.scheduled_at), run.run_id, RunStatus.RUNNING.value, attempt, now]
    return UPSERT_HISTORY + " USING TTL ? AND TIMESTAMP ?", [*params, kept_s(run, now, lease_until), write_time_us]


def outcome_history_row(
    run: NewRun, status: RunStatus, attempt: int, now: datetime, claimed_at: datetime
) -> tuple[str, list[Any]]:
    """The history's row for the outcome of `attempt` (claimed at `claimed_at`): written at now, and never before
    its claim's row, whatever the clocks."""
    claim_us = min(epoch_us(run.scheduled_at), epoch_us(claimed_at)) + 2 * attempt
    write_time_us = max(epoch_us(now), claim_us + 1)
    params = [run.job_id, whole_ms(run.scheduled_at), run.run_id, status.value, attempt, now]
    return UPSERT_HISTORY + " USING TTL ? AND TIMESTAMP ?", [*params, kept_s(run, now), write_time_us]


def new_run_rows(run: NewRun, now: datetime) -> list[tuple[str, list[Any]]]:
    """The rows of a run that cannot exist yet (the first run of a job just made): no condition needed."""
    statement, params = run_row(run, now)
    return [(statement.replace(" IF NOT EXISTS", ""), params), first_row(run, now), scheduled_history_row(run, now)]


async def write_new_run(store: CassandraStore, run: NewRun, now: datetime) -> None:
    """Write a run nobody can have written yet (`new_run_rows`: one unlogged batch, no condition)."""
    await store.batch(new_run_rows(run, now), logged=False)


async def create_run(store: CassandraStore, run: NewRun, now: datetime) -> bool:
    """Write a run and every row it needs (QUORUM). Returns False when the run already existed.

    Writing the same occurrence twice is harmless: the `runs` row is only inserted if absent, and the bucket row
    is only (re)written while the run is still SCHEDULED, so a finished run is never revived.
    """
    applied, current = await store.applied(*run_row(run, now))
    if not applied and found_of(current).status is not RunStatus.SCHEDULED:
        return False
    await store.batch([first_row(run, now), scheduled_history_row(run, now)])
    return applied


async def get_run(store: CassandraStore, run_id: uuid.UUID) -> Run | None:
    """The run, or None when it has no row (never written, or past its retention)."""
    rows = await store.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    return run_of(rows[0]) if rows else None


async def get_attempts(store: CassandraStore, run_id: uuid.UUID) -> list[Attempt]:
    """Every attempt, deferral, lease expiry and redrive of the run, in order."""
    rows = await store.execute("SELECT * FROM run_attempts WHERE run_id = ?", [run_id])
    return [attempt_of(row) for row in rows]


CLAIM = (
    "UPDATE runs USING TTL ? SET status = 'RUNNING', attempt = ?, lease_until = ?, worker = ?, started_at = ?"
    " WHERE run_id = ? IF status IN ('SCHEDULED', 'RETRY') AND attempt = ? AND job_version = ?"
)
FINISH = (
    "UPDATE runs USING TTL ? SET status = ?, finished_at = ?, response_code = ?, last_error = ?, due_at = ?,"
    " lease_until = null WHERE run_id = ? IF status = 'RUNNING' AND attempt = ?"
)
INSERT_CALL_ATTEMPT = (
    "INSERT INTO run_attempts (run_id, attempt, seq, kind, worker, started_at, finished_at, outcome,"
    " response_code, error, response_excerpt) VALUES (?, ?, now(), 'call', ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
)
# A claim sent without reading the job (the job's version from the due row): it also needs no change of the job to
# have begun since the run was made (`mark_changed`); refused, it returns `changed_at` too.
CLAIM_UNCHANGED = CLAIM + " AND changed_at = null"
LEASE_STATE = "SELECT status, attempt, lease_until, reported FROM runs WHERE run_id = ?"
MARK_CHANGED = "UPDATE runs USING TTL ? SET changed_at = ? WHERE run_id = ?"
INSERT_MARKED_CANCELLED = (
    "INSERT INTO runs (run_id, job_id, tenant_id, job_version, shard, lane, scheduled_at, due_at, status, attempt,"
    " redrive_count, created_at, finished_at, changed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'CANCELLED', 0, 0, ?, ?, ?)"
    " IF NOT EXISTS USING TTL ?"
)


async def claim(
    store: CassandraStore,
    run: NewRun,
    expected_attempt: int,
    worker: str,
    lease_until: datetime,
    now: datetime,
    *,
    unchanged: bool = False,
) -> Transition:
    """RUNNING at attempt + 1 if the run is runnable at `expected_attempt` and made for `run.job_version`; with
    `unchanged` (a claim whose worker did not read the job), also only if no change of its job has begun since the
    run was made (`mark_changed`; refused, `found.changed` says so).

    Its lease check row (and its RUNNING history row, see `running_history_row`) are written first: if the claim
    applies and the worker dies, that row finds the run (written in one unlogged batch with the other claims' rows
    of the same event-loop round, store.rounds; acknowledged before the LWT is sent). When the claim does not
    apply, `current` holds the run's status, attempt and job_version (all None: no such run); a run found CANCELLED
    gets its history row back over the refused claim's RUNNING row (`cancelled_again_row`)."""
    await store.round_batch(
        [
            bucket_row(run, fire_at=lease_until, attempt=expected_attempt + 1, kind=RunKind.LEASE_CHECK),
            running_history_row(run, expected_attempt + 1, now, lease_until),
        ]
    )
    applied, current = await store.applied(
        CLAIM_UNCHANGED if unchanged else CLAIM,
        [
            kept_s(run, now, lease_until),
            expected_attempt + 1,
            whole_ms(lease_until),
            worker,
            now,
            run.run_id,
            expected_attempt,
            run.job_version,
        ],
    )
    found = found_of(current)
    if not applied and found.status is RunStatus.CANCELLED:
        await store.execute(*cancelled_again_row(run, expected_attempt + 1, found.attempt or 0, now))
    return Transition(applied, found)


def cancelled_again_row(run: NewRun, claimed: int, attempt: int, now: datetime) -> tuple[str, list[Any]]:
    """The CANCELLED history row a claim refused by a cancelled run writes back over its own RUNNING row, one
    microsecond after it (`running_history_row`): a cancel written before the occurrence (a pause before the run was
    due, whose due row still fires) is older than that RUNNING row. No later: a row written since (a revive) stays."""
    write_time_us = min(epoch_us(run.scheduled_at), epoch_us(now)) + 2 * claimed + 1
    params = [run.job_id, whole_ms(run.scheduled_at), run.run_id, RunStatus.CANCELLED.value, attempt, now]
    return UPSERT_HISTORY + " USING TTL ? AND TIMESTAMP ?", [*params, kept_s(run, now), write_time_us]


async def mark_changed(store: CassandraStore, run: NewRun, now: datetime) -> None:
    """Before a change of a once job (edit, pause, delete) writes the job: mark its scheduled run, so a worker that did
    not read the job cannot claim it (`claim(unchanged=True)` is refused, and the worker reads the job). A plain
    write, acknowledged at QUORUM before the job's conditional write is sent: every claim whose Paxos read comes after
    it sees it; a claim before it was made before the change began. Nothing clears it (a run its change retargets or
    revives is then claimed after a read of the job).

    A run with no row yet (its create's rows may still land: a logged batch that timed out is replayed by the
    batchlog, a concurrent change's run is written after its job) is written CANCELLED and marked, if still absent
    (IF NOT EXISTS): rows landing later are older than it and cannot schedule it again (only a revive can)."""
    found = await get_run(store, run.run_id)
    if found is None:
        applied, _ = await store.applied(
            INSERT_MARKED_CANCELLED,
            [run.run_id, run.job_id, run.tenant_id, run.job_version, run.shard, run.lane, whole_ms(run.scheduled_at),
             whole_ms(run.fire_at), now, now, now, kept_s(run, now)],
        )  # fmt: skip
        if applied:
            return
    await store.execute(MARK_CHANGED, [kept_s(run, now), now, run.run_id])


async def lease_lapsed(store: CassandraStore, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
    """Whether `attempt` still holds the run past its lease, or has reported its outcome (an asynchronous run): what
    a lease check row must find to be worth a worker's time (most runs finish inside their lease, and their lease
    check ends here)."""
    rows = await store.execute(LEASE_STATE, [run_id])
    if not rows:
        return False
    row = rows[0]
    reported = (row.get("reported") or {}).get(attempt) is not None
    return fencing.lease_lapsed(
        row["status"], row["attempt"], attempt, reported=reported, lease_until=aware(row["lease_until"]), now=now
    )


async def finish(
    store: CassandraStore,
    run: NewRun,
    attempt: int,
    result: AttemptResult,
    worker: str,
    started_at: datetime,
    now: datetime,
    lease_until: datetime | None = None,
    fired_at: datetime | None = None,
) -> bool:
    """Record the outcome of `attempt`, only if that attempt still holds the run (a stale worker is refused).

    A refusal that finds the run already at this outcome and attempt is this attempt's own earlier write whose
    reply (or whose description rows) was lost: the description rows are written and the outcome counts.
    With `lease_until` (the claim's), the claim's lease check row is deleted in the same batch as the
    description rows: a run that finished has nothing for it to find, and a row gone before the dispatchers
    preload its minute costs them no wheel entry and no read of the run (one read per run saved; a row already
    preloaded still fires, and its read finds the run finished). With `fired_at`, the due row the attempt was
    fired from goes too: the run is final or has its retry's row, so the row has nothing left to tell the
    dispatchers' rescans and take-overs nor the sweeper, which would otherwise read the run once more."""
    due_at = whole_ms(result.retry_at) if result.retry_at else None
    if result.status is RunStatus.RETRY and result.retry_at is not None:
        await store.execute(*bucket_row(run, fire_at=result.retry_at, attempt=attempt, kind=RunKind.RUN))
    applied, current = await store.applied(
        FINISH,
        [
            kept_s(run, now, due_at),
            result.status.value,
            now,
            result.response_code,
            result.error,
            due_at,
            run.run_id,
            attempt,
        ],
    )
    found = found_of(current)
    if not fencing.outcome_counts(applied, found.status, found.attempt, result.status, attempt):
        return False
    await _describe(
        store,
        [
            outcome_history_row(run, result.status, attempt, now, started_at),
            (
                INSERT_CALL_ATTEMPT,
                [
                    run.run_id,
                    attempt,
                    worker,
                    started_at,
                    now,
                    result.status.value,
                    result.response_code,
                    result.error,
                    result.response_excerpt,
                    kept_s(run, now),
                ],
            ),
            # the claim's lease check row carries the attempt holding the lease; the fired row the one it found
            *([due_row_removal(run, lease_until, attempt, RunKind.LEASE_CHECK)] if lease_until is not None else []),
            *([due_row_removal(run, fired_at, attempt - 1, RunKind.RUN)] if fired_at is not None else []),
        ],
    )
    return True


DESCRIBE_TRIES = 4


async def _describe(store: CassandraStore, rows: list[tuple[str, list[Any]]]) -> None:
    """The description rows of an outcome that counted, written again here when the write fails: retrying the
    whole `finish` would re-run its LWT, which a retry's next attempt may have claimed by then (the refusal would
    drop this attempt's rows for good). Unlogged: descriptions of one outcome, all safe to write again; written with
    the other unlogged batches of the same event-loop round (store.rounds)."""
    for tries in range(1, DESCRIBE_TRIES + 1):
        try:
            await store.round_batch(rows)
            return
        except TickwheelError as exc:
            if not exc.retriable or tries == DESCRIBE_TRIES:
                raise
            await asyncio.sleep(0.1 * 2**tries)


def due_row_removal(run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> tuple[str, list[Any]]:
    """The delete of the run's due row (attempt, kind) at `fire_at` (the same key as its `bucket_row`)."""
    at = whole_ms(fire_at)
    return DELETE_BUCKET, [minute_bucket(at), run.shard, at, run.run_id, attempt, kind.value]


async def expire_lease(
    store: CassandraStore, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime
) -> bool:
    """A lease check fired: if `attempt` still runs and its lease has passed, the run times out into RETRY at
    `retry_at`, or into DEAD when `retry_at` is None (the retry policy has no attempt left)."""
    status = RunStatus.RETRY if retry_at is not None else RunStatus.DEAD
    if retry_at is not None:
        await store.execute(*bucket_row(run, fire_at=retry_at, attempt=attempt, kind=RunKind.RUN))
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET status = ?, due_at = ?, last_error = 'lease expired', lease_until = null,"
        " finished_at = ? WHERE run_id = ? IF status = 'RUNNING' AND attempt = ? AND lease_until <= ?",
        [kept_s(run, now, retry_at), status.value, retry_at and whole_ms(retry_at), now, run.run_id, attempt, now],
    )
    if applied:
        await store.batch(
            [
                history_row(run, status, attempt, now),  # a lease after the claim: later than its row
                (
                    "INSERT INTO run_attempts (run_id, attempt, seq, kind, finished_at, outcome, error)"
                    " VALUES (?, ?, now(), 'lease_expired', ?, ?, 'lease expired') USING TTL ?",
                    [run.run_id, attempt, now, status.value, kept_s(run, now)],
                ),
            ],
            logged=False,
        )
    return applied


async def extend_lease(
    store: CassandraStore, run_id: uuid.UUID, attempt: int, lease_until: datetime, now: datetime, retention_s: int
) -> Transition:
    """Heartbeat: move lease_until later if `attempt` (the fencing token) still holds the run (its lease check row
    at the new instant is written first), kept for the tenant's run retention `retention_s`. A live lease already
    ending later is kept, never shortened: the transition applies with the run's own `lease_until`."""
    found = await get_run(store, run_id)
    if found is None:
        return Transition(False)
    run = found.identity(retention_s)
    await store.execute(*bucket_row(run, fire_at=lease_until, attempt=attempt, kind=RunKind.LEASE_CHECK))
    applied, current = await store.applied(
        "UPDATE runs USING TTL ? SET lease_until = ? WHERE run_id = ?"
        " IF status = 'RUNNING' AND attempt = ? AND lease_until < ?",
        [kept_s(run, now, lease_until), whole_ms(lease_until), run_id, attempt, whole_ms(lease_until)],
    )
    return _lease_transition(applied, current, attempt, lease_until)


async def hold_lease(
    store: CassandraStore, run: NewRun, attempt: int, claimed_until: datetime, lease_until: datetime, now: datetime
) -> Transition:
    """An asynchronous run's target answered 202: replace the claim's lease (`claimed_until`, the lease the call
    was made under) with `lease_until`, shorter or longer, if `attempt` still holds the run. A lease a heartbeat
    has already moved is the target's word and is kept: the transition applies with the run's own lease."""
    await store.execute(*bucket_row(run, fire_at=lease_until, attempt=attempt, kind=RunKind.LEASE_CHECK))
    applied, current = await store.applied(
        "UPDATE runs USING TTL ? SET lease_until = ? WHERE run_id = ?"
        " IF status = 'RUNNING' AND attempt = ? AND lease_until = ?",
        [kept_s(run, now, lease_until), whole_ms(lease_until), run.run_id, attempt, whole_ms(claimed_until)],
    )
    return _lease_transition(applied, current, attempt, lease_until)


def _lease_transition(applied: bool, current: Row, attempt: int, lease_until: datetime) -> Transition:
    """A lease write's outcome: applied with `lease_until`, or applied with the run's own lease when `attempt`
    still holds it (the condition on the lease refused the write), else refused with what it found."""
    if applied:
        return Transition(True, lease_until=whole_ms(lease_until))
    found = found_of(current)
    if fencing.lease_kept(applied, found.status, found.attempt, attempt):
        return Transition(True, lease_until=aware(current.get("lease_until")))
    return Transition(False, found)


async def report_completion(store: CassandraStore, run: NewRun, attempt: int, report: str, now: datetime) -> Transition:
    """Fence an asynchronous run's reported outcome (`report`, an encoded CompletionReport) into its row: only
    while `attempt` holds the run and has not reported yet. Its lease check row at `now` is written first, so a
    worker records the outcome through the ordinary path (`RunHandler.check_lease`) without waiting for the
    lease to end. When refused, `found` holds status, attempt and the attempts that have reported."""
    await store.execute(*bucket_row(run, fire_at=now, attempt=attempt, kind=RunKind.LEASE_CHECK))
    applied, current = await store.applied(
        "UPDATE runs USING TTL ? SET reported[?] = ? WHERE run_id = ?"
        " IF status = 'RUNNING' AND attempt = ? AND reported[?] = null",
        [kept_s(run, now), attempt, report, run.run_id, attempt, attempt],
    )
    return Transition(applied, Found() if applied else found_of(current))


async def defer(store: CassandraStore, run: NewRun, attempt: int, until: datetime, reason: str, now: datetime) -> None:
    """Put a runnable run back for later without spending an attempt (breaker open, rate or tenant cap)."""
    await store.batch(
        [
            bucket_row(run, fire_at=until, attempt=attempt, kind=RunKind.RUN),
            (
                "INSERT INTO run_attempts (run_id, attempt, seq, kind, finished_at, outcome, error)"
                " VALUES (?, ?, now(), 'deferred', ?, 'DEFERRED', ?) USING TTL ?",
                [run.run_id, attempt, now, reason, kept_s(run, now, until)],
            ),
        ]
    )


async def cancel(store: CassandraStore, run: NewRun, now: datetime) -> bool:
    """CANCELLED if not started (SCHEDULED or RETRY); a running attempt is left to finish."""
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET status = 'CANCELLED', finished_at = ? WHERE run_id = ?"
        " IF status IN ('SCHEDULED', 'RETRY')",
        [kept_s(run, now), now, run.run_id],
    )
    if applied:
        current = await get_run(store, run.run_id)
        attempt = current.attempt if current else 0
        await store.execute(*history_row(run, RunStatus.CANCELLED, attempt, now))
    return applied


async def retarget(store: CassandraStore, run: NewRun, now: datetime) -> bool:
    """An edited job keeps its next occurrence: move a still-unstarted run to the job's new version and lane."""
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET job_version = ?, lane = ? WHERE run_id = ?"
        " IF status = 'SCHEDULED' AND attempt = 0",
        [kept_s(run, now), run.job_version, run.lane, run.run_id],
    )
    if applied:
        await store.execute(*first_row(run, now))
    return applied


async def redrive(store: CassandraStore, run: NewRun, attempt: int, due_at: datetime, now: datetime) -> bool:
    """A DEAD run at `attempt` gets one more attempt (same run id, so the same idempotency key), due at `due_at`,
    made for `run.job_version` (the job's current version, so a job edited since still runs it)."""
    current = await get_run(store, run.run_id)
    redrives = (current.redrive_count if current else 0) + 1
    await store.execute(*bucket_row(run, fire_at=due_at, attempt=attempt, kind=RunKind.RUN))
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET status = 'RETRY', due_at = ?, dead_at = null, redrive_count = ?, job_version = ?"
        " WHERE run_id = ? IF status = 'DEAD' AND attempt = ?",
        [kept_s(run, now, due_at), whole_ms(due_at), redrives, run.job_version, run.run_id, attempt],
    )
    if applied:
        await store.batch(
            [
                history_row(run, RunStatus.RETRY, attempt, now),
                (
                    "INSERT INTO run_attempts (run_id, attempt, seq, kind, finished_at, outcome)"
                    " VALUES (?, ?, now(), 'redrive', ?, 'RETRY') USING TTL ?",
                    [run.run_id, attempt, now, kept_s(run, now, due_at)],
                ),
            ]
        )
    return applied


async def revive(store: CassandraStore, run: NewRun, now: datetime) -> bool:
    """Schedule again an occurrence that was cancelled before any attempt (a paused job resumed before it)."""
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET status = 'SCHEDULED', job_version = ?, lane = ?, due_at = ?, finished_at = null"
        " WHERE run_id = ? IF status = 'CANCELLED' AND attempt = 0",
        [kept_s(run, now), run.job_version, run.lane, whole_ms(run.fire_at), run.run_id],
    )
    if applied:
        await store.batch([first_row(run, now), scheduled_history_row(run, now)])
    return applied


DUE_STATES = "SELECT run_id, status, attempt, due_at, lease_until FROM runs WHERE run_id IN ?"
DUE_STATES_GROUP = 64
"""Partitions one `run_id IN ?` read asks for at most: the coordinator of the read waits for every partition."""


async def due_states(store: CassandraStore, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
    """`due_state` of many runs, one `run_id IN ?` read per DUE_STATES_GROUP runs; runs without a row are left
    out."""
    found: dict[uuid.UUID, DueState] = {}
    for start in range(0, len(run_ids), DUE_STATES_GROUP):
        group = sorted(set(run_ids[start : start + DUE_STATES_GROUP]))
        for row in await store.execute(DUE_STATES, [group]):
            found[row["run_id"]] = DueState(
                RunStatus(row["status"]), row["attempt"] or 0, aware(row["due_at"]), aware(row["lease_until"])
            )
    return found


async def move_due(
    store: CassandraStore, run: NewRun, status: RunStatus, attempt: int, due_at: datetime, now: datetime
) -> bool:
    """Move a run's due time if it is still `status` at `attempt` (a sweeper repair re-firing it)."""
    applied, _ = await store.applied(
        "UPDATE runs USING TTL ? SET due_at = ? WHERE run_id = ? IF status = ? AND attempt = ?",
        [kept_s(run, now, due_at), bound(due_at), run.run_id, status.value, attempt],
    )
    return applied


async def write_due_row(store: CassandraStore, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
    """A `runs_by_bucket` row that fires (run, attempt, kind) at `fire_at` (the sweeper's repairs)."""
    await store.execute(*bucket_row(run, fire_at=fire_at, attempt=attempt, kind=kind))
