"""Missed and overlapping occurrences: what a recurring job's catch-up and overlap policies decide when one of
its occurrences comes to fire (docs/time.md, "Catch-up and overlap"). Pure: the caller passes the clock.

An occurrence is *missed* when it fires more than `missed_after_s` (plus its delay tolerance) after its
scheduled time: its dispatcher was down, or the sweeper found it never fired.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwheel.core.policies import CatchUpPolicy, OverlapPolicy
from tickwheel.core.schedule import catch_up, next_fire
from tickwheel.core.specs import Schedule

MISSED_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The job's catch-up policy: which missed occurrences still run (`max_count` is the wire's maxRuns)."""

    policy: CatchUpPolicy = CatchUpPolicy.LATEST
    max_count: int = 10
    max_age_s: float | None = 86_400.0


@dataclass(frozen=True, slots=True)
class Plan:
    """What happens to the occurrence at hand, and which occurrence the job moves to next."""

    fire: bool
    """The occurrence is sent (False: it is skipped and its run cancelled)."""
    next_at: datetime | None
    """The job's next occurrence; at or before now when it is a missed one that still runs (it fires at once)."""


def plan_occurrence(
    schedule: Schedule,
    scheduled_at: datetime,
    now: datetime,
    rule: CatchUp,
    *,
    fired_count: int,
    late_after_s: float = MISSED_AFTER_S,
) -> Plan:
    """Whether the occurrence `scheduled_at`, firing at `now`, runs and what follows it. `fired_count` counts the
    job's fires before this one. On time: it runs and the next occurrence follows. Missed: `skip` runs none of
    the missed occurrences and moves to the first one on time; `latest` runs only the newest occurrence up to
    now; `all` the newest `max_count`; both ignore occurrences older than `max_age_s`."""
    if (now - scheduled_at).total_seconds() <= late_after_s:
        return Plan(True, next_fire(schedule, scheduled_at, fired_count=fired_count + 1))
    # Occurrences less than `late_after_s` old are on time whatever the policy: the first of them follows.
    on_time = next_fire(schedule, now - timedelta(seconds=late_after_s), fired_count=fired_count)
    if rule.policy is CatchUpPolicy.SKIP:
        return Plan(False, on_time)
    keep = 1 if rule.policy is CatchUpPolicy.LATEST else rule.max_count
    young = rule.max_age_s is None or scheduled_at >= now - timedelta(seconds=rule.max_age_s)
    newer = catch_up(schedule, scheduled_at, now, CatchUpPolicy.ALL, keep, None)
    if young and keep > 0 and len(newer) < keep:  # among the newest `keep` missed occurrences
        return Plan(True, next_fire(schedule, scheduled_at, fired_count=fired_count + 1))
    window = catch_up(schedule, scheduled_at, now, rule.policy, keep, rule.max_age_s)
    if window and not _exhausted(schedule, fired_count):
        return Plan(False, window[0])
    return Plan(False, on_time)


def _exhausted(schedule: Schedule, fired_count: int) -> bool:
    max_runs = getattr(schedule, "max_runs", None)
    return max_runs is not None and fired_count >= max_runs


class Overlap(enum.StrEnum):
    """What an occurrence does about earlier runs of its job still in flight."""

    START = "start"
    SKIP = "skip"
    BUFFER = "buffer"
    """Wait (re-checked shortly) until the earlier run is final."""


def overlap_verdict(policy: OverlapPolicy, earlier_in_flight: int) -> Overlap:
    """`earlier_in_flight` counts the job's earlier runs not yet final (scheduled past due, running, retrying).
    With `buffer_one` one of them may itself be the buffered one: a second waiting run is skipped."""
    if policy is OverlapPolicy.ALLOW or earlier_in_flight == 0:
        return Overlap.START
    if policy is OverlapPolicy.BUFFER_ONE and earlier_in_flight == 1:
        return Overlap.BUFFER
    return Overlap.SKIP
