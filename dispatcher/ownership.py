"""Pure ownership decisions: which shards an assignment gives a member, what changes, where a new owner resumes,
and whether the dispatcher may fire right now."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.messages import ShardAssignment
from tickwheel.coordination.zookeeper import SessionState
from tickwheel.core.acquisition import HANDOVER_GRACE_S as HANDOVER_GRACE_S  # re-exported: the tests' names
from tickwheel.core.acquisition import LEAVING_TAG as LEAVING_TAG
from tickwheel.core.liveness import alive_within
from tickwheel.store.records import Checkpoint


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


def owner_tag(member: str, leaving: bool) -> str:
    """The checkpoint owner a member writes: its name, tagged while it hands its shards over."""
    return f"{member}{LEAVING_TAG}" if leaving else member


def resume_from(
    fired_through: datetime | None, now: datetime, grace_s: float, *, handed_over: bool = False
) -> datetime:
    """Where a new owner starts reading: the shard's watermark (or now) minus the grace, so what the previous
    owner may not have sent goes out again (claims make a second fire harmless). A watermark written by an owner
    handing over (alive, acknowledged up to it, still firing and reading the near-term topic until we have
    caught up) needs only a few seconds, not a re-fire of minutes."""
    grace = min(grace_s, HANDOVER_GRACE_S) if handed_over else grace_s
    return (fired_through or now) - timedelta(seconds=grace)


@dataclass(frozen=True, slots=True)
class Moving:
    """A shard an assignment moved away from a live member, which keeps firing it until its new owner has read it."""

    epoch: int
    """The epoch of the assignment that moved it."""
    began: datetime
    """When it was moved: the new owner's watermark must pass it."""
    deadline_s: float
    """Monotonic seconds after which it is dropped whoever has it (a new owner that never came)."""


def taken_over(mark: Checkpoint | None, member: str, moving: Moving) -> bool:
    """Whether another member has taken a moving shard: checkpointed it under the moving assignment's epoch (or a
    newer one) with a watermark past the move, so it has re-fired from our mark and fires the current runs. Until
    then both fire (the claim makes the second call harmless) and none goes out late."""
    return (
        mark is not None
        and mark.owner_epoch >= moving.epoch
        and mark.owner.removesuffix(LEAVING_TAG) != member
        and mark.fired_through >= moving.began
    )


def may_fire(state: SessionState, paused: bool, since_alive_s: float, alive_window_s: float) -> bool:
    """Fire only on a live session whose member znode was confirmed within `alive_window_s`: after a stall
    (SIGSTOP, a long pause) the coordinator may have evicted us for silence, or the session expired, before kazoo
    had a chance to say so (tickwheel/core/liveness.py)."""
    return state is SessionState.CONNECTED and not paused and alive_within(since_alive_s, alive_window_s)
