"""An in-memory twin of the store's ports, with the Cassandra semantics: conditional writes that apply or say
what they found, the attempt as fencing token, the epoch-fenced checkpoints, rows written before the condition
(so a refused claim still leaves its lease check row, as on Cassandra).

For unit tests of the processes (no servers, milliseconds a test). `tests/integration/store/test_contract.py`
runs the same tests against this and `CassandraTables`, so the two cannot drift. Not for production: nothing
expires and nothing survives the process; what a TTL would do is only noted (`kept_until`: when the `runs` cells a
write set would expire, the run's retention past its due time, as `runs.kept_s` gives Cassandra).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.messages import DueRun
from tickwheel.core import fencing
from tickwheel.core.horizon import day_of, is_far
from tickwheel.core.instants import epoch_ms, whole_ms
from tickwheel.model import recurs
from tickwheel.store import far
from tickwheel.store.buckets import due_run_for
from tickwheel.store.records import (
    FINAL,
    RUNNABLE,
    Attempt,
    AttemptResult,
    Checkpoint,
    DeadLetter,
    DueKey,
    DueState,
    Found,
    HistoryEntry,
    Job,
    JobHead,
    JobState,
    NewRun,
    Pointer,
    Run,
    RunKind,
    RunStatus,
    Tenant,
    Transition,
)
from tickwheel.store.run_history import EARLIER_RUNS_READ
from tickwheel.store.runs import kept_s
from tickwheel.store.sweeping import part_of
from tickwheel.store.times import epoch_us

ClusteringKey = tuple[int, uuid.UUID, int, str]
"""A due row's clustering key inside its shard: (fire_at ms, run id, attempt, kind)."""


def stored(at: datetime) -> datetime:
    """What a Cassandra timestamp gives back of `at`: UTC, whole milliseconds."""
    return whole_ms(at.astimezone(UTC))


def _found(current: Run | None, *, changed_at: bool = False) -> Found:
    """What a refused conditional write on a run found (nothing when the run has no row); whether it is marked
    changed only when the write's condition reads `changed_at` (Cassandra returns the condition's columns)."""
    if current is None:
        return Found()
    changed = changed_at and current.changed_at is not None
    return Found(current.status, current.attempt, current.job_version, frozenset(current.reported), changed)


def _lease_found(current: Run) -> Found:
    """What a refused lease write found: only the columns of its condition (status, attempt), as Cassandra
    returns them (no job version)."""
    return Found(current.status, current.attempt)


@dataclass
class _History:
    entry: HistoryEntry
    written_us: int


