"""`shard_checkpoints`: the fired-through watermark of each shard, fenced by the owner's assignment epoch.

An owner advances a watermark only while no newer epoch has written it: a stale owner's write is refused and
tells it that the shard has moved on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime

from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.records import Checkpoint as Checkpoint
from tickwheel.store.times import bound, read_at

ADVANCE = (
    "UPDATE shard_checkpoints SET fired_through = ?, owner_epoch = ?, owner = ?, updated_at = ?"
    " WHERE shard = ? IF owner_epoch <= ?"
)
FIRST = (
    "INSERT INTO shard_checkpoints (shard, fired_through, owner_epoch, owner, updated_at)"
    " VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
)
SELECT = "SELECT shard, fired_through, owner_epoch, owner FROM shard_checkpoints WHERE shard IN ?"


async def highest_epoch(store: CassandraStore) -> int:
    """The highest owner epoch any shard's checkpoint holds (0 when there is none)."""
    rows = await store.execute("SELECT owner_epoch FROM shard_checkpoints")
    return max((row["owner_epoch"] or 0 for row in rows), default=0)


async def read(store: CassandraStore, shards: Iterable[int], *, chunk: int = 128) -> dict[int, Checkpoint]:
    """The checkpoints of `shards` that exist, a read per `chunk` shards, all at once (a take-over of 512 shards
    waited for four QUORUM reads in a row)."""
    wanted = sorted(set(shards))
    pages = await asyncio.gather(
        *(store.execute(SELECT, [wanted[start : start + chunk]]) for start in range(0, len(wanted), chunk))
    )
    found: dict[int, Checkpoint] = {}
    for row in (row for page in pages for row in page):
        if row["fired_through"] is None:
            continue
        found[row["shard"]] = Checkpoint(
            shard=row["shard"],
            fired_through=read_at(row["fired_through"]),
            owner_epoch=row["owner_epoch"] or 0,
            owner=row["owner"] or "",
        )
    return found


async def advance_one(
    store: CassandraStore, shard: int, fired_through: datetime, epoch: int, owner: str, now: datetime
) -> bool:
    """Move one watermark; False when a newer epoch owns the shard (the caller must stop firing it)."""
    through = bound(fired_through)
    applied, current = await store.applied(ADVANCE, [through, epoch, owner, bound(now), shard, epoch])
    if applied:
        return True
    if current.get("owner_epoch") is not None:
        return False
    applied, _ = await store.applied(FIRST, [shard, through, epoch, owner, bound(now)])
    if applied:
        return True
    applied, _ = await store.applied(ADVANCE, [through, epoch, owner, bound(now), shard, epoch])
    return applied


async def advance(
    store: CassandraStore,
    marks: Mapping[int, datetime],
    epoch: int,
    owner: str,
    now: datetime,
    *,
    concurrency: int = 32,
) -> dict[int, bool]:
    """Advance several shards' watermarks (one LWT each: conditional batches must stay in one partition)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(shard: int, through: datetime) -> tuple[int, bool]:
        async with gate:
            return shard, await advance_one(store, shard, through, epoch, owner, now)

    results = await asyncio.gather(*(one(shard, through) for shard, through in marks.items()))
    return dict(results)
