"""Pure assignment decisions: the next shard assignment for a set of live members, with minimal movement."""

from __future__ import annotations

from schemas.messages import ShardAssignment
from tickwheel.core.ids import ShardRange, split_ranges


def ranges_of(assignment: ShardAssignment | None) -> dict[str, list[ShardRange]]:
    if assignment is None:
        return {}
    return {m: [ShardRange(start, end) for start, end in ranges] for m, ranges in assignment.members.items()}


def next_assignment(
    previous: ShardAssignment | None, members: list[str], shards: int, *, floor_epoch: int = 0
) -> ShardAssignment | None:
    """The assignment to publish for `members`, or None when the published one already fits them.

    Its epoch exceeds both the previous one and `floor_epoch` (the highest epoch any checkpoint was written
    with): if ZooKeeper's state is lost, restarting at epoch 1 would leave every owner fenced out.
    """
    prior = ranges_of(previous) if previous is not None and previous.shards == shards else {}
    split = split_ranges(members, shards, prior)
    as_tuples = {m: [(r.start, r.end) for r in ranges] for m, ranges in split.items()}
    if previous is not None and previous.shards == shards and as_tuples == previous.members:
        return None
    epoch = max(previous.epoch if previous else 0, floor_epoch) + 1
    return ShardAssignment(epoch=epoch, shards=shards, members=as_tuples)


def unowned(assignment: ShardAssignment | None, shards: int) -> int:
    """How many shards the assignment leaves without an owner."""
    if assignment is None:
        return shards
    covered = sum(end - start for ranges in assignment.members.values() for start, end in ranges)
    return max(0, shards - covered)
