"""The near-term announcer: a failed announcement is logged with its reason and never raised."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from schemas.messages import DueRun
from tickwheel.bus.near import NearAnnouncer
from tickwheel.settings import Settings

NOW = datetime(2026, 12, 2, 14, 26, 44, tzinfo=UTC)


class SilentBroker:
    """A publisher whose acknowledgement never comes in time (what `asyncio.wait_for` reports as a bare timeout)."""

    async def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[int, int]:
        raise TimeoutError


async def test_a_timed_out_announcement_is_logged_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    due = DueRun(
        run_id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        tenant_id="t",
        shard=7,
        attempt=1,
        kind="run",
        lane="default",
        job_version=1,
        scheduled_at_ms=int(NOW.timestamp() * 1000) + 5_000,
        fire_at_ms=int(NOW.timestamp() * 1000) + 5_000,
    )
    with caplog.at_level(logging.WARNING, logger="tickwheel.bus.near"):
        await NearAnnouncer(Settings(), SilentBroker()).announce_if_near(due, NOW)

    (record,) = caplog.records
    assert record.getMessage().endswith("the rescan will find the row: no acknowledgement within 3 s")
