"""The reads of a take-over: the minutes around now first, the backlog since the checkpoints after, nothing lost; where
a take-over starts a shard, by who wrote its checkpoint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwheel.core.acquisition import (
    HANDOVER_GRACE_S,
    LEAVING_TAG,
    Previous,
    ShardRead,
    backlog_reads,
    first_from,
    first_reads,
    previous_owner,
    resume_grace_s,
)

NOW = datetime(2026, 12, 2, 5, 30, 12, tzinfo=UTC)
UNTIL = datetime(2026, 12, 2, 5, 32, tzinfo=UTC)  # loadable_until(NOW, 120)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 12, 2, 5, minute, second, tzinfo=UTC)


def covered(reads: list[ShardRead], shard: int) -> list[tuple[datetime, datetime]]:
    """The spans read for `shard`, merged."""
    spans = sorted((r.since, r.until) for r in reads if shard in r.shards)
    merged: list[tuple[datetime, datetime]] = []
    for since, until in spans:
        if merged and since <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], until))
        else:
            merged.append((since, until))
    return merged


def test_the_minute_holding_now_is_read_first_then_the_one_before_then_the_next() -> None:
    reads = first_reads(range(3), NOW, UNTIL, lookback_s=20, per_read=64)
    assert [(r.since, r.until) for r in reads] == [
        (at(30), at(31)),
        (at(29, 52), at(30)),
        (at(31), at(32)),
    ]
    assert all(r.shards == (0, 1, 2) for r in reads)


def test_first_reads_group_the_shards_and_stay_a_few_whatever_the_number_of_shards() -> None:
    reads = first_reads(range(512), NOW, UNTIL, lookback_s=20, per_read=64)
    assert len(reads) == 3 * 8  # three minutes, eight groups of 64
    assert [r.since for r in reads[:8]] == [at(30)] * 8  # every group's current minute goes out first
    assert sorted(s for r in reads[:8] for s in r.shards) == list(range(512))
    late_in_the_minute = first_reads(range(512), at(30, 45), UNTIL, lookback_s=20, per_read=64)
    assert len(late_in_the_minute) == 2 * 8  # the lookback stays inside the current minute


def test_the_backlog_covers_each_shard_from_its_start_to_where_the_first_reads_begin() -> None:
    begin = first_from(NOW, 20)
    starts = {0: at(26, 30), 1: at(27, 59), 2: at(29, 55), 3: at(30, 5)}
    reads = backlog_reads(starts, begin, per_read=64)
    assert covered(reads, 0)[0][0] <= starts[0] and covered(reads, 0)[-1][1] == begin
    assert covered(reads, 1)[0][0] <= starts[1] and covered(reads, 1)[-1][1] == begin
    assert covered(reads, 2) == [] and covered(reads, 3) == []  # nothing before the first reads: no backlog
    assert reads[0].since == starts[0] and reads[0].shards == (0,)  # oldest first; a later shard joins later
    for r in reads:  # each read inside one minute bucket
        assert r.since.minute == (r.until - timedelta(microseconds=1)).minute


def test_first_reads_and_backlog_together_cover_what_one_read_from_the_start_covered() -> None:
    lookback_s = 20
    starts = {shard: at(27) + timedelta(seconds=7 * shard) for shard in range(40)}
    reads = first_reads(starts, NOW, UNTIL, lookback_s, per_read=8) + backlog_reads(
        starts, first_from(NOW, lookback_s), per_read=8
    )
    for shard, start in starts.items():
        [(since, until)] = covered(reads, shard)
        assert since <= min(start, first_from(NOW, lookback_s)) and until == UNTIL


def test_a_horizon_not_reaching_now_gives_no_later_minute() -> None:
    reads = first_reads([5], NOW, at(31), lookback_s=20, per_read=64)
    assert [(r.since, r.until) for r in reads] == [(at(30), at(31)), (at(29, 52), at(30))]


def test_a_mark_tagged_by_its_writer_or_written_by_a_live_member_is_a_handover_and_any_other_is_not() -> None:
    live = {"m-a", "m-b"}
    assert previous_owner(f"m-gone{LEAVING_TAG}", live, "m-b") is Previous.HANDED_OVER  # a leaver, gone since
    assert previous_owner(f"m-a{LEAVING_TAG}", live, "m-b") is Previous.HANDED_OVER
    assert (
        previous_owner("m-a", live, "m-b") is Previous.LIVE
    )  # in the assignment being applied: it fires until we take
    assert previous_owner("m-gone", live, "m-b") is Previous.GONE  # evicted or dead: may have died with runs unsent
    assert previous_owner("m-b", live, "m-b") is Previous.GONE  # our own old mark: others may have had it since
    assert previous_owner(None, live, "m-b") is Previous.GONE


def test_a_handover_is_resumed_with_seconds_of_grace_and_a_dead_owner_with_minutes() -> None:
    assert resume_grace_s(Previous.GONE, 120) == 120
    assert resume_grace_s(Previous.HANDED_OVER, 120) == resume_grace_s(Previous.LIVE, 120) == HANDOVER_GRACE_S
    assert resume_grace_s(Previous.LIVE, 2) == 2  # never more than the configured grace
