"""A dispatcher taking shards over fires what is due now before it reads the backlog since their checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

import pytest

from dispatcher.shards import ShardTable
from schemas.messages import DueRun
from tests.integration.dispatch.conftest import SHARDS, Cluster, LaneReader, covered, new_run, wait_until, write_run
from tickwheel.store import checkpoints
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tables import CassandraTables


async def test_a_dispatcher_taking_shards_with_minutes_of_backlog_fires_the_run_due_now_before_reading_the_backlog(
    cluster: Cluster, store: CassandraStore, lanes: LaneReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    # Every shard was last checkpointed 4 minutes ago by an owner that is gone: the backlog is 4 minutes plus the
    # grace, five or six minute buckets per shard, where the run due now is in the minutes around now.
    await checkpoints.advance(store, {shard: now - timedelta(minutes=4) for shard in range(SHARDS)}, 0, "gone", now)
    due_now = await write_run(store, new_run(uuid.uuid4(), now - timedelta(seconds=2)))
    overdue = await write_run(store, new_run(uuid.uuid4(), now - timedelta(minutes=3)))
    events: list[tuple[str, datetime | None, set[uuid.UUID]]] = []
    read_shards, insert_all = CassandraTables.read_shards, ShardTable.insert_all

    async def read(self: CassandraTables, shards: Collection[int], since: datetime, until: datetime) -> list[DueRun]:
        events.append(("read", since, set()))
        return await read_shards(self, shards, since, until)

    def insert(self: ShardTable, runs: list[DueRun]) -> int:
        events.append(("insert", None, {run.run_id for run in runs}))
        return insert_all(self, runs)

    monkeypatch.setattr(CassandraTables, "read_shards", read)
    monkeypatch.setattr(ShardTable, "insert_all", insert)
    [d] = await cluster(1, acquire_lookback_s=60.0)  # the run stays in the first reads however slow the start is
    await wait_until(lambda: covered([d]))
    await lanes.wait_for(lambda: {due_now.run_id, overdue.run_id} <= {f.run_id for f in lanes.runs()})

    # Counted in events, not seconds (how fast goes to BENCHMARKS.md): the run due now entered the wheel before any
    # read of the backlog (rows due more than a minute before it) was sent. Reading everything first, it waited
    # for all of them (the acquisition of 512 shards took 3-21 s on a loaded cluster).
    inserted_at = next(i for i, (kind, _, ids) in enumerate(events) if kind == "insert" and due_now.run_id in ids)
    backlog_at = [i for i, (kind, since, _) in enumerate(events) if since and since < now - timedelta(minutes=1)]
    assert backlog_at, "the backlog since the checkpoints was not read"
    assert inserted_at < min(backlog_at)
    [fired_overdue] = [f for f in lanes.runs() if f.run_id == overdue.run_id]  # re-fired from the backlog
    assert fired_overdue.fired_at_ms >= fired_overdue.fire_at_ms
