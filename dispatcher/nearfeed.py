"""The near-term topic as the dispatcher reads it: manual assignment of the partitions covering its shards, each
new partition positioned at its end offset read before the scan that follows, so a run is in that scan or on
the topic after that offset."""

from __future__ import annotations

import logging

import msgspec

from schemas.messages import DueRun, decode_due_run, topic_names
from tickwheel.bus.kafka import KafkaConsumer
from tickwheel.bus.near import near_partitions_for
from tickwheel.settings import Settings

log = logging.getLogger(__name__)

GATHER_S = 0.05


class NearFeed:
    def __init__(self, settings: Settings, consumer: KafkaConsumer):
        self.topic = topic_names(settings.kafka.topic_prefix)["near"]
        self._partitions = settings.kafka.near_partitions
        self._shards = settings.shards
        self._consumer = consumer
        self.positions: dict[int, int] = {}

    async def retarget(self, shards: set[int]) -> None:
        """Consume exactly the partitions of `shards`; kept partitions keep their position, new ones start at
        their current end. Call before scanning newly owned shards."""
        wanted = set(near_partitions_for(shards, self._partitions, self._shards))
        new = sorted(wanted - self.positions.keys())
        ends = await self._consumer.end_offsets(self.topic, new) if new else {}
        self.positions = {p: self.positions[p] if p in self.positions else ends[p] for p in sorted(wanted)}
        await self._consumer.assign([(self.topic, p, offset) for p, offset in self.positions.items()])

    async def poll(self, timeout_s: float = 0.2) -> list[DueRun]:
        if not self.positions:
            return []
        runs = []
        # Announcements are mostly of runs due seconds or minutes ahead: gathered for up to GATHER_S, a hop to the
        # event loop per ~GATHER_S at most, while a run due at once still reaches the wheel within it.
        for record in await self._consumer.poll(500, timeout_s, GATHER_S):
            if record.partition in self.positions:
                self.positions[record.partition] = record.offset + 1
            try:
                runs.append(decode_due_run(record.value))
            except msgspec.DecodeError:
                log.warning("unreadable near-term message at %s/%d@%d", record.topic, record.partition, record.offset)
        return runs

    async def close(self) -> None:
        await self._consumer.close()
