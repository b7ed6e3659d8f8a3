"""Announcing the bucket rows the worker writes (retries, deferrals, lease checks, hand-backs) on the near-term
topic. They are due within seconds, inside the minutes the dispatchers have already preloaded, so without an
announcement they would wait for the dispatchers' rescan.

An announcement goes out after the row is durable and in the background: it must not delay the call, and if
it is lost the rescan still finds the row.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from schemas.messages import DueRun, Lane, RunKind, topic_names
from tickwheel import metrics
from tickwheel.bus.kafka import KafkaProducer
from tickwheel.bus.near import announce
from tickwheel.core.ids import epoch_ms
from tickwheel.errors import TickwheelError
from tickwheel.settings import Settings
from tickwheel.store.runs import NewRun

log = logging.getLogger(__name__)

NEAR_MARGIN_S = 5  # a row a little past the dispatchers' horizon may already be inside it when they rescan
ANNOUNCE_TIMEOUT_S = 3.0


def due_run(run: NewRun, attempt: int, kind: RunKind, fire_at: datetime) -> DueRun:
    """The message of the bucket row `runs.bucket_row` writes for (run, attempt, kind) at `fire_at`."""
    lane: Lane = run.lane  # type: ignore[assignment]
    return DueRun(
        run_id=run.run_id,
        job_id=run.job_id,
        tenant_id=run.tenant_id,
        shard=run.shard,
        attempt=attempt,
        kind=kind,
        lane=lane,
        job_version=run.job_version,
        scheduled_at_ms=epoch_ms(run.scheduled_at),
        fire_at_ms=epoch_ms(fire_at),
        tolerance_ms=run.tolerance_ms,
    )


class Announcer:
    def __init__(self, settings: Settings, producer: KafkaProducer):
        self.settings = settings
        self.producer = producer
        self.topic = topic_names(settings.kafka.topic_prefix)["near"]
        self._pending: set[asyncio.Task[None]] = set()

    def row_written(self, run: NewRun, attempt: int, kind: RunKind, fire_at: datetime, now: datetime) -> None:
        """A bucket row is durable: announce it in the background if the dispatchers may have loaded past it."""
        if fire_at > now + timedelta(seconds=self.settings.dispatcher.preload_horizon_s + NEAR_MARGIN_S):
            return
        task = asyncio.create_task(self._announce(due_run(run, attempt, kind, fire_at)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _announce(self, due: DueRun) -> None:
        s = self.settings
        try:
            send = announce(self.producer, self.topic, due, partitions=s.kafka.near_partitions, shards=s.shards)
            await asyncio.wait_for(send, ANNOUNCE_TIMEOUT_S)
            metrics.near_announced.inc()
        except (TickwheelError, TimeoutError) as exc:
            extra = {"tenant": due.tenant_id, "job_id": str(due.job_id), "run_id": str(due.run_id)}
            log.warning("near-term announcement failed; the rescan will find the row: %s", exc, extra=extra)

    async def drain(self, timeout_s: float = ANNOUNCE_TIMEOUT_S) -> None:
        """Wait for announcements still on their way (shutdown)."""
        if self._pending:
            await asyncio.wait(set(self._pending), timeout=timeout_s)