@dataclass
class MemoryStore:
    """Every store port in memory. The tables are plain attributes, so a test can look at what was written."""

    runs: dict[uuid.UUID, Run] = field(default_factory=dict)
    due_rows: dict[int, dict[ClusteringKey, DueRun]] = field(default_factory=dict)
    far_rows: dict[uuid.UUID, NewRun] = field(default_factory=dict)
    attempts: dict[uuid.UUID, list[Attempt]] = field(default_factory=dict)
    history: dict[uuid.UUID, dict[tuple[datetime, uuid.UUID], _History]] = field(default_factory=dict)
    jobs: dict[uuid.UUID, Job] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    tenants: dict[str, Tenant] = field(default_factory=dict)
    dead_letters: dict[tuple[str, uuid.UUID], DeadLetter] = field(default_factory=dict)
    versions_started: dict[tuple[uuid.UUID, int], datetime] = field(default_factory=dict)
    sweeps: int = 0
    repairs: dict[str, int] = field(default_factory=dict)
    recurring: dict[uuid.UUID, tuple[int, int]] = field(default_factory=dict)
    """The recurring jobs' index: job id -> (shard, when its row was written, epoch us: wall time, as Cassandra's)."""
    marks: dict[str, datetime] = field(default_factory=dict)
    kept_until: dict[uuid.UUID, datetime] = field(default_factory=dict)
    """Run id -> when the `runs` cells its latest write set would expire on Cassandra (nothing expires here)."""

    def _keep(self, run: NewRun, now: datetime, until: datetime | None = None) -> None:
        self.kept_until[run.run_id] = stored(now) + timedelta(seconds=kept_s(run, now, until))

    # -- rows written before a condition ------------------------------------------------------------------------
    def _due_row(self, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
        due = due_run_for(
            run, attempt=attempt, kind="lease_check" if kind is RunKind.LEASE_CHECK else "run", fire_at=fire_at
        )
        self.due_rows.setdefault(run.shard, {})[(due.fire_at_ms, run.run_id, attempt, kind.value)] = due

    def _drop_due_row(self, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
        self.due_rows.get(run.shard, {}).pop((epoch_ms(stored(fire_at)), run.run_id, attempt, kind.value), None)

    def _first_row(self, run: NewRun, now: datetime) -> None:
        if is_far(run.fire_at, now):
            self.far_rows[run.run_id] = run
        else:
            self._due_row(run, run.fire_at, 0, RunKind.RUN)

    def _history(self, run: NewRun, status: RunStatus, attempt: int, now: datetime, written_us: int) -> None:
        rows = self.history.setdefault(run.job_id, {})
        key = (stored(run.scheduled_at), run.run_id)
        held = rows.get(key)
        if held is not None and held.written_us > written_us:
            return  # last write wins by write time, as Cassandra's cells do
        origin = run.origin if run.origin is not None else (held.entry.origin if held else None)
        entry = HistoryEntry(run.run_id, key[0], status, attempt, stored(now), origin)
        rows[key] = _History(entry, written_us)

    def _attempt(self, run_id: uuid.UUID, attempt: int, kind: str, **values: Any) -> None:
        row = Attempt(
            run_id=run_id, attempt=attempt, seq=uuid.uuid1(), kind=kind, worker=values.get("worker"),
            started_at=values.get("started_at"), finished_at=values.get("finished_at"), outcome=values.get("outcome"),
            response_code=values.get("response_code"), error=values.get("error"),
            response_excerpt=values.get("response_excerpt"),
        )  # fmt: skip
        self.attempts.setdefault(run_id, []).append(row)

    # -- RunStore -----------------------------------------------------------------------------------------------
    async def get_run(self, run_id: uuid.UUID) -> Run | None:
        """The run, or None when it has no row."""
        return self.runs.get(run_id)

    async def get_attempts(self, run_id: uuid.UUID) -> list[Attempt]:
        """Every attempt of the run, by attempt then in the order written (the table's clustering order)."""
        return sorted(self.attempts.get(run_id, []), key=lambda a: a.attempt)

    def _new_run_row(self, run: NewRun, now: datetime) -> Run:
        return Run(
            run_id=run.run_id, job_id=run.job_id, tenant_id=run.tenant_id, job_version=run.job_version,
            shard=run.shard, lane=run.lane, scheduled_at=stored(run.scheduled_at), due_at=stored(run.fire_at),
            status=RunStatus.SCHEDULED, attempt=0, origin=run.origin, forced=run.forced, created_at=stored(now),
        )  # fmt: skip

    def _scheduled_history(self, run: NewRun, now: datetime) -> None:
        self._history(run, RunStatus.SCHEDULED, 0, now, min(epoch_us(run.scheduled_at), epoch_us(now)))

    async def create_run(self, run: NewRun, now: datetime) -> bool:
        """The run if absent; its due and history rows while it is SCHEDULED; False when it existed."""
        current = self.runs.get(run.run_id)
        if current is not None and current.status is not RunStatus.SCHEDULED:
            return False
        if current is None:
            self.runs[run.run_id] = self._new_run_row(run, now)
            self._keep(run, now)
        self._first_row(run, now)
        self._scheduled_history(run, now)
        return current is None

    async def write_new_run(self, run: NewRun, now: datetime) -> None:
        """The rows of a run nobody can have written yet (no condition: an upsert)."""
        self.runs[run.run_id] = self._new_run_row(run, now)
        self._keep(run, now)
        self._first_row(run, now)
        self._scheduled_history(run, now)

    async def claim(
        self,
        run: NewRun,
        expected_attempt: int,
        worker: str,
        lease_until: datetime,
        now: datetime,
        *,
        unchanged: bool = False,
    ) -> Transition:
        """RUNNING at expected_attempt + 1 if runnable at `expected_attempt` and made for `run.job_version` (with
        `unchanged`, also only while the run is not marked changed); the lease check row and the RUNNING history row
        are written first, whatever the claim finds."""
        attempt = expected_attempt + 1
        self._due_row(run, lease_until, attempt, RunKind.LEASE_CHECK)
        self._history(
            run, RunStatus.RUNNING, attempt, now, min(epoch_us(run.scheduled_at), epoch_us(now)) + 2 * attempt
        )
        current = self.runs.get(run.run_id)
        if current is None:
            return Transition(False)
        if (
            current.status not in RUNNABLE
            or current.attempt != expected_attempt
            or current.job_version != run.job_version
            or (unchanged and current.changed_at is not None)
        ):
            if current.status is RunStatus.CANCELLED:  # its history row back over the refused claim's RUNNING row
                at_us = min(epoch_us(run.scheduled_at), epoch_us(now)) + 2 * attempt + 1
                self._history(run, RunStatus.CANCELLED, current.attempt, now, at_us)
            return Transition(False, _found(current, changed_at=unchanged))
        self.runs[run.run_id] = replace(
            current, status=RunStatus.RUNNING, attempt=attempt, lease_until=stored(lease_until), worker=worker,
            started_at=stored(now),
        )  # fmt: skip
        self._keep(run, now, lease_until)
        return Transition(True)

    async def finish(
        self,
        run: NewRun,
        attempt: int,
        result: AttemptResult,
        worker: str,
        started_at: datetime,
        now: datetime,
        lease_until: datetime | None = None,
        fired_at: datetime | None = None,
    ) -> bool:
        """The outcome of `attempt` if it still holds the run, or if this very outcome is already recorded; with
        `lease_until`, the claim's lease check row is removed with the description rows, with `fired_at` the due
        row the attempt was fired from."""
        if result.status is RunStatus.RETRY and result.retry_at is not None:
            self._due_row(run, result.retry_at, attempt, RunKind.RUN)
        current = self.runs.get(run.run_id)
        if current is None:
            return False
        holds = fencing.holds(current.status, current.attempt, attempt)  # the condition of the outcome's write
        if not fencing.outcome_counts(holds, current.status, current.attempt, result.status, attempt):
            return False
        if holds:
            self.runs[run.run_id] = replace(
                current, status=result.status, finished_at=stored(now), response_code=result.response_code,
                last_error=result.error, due_at=stored(result.retry_at) if result.retry_at else None,
                lease_until=None,
            )  # fmt: skip
            self._keep(run, now, result.retry_at)
        claim_us = min(epoch_us(run.scheduled_at), epoch_us(started_at)) + 2 * attempt
        self._history(run, result.status, attempt, now, max(epoch_us(now), claim_us + 1))
        self._attempt(
            run.run_id, attempt, "call", worker=worker, started_at=stored(started_at), finished_at=stored(now),
            outcome=result.status.value, response_code=result.response_code, error=result.error,
            response_excerpt=result.response_excerpt,
        )  # fmt: skip
        if lease_until is not None:
            self._drop_due_row(run, lease_until, attempt, RunKind.LEASE_CHECK)
        if fired_at is not None:
            self._drop_due_row(run, fired_at, attempt - 1, RunKind.RUN)
        return True

    async def expire_lease(self, run: NewRun, attempt: int, retry_at: datetime | None, now: datetime) -> bool:
        """RETRY at `retry_at` (DEAD when None) if `attempt` still runs and its lease has passed."""
        status = RunStatus.RETRY if retry_at is not None else RunStatus.DEAD
        if retry_at is not None:
            self._due_row(run, retry_at, attempt, RunKind.RUN)
        current = self.runs.get(run.run_id)
        if (
            current is None
            or not fencing.holds(current.status, current.attempt, attempt)
            or current.lease_until is None
            or current.lease_until > now
        ):
            return False
        self.runs[run.run_id] = replace(
            current, status=status, due_at=stored(retry_at) if retry_at else None, last_error="lease expired",
            lease_until=None, finished_at=stored(now),
        )  # fmt: skip
        self._keep(run, now, retry_at)
        self._history(run, status, attempt, now, epoch_us(now))
        self._attempt(
            run.run_id, attempt, "lease_expired", finished_at=stored(now), outcome=status.value,
            error="lease expired",
        )  # fmt: skip
        return True

    async def lease_lapsed(self, run_id: uuid.UUID, attempt: int, now: datetime) -> bool:
        """Whether `attempt` still holds the run past its lease."""
        current = self.runs.get(run_id)
        if current is None:
            return False
        reported = current.report(attempt) is not None
        return fencing.lease_lapsed(
            current.status, current.attempt, attempt, reported=reported, lease_until=current.lease_until, now=now
        )

    async def extend_lease(
        self, run_id: uuid.UUID, attempt: int, lease_until: datetime, now: datetime, retention_s: int
    ) -> Transition:
        """The lease moved to `lease_until` if `attempt` holds the run and its lease ends earlier; a later lease is
        kept (applied, with it); the lease check row at `lease_until` written first."""
        current = self.runs.get(run_id)
        if current is None:
            return Transition(False)
        run = current.identity(retention_s)
        self._due_row(run, lease_until, attempt, RunKind.LEASE_CHECK)
        later = current.lease_until is not None and current.lease_until < stored(lease_until)  # `null < ?` is false
        return self._lease_write(run, current, attempt, later, lease_until, now)

    async def hold_lease(
        self, run: NewRun, attempt: int, claimed_until: datetime, lease_until: datetime, now: datetime
    ) -> Transition:
        """The claim's lease replaced by `lease_until` if `attempt` holds the run under it; a moved lease kept."""
        self._due_row(run, lease_until, attempt, RunKind.LEASE_CHECK)
        current = self.runs.get(run.run_id)
        if current is None:
            return Transition(False, Found())
        held = current.lease_until == stored(claimed_until)
        return self._lease_write(run, current, attempt, held, lease_until, now)

    def _lease_write(
        self, run: NewRun, current: Run, attempt: int, lease_condition: bool, lease_until: datetime, now: datetime
    ) -> Transition:
        """A lease write conditional on `attempt` holding the run and on `lease_condition` (about its lease)."""
        if fencing.holds(current.status, current.attempt, attempt) and lease_condition:
            self.runs[current.run_id] = replace(current, lease_until=stored(lease_until))
            self._keep(run, now, lease_until)
            return Transition(True, lease_until=stored(lease_until))
        if fencing.lease_kept(False, current.status, current.attempt, attempt):
            return Transition(True, lease_until=current.lease_until)
        return Transition(False, _lease_found(current))

    async def report_completion(self, run: NewRun, attempt: int, report: str, now: datetime) -> Transition:
        """`report` kept for `attempt` if it holds the run and has not reported; its lease check row at `now`."""
        self._due_row(run, now, attempt, RunKind.LEASE_CHECK)
        current = self.runs.get(run.run_id)
        if (
            current is None
            or not fencing.holds(current.status, current.attempt, attempt)
            or current.report(attempt) is not None
        ):
            return Transition(False, _found(current))
        self.runs[run.run_id] = replace(current, reported={**current.reported, attempt: report})
        self._keep(run, now)
        return Transition(True)

    async def defer(self, run: NewRun, attempt: int, until: datetime, reason: str, now: datetime) -> None:
        """A due row at `until` with the same attempt, and the deferral in the attempts."""
        self._due_row(run, until, attempt, RunKind.RUN)
        self._attempt(run.run_id, attempt, "deferred", finished_at=stored(now), outcome="DEFERRED", error=reason)

    async def mark_changed(self, run: NewRun, now: datetime) -> None:
        """The run marked: a change of its job begins (claims that did not read the job are refused); a run with no
        row is written CANCELLED and marked."""
        current = self.runs.get(run.run_id)
        if current is None:
            current = replace(self._new_run_row(run, now), status=RunStatus.CANCELLED, finished_at=stored(now))
        self.runs[run.run_id] = replace(current, changed_at=stored(now))
        self._keep(run, now)

    async def cancel(self, run: NewRun, now: datetime) -> bool:
        """CANCELLED if SCHEDULED or RETRY."""
        current = self.runs.get(run.run_id)
        if current is None or current.status not in RUNNABLE:
            return False
        self.runs[run.run_id] = replace(current, status=RunStatus.CANCELLED, finished_at=stored(now))
        self._keep(run, now)
        self._history(run, RunStatus.CANCELLED, current.attempt, now, epoch_us(now))
        return True

    # -- JobStore -----------------------------------------------------------------------------------------------
    async def get_job(self, job_id: uuid.UUID) -> Job | None:
        """The job (any state), or None."""
        return self.jobs.get(job_id)

    async def read_state(self, job_id: uuid.UUID) -> JobHead | None:
        """The job's state, version and definition."""
        job = self.jobs.get(job_id)
        return None if job is None else JobHead(job.job_id, job.state, job.version, job.definition)

    async def create_job(self, job: Job, first_run: NewRun | None, now: datetime) -> None:
        """The job (fired_count 0, made now) and its first run."""
        at = stored(now)
        self.jobs[job.job_id] = replace(
            job, fired_count=0, created_at=at, updated_at=at,
            next_run_at=stored(job.next_run_at) if job.next_run_at else None,
        )  # fmt: skip
        if first_run is not None:
            await self.write_new_run(first_run, now)
        if recurs(job.definition):
            await self.mark_recurring(job)

    async def move_pointer(
        self, job: Job, current_run_id: uuid.UUID, following: NewRun | None, fired_count: int, now: datetime
    ) -> Pointer:
        """Point the job at `following` if ACTIVE, at `job.version` and pointing at `current_run_id`."""
        held = self.jobs.get(job.job_id)
        if held is None:
            return Pointer(False)
        if held.version != job.version or held.state is not JobState.ACTIVE or held.next_run_id != current_run_id:
            return Pointer(False, held.next_run_id, held.version)
        self.jobs[job.job_id] = replace(
            held, next_run_id=following.run_id if following else None,
            next_run_at=stored(following.scheduled_at) if following else None, fired_count=fired_count,
            updated_at=stored(now),
        )  # fmt: skip
        return Pointer(True)

    async def earlier_in_flight(self, job_id: uuid.UUID, before: datetime) -> int:
        """How many of the job's latest runs scheduled before `before` are not final (by their run rows)."""
        rows = self.history.get(job_id, {})
        earlier = sorted((key for key in rows if key[0] < before), reverse=True)[:EARLIER_RUNS_READ]
        candidates = [rows[key].entry.run_id for key in earlier if rows[key].entry.status not in FINAL]
        return sum(1 for run_id in candidates if run_id in self.runs and self.runs[run_id].status not in FINAL)

    # -- ReconcilerStore ------------------------------------------------------------------------------------------
    async def version_started_at(self, job_id: uuid.UUID, version: int) -> datetime | None:
        """When the job reached `version`: set by a test in `versions_started` (the twin keeps no audit log)."""
        return self.versions_started.get((job_id, version))

    async def scheduled_between(self, job_id: uuid.UUID, after: datetime, until: datetime) -> list[datetime]:
        """The job's occurrences with a run in (after, until], newest first."""
        return sorted((key[0] for key in self.history.get(job_id, {}) if after < key[0] <= until), reverse=True)

    # -- CoordinatorStore -----------------------------------------------------------------------------------------
    async def highest_epoch(self) -> int:
        """The highest epoch of any checkpoint (0 without any)."""
        return max((c.owner_epoch for c in self.checkpoints.values()), default=0)

    async def due_per_minute(self, start: datetime, minutes: int, shards: int) -> list[int]:
        """Due rows of shards 0 .. shards - 1 in each minute from `start`'s minute on."""
        first = epoch_ms(start.replace(second=0, microsecond=0))
        aheads = [(key[0] - first) // 60_000 for shard in range(shards) for key in self.due_rows.get(shard, {})]
        return [aheads.count(ahead) for ahead in range(minutes)]

    # -- HistoryStore, FarStore ---------------------------------------------------------------------------------
    async def previous_status(self, job_id: uuid.UUID, before: datetime) -> str | None:
        """The status of the job's latest run scheduled before `before`."""
        rows = self.history.get(job_id, {})
        earlier = [key for key in rows if key[0] < before]
        return rows[max(earlier)].entry.status.value if earlier else None

    async def read_far_day(self, day: datetime, shard: int) -> list[NewRun]:
        """The far runs of (day, shard), in fire order."""
        waiting = [r for r in self.far_rows.values() if r.shard == shard and day_of(stored(r.fire_at)) == day]
        return sorted(waiting, key=lambda r: (r.fire_at, str(r.run_id)))

    async def move_far_run(self, run: NewRun, now: datetime) -> bool:
        """`far.move_run` (the same decision) over this store."""
        return await far.move_run(self, run, now)

    async def delete_far_day(self, day: datetime, shard: int) -> None:
        """Drop the (day, shard) partition."""
        for run in await self.read_far_day(day, shard):
            del self.far_rows[run.run_id]

    # -- SweeperStore -------------------------------------------------------------------------------------------
    async def scan_jobs(self, *, page_size: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """A page of every job, by job id; the cursor is the offset of the next page."""
        start = int(cursor or 0)
        ordered = sorted(self.jobs.values(), key=lambda j: j.job_id.bytes)
        following = start + page_size
        return ordered[start:following], str(following) if following < len(ordered) else None

    async def recurring_jobs(self, part: int) -> list[uuid.UUID]:
        """The ids in partition `part` of the recurring jobs' index, by id."""
        held = [job_id for job_id, (shard, _) in self.recurring.items() if part_of(shard) == part]
        return sorted(held, key=lambda job_id: job_id.bytes)

    async def forget_recurring(self, job: Job) -> None:
        """Drop the job's index row unless it was written after the job version read (its `updated_at`)."""
        held = self.recurring.get(job.job_id)
        if held is not None and held[1] <= epoch_us(job.updated_at):
            del self.recurring[job.job_id]

    async def mark_recurring(self, job: Job) -> None:
        """Put the job in the recurring jobs' index (written at the wall clock's time, as on Cassandra)."""
        self.recurring[job.job_id] = (job.shard, epoch_us(datetime.now(UTC)))

    async def mark_all_recurring(self, jobs: Sequence[Job]) -> None:
        """Put each of `jobs` in the recurring jobs' index."""
        for job in jobs:
            await self.mark_recurring(job)

    async def recurring_page(
        self, part: int, *, page_size: int, cursor: str | None
    ) -> tuple[list[uuid.UUID], str | None]:
        """A page of partition `part` of the index, by id; the cursor is the offset of the next page."""
        start = int(cursor or 0)
        held = await self.recurring_jobs(part)
        following = start + page_size
        return held[start:following], str(following) if following < len(held) else None

    async def get_jobs(self, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Job]:
        """Each job that exists."""
        return {job_id: job for job_id in job_ids if (job := self.jobs.get(job_id)) is not None}

    async def swept_through(self, name: str) -> datetime | None:
        """The first minute sweeper `name` has not swept yet."""
        return self.marks.get(name)

    async def mark_swept(self, name: str, through: datetime) -> None:
        """Every minute before `through` is swept."""
        self.marks[name] = stored(through)

    async def due_states(self, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, DueState]:
        """Each run's status, attempt, due time and lease (runs without a row left out)."""
        return {
            run_id: DueState(run.status, run.attempt, run.due_at, run.lease_until)
            for run_id in run_ids
            if (run := self.runs.get(run_id)) is not None
        }

    async def move_due(self, run: NewRun, status: RunStatus, attempt: int, due_at: datetime, now: datetime) -> bool:
        """Move the due time if the run is still `status` at `attempt`."""
        current = self.runs.get(run.run_id)
        if current is None or (current.status, current.attempt) != (status, attempt):
            return False
        self.runs[run.run_id] = replace(current, due_at=stored(due_at))
        self._keep(run, now, due_at)
        return True

    async def write_due_row(self, run: NewRun, fire_at: datetime, attempt: int, kind: RunKind) -> None:
        """A due row firing (run, attempt, kind) at `fire_at`."""
        self._due_row(run, fire_at, attempt, kind)

    async def add_sweep(self, repairs: Mapping[str, int]) -> None:
        """Count a sweep and its repairs."""
        self.sweeps += 1
        for reason, count in repairs.items():
            self.repairs[reason] = self.repairs.get(reason, 0) + count

    # -- DueRowStore, CheckpointStore -----------------------------------------------------------------------------
    async def read_range(self, shard: int, since: datetime, until: datetime) -> list[DueRun]:
        """Every due row of `shard` with since <= fire_at < until, in fire order."""
        low, high = epoch_ms(since), epoch_ms(until)
        rows = self.due_rows.get(shard, {})
        return [rows[key] for key in sorted(rows, key=lambda k: (k[0], str(k[1]), k[2], k[3])) if low <= key[0] < high]

    async def read_shards(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueRun]:
        """Every due row of each of `shards` with since <= fire_at < until, shard after shard."""
        return [run for shard in sorted(set(shards)) for run in await self.read_range(shard, since, until)]

    async def read_keys(self, shards: Collection[int], since: datetime, until: datetime) -> list[DueKey]:
        """The names of the rows `read_shards` returns."""
        return [
            DueKey(run.shard, run.run_id, run.attempt, run.kind, run.fire_at_ms, run.job_id)
            for shard in sorted(set(shards))
            for run in await self.read_range(shard, since, until)
        ]

    async def read_checkpoints(self, shards: Iterable[int]) -> dict[int, Checkpoint]:
        """The checkpoints of `shards` that exist."""
        return {shard: self.checkpoints[shard] for shard in set(shards) if shard in self.checkpoints}

    async def advance_checkpoints(
        self, marks: Mapping[int, datetime], epoch: int, owner: str, now: datetime
    ) -> dict[int, bool]:
        """Move each watermark unless a newer epoch has written it."""
        results = {}
        for shard, through in marks.items():
            held = self.checkpoints.get(shard)
            results[shard] = held is None or held.owner_epoch <= epoch
            if results[shard]:
                self.checkpoints[shard] = Checkpoint(shard, stored(through), epoch, owner)
        return results

    # -- TenantStore, DeadLetterStore ---------------------------------------------------------------------------
    async def call_settings(self, tenant_id: str) -> Tenant:
        """The tenant, or one with no settings when it has no row."""
        return self.tenants.get(tenant_id) or Tenant(tenant_id, "", None, ())

    async def add_dead_letter(self, letter: DeadLetter, ttl_s: int, run_retention_s: int) -> None:
        """The letter, and the run's `dead_at`."""
        letter = replace(letter, dead_at=stored(letter.dead_at))
        self.dead_letters[(letter.tenant_id, letter.run_id)] = letter
        if letter.run_id in self.runs:
            self.runs[letter.run_id] = replace(self.runs[letter.run_id], dead_at=letter.dead_at)
            self.kept_until[letter.run_id] = letter.dead_at + timedelta(seconds=run_retention_s)
