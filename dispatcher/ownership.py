"""Pure ownership decisions: which shards an assignment gives a member, what changes, where a new owner resumes,
and whether the dispatcher may fire right now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.messages import ShardAssignment
from tickwheel.coordination.zookeeper import SessionState


@dataclass(frozen=True, slots=True)
class OwnershipChange:
    """What applying an assignment means for one dispatcher."""

    epoch: int
    added: frozenset[int]
    removed: frozenset[int]
    kept: frozenset[int]


def shards_of(assignment: ShardAssignment | None, member: str | None) -> frozenset[int]:
    """The shards `assignment` gives `member` (none without a member or an assignment)."""
    if assignment is None or member is None:
        return frozenset()
    return frozenset(s for start, end in assignment.members.get(member, []) for s in range(start, end))


def plan_ownership(owned: frozenset[int], assignment: ShardAssignment | None, member: str | None) -> OwnershipChange:
    target = shards_of(assignment, member)
    return OwnershipChange(
        epoch=assignment.epoch if assignment else 0,
        added=target - owned,
        removed=owned - target,
        kept=owned & target,
    )


def is_newer(candidate: ShardAssignment, current: ShardAssignment | None) -> bool:
    """Assignments only move forward: an older epoch seen late (watch reordering) is ignored."""
    return current is None or candidate.epoch >= current.epoch


def resume_from(fired_through: datetime | None, now: datetime, grace_s: float) -> datetime:
    """Where a new owner starts reading: the shard's watermark (or now) minus the grace, so what the previous
    owner may not have sent goes out again (claims make a second fire harmless)."""
    return (fired_through or now) - timedelta(seconds=grace_s)


def may_fire(state: SessionState, paused: bool, since_alive_s: float, session_timeout_s: float) -> bool:
    """Fire only on a live session whose liveness was confirmed well inside the session timeout: after a long
    stall (SIGSTOP, GC pause) the session may have expired before kazoo had a chance to say so."""
    return state is SessionState.CONNECTED and not paused and since_alive_s < session_timeout_s / 2
