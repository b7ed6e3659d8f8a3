"""Watching the dispatcher's whole-row reads of a memory store in a unit test."""

from __future__ import annotations

from datetime import datetime

import pytest

from schemas.messages import DueRun
from tickwheel.store.memory import MemoryStore


def count_group_reads(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The shard groups of every `read_shards` on `store` from now on (sorted), in the order they were asked."""
    reads: list[list[int]] = []
    read_shards = store.read_shards

    async def counted(group: list[int], since: datetime, until: datetime) -> list[DueRun]:
        reads.append(sorted(group))
        return await read_shards(group, since, until)

    monkeypatch.setattr(store, "read_shards", counted)
    return reads
