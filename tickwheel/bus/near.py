"""The near-term topic: runs written after their minute was preloaded reach the shard's owner through it.

Partitions map to contiguous shard ranges, so a dispatcher assigns itself exactly the partitions that cover
the shards it owns. Whoever writes a run row that may fall inside the dispatchers' loaded horizon (the API on
create, the worker on retries, deferrals and lease checks, the sweeper on repairs) announces it here, after the
row is durable, through `NearAnnouncer`. An announcement that fails is logged, never answered as an error (the
row is durable and the dispatchers' rescan finds it), so nobody waits for the broker's acknowledgement.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import partial

from schemas.messages import DueRun, encode, topic_names
from tickwheel import metrics
from tickwheel.bus.ports import Publisher
from tickwheel.settings import Settings

log = logging.getLogger(__name__)

NEAR_MARGIN_S = 5  # a row a little past the dispatchers' horizon may already be inside it when they rescan
# A row due at least this long after its write is announced through the `ahead` publisher when there is one: its
# announcement may be held for the producer's longer linger (`kafka.announce_ahead_linger_ms`) and still reach the
# dispatchers, through their fetch and their feed's gather, well before it is due.
AHEAD_LEAD_S = 2.0


def near_partition_of(shard: int, partitions: int, shards: int = 1024) -> int:
    """The near-term partition carrying announcements for `shard`."""
    return shard * partitions // shards


def near_partitions_for(shard_ids: Iterable[int], partitions: int, shards: int = 1024) -> list[int]:
    """Every near-term partition that carries announcements for any of `shard_ids`."""
    return sorted({near_partition_of(s, partitions, shards) for s in shard_ids})


def addressed(run: DueRun, partitions: int, shards: int) -> tuple[bytes, bytes, int]:
    """The announcement of `run`: its message, its key (the job) and the partition of its shard."""
    return encode(run), str(run.job_id).encode(), near_partition_of(run.shard, partitions, shards)


async def announce(producer: Publisher, topic: str, run: DueRun, *, partitions: int, shards: int = 1024) -> None:
    """Publish `run` on the near-term topic (after its durable write), to the partition of its shard."""
    value, key, partition = addressed(run, partitions, shards)
    await producer.send(topic, value, key=key, partition=partition)


class NearAnnouncer:
    """Announces durable run rows that the dispatchers may already have preloaded past; with `ahead`, the rows due
    `AHEAD_LEAD_S` or more after now go through it (a producer holding them longer, so fewer produce requests:
    librdkafka sends one per partition and batch, and the near-term topic's partitions split every burst)."""

    def __init__(self, settings: Settings, producer: Publisher, ahead: Publisher | None = None):
        self.settings = settings
        self.producer = producer
        self.ahead = ahead
        self.topic = topic_names(settings.kafka.topic_prefix)["near"]

    def rescan_finds(self, fire_at: datetime, now: datetime) -> bool:
        """Whether the dispatchers' rescan will find a row written now in time, so announcing it can be skipped
        (what a lease check row, due a lease after its claim, relies on). The rescan reads the whole current minute
        at least every `rescan_interval_s`; a row due a minute or more after it is written falls in a minute that
        starts after the write, and a rescan inside that minute reads it, at most `rescan_interval_s` late."""
        return self.settings.dispatcher.rescan_interval_s <= 60 and fire_at - now >= timedelta(minutes=1)

    def is_near(self, fire_at: datetime, now: datetime) -> bool:
        """Whether a row due at `fire_at` may fall inside a dispatcher's loaded horizon, so it must be announced."""
        return fire_at <= now + timedelta(seconds=self.settings.dispatcher.preload_horizon_s + NEAR_MARGIN_S)

    def announce_if_near(self, due: DueRun, now: datetime) -> None:
        """Announce `due` if it is near, without waiting for the acknowledgement; a failure is logged."""
        fire_at = datetime.fromtimestamp(due.fire_at_ms / 1000, UTC)
        if not self.is_near(fire_at, now):
            return
        value, key, partition = addressed(due, self.settings.kafka.near_partitions, self.settings.shards)
        publisher = self.producer
        if self.ahead is not None and fire_at - now >= timedelta(seconds=AHEAD_LEAD_S):
            publisher = self.ahead
        publisher.send_soon(self.topic, value, key=key, partition=partition, on_result=partial(_announced, due))


def _announced(due: DueRun, failure: str | None) -> None:
    """Count an acknowledged announcement, log a failed one (on the producer's thread)."""
    if failure is None:
        metrics.near_announced.inc()
        return
    extra = {"tenant": due.tenant_id, "job_id": str(due.job_id), "run_id": str(due.run_id)}
    log.warning("near-term announcement failed; the rescan will find the row: %s", failure, extra=extra)
