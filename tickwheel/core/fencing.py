"""How a run's attempt number fences its state changes: the rules the store applies after a conditional write, or
instead of one in its in-memory twin, written once so the two cannot disagree (the CQL conditions themselves
say the same; `tests/integration/store` checks both stores against each other). Statuses are compared as their
names (`RunStatus` is a string enum), so this module needs nothing of the store."""

from __future__ import annotations

from datetime import datetime

RUNNING = "RUNNING"


def holds(status: str | None, held_attempt: int | None, attempt: int) -> bool:
    """`attempt` still holds the run: the run is RUNNING at that very attempt (a later claim took it otherwise)."""
    return status == RUNNING and held_attempt == attempt


def outcome_counts(applied: bool, status: str | None, held_attempt: int | None, outcome: str, attempt: int) -> bool:
    """An attempt's outcome counts when its conditional write applied, or when the run already shows this very
    outcome at this attempt: its own earlier write whose reply was lost (its description rows are then written)."""
    return applied or (status, held_attempt) == (outcome, attempt)


def lease_lapsed(
    status: str | None,
    held_attempt: int | None,
    attempt: int,
    *,
    reported: bool,
    lease_until: datetime | None,
    now: datetime,
) -> bool:
    """A lease check is worth a worker's time: `attempt` still holds the run and either reported its outcome (an
    asynchronous run) or runs past its lease (a run with no lease has lapsed)."""
    if not holds(status, held_attempt, attempt):
        return False
    return reported or lease_until is None or lease_until <= now


def lease_kept(applied: bool, status: str | None, held_attempt: int | None, attempt: int) -> bool:
    """A lease write refused by its condition on the lease itself (a heartbeat moved it, or it already ends
    later) still holds: the attempt keeps the run, under the run's own lease."""
    return applied or holds(status, held_attempt, attempt)
