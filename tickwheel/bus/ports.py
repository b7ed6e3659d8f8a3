"""The bus as the processes see it: a publisher (lanes, the near-term topic) and the near-term feed a dispatcher
reads. Implemented over Kafka (`tickwheel.bus.kafka.KafkaProducer`, `dispatcher.nearfeed.NearFeed`) and in memory
(`tickwheel.bus.memory`) for unit tests of the engine and the pipeline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from schemas.messages import DueRun


class Publisher(Protocol):
    """Produces messages: `send` waits for the acknowledgement (`Unavailable` when the bus does not answer),
    `send_soon` does not (what needs no answer: the near-term announcements)."""

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[int, int]:
        """Publish `value` on `topic`; returns (partition, offset)."""
        ...

    def send_soon(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        on_result: Callable[[str | None], None],
    ) -> None:
        """Publish `value` on `topic` without waiting: `on_result` later gets None once the bus acknowledged it,
        else the reason it did not, on whichever thread learns it (so it must be thread-safe and quick)."""
        ...


class NearTermFeed(Protocol):
    """The near-term announcements of the shards a dispatcher owns, from where it started reading each."""

    positions: dict[int, int]
    """The partitions read and the next offset of each (empty: nothing assigned)."""

    async def retarget(self, shards: set[int]) -> None:
        """Read exactly the partitions of `shards`; a new partition starts at its current end."""
        ...

    async def poll(self, timeout_s: float = 0.2) -> list[DueRun]:
        """The announcements that arrived since the last poll (waits up to `timeout_s` for some)."""
        ...
