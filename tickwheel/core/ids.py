"""Identity and placement: deterministic run ids, minute buckets, shards and shard ranges."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

# Re-exported: many modules import them from here; they live with the other instant conversions.
from tickwheel.core.instants import EPOCH as EPOCH
from tickwheel.core.instants import epoch_ms as epoch_ms

SHARDS = 1024


def run_id_for(job_id: uuid.UUID, scheduled_at: datetime) -> uuid.UUID:
    """The run id of a job's occurrence: uuid5(job_id, epoch ms), the same in every process."""
    return uuid.uuid5(job_id, str(epoch_ms(scheduled_at)))


def requested_run_id(job_id: uuid.UUID, origin: str, scheduled_at: datetime) -> uuid.UUID:
    """The run id of a run made on request (`origin` 'trigger' or 'backfill') for the instant `scheduled_at`:
    never the id of the schedule's own occurrence at that instant, and the same for the same request."""
    return uuid.uuid5(job_id, f"{origin}:{epoch_ms(scheduled_at)}")


def is_schedule_run(run_id: uuid.UUID, job_id: uuid.UUID, scheduled_at_ms: int) -> bool:
    """Whether `run_id` is the schedule's own occurrence at `scheduled_at_ms` (not a trigger or a backfill)."""
    return run_id == uuid.uuid5(job_id, str(scheduled_at_ms))


def shard_of(job_id: uuid.UUID, shards: int = SHARDS) -> int:
    """The job's shard: the first 8 bytes of blake2b(job_id.bytes), big-endian, mod `shards`."""
    digest = hashlib.blake2b(job_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def minute_bucket(at: datetime) -> datetime:
    """The UTC minute holding the aware instant `at` (the `runs_by_bucket` partition key)."""
    if at.tzinfo is None:
        raise ValueError("minute_bucket needs an aware datetime")
    return at.astimezone(UTC).replace(second=0, microsecond=0)


@dataclass(frozen=True, slots=True, order=True)
class ShardRange:
    """Shards start <= s < end: the unit of dispatcher ownership."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"invalid shard range [{self.start}, {self.end})")

    def __contains__(self, shard: object) -> bool:
        return isinstance(shard, int) and self.start <= shard < self.end

    def __len__(self) -> int:
        return self.end - self.start

    def shards(self) -> range:
        """The shard numbers in this range."""
        return range(self.start, self.end)


def ranges_of(shards: list[int]) -> list[ShardRange]:
    """Merge shard numbers into the fewest contiguous ranges, in order."""
    ranges: list[ShardRange] = []
    for shard in sorted(set(shards)):
        if ranges and ranges[-1].end == shard:
            ranges[-1] = ShardRange(ranges[-1].start, shard + 1)
        else:
            ranges.append(ShardRange(shard, shard + 1))
    return ranges


def split_ranges(
    members: list[str], shards: int = SHARDS, previous: dict[str, list[ShardRange]] | None = None
) -> dict[str, list[ShardRange]]:
    """Share `shards` among `members` evenly (sizes differ by at most one) in contiguous ranges; given the
    previous assignment, each member keeps all it can, so only the fewest shards change owner."""
    names = sorted(set(members))
    if not names:
        return {}
    owned = _previously_owned(names, shards, previous or {})
    quotas = _quotas(names, shards, owned)
    kept = {name: owned[name][: quotas[name]] for name in names}
    taken = {s for shard_list in kept.values() for s in shard_list}
    free = iter(s for s in range(shards) if s not in taken)
    result: dict[str, list[ShardRange]] = {}
    for name in names:
        extra = [next(free) for _ in range(quotas[name] - len(kept[name]))]
        result[name] = ranges_of(kept[name] + extra)
    return result


def _previously_owned(names: list[str], shards: int, previous: dict[str, list[ShardRange]]) -> dict[str, list[int]]:
    claimed: set[int] = set()
    owned: dict[str, list[int]] = {}
    for name in names:
        mine = sorted({s for r in previous.get(name, []) for s in r.shards() if s < shards} - claimed)
        claimed.update(mine)
        owned[name] = mine
    return owned


def _quotas(names: list[str], shards: int, owned: dict[str, list[int]]) -> dict[str, int]:
    """Even quotas; the remainder goes to the members holding most, so fewer shards move."""
    base, remainder = divmod(shards, len(names))
    by_holding = sorted(names, key=lambda n: (-len(owned[n]), n))
    return {name: base + (1 if rank < remainder else 0) for rank, name in enumerate(by_holding)}
