"""The near-term topic: runs written after their minute was preloaded reach the shard's owner through it.

Partitions map to contiguous shard ranges, so a dispatcher assigns itself exactly the partitions that cover
the shards it owns. Whoever writes a run row that may fall inside the dispatchers' loaded horizon (the API on
create, the worker on retries, deferrals and lease checks, the sweeper on repairs) announces it here, after the
row is durable, through `NearAnnouncer`. An announcement that fails is logged, never answered as an error: the
row is durable and the dispatchers' rescan finds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from schemas.messages import DueRun, encode, topic_names
from tickwheel import metrics
from tickwheel.bus.ports import Publisher
from tickwheel.errors import TickwheelError
from tickwheel.settings import Settings

log = logging.getLogger(__name__)

NEAR_MARGIN_S = 5  # a row a little past the dispatchers' horizon may already be inside it when they rescan
ANNOUNCE_TIMEOUT_S = 3.0


def near_partition_of(shard: int, partitions: int, shards: int = 1024) -> int:
    """The near-term partition carrying announcements for `shard`."""
    return shard * partitions // shards


def near_partitions_for(shard_ids: Iterable[int], partitions: int, shards: int = 1024) -> list[int]:
    """Every near-term partition that carries announcements for any of `shard_ids`."""
    return sorted({near_partition_of(s, partitions, shards) for s in shard_ids})


async def announce(producer: Publisher, topic: str, run: DueRun, *, partitions: int, shards: int = 1024) -> None:
    """Publish `run` on the near-term topic (after its durable write), to the partition of its shard."""
    await producer.send(
        topic,
        encode(run),
        key=str(run.job_id).encode(),
        partition=near_partition_of(run.shard, partitions, shards),
    )


class NearAnnouncer:
    """Announces durable run rows that the dispatchers may already have preloaded past."""

    def __init__(self, settings: Settings, producer: Publisher):
        self.settings = settings
        self.producer = producer
        self.topic = topic_names(settings.kafka.topic_prefix)["near"]
        self._pending: set[asyncio.Task[None]] = set()

    def rescan_finds(self, fire_at: datetime, now: datetime) -> bool:
        """Whether the dispatchers' rescan will find a row written now in time, so announcing it can be skipped
        (what a lease check row, due a lease after its claim, relies on). The rescan reads the whole current minute
        at least every `rescan_interval_s`; a row due a minute or more after it is written falls in a minute that
        starts after the write, and a rescan inside that minute reads it, at most `rescan_interval_s` late."""
        return self.settings.dispatcher.rescan_interval_s <= 60 and fire_at - now >= timedelta(minutes=1)

    def is_near(self, fire_at: datetime, now: datetime) -> bool:
        """Whether a row due at `fire_at` may fall inside a dispatcher's loaded horizon, so it must be announced."""
        return fire_at <= now + timedelta(seconds=self.settings.dispatcher.preload_horizon_s + NEAR_MARGIN_S)

    async def announce_if_near(self, due: DueRun, now: datetime) -> None:
        """Announce `due` and wait for the ack, if it is near; a failure is logged."""
        if not self.is_near(datetime.fromtimestamp(due.fire_at_ms / 1000, UTC), now):
            return
        s = self.settings
        try:
            send = announce(self.producer, self.topic, due, partitions=s.kafka.near_partitions, shards=s.shards)
            await asyncio.wait_for(send, ANNOUNCE_TIMEOUT_S)
        except (TickwheelError, TimeoutError) as exc:
            extra = {"tenant": due.tenant_id, "job_id": str(due.job_id), "run_id": str(due.run_id)}
            # A timeout's own text is empty (run 11's soak logged ten such failures with no reason at all)
            reason = str(exc) or f"no acknowledgement within {ANNOUNCE_TIMEOUT_S:g} s"
            log.warning("near-term announcement failed; the rescan will find the row: %s", reason, extra=extra)
            return
        metrics.near_announced.inc()

    def announce_soon(self, due: DueRun, now: datetime) -> None:
        """`announce_if_near` in the background, for callers that must not wait (a worker between calls)."""
        task = asyncio.create_task(self.announce_if_near(due, now))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self, timeout_s: float = ANNOUNCE_TIMEOUT_S) -> None:
        """Wait for background announcements still on their way (shutdown)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)
