"""The near-term announcer: it does not wait for the bus; a failed announcement is logged with its reason, never
raised, and an announcement only goes out for a row inside the dispatchers' horizon."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from schemas.messages import DueRun, topic_names
from tickwheel.bus.memory import MemoryBus
from tickwheel.bus.near import AHEAD_LEAD_S, NearAnnouncer, near_partition_of
from tickwheel.settings import Settings

NOW = datetime(2026, 12, 2, 14, 26, 44, tzinfo=UTC)


def due_in(delay: timedelta) -> DueRun:
    at_ms = int((NOW + delay).timestamp() * 1000)
    return DueRun(
        run_id=uuid.uuid4(),
        job_id=uuid.uuid4(),
        tenant_id="t",
        shard=700,
        attempt=1,
        kind="run",
        lane="default",
        job_version=1,
        scheduled_at_ms=at_ms,
        fire_at_ms=at_ms,
    )


def test_a_near_row_is_published_on_its_shards_partition_at_once() -> None:
    settings, bus = Settings(), MemoryBus()
    due = due_in(timedelta(seconds=5))

    NearAnnouncer(settings, bus).announce_if_near(due, NOW)

    (message,) = bus.messages
    assert message.topic == topic_names(settings.kafka.topic_prefix)["near"]
    assert message.partition == near_partition_of(700, settings.kafka.near_partitions, settings.shards)
    assert message.key == str(due.job_id).encode()
    assert bus.on(message.topic) == [due]


def test_a_row_past_the_horizon_is_not_announced() -> None:
    settings, bus = Settings(), MemoryBus()
    beyond = timedelta(seconds=settings.dispatcher.preload_horizon_s + 60)

    NearAnnouncer(settings, bus).announce_if_near(due_in(beyond), NOW)

    assert bus.messages == []


def test_a_failed_announcement_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    bus = MemoryBus(down=True)
    due = due_in(timedelta(seconds=5))

    with caplog.at_level(logging.WARNING, logger="tickwheel.bus.near"):
        NearAnnouncer(Settings(), bus).announce_if_near(due, NOW)

    (record,) = caplog.records
    assert record.getMessage().endswith("the rescan will find the row: the in-memory bus is down")
    assert record.__dict__["run_id"] == str(due.run_id)


def test_a_row_due_seconds_ahead_goes_through_the_ahead_publisher_a_row_due_now_does_not() -> None:
    # The ahead producer holds announcements longer (fewer produce requests); a row due within AHEAD_LEAD_S must not
    # wait for it.
    settings, soon, ahead = Settings(), MemoryBus(), MemoryBus()
    announcer = NearAnnouncer(settings, soon, ahead)
    later, now_due, edge = due_in(timedelta(seconds=5)), due_in(timedelta(0)), due_in(timedelta(seconds=AHEAD_LEAD_S))

    for due in (later, now_due, edge):
        announcer.announce_if_near(due, NOW)

    assert ahead.on(topic_names(settings.kafka.topic_prefix)["near"]) == [later, edge]
    assert soon.on(topic_names(settings.kafka.topic_prefix)["near"]) == [now_due]
    NearAnnouncer(settings, soon).announce_if_near(later, NOW)  # without one, everything goes through `producer`
    assert soon.on(topic_names(settings.kafka.topic_prefix)["near"]) == [now_due, later]
