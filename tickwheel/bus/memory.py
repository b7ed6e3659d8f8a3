"""An in-memory bus for unit tests: topics are lists, a send is acknowledged at once (or fails while `down`),
the near-term feed reads the near topic's partitions from their end, as `dispatcher.nearfeed.NearFeed` does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schemas.messages import DueRun, decode_due_run, topic_names
from tickwheel.bus.near import near_partitions_for
from tickwheel.errors import Unavailable


@dataclass(frozen=True, slots=True)
class Message:
    """One published message."""

    topic: str
    value: bytes
    key: bytes | None
    partition: int
    headers: tuple[tuple[str, bytes], ...]


@dataclass
class MemoryBus:
    """Every topic as a list of messages; `down` makes every send fail as an unreachable broker does."""

    messages: list[Message] = field(default_factory=list)
    down: bool = False

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[int, int]:
        """Append the message (partition 0 unless given); `Unavailable` while `down`."""
        if self.down:
            raise Unavailable("the in-memory bus is down")
        self.messages.append(Message(topic, value, key, partition or 0, tuple(headers)))
        return partition or 0, len(self.messages) - 1

    def send_soon(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        on_result: Callable[[str | None], None],
    ) -> None:
        """Append the message and report it acknowledged at once (its failure while `down`)."""
        if self.down:
            on_result("the in-memory bus is down")
            return
        self.messages.append(Message(topic, value, key, partition or 0, ()))
        on_result(None)

    def on(self, topic: str) -> list[DueRun]:
        """The runs published on `topic`, in order."""
        return [decode_due_run(m.value) for m in self.messages if m.topic == topic]


class MemoryNearFeed:
    """The near-term topic of a `MemoryBus`, read by partition from where each was assigned."""

    def __init__(self, bus: MemoryBus, topic_prefix: str, partitions: int, shards: int):
        self.bus = bus
        self.topic = topic_names(topic_prefix)["near"]
        self._partitions = partitions
        self._shards = shards
        self.positions: dict[int, int] = {}

    def _end(self) -> int:
        return len(self.bus.messages)

    async def retarget(self, shards: set[int]) -> None:
        """Read exactly the partitions of `shards`; a new one starts at the bus's current end."""
        wanted = near_partitions_for(shards, self._partitions, self._shards)
        self.positions = {p: self.positions.get(p, self._end()) for p in wanted}

    async def poll(self, timeout_s: float = 0.2) -> list[DueRun]:
        """The near-term runs of the assigned partitions published since the last poll."""
        await asyncio.sleep(0)
        runs = []
        for partition, start in self.positions.items():
            runs += [
                decode_due_run(m.value)
                for m in self.bus.messages[start:]
                if m.topic == self.topic and m.partition == partition
            ]
            self.positions[partition] = self._end()
        return runs
