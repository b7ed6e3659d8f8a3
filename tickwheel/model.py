"""The one translation from the stored job definition (schemas.messages) to the time core's types.

The API, the dispatcher and the worker all read a job through these functions, so a schedule means the same
thing everywhere. Instants in the document are ISO-8601 strings; the core works on aware datetimes. Errors
name the wire field (camelCase), e.g. `schedule.runAt`.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from schemas.messages import JobDefinition, Lane, ScheduleDoc
from tickwheel.core.calendars import Calendar, DateRange, Exclusions
from tickwheel.core.cron import parse_cron
from tickwheel.core.errors import ScheduleError
from tickwheel.core.ids import epoch_ms
from tickwheel.core.instants import parse_instant
from tickwheel.core.missed import CatchUp
from tickwheel.core.policies import CatchUpPolicy, DstGapPolicy, DstRepeatPolicy, OverlapPolicy
from tickwheel.core.specs import CronSchedule, IntervalSchedule, OnceSchedule, Schedule
from tickwheel.core.zones import load_zone


def schedule_of(definition: JobDefinition | ScheduleDoc) -> Schedule:
    """The core schedule a stored definition (or its schedule document) describes; raises ScheduleError
    naming the wire field. Interval jobs are anchored at `anchorAt` (the API always sets it)."""
    doc = definition.schedule if isinstance(definition, JobDefinition) else definition
    if doc.type == "once":
        return OnceSchedule(run_at=_instant(_required(doc.run_at, "runAt"), "runAt"))
    start_at = _optional_instant(doc.start_at, "startAt")
    end_at = _optional_instant(doc.end_at, "endAt")
    exclusions = exclusions_of(doc)
    paused_until = _optional_instant(doc.paused_until, "pausedUntil")
    if doc.type == "cron":
        return CronSchedule(
            expr=_required(doc.expr, "expr"),
            tz=doc.tz,
            dst_gap=DstGapPolicy(doc.dst_gap),
            dst_repeat=DstRepeatPolicy(doc.dst_repeat),
            start_at=start_at,
            end_at=end_at,
            max_runs=doc.max_runs,
            calendars=tuple(Calendar(c.expr, c.tz or doc.tz) for c in doc.calendars),
            exclusions=exclusions,
            paused_until=paused_until,
        )
    if doc.calendars:
        raise ScheduleError("schedule.calendars", "calendars are cron expressions: only cron schedules have them")
    anchor = _optional_instant(doc.anchor_at, "anchorAt") or start_at
    if anchor is None:
        raise ScheduleError("schedule.anchorAt", "an interval schedule needs anchorAt or startAt")
    return IntervalSchedule(
        every_s=_required(doc.every_s, "everyS"), anchor_at=anchor, start_at=start_at, end_at=end_at,
        max_runs=doc.max_runs, exclusions=exclusions, paused_until=paused_until,
    )  # fmt: skip


def exclusions_of(doc: ScheduleDoc) -> Exclusions:
    """The core exclusions of a schedule document: `exclude` (dates, except) and the skipped occurrences."""
    skipped = frozenset(epoch_ms(_instant(text, f"skip[{i}]")) for i, text in enumerate(doc.skip))
    if doc.exclude is None:
        return Exclusions(skipped_ms=skipped)
    tz = doc.exclude.tz or doc.tz
    load_zone(tz, "schedule.exclude.tz")
    dates = tuple(_date_range(text, f"schedule.exclude.dates[{i}]") for i, text in enumerate(doc.exclude.dates))
    for i, text in enumerate(doc.exclude.except_):
        try:
            parse_cron(text)
        except ScheduleError as exc:
            raise ScheduleError(f"schedule.exclude.except[{i}]", exc.message) from None
    return Exclusions(tz=tz, dates=dates, crons=tuple(doc.exclude.except_), skipped_ms=skipped)


def _date_range(text: str, field: str) -> DateRange:
    """`2026-12-25` or `2026-12-24/2026-12-31` (ISO 8601 dates, both ends included)."""
    first_text, _, last_text = text.partition("/")
    try:
        first = date.fromisoformat(first_text)
        last = date.fromisoformat(last_text) if last_text else first
    except ValueError:
        raise ScheduleError(field, f"{text!r} is not a date (2026-12-25) or a range (2026-12-24/2026-12-31)") from None
    if last < first:
        raise ScheduleError(field, f"{text!r} ends before it starts")
    return DateRange(first, last)


def catch_up_of(definition: JobDefinition) -> CatchUp:
    """The job's rule for missed occurrences (after an outage, or a resume)."""
    doc = definition.schedule
    return CatchUp(CatchUpPolicy(doc.catch_up), doc.catch_up_max_count, float(doc.catch_up_max_age_s))


def overlap_of(definition: JobDefinition) -> OverlapPolicy:
    """What the job's occurrence does while an earlier run of it is still in flight."""
    return OverlapPolicy(definition.schedule.overlap)


def retry_policy_of(definition: JobDefinition) -> Any:
    """The core RetryPolicy of a stored definition."""
    from tickwheel.core.retry import RetryPolicy  # the retry module lands separately from the schedules

    doc = definition.retry_policy
    return RetryPolicy(
        max_attempts=doc.max_attempts,
        base_delay_s=doc.base_delay_s,
        max_delay_s=doc.max_delay_s,
        max_age_s=doc.max_age_s,
        jitter=doc.jitter,
    )


def lane_of(definition: JobDefinition) -> Lane:
    """The lane topic a job's runs are fired onto: its priority."""
    return definition.priority


def recurs(definition: JobDefinition) -> bool:
    """Whether the job has further occurrences after a fire (cron, interval), so firing must chain its next run."""
    return definition.schedule.type in ("cron", "interval")


def tolerance_ms_of(definition: JobDefinition) -> int:
    """How late (ms) a run of this job may start when spreading a peak."""
    return definition.delay_tolerance_s * 1000


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise ScheduleError(f"schedule.{name}", f"schedule.{name} is required for this schedule type")
    return value


def _instant(text: str, name: str) -> datetime:  # name: the field under `schedule.`
    return parse_instant(text, field=f"schedule.{name}")


def _optional_instant(text: str | None, name: str) -> datetime | None:
    return None if text is None else _instant(text, name)
