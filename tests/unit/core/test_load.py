"""Upcoming load: occurrences of schedules counted per bucket, bounded by a step budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core.load import due_counts
from tickwheel.core.specs import CronSchedule, IntervalSchedule, OnceSchedule

START = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)


def test_a_cron_job_is_counted_in_every_bucket_it_fires_in() -> None:
    every_15 = CronSchedule("*/15 * * * *", "Europe/Paris")

    counts = due_counts([(every_15, 0)], START, 3600, 3, max_steps=100)

    assert counts.counts == (4, 4, 4) and not counts.truncated and counts.schedules == 1


def test_a_dst_gap_changes_the_hourly_count_of_a_local_time_schedule() -> None:
    # 02:xx does not exist in Paris on 29 March 2026: the run of 02:00 local moves just after the gap (03:00)
    daily_two_am = CronSchedule("0 2 * * *", "Europe/Paris")

    counts = due_counts([(daily_two_am, 0)], START, 3600, 24, max_steps=100)

    assert sum(counts.counts) == 1 and counts.counts[1] == 1  # 03:00 CEST is 01:00 UTC


def test_once_and_interval_schedules_and_their_fired_counts() -> None:
    once = OnceSchedule(START + timedelta(minutes=3, seconds=10))
    interval = IntervalSchedule(every_s=120, anchor_at=START, max_runs=4)

    counts = due_counts([(once, 0), (once, 1), (interval, 1)], START, 60, 10, max_steps=100)

    # the second once job has fired already; the interval job has 3 runs left: minutes 0, 2 and 4
    assert counts.counts == (1, 0, 1, 1, 1, 0, 0, 0, 0, 0)


def test_running_out_of_steps_says_the_counts_are_a_lower_bound() -> None:
    every_minute = CronSchedule("* * * * *", "UTC")

    counts = due_counts([(every_minute, 0)] * 3, START, 60, 60, max_steps=100)

    assert counts.truncated and sum(counts.counts) == 100


def test_counting_since_an_instant_inside_the_first_bucket_leaves_out_what_is_past() -> None:
    every_15 = CronSchedule("*/15 * * * *", "UTC")

    counts = due_counts([(every_15, 0)], START, 3600, 2, max_steps=100, since=START + timedelta(minutes=20))

    assert counts.counts == (2, 4)
