"""Run ids, shards and shard ranges, retry decisions and peak spreading."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.core.ids import ShardRange, minute_bucket, run_id_for, shard_of, split_ranges
from tickwheel.core.peaks import spread_fire_ms
from tickwheel.core.retry import Outcome, RetryPolicy, classify, decide, next_delay_s, parse_retry_after

JOB = uuid.UUID("6f1c2a94-0d1e-4c55-9a43-2b7d8e5f0a11")
AT = datetime(2026, 3, 8, 7, 0, 0, 123456, tzinfo=UTC)


def test_run_ids_are_deterministic_per_job_and_millisecond() -> None:
    assert run_id_for(JOB, AT) == run_id_for(JOB, AT.astimezone(UTC).replace(microsecond=123999))
    assert run_id_for(JOB, AT) != run_id_for(JOB, AT + timedelta(milliseconds=1))
    assert run_id_for(JOB, AT) == uuid.UUID("23b4e93a-0339-577a-811c-bbfb05686606")  # uuid5(JOB, "1772953200123")
    assert run_id_for(JOB, AT).version == 5


def test_shard_of_is_pinned_so_that_a_change_breaks_this_test() -> None:
    golden = {
        uuid.UUID(int=0): 14,
        uuid.UUID(int=1): 898,
        JOB: 994,  # also: printf <job bytes> | b2sum -l 64 -> first 8 bytes big-endian % 1024
        uuid.UUID("00000000-0000-0000-0000-00000000ffff"): 399,
    }
    assert {job: shard_of(job) for job in golden} == golden
    assert shard_of(JOB, 16) == shard_of(JOB) % 16


def test_minute_bucket_floors_to_the_utc_minute() -> None:
    local = datetime(2026, 1, 1, 5, 30, 59, 999, tzinfo=UTC).astimezone(tz=None)
    assert minute_bucket(local) == datetime(2026, 1, 1, 5, 30, tzinfo=UTC)


def test_shard_ranges_are_half_open() -> None:
    shard_range = ShardRange(0, 512)
    assert 0 in shard_range and 511 in shard_range and 512 not in shard_range
    assert list(ShardRange(3, 6).shards()) == [3, 4, 5]


def test_split_ranges_without_history_gives_one_contiguous_range_each() -> None:
    assert split_ranges(["b", "a", "c"], 10) == {
        "a": [ShardRange(0, 4)],
        "b": [ShardRange(4, 7)],
        "c": [ShardRange(7, 10)],
    }


def owners(assignment: dict[str, list[ShardRange]]) -> dict[int, str]:
    return {shard: name for name, ranges in assignment.items() for r in ranges for shard in r.shards()}


def moved(before: dict[str, list[ShardRange]], after: dict[str, list[ShardRange]]) -> int:
    old, new = owners(before), owners(after)
    return sum(1 for shard, name in new.items() if old.get(shard) != name)


@settings(max_examples=100, deadline=None)
@given(
    first=st.sets(st.sampled_from("abcdefgh"), min_size=1),
    second=st.sets(st.sampled_from("abcdefgh"), min_size=1),
    shards=st.sampled_from([7, 64, 1024]),
)
def test_split_ranges_moves_only_the_shards_it_must(first: set[str], second: set[str], shards: int) -> None:
    before = split_ranges(sorted(first), shards)
    after = split_ranges(sorted(second), shards, before)
    assert sorted(owners(after)) == list(range(shards))  # every shard has exactly one owner
    sizes = sorted(sum(len(r) for r in ranges) for ranges in after.values())
    assert sizes[-1] - sizes[0] <= 1
    departed = sum(sum(len(r) for r in before[name]) for name in first - second)
    kept_members = first & second
    base = shards // len(second)
    trimmed = sum(max(0, sum(len(r) for r in before[name]) - (base + 1)) for name in kept_members)
    lower_bound = departed + trimmed
    if not kept_members:
        lower_bound = shards
    assert lower_bound <= moved(before, after) <= lower_bound + len(second)


def test_adding_a_member_moves_only_its_share() -> None:
    before = split_ranges(["a", "b", "c", "d"], 1024)
    after = split_ranges(["a", "b", "c", "d", "e"], 1024, before)
    assert moved(before, after) == sum(len(r) for r in after["e"]) == 204


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (200, None, Outcome.SUCCESS),
        (204, None, Outcome.SUCCESS),
        (301, None, Outcome.PERMANENT),
        (400, None, Outcome.PERMANENT),
        (404, None, Outcome.PERMANENT),
        (408, None, Outcome.RETRY),
        (429, None, Outcome.RETRY),
        (500, None, Outcome.RETRY),
        (503, None, Outcome.RETRY),
        (None, "timeout", Outcome.RETRY),
        (None, "connection refused", Outcome.RETRY),
        (None, "egress_denied", Outcome.PERMANENT),
    ],
)
def test_classify(status: int | None, error: str | None, expected: Outcome) -> None:
    assert classify(status, error=error) is expected


def test_classify_with_custom_success_codes() -> None:
    assert classify(302, success_codes=frozenset({302})) is Outcome.SUCCESS
    assert classify(200, success_codes=frozenset({202})) is Outcome.PERMANENT


def test_retry_after_in_seconds_or_http_date() -> None:
    now = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after("Thu, 01 Jan 2026 00:01:30 GMT", now) == 90.0
    assert parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("-5", now) is None
    assert parse_retry_after("²", now) is None  # str.isdigit says yes, float() says ValueError
    assert parse_retry_after("\uff11\uff12", now) is None


def test_backoff_doubles_to_the_cap_with_downward_jitter() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=300.0, jitter=0.2)
    assert [next_delay_s(policy, n, rand=0.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert next_delay_s(policy, 30, rand=0.0) == 300.0
    assert next_delay_s(policy, 3, rand=0.5) == pytest.approx(3.6)
    assert next_delay_s(policy, 1, rand=0.0, retry_after_s=30) == 30.0
    assert next_delay_s(policy, 10_000, rand=0.999) <= 300.0


def test_a_retry_after_longer_than_a_day_waits_a_day() -> None:
    # The retry row goes to its minute bucket (14-day TTL): a Retry-After of 30 days would outlive it and be lost.
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=300.0, max_age_s=None)
    assert next_delay_s(policy, 1, rand=0.0, retry_after_s=30 * 86_400) == 86_400.0


def test_decide_retries_then_dies_with_a_reason() -> None:
    policy = RetryPolicy(max_attempts=3, max_age_s=3600)
    first = datetime(2026, 1, 1, tzinfo=UTC)
    retry = decide(policy, Outcome.RETRY, 1, first, first + timedelta(seconds=5), 0.0)
    assert retry.retry_at == first + timedelta(seconds=6) and not retry.dead
    assert decide(policy, Outcome.SUCCESS, 1, first, first, 0.0).succeeded
    assert decide(policy, Outcome.PERMANENT, 1, first, first, 0.0).dead_reason == "permanent failure"
    assert "max_attempts 3" in (decide(policy, Outcome.RETRY, 3, first, first, 0.0).dead_reason or "")
    too_old = decide(policy, Outcome.RETRY, 1, first, first + timedelta(seconds=3600), 0.0)
    assert too_old.dead and "max_age_s" in (too_old.dead_reason or "")


def test_peaks_spread_only_when_over_capacity_and_never_early() -> None:
    run = uuid.UUID(int=42)
    assert spread_fire_ms(1000, 60_000, run, 10, 100) == 1000
    assert spread_fire_ms(1000, 0, run, 10_000, 100) == 1000
    moved_to = spread_fire_ms(1000, 60_000, run, 1_000, 100)
    assert 1000 <= moved_to <= 11_000
    assert moved_to == spread_fire_ms(1000, 60_000, run, 1_000, 100)


@settings(max_examples=200, deadline=None)
@given(
    due=st.integers(0, 10**12),
    tolerance=st.integers(0, 600_000),
    load=st.integers(0, 10**6),
    capacity=st.integers(1, 10**5),
    key=st.binary(min_size=1, max_size=16),
)
def test_peaks_stay_inside_the_tolerance(due: int, tolerance: int, load: int, capacity: int, key: bytes) -> None:
    assert due <= spread_fire_ms(due, tolerance, key, load, capacity) <= due + tolerance


def test_spreading_flattens_an_overloaded_second() -> None:
    runs = [uuid.UUID(int=i) for i in range(10_000)]
    seconds: dict[int, int] = {}
    for run in runs:
        second = spread_fire_ms(0, 300_000, run, len(runs), 1000) // 1000
        seconds[second] = seconds.get(second, 0) + 1
    assert max(seconds.values()) < 1200 and len(seconds) <= 11  # 10 s at capacity, end inclusive
