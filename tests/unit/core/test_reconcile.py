"""The reconciler's decision: promised occurrences without a run, repaired within the catch-up policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core.policies import CatchUpPolicy
from tickwheel.core.reconcile import Finding, Verdict, promised, reconcile
from tickwheel.core.specs import CronSchedule, IntervalSchedule

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def hourly() -> list[datetime]:
    return promised(CronSchedule("0 * * * *", "UTC"), T0 - timedelta(seconds=1), T0 + 5 * HOUR)


def test_promised_lists_each_occurrence_of_the_window_including_dst_days() -> None:
    assert hourly() == [T0 + n * HOUR for n in range(6)]
    interval = IntervalSchedule(every_s=90, anchor_at=T0)
    assert promised(interval, T0, T0 + timedelta(minutes=6)) == [T0 + timedelta(seconds=90 * n) for n in range(1, 5)]
    paris = CronSchedule("30 2 * * *", "Europe/Paris")  # 02:30 does not exist on 2026-03-29 (run after the gap)
    spring = promised(paris, datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    assert [at.isoformat() for at in spring] == [
        "2026-03-28T01:30:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00",
    ]  # fmt: skip


def test_nothing_missing_is_nothing_found_at_millisecond_precision() -> None:
    recorded = [at + timedelta(microseconds=400) for at in hourly()]
    assert reconcile(hourly(), recorded, T0 + 6 * HOUR, CatchUpPolicy.ALL, 10, None) == []


def test_all_repairs_the_newest_missing_within_count_and_age() -> None:
    fires = hourly()
    recorded = [fires[0], fires[5]]
    found = reconcile(fires, recorded, T0 + 6 * HOUR, CatchUpPolicy.ALL, 2, 4.5 * 3600)
    assert found == [
        Finding(fires[1], Verdict.TOO_OLD),
        Finding(fires[2], Verdict.OVER_COUNT),
        Finding(fires[3], Verdict.REPAIRED),
        Finding(fires[4], Verdict.REPAIRED),
    ]


def test_latest_repairs_only_a_miss_no_later_run_superseded() -> None:
    fires = hourly()
    found = reconcile(fires, fires[:2], T0 + 6 * HOUR, CatchUpPolicy.LATEST, 10, None)
    assert [f.verdict for f in found] == [Verdict.OVER_COUNT] * 3 + [Verdict.REPAIRED]
    between = reconcile(fires, [fires[0], fires[2]], T0 + 3 * HOUR, CatchUpPolicy.LATEST, 10, None)
    assert between[0] == Finding(fires[1], Verdict.SUPERSEDED)


def test_no_catch_up_reports_every_miss() -> None:
    fires = hourly()
    found = reconcile(fires, [], T0 + 6 * HOUR, CatchUpPolicy.SKIP, 10, None)
    assert {f.verdict for f in found} == {Verdict.CATCH_UP_NONE} and len(found) == 6
