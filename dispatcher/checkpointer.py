"""Writing how far each owned shard has fired: its watermark (never past a row not yet acknowledged), under the
assignment's epoch, every checkpoint step it moves. A write a newer epoch refused means another member owns the
shard: it is dropped at once. The decisions are `dispatcher.firing`'s (`Watermarks`, `checkpoints_due`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from dispatcher import firing
from dispatcher.owner import Ownership
from dispatcher.ownership import owner_tag
from dispatcher.shards import Clock, ShardTable
from tickwheel import metrics
from tickwheel.settings import DispatcherSettings
from tickwheel.store.ports import CheckpointStore

log = logging.getLogger(__name__)


class Checkpointer:
    """Advances the owned shards' checkpoints from the table's watermarks, fenced by the ownership's epoch."""

    def __init__(
        self, table: ShardTable, store: CheckpointStore, ownership: Ownership, cfg: DispatcherSettings, clock: Clock
    ):
        self.table, self.store, self.ownership, self.cfg, self.clock = table, store, ownership, cfg, clock

    async def checkpoint(self, *, force: bool = False) -> dict[int, bool]:
        """Write the watermarks that moved a checkpoint step (`force`: every one that moved at all)."""
        table, ownership = self.table, self.ownership
        if not ownership.can_fire() or ownership.member is None:
            return {}
        moving = ownership.moving  # their new owner checkpoints them under the assignment that moved them
        marks = {
            s: table.watermarks.mark(s, table.fired_through_ms)
            for s, st in table.owned.items()
            if st.scanned and s not in moving
        }
        if marks:
            metrics.checkpoint_lag.set(max(0, self.clock.now_ms() - min(marks.values())) / 1000)
        due = firing.checkpoints_due(marks, table.written, 1 if force else int(self.cfg.checkpoint_step_s * 1000))
        if not due:
            return {}
        at = {s: datetime.fromtimestamp(ms / 1000, UTC) for s, ms in due.items()}
        epoch = ownership.epoch
        tag = owner_tag(ownership.member, ownership.leaving)
        results = await self.store.advance_checkpoints(at, epoch, tag, self.clock.now())
        for shard, applied in results.items():
            if applied:
                table.written[shard] = due[shard]
            elif shard in table.owned and not ownership.leaving:  # leaving: hand_over drops it once taken over
                log.warning("shard %d is fenced by a newer epoch than %d: dropping it", shard, epoch)
                table.drop_shard(shard)
        return results
