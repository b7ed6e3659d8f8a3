"""The near-term topic: runs written after their minute was preloaded reach the shard's owner through it.

Partitions map to contiguous shard ranges, so a dispatcher assigns itself exactly the partitions that cover
the shards it owns.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.messages import DueRun, encode
from tickwheel.bus.kafka import KafkaProducer


def near_partition_of(shard: int, partitions: int, shards: int = 1024) -> int:
    """The near-term partition carrying announcements for `shard`."""
    return shard * partitions // shards


def near_partitions_for(shard_ids: Iterable[int], partitions: int, shards: int = 1024) -> list[int]:
    """Every near-term partition that carries announcements for any of `shard_ids`."""
    return sorted({near_partition_of(s, partitions, shards) for s in shard_ids})


async def announce(producer: KafkaProducer, topic: str, run: DueRun, *, partitions: int, shards: int = 1024) -> None:
    """Publish `run` on the near-term topic (after its durable write), to the partition of its shard."""
    await producer.send(
        topic,
        encode(run),
        key=str(run.job_id).encode(),
        partition=near_partition_of(run.shard, partitions, shards),
    )
