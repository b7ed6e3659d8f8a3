"""The reconciler's decision: which occurrences a recurring job promised in a window have no run, and which of
those the catch-up policy lets it repair. Everything not repaired is a `missed` fire, counted per reason.

The sweeper looks at one pointer per job (its next run); this compares the whole window, so a fire that
vanished between two healthy pointers (a lost write, a chain that skipped) becomes visible. Pure: the window,
the recorded runs and `now` are arguments.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tickwheel.core.instants import whole_ms
from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.schedule import Schedule, next_fire

MAX_PROMISED = 10_000
"""Occurrences looked at per job and window at most (a per-second interval over a day is 86,400: the window
must be sized so a job cannot exceed this; what is beyond is not looked at)."""


class Verdict(enum.StrEnum):
    REPAIRED = "repaired"
    """Written again now: within the catch-up policy."""
    CATCH_UP_NONE = "catch_up_none"
    """The job asked for no catch-up."""
    TOO_OLD = "too_old"
    """Older than the job's catch-up age."""
    OVER_COUNT = "over_count"
    """Beyond the number of missed fires the policy runs (LATEST: one; ALL: catchUpMaxCount)."""
    SUPERSEDED = "superseded"
    """LATEST only: a later occurrence already ran, so this one is not run late."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One promised occurrence without a run, and what the reconciler does about it."""

    at: datetime
    verdict: Verdict


def promised(schedule: Schedule, after: datetime, until: datetime) -> list[datetime]:
    """The job's occurrences in (after, until], oldest first (at most MAX_PROMISED)."""
    fires: list[datetime] = []
    cursor = after
    while len(fires) < MAX_PROMISED:
        at = next_fire(schedule, cursor)
        if at is None or at > until:
            break
        fires.append(at)
        cursor = at
    return fires


def to_ms(at: datetime) -> datetime:
    """The precision runs are recorded with (run ids are made from ms instants), in UTC."""
    return whole_ms(at.astimezone(UTC))


def reconcile(
    promises: Iterable[datetime],
    recorded: Iterable[datetime],
    now: datetime,
    policy: CatchUpPolicy,
    max_count: int,
    max_age_s: float | None,
) -> list[Finding]:
    """Every promised occurrence without a recorded run, oldest first, with its verdict."""
    have = {to_ms(at) for at in recorded}
    missing = [at for at in promises if to_ms(at) not in have]
    if not missing:
        return []
    if policy is CatchUpPolicy.SKIP or max_count <= 0:
        return [Finding(at, Verdict.CATCH_UP_NONE) for at in missing]
    oldest = None if max_age_s is None else now - timedelta(seconds=max_age_s)
    newest_run = max(have, default=None)
    findings = []
    fresh = [at for at in missing if oldest is None or at >= oldest]
    keep = set(fresh[-(1 if policy is CatchUpPolicy.LATEST else max_count) :])
    for at in missing:
        if oldest is not None and at < oldest:
            verdict = Verdict.TOO_OLD
        elif policy is CatchUpPolicy.LATEST and newest_run is not None and newest_run > to_ms(at):
            verdict = Verdict.SUPERSEDED
        elif at in keep:
            verdict = Verdict.REPAIRED
        else:
            verdict = Verdict.OVER_COUNT
        findings.append(Finding(at, verdict))
    return findings
